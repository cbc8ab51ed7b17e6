"""Files written through a temporary file beside the target, then renamed into place.

``tempfile.mkstemp`` creates mode 0600; :func:`ordinary_mode` gives the file the
mode ``open()`` would (0666 less the umask), so a model or report written for
others on a shared machine is as readable as any file its writer makes.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path


def umask_mode() -> int:
    """``0o666`` less the process umask: the mode a newly created plain file gets."""
    umask = os.umask(0)
    os.umask(umask)
    return 0o666 & ~umask


def ordinary_mode(path: str | os.PathLike[str]) -> None:
    """Give ``path`` (a temporary file of ours) the mode of an ordinary new file."""
    os.chmod(path, umask_mode())


def temp_beside(path: Path, suffix: str = ".tmp") -> Path:
    """An empty temporary file in ``path``'s directory, with the mode of an ordinary file."""
    fd, name = tempfile.mkstemp(prefix=f".{path.name}.", suffix=suffix, dir=path.parent)
    os.close(fd)
    ordinary_mode(name)
    return Path(name)
