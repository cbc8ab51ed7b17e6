"""gguf-py's constants, without importing the rest of gguf-py.

``import gguf`` runs the package's ``__init__``, which also imports its
writer, vocabulary (sentencepiece), metadata (yaml) and tensor-name modules:
in a process that only loads a model, 4 MB of peak RSS and ~80 ms
(measured, docs/FORMATS.md). Reading needs only ``gguf/constants.py``
(value and tensor types, block sizes, the magic), a module that imports
nothing from its package, so it is loaded here from gguf-py's own file under
a private name. Where gguf-py is already imported, its module is used as is.
The enums are ``IntEnum`` s: they compare and hash as their integers, so a
member from here and one from ``gguf`` are interchangeable as values and as
dict keys (the writer and ``gguf.quants`` use gguf-py's own).
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path
from types import ModuleType

_PRIVATE_NAME = "bitnet_core.gguf._gguf_py_constants"


def _load() -> ModuleType:
    for name in ("gguf.constants", _PRIVATE_NAME):
        if name in sys.modules:
            return sys.modules[name]
    try:
        spec = importlib.util.find_spec("gguf")  # locates the package without running it
        if spec is None or not spec.submodule_search_locations:
            raise ImportError("gguf is not a package here")
        path = Path(next(iter(spec.submodule_search_locations))) / "constants.py"
        file_spec = importlib.util.spec_from_file_location(_PRIVATE_NAME, path)
        if file_spec is None or file_spec.loader is None:
            raise ImportError(f"cannot load {path}")
        module = importlib.util.module_from_spec(file_spec)
        sys.modules[_PRIVATE_NAME] = module
        file_spec.loader.exec_module(module)
        return module
    except Exception:  # a gguf-py whose constants need the package: import it whole
        sys.modules.pop(_PRIVATE_NAME, None)
        import gguf.constants

        return gguf.constants


_constants = _load()

GGMLQuantizationType = _constants.GGMLQuantizationType
GGUFValueType = _constants.GGUFValueType
GGML_QUANT_SIZES = _constants.GGML_QUANT_SIZES
GGUF_MAGIC: int = _constants.GGUF_MAGIC
GGUF_DEFAULT_ALIGNMENT: int = _constants.GGUF_DEFAULT_ALIGNMENT

__all__ = [
    "GGML_QUANT_SIZES",
    "GGMLQuantizationType",
    "GGUFValueType",
    "GGUF_DEFAULT_ALIGNMENT",
    "GGUF_MAGIC",
]
