"""Models by name from the Hugging Face Hub: ``ORG/NAME[@REV][:FILE]`` or ``hf://ORG/NAME[@REV]/FILE``.

``parse_model_ref`` tells a hub name from a local path (a path that exists
always wins); ``fetch_model`` returns the local GGUF for a name, downloaded
into huggingface_hub's cache (or converted there from a checkpoint repo).
Submodules are imported on first use, so ``bitnet`` starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

_LAZY = {
    "HubRef": ".names",
    "parse_model_ref": ".names",
    "choose_gguf": ".names",
    "fetch_model": ".fetch",
}

__all__ = list(_LAZY)


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
