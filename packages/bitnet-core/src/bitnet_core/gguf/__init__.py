"""GGUF model files: a checked, memory-mapped reader and an atomic writer.

- ``open_model_file(path) -> ModelFile``: ``.config``, ``.metadata``,
  ``.tensor_names``, ``.has``, ``.tensor_info``, ``.ternary``, ``.dense``, ``.table``;
  tensors stay views of the file.
- ``GGUFFile``: the container alone (any architecture), used by ``bitnet inspect``.
- ``write_gguf(path, config, tensors, ...)``: TQ2_0 / TQ1_0 / I2_S / QK256 /
  BitNet32-F16 / F16 / F32 / BF16 ternary weights, F32 norms.
"""

from .container import GGUFFile, TensorInfo
from .metadata import config_from_metadata, expected_shapes, metadata_from_config
from .model_file import ModelFile, open_model_file

_WRITER_NAMES = ("WRITABLE_TERNARY_TYPES", "write_gguf")


def __getattr__(name: str):
    # the writer imports all of gguf-py (GGUFWriter); a process that only reads never does
    if name in _WRITER_NAMES:
        from . import writer

        return getattr(writer, name)
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


__all__ = [
    "WRITABLE_TERNARY_TYPES",
    "GGUFFile",
    "ModelFile",
    "TensorInfo",
    "config_from_metadata",
    "expected_shapes",
    "metadata_from_config",
    "open_model_file",
    "write_gguf",
]
