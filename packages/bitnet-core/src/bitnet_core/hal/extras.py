"""Install hints from the ``bitnet`` meta package's extras (the only list of backends).

A request for a device whose plugin is not installed cannot be answered from
the plugins; the meta package's metadata says which distribution an extra of
that name pulls in (``pip install 'bitnet[NAME]'``).
"""

from __future__ import annotations

import functools
import re
from importlib.metadata import PackageNotFoundError, metadata

META_PACKAGE = "bitnet"
#: extras that are not one device family
UMBRELLAS = ("gpu", "all", "server")

_REQUIREMENT = re.compile(
    r"^\s*([A-Za-z0-9][A-Za-z0-9._-]*)[^;]*;\s*extra\s*==\s*['\"]([^'\"]+)['\"]"
)


@functools.cache
def extras() -> dict[str, str]:
    """Extra name -> the distribution it installs, for one-distribution extras."""
    try:
        requires = metadata(META_PACKAGE).get_all("Requires-Dist") or []
    except PackageNotFoundError:
        return {}
    found: dict[str, list[str]] = {}
    for line in requires:
        m = _REQUIREMENT.match(line)
        if m:
            found.setdefault(m.group(2), []).append(m.group(1))
    return {
        extra: dists[0]
        for extra, dists in found.items()
        if len(dists) == 1 and extra not in UMBRELLAS
    }


def install_hint(name: str) -> str:
    """``"install bitnet-x: pip install 'bitnet[x]'"`` when an extra ``name`` exists, else ``""``."""
    dist = extras().get(name)
    return f"install {dist}: pip install '{META_PACKAGE}[{name}]'" if dist else ""
