"""``GGUFFile``: a memory-mapped GGUF container with a checked tensor directory.

Opening maps the file and scans its header (``header.scan_header``); each
tensor's byte size is derived from its type and shape and checked to lie
inside the file without overlapping another. Tensor bytes are views of the
map (``numpy.memmap``): nothing is read until used.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..errors import GGUFFormatError, ModelFileError, UnsupportedModelError
from ..formats import get_codec
from ..hal.bf16 import BF16Array, bf16_to_f32
from .gguf_constants import GGMLQuantizationType
from .header import Header, RawTensor, scan_header
from .types import BITNET_CPP_UNSUPPORTED, GGML_TYPE_I2_S, block_sizes, type_name

#: Flavours of GGML type 36, in the order they are tried (see ``i2s_flavour``).
I2S_FLAVOURS = ("i2_s", "qk256", "bitnet32")


@dataclass(frozen=True)
class TensorInfo:
    """One tensor of a GGUF file."""

    name: str
    shape: tuple[int, ...]  # numpy order: (rows, cols) for a matrix
    type_id: int
    type_name: str
    offset: int  # absolute, in the file
    nbytes: int
    codec: str | None  # ternary codec name where the type is ternary-capable

    @property
    def n_elements(self) -> int:
        return int(np.prod(self.shape, dtype=np.int64)) if self.shape else 1

    def as_dict(self) -> dict:
        return {
            "name": self.name,
            "shape": list(self.shape),
            "type": self.type_name,
            "nbytes": self.nbytes,
            "offset": self.offset,
            "codec": self.codec,
        }


def i2s_flavour(t: RawTensor, avail: int, alignment: int, path: Path) -> tuple[str, int]:
    """Tell a type-36 tensor's flavour from the bytes it has (seeds' ``I2SFlavor::detect``).

    ``avail`` is the distance to the next tensor (or the end of the file). A
    flavour fits when its size is at most ``avail`` and the rest is less than
    the alignment padding.
    """
    if len(t.dims) != 2:
        raise GGUFFormatError(f"tensor {t.name!r}: I2_S tensors must be 2-D, got {t.shape}", path)
    rows, cols = t.shape
    fits = []
    for name in I2S_FLAVOURS:
        codec = get_codec(name)
        if cols % codec.col_multiple:
            continue
        size = codec.nbytes(rows, cols)
        if size <= avail and avail - size < alignment:
            fits.append((name, size))
    if not fits:
        raise GGUFFormatError(
            f"tensor {t.name!r}: {avail} bytes of type 36 data match none of I2_S "
            f"(bitnet.cpp), QK256 or BitNet32-F16 for shape {t.shape}",
            path,
        )
    return fits[0]


def tensor_nbytes(t: RawTensor, path: Path) -> int | None:
    """Byte size from type and shape; None for type 36 (resolved by flavour)."""
    if t.type_id == GGML_TYPE_I2_S:
        return None
    if t.type_id in BITNET_CPP_UNSUPPORTED:
        raise UnsupportedModelError(
            f"tensor {t.name!r} has bitnet.cpp's kernel-specific type "
            f"{BITNET_CPP_UNSUPPORTED[t.type_id]} ({t.type_id}); convert the model to "
            "I2_S, TQ2_0 or TQ1_0",
            path,
        )
    sizes = block_sizes(t.type_id)
    if sizes is None:
        raise GGUFFormatError(f"tensor {t.name!r} has unknown tensor type {t.type_id}", path)
    block, type_size = sizes
    if t.dims[0] % block:
        raise GGUFFormatError(
            f"tensor {t.name!r}: row length {t.dims[0]} is not a multiple of the "
            f"{type_name(t.type_id)} block size {block}",
            path,
        )
    return t.n_elements // block * type_size


class GGUFFile:
    """A GGUF file opened read-only and memory-mapped (see module docstring)."""

    def __init__(self, path: str | os.PathLike[str]) -> None:
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            if not self.path.is_file():
                raise ModelFileError("not a regular file", self.path)
        except FileNotFoundError:
            raise ModelFileError("no such file", self.path) from None
        except OSError as exc:
            raise ModelFileError(f"cannot read: {exc.strerror or exc}", self.path) from None
        if size < 24:
            raise GGUFFormatError(
                f"not a GGUF file: {size} bytes is too small for a GGUF header", self.path
            )
        try:
            self._map = np.memmap(self.path, dtype=np.uint8, mode="r")
        except (OSError, ValueError) as exc:
            raise ModelFileError(f"cannot map the file: {exc}", self.path) from None
        self.header: Header = scan_header(self._map, self.path)
        self.metadata = self.header.metadata
        self.tensors: dict[str, TensorInfo] = self._directory()

    def _directory(self) -> dict[str, TensorInfo]:
        h = self.header
        data_size = h.file_size - h.data_offset
        order = sorted(h.tensors, key=lambda t: t.offset)
        out: dict[str, TensorInfo] = {}
        prev_end, prev_name = 0, None
        for i, t in enumerate(order):
            if t.offset < prev_end:
                raise GGUFFormatError(
                    f"tensor {t.name!r} at offset {t.offset} overlaps tensor {prev_name!r}",
                    self.path,
                )
            nxt = order[i + 1].offset if i + 1 < len(order) else data_size
            codec = None
            nbytes = tensor_nbytes(t, self.path)
            if nbytes is None:
                codec, nbytes = i2s_flavour(t, nxt - t.offset, h.alignment, self.path)
            elif t.type_id in _TERNARY_CAPABLE:
                codec = _TERNARY_CAPABLE[t.type_id]
            if t.offset + nbytes > data_size:
                raise GGUFFormatError(
                    f"tensor {t.name!r} ({type_name(t.type_id)} {list(t.shape)}, {nbytes} bytes "
                    f"at data offset {t.offset}) runs past the end of the file",
                    self.path,
                )
            prev_end, prev_name = t.offset + nbytes, t.name
            out[t.name] = TensorInfo(
                t.name,
                t.shape,
                t.type_id,
                type_name(t.type_id),
                h.data_offset + t.offset,
                nbytes,
                codec,
            )
        return {t.name: out[t.name] for t in h.tensors}  # file order

    # --- access ---------------------------------------------------------------
    @property
    def tensor_names(self) -> list[str]:
        return list(self.tensors)

    def has(self, name: str) -> bool:
        return name in self.tensors

    def tensor_info(self, name: str) -> TensorInfo:
        try:
            return self.tensors[name]
        except KeyError:
            raise ModelFileError(f"no tensor {name!r} in the file", self.path) from None

    def raw(self, name: str) -> np.ndarray:
        """The tensor's bytes: a read-only ``numpy.memmap`` view of the file."""
        info = self.tensor_info(name)
        if self._map is None:
            raise ModelFileError("the file is closed", self.path)
        return self._map[info.offset : info.offset + info.nbytes]

    def dense(self, name: str) -> np.ndarray:
        """The tensor as floats in numpy order: F32/F16 as views, other types dequantized to f32."""
        info = self.tensor_info(name)
        raw = self.raw(name)
        if info.type_id == GGMLQuantizationType.F32:
            return raw.view("<f4").reshape(info.shape)
        if info.type_id == GGMLQuantizationType.F16:
            return raw.view("<f2").reshape(info.shape)
        if info.type_id == GGMLQuantizationType.BF16:
            return bf16_to_f32(raw.view("<u2")).reshape(info.shape)
        if info.codec is not None:
            raise ModelFileError(
                f"tensor {name!r} is ternary ({info.type_name}); read it with ternary()", self.path
            )
        from gguf.quants import dequantize  # all of gguf-py: only for other quantized types

        try:
            qtype = GGMLQuantizationType(info.type_id)
            return dequantize(np.asarray(raw), qtype).reshape(info.shape).astype(np.float32)
        except (ValueError, NotImplementedError) as exc:
            raise UnsupportedModelError(
                f"tensor {name!r}: cannot read {info.type_name} as floats ({exc})", self.path
            ) from None

    def table(self, name: str) -> np.ndarray | BF16Array:
        """A 2-D float table (embeddings, output head) without widening: as ``dense``, but
        BF16 comes as a ``BF16Array`` view of the file rather than a float32 copy."""
        info = self.tensor_info(name)
        if info.type_id == GGMLQuantizationType.BF16:
            return BF16Array(self.raw(name).view("<u2").reshape(info.shape))
        return self.dense(name)

    def close(self) -> None:
        """Drop the map (views taken before stay valid while referenced)."""
        self._map = None  # type: ignore[assignment]

    def __enter__(self) -> GGUFFile:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


_TERNARY_CAPABLE = {
    int(GGMLQuantizationType.TQ2_0): "tq2_0",
    int(GGMLQuantizationType.TQ1_0): "tq1_0",
    int(GGMLQuantizationType.F32): "f32",
    int(GGMLQuantizationType.F16): "f16",
    int(GGMLQuantizationType.BF16): "bf16",
}
