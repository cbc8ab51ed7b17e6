"""Set the version of every distribution in packages/ (they are released in step).

Usage: python tools/set_version.py 0.2.0   (or with no argument: print the versions)
Each distribution keeps its own ``_version.py`` so it builds on its own from an
sdist; packages/bitnet/tests/test_versions.py fails if they ever differ.
"""

from __future__ import annotations

import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PATTERN = re.compile(r'^__version__ = "([^"]+)"$', re.M)


def version_files() -> list[Path]:
    return sorted(ROOT.glob("packages/*/src/*/_version.py"))


def versions() -> dict[str, str]:
    out = {}
    for f in version_files():
        m = PATTERN.search(f.read_text())
        out[str(f.relative_to(ROOT))] = m.group(1) if m else "?"
    return out


def main(argv: list[str]) -> int:
    if not argv:
        for path, v in versions().items():
            print(f"{v}  {path}")
        return 0
    new = argv[0]
    if not re.fullmatch(r"\d+\.\d+\.\d+([.-]?\w+)?", new):
        print(f"error: {new!r} is not a version like 1.2.3", file=sys.stderr)
        return 2
    for f in version_files():
        f.write_text(PATTERN.sub(f'__version__ = "{new}"', f.read_text()))
    print(f"set {len(version_files())} distributions to {new}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
