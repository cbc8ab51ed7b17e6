"""Every distribution in packages/ carries the same version (tools/set_version.py keeps them in step)."""

import importlib.util
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_versions_in_step():
    spec = importlib.util.spec_from_file_location("set_version", ROOT / "tools" / "set_version.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    found = mod.versions()
    assert len(found) >= 3, found
    assert len(set(found.values())) == 1, found
