"""``bitnet convert``: Hugging Face BitNet checkpoints (transformers' ``BitNetForCausalLM``) to GGUF.

See docs/CONVERT.md. ``convert_checkpoint(src_dir, out_path, ternary_type=...)``.
Submodules are imported on first use, so ``bitnet`` starts fast.
"""

from __future__ import annotations

import importlib
from typing import Any

from .types import CONVERT_TYPES

_LAZY = {
    "convert_checkpoint": ".checkpoint",
    "load_tensors": ".checkpoint",
    "HFModelInfo": ".hf_config",
    "read_hf_config": ".hf_config",
    "bitnet_scale": ".packed",
    "unpack_bitnet_weight": ".packed",
}

__all__ = ["CONVERT_TYPES", *_LAZY]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        return getattr(importlib.import_module(_LAZY[name], __name__), name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
