"""Every backend package has the same files by role (CONTRIBUTING's "Adding a backend").

The backend packages are ``packages/bitnet-*`` but bitnet-core and the meta
package ``bitnet``, plus the template and what ``tools/new-backend`` makes of
it. Each has ``provider.py``, a ``runtime`` and a ``kernels`` (a module or a
package), ``memory.py``, ``tests/test_conformance.py``, a README and its entry
point on ``provider.py``; every other module of the package is a helper of
one role, named in the package's README.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
NOT_BACKENDS = {"bitnet-core", "bitnet"}
#: role -> what may hold it, under src/bitnet_NAME/
ROLES = {
    "provider": ("provider.py",),
    "runtime": ("runtime.py", "runtime/__init__.py"),
    "memory": ("memory.py",),
    "kernels": ("kernels.py", "kernels/__init__.py"),
}
#: modules every package may have beside the roles (runner.py: the optional Level-2 runner)
STANDARD = {"__init__", "_version", "runner", *ROLES}


def backend_dirs() -> list[Path]:
    found = [
        p
        for p in sorted((ROOT / "packages").iterdir())
        if (p / "pyproject.toml").is_file() and p.name not in NOT_BACKENDS
    ]
    return [*found, ROOT / "templates" / "bitnet-backend-template"]


def skeleton_problems(pkg: Path) -> list[str]:
    """What ``pkg`` (a backend package directory) lacks of the common skeleton."""
    module = pkg.name.removeprefix("bitnet-").replace("-", "_")
    if pkg.name == "bitnet-backend-template":
        module = "template"
    src = pkg / "src" / f"bitnet_{module}"
    problems = [
        f"{role}: none of {', '.join(where)}"
        for role, where in ROLES.items()
        if not any((src / w).is_file() for w in where)
    ]
    for name in ("README.md", "pyproject.toml", "tests/test_conformance.py"):
        if not (pkg / name).is_file():
            problems.append(f"{name} is missing")
    pyproject = (pkg / "pyproject.toml").read_text() if (pkg / "pyproject.toml").is_file() else ""
    if f'"bitnet_{module}.provider:' not in pyproject:
        problems.append("the bitnet.providers entry point is not on provider.py")
    readme = (pkg / "README.md").read_text() if (pkg / "README.md").is_file() else ""
    for path in sorted(src.glob("*")):
        name = path.name.removesuffix(".py")
        is_module = path.suffix == ".py" or (path / "__init__.py").is_file()
        if is_module and name not in STANDARD and f"{path.name}" not in readme:
            problems.append(f"helper {path.name} is not named in README.md")
    return problems


@pytest.mark.parametrize("pkg", backend_dirs(), ids=lambda p: p.name)
def test_backend_package_has_the_skeleton(pkg):
    assert skeleton_problems(pkg) == []


def test_the_check_sees_a_missing_role(tmp_path):
    dest = tmp_path / "bitnet-metal"
    result = subprocess.run(
        [sys.executable, str(ROOT / "tools" / "new-backend"), "metal", "--dest", str(dest)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert skeleton_problems(dest) == []  # what new-backend makes has the skeleton
    (dest / "src" / "bitnet_metal" / "runtime.py").rename(dest / "src" / "bitnet_metal" / "dev.py")
    assert skeleton_problems(dest) == [
        "runtime: none of runtime.py, runtime/__init__.py",
        "helper dev.py is not named in README.md",
    ]
