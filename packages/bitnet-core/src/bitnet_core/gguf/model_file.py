"""``open_model_file``: a GGUF file checked as a BitNet model.

On top of ``GGUFFile`` (memory-mapped, checked container) it reads the
``BitNetConfig`` from the metadata, checks that every tensor the config
needs is there with its shape, and hands out ternary weights as
``TernaryWeight`` views of the file with the codec of their type.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np

from ..config import ARCH_LLAMA, TOKEN_EMBD, BitNetConfig
from ..errors import BitnetError, ModelFileError, UnsupportedModelError
from ..formats import get_codec
from ..formats.absmean import ternary_row_scales
from ..formats.base import Codec
from ..formats.dense import DenseCodec
from ..hal.weights import TernaryWeight
from .container import GGUFFile
from .metadata import check_shapes, config_from_metadata, scale_tensor_name


class FileCodec:
    """The codec of one tensor of one file: errors name both, ``.scale`` multiplies.

    Providers that compute on ``TernaryWeight.raw`` must take the per-row
    scales from ``TernaryWeight.scales()``: they include llama.cpp's optional
    ``blk.N.<name>.scale`` factor, which the raw blocks do not.
    """

    def __init__(
        self,
        inner: Codec,
        factor: np.ndarray | None,
        path: Path,
        tensor: str,
        require_ternary: bool = False,
    ) -> None:
        self.inner = inner
        #: refuse float rows that are not already ternary instead of absmean-quantizing them
        self.require_ternary = require_ternary and isinstance(inner, DenseCodec)
        self.factor = None if factor is None else np.asarray(factor, np.float32).reshape(-1)
        self.name = inner.name
        self.path = path
        self.tensor = tensor

    @property
    def native_reader(self) -> bool:
        """The native module may read the raw bytes (then times ``factor``, as ``unpack``)."""
        return bool(getattr(self.inner, "native_reader", False)) and not self.require_ternary

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        if (
            self.require_ternary
            and ternary_row_scales(
                self.inner.to_float(raw, rows, cols)  # type: ignore[attr-defined]
            )
            is None
        ):
            raise UnsupportedModelError(
                f"tensor {self.tensor!r} ({self.inner.name}) is not ternary: a 'llama' file "
                "runs here only as a 1.58-bit model (ternary rows, one magnitude each)",
                self.path,
            )
        try:
            codes, scales = self.inner.unpack(raw, rows, cols)
        except BitnetError as exc:
            if isinstance(exc, ModelFileError) and exc.path:
                raise
            cls = type(exc) if isinstance(exc, ModelFileError) else ModelFileError
            raise cls(f"tensor {self.tensor!r}: {exc}", self.path) from None
        if self.factor is not None:
            scales = (scales * self.factor).astype(np.float32)
        return codes, scales


class ModelFile(GGUFFile):
    """A BitNet GGUF model: ``.config``, ``.metadata``, tensors as views of the file."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        super().__init__(path)
        embd = self.tensors.get(TOKEN_EMBD)
        rows = embd.shape[0] if embd is not None and len(embd.shape) == 2 else None
        self.config: BitNetConfig = config_from_metadata(
            self.metadata, list(self.tensors), self.path, rows
        )
        check_shapes(self.config, {n: t.shape for n, t in self.tensors.items()}, self.path)

    def _scale_factor(self, name: str) -> np.ndarray | None:
        sname = scale_tensor_name(name)
        if sname not in self.tensors:
            return None
        f = np.asarray(self.dense(sname), dtype=np.float32).reshape(-1)
        if not np.isfinite(f).all():
            raise ModelFileError(f"scale tensor {sname!r} is not finite", self.path)
        return f

    def codec(self, name: str) -> FileCodec:
        """The codec that unpacks tensor ``name`` (with its ``.scale`` applied)."""
        info = self.tensor_info(name)
        if info.codec is None or len(info.shape) != 2:
            raise UnsupportedModelError(
                f"tensor {name!r} of type {info.type_name} and shape {list(info.shape)} "
                "cannot be read as a ternary matrix",
                self.path,
            )
        codec = get_codec(info.codec)
        factor = self._scale_factor(name)
        if info.codec == "qk256":
            if factor is None:
                raise UnsupportedModelError(
                    f"QK256 tensor {name!r} has no scale tensor {scale_tensor_name(name)!r}",
                    self.path,
                )
            codec, factor = codec.with_scales(factor), None  # type: ignore[attr-defined]
        # a llama-architecture file may be any llama model: only a ternary one runs here
        strict = self.config.arch == ARCH_LLAMA
        return FileCodec(codec, factor, self.path, name, require_ternary=strict)

    def ternary(self, name: str) -> TernaryWeight:
        """Tensor ``name`` as a ``TernaryWeight`` whose ``raw`` is a view of the file."""
        info = self.tensor_info(name)
        codec = self.codec(name)
        rows, cols = info.shape
        return TernaryWeight(name, rows, cols, codec.name, self.raw(name), codec)

    def unpack(self, name: str) -> tuple[np.ndarray, np.ndarray]:
        """``(codes, scales)`` of a ternary tensor, errors naming the file and tensor."""
        return self.ternary(name).unpack()


def open_model_file(path: str | os.PathLike[str]) -> ModelFile:
    """Open, map and check a BitNet GGUF model file (nothing of the tensors is read)."""
    return ModelFile(Path(path))
