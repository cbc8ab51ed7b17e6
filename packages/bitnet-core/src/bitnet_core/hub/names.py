"""Hub model names: ``ORG/NAME[@REV][:FILE]`` and ``hf://ORG/NAME[@REV][/FILE]``, and which GGUF to take."""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from ..errors import HubError

_PART = r"[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?"
_REPO = re.compile(rf"^({_PART})/({_PART})$")
_NAME = re.compile(rf"^(?P<repo>{_PART}/{_PART})(?:@(?P<rev>[^:/\s][^:\s]*))?(?::(?P<file>\S+))?$")
_URL = re.compile(rf"^hf://(?P<repo>{_PART}/{_PART})(?:@(?P<rev>[^/\s]+))?(?:/(?P<file>\S+))?$")

#: Ternary types in order of preference when a repo holds several GGUF files.
GGUF_PREFERENCE = ("i2_s", "tq2_0", "tq1_0")


@dataclass(frozen=True)
class HubRef:
    """A model on the hub: repository, revision (None: the default branch), file (None: choose)."""

    repo_id: str
    revision: str | None = None
    filename: str | None = None

    def __str__(self) -> str:
        rev = f"@{self.revision}" if self.revision else ""
        return f"{self.repo_id}{rev}" + (f":{self.filename}" if self.filename else "")


def _check_repo(repo: str, value: str) -> None:
    if "--" in repo or ".." in repo or not _REPO.match(repo):
        raise HubError(f"{value!r} is not a hub model name (expected ORG/NAME[@REV][:FILE])")


def _check_file(filename: str | None, value: str) -> None:
    if filename is None:
        return
    parts = filename.split("/")
    if filename.startswith("/") or any(p in ("", ".", "..") for p in parts):
        raise HubError(f"{value!r}: {filename!r} is not a file name inside the repository")


def parse_model_ref(value: str | os.PathLike[str]) -> HubRef | None:
    """The hub reference ``value`` names, or None when it is a local path.

    A path that exists always wins. ``hf://`` is always the hub. Otherwise a
    value of the form ``ORG/NAME[@REV][:FILE]`` that does not look like a file
    path (no leading ``/``, ``.`` or ``~``; no ``.gguf`` ending without ``:FILE``)
    is a hub name.
    """
    if not isinstance(value, str):
        return None
    if value.startswith("hf://"):
        m = _URL.match(value)
        if not m:
            raise HubError(f"{value!r} is not a hub URL (expected hf://ORG/NAME[@REV]/FILE.gguf)")
        _check_repo(m["repo"], value)
        _check_file(m["file"], value)
        return HubRef(m["repo"], m["rev"], m["file"])
    if Path(value).exists() or value.startswith(("/", ".", "~")):
        return None
    if value.endswith(".gguf") and ":" not in value:  # dir/m.gguf: a file that is missing
        return None
    m = _NAME.match(value)
    if not m:
        return None
    _check_repo(m["repo"], value)
    _check_file(m["file"], value)
    return HubRef(m["repo"], m["rev"], m["file"])


def _rank(filename: str) -> tuple[int, int, str]:
    low = Path(filename).name.lower().replace("-", "_")
    pref = next((i for i, t in enumerate(GGUF_PREFERENCE) if t in low), len(GGUF_PREFERENCE))
    return (pref, filename.count("/"), filename)


def choose_gguf(files: list[str]) -> list[str]:
    """The repo's ``.gguf`` files, best first: I2_S, then TQ2_0, TQ1_0, then the rest by name.

    Split files (``-00002-of-00003.gguf``) other than the first part are left out.
    """
    ggufs = [
        f
        for f in files
        if f.lower().endswith(".gguf") and not re.search(r"-0000[2-9]-of-\d+\.gguf$", f)
    ]
    return sorted(ggufs, key=_rank)
