"""What every ternary weight codec shares: the interface and the checks.

A codec turns int8 codes ``[rows, cols]`` in {-1, 0, +1} plus one float32
scale per row into the bytes of one on-disk layout (``pack``) and back
(``unpack``, the ``TernaryCodec`` protocol of ``hal.weights``). Layouts with
per-block scales must have equal scales within a row (providers take one
scale per row); ``row_scales_from_blocks`` enforces that.
"""

from __future__ import annotations

import numpy as np

from ..errors import QuantizationError, ShapeError, UnsupportedModelError
from ..native import load_native


class Codec:
    """Base class of the codecs in ``bitnet_core.formats`` (see module docstring)."""

    #: Registry name (``get_codec(name)``).
    name: str = ""
    #: GGML type id in GGUF files, or None where the layout has none.
    ggml_type: int | None = None
    #: Columns must be a multiple of this (1: any width).
    col_multiple: int = 1
    #: The native module reads this layout (``_native.unpack_raw``, ``TernaryMatrix.from_raw``).
    native_reader: bool = False

    def nbytes(self, rows: int, cols: int) -> int:
        """Size in bytes of a ``[rows, cols]`` tensor in this layout."""
        raise NotImplementedError

    def pack(self, codes: np.ndarray, scales: np.ndarray | float) -> np.ndarray:
        """``codes`` int8 ``[rows, cols]`` and per-row ``scales`` -> raw uint8 bytes."""
        raise NotImplementedError

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        """Raw bytes -> ``(codes int8 [rows, cols], scales float32 [rows])``.

        Layouts with a ``native_reader`` are read by the native module on every
        thread; ``unpack_numpy`` is their reference, and also reads any tensor
        the native reader refuses, so errors are the codec's own.
        """
        if self.native_reader:
            data = self.raw_bytes(raw, rows, cols)
            mod, _ = load_native()
            if mod is not None:
                try:
                    return tuple(mod.unpack_raw(self.name, data, rows, cols))  # type: ignore[return-value]
                except ValueError:
                    pass  # a row it cannot take as the codec would: the codec says why
        return self.unpack_numpy(raw, rows, cols)

    def unpack_numpy(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        """``unpack`` in numpy alone: the reference the native reader is tested against."""
        raise NotImplementedError

    def dequantize(self, raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
        """The float32 matrix ``codes * scales[:, None]``."""
        codes, scales = self.unpack(raw, rows, cols)
        return codes.astype(np.float32) * scales[:, None]

    # --- helpers for subclasses ---------------------------------------------
    def check_shape(self, rows: int, cols: int) -> None:
        if rows <= 0 or cols <= 0:
            raise ShapeError(f"{self.name}: empty or negative shape ({rows}, {cols})")
        if cols % self.col_multiple:
            raise QuantizationError(
                f"{self.name}: rows of {cols} columns are not a multiple of {self.col_multiple}"
            )

    def raw_bytes(self, raw: np.ndarray, rows: int, cols: int) -> np.ndarray:
        """``raw`` as a flat uint8 array of exactly ``nbytes(rows, cols)`` bytes (a view)."""
        self.check_shape(rows, cols)
        flat = np.asarray(raw).reshape(-1).view(np.uint8)
        need = self.nbytes(rows, cols)
        if flat.size < need:
            raise QuantizationError(
                f"{self.name}: {flat.size} bytes cannot hold a ({rows}, {cols}) tensor "
                f"({need} bytes needed)"
            )
        return flat[:need]

    def __repr__(self) -> str:
        return f"<codec {self.name}>"


def check_codes(codes: np.ndarray, what: str) -> np.ndarray:
    """Validate ternary codes: 2-D, values in {-1, 0, +1}; returns an int8 array."""
    codes = np.asarray(codes)
    if codes.ndim != 2 or codes.size == 0:
        raise ShapeError(f"{what}: ternary codes must be 2-D and non-empty, got {codes.shape}")
    if codes.size and (codes.min() < -1 or codes.max() > 1):
        raise QuantizationError(f"{what}: ternary codes must be in {{-1, 0, +1}}")
    return codes.astype(np.int8, copy=False)


def row_scales(scales: np.ndarray | float, rows: int, what: str) -> np.ndarray:
    """Broadcast a scalar or ``[rows]`` scale to float32 ``[rows]``, finite."""
    s = np.asarray(scales, dtype=np.float32)
    if s.ndim > 1 or (s.ndim == 1 and s.shape[0] not in (1, rows)):
        raise ShapeError(f"{what}: {s.shape} scales do not fit {rows} rows")
    s = np.broadcast_to(s.reshape(-1) if s.ndim else s, (rows,)).astype(np.float32)
    if not np.isfinite(s).all():
        raise QuantizationError(f"{what}: scales must be finite")
    return s


def row_scales_from_blocks(block_scales: np.ndarray, live: np.ndarray, what: str) -> np.ndarray:
    """One scale per row from per-block scales ``[rows, blocks]``.

    Blocks where ``live`` is False (all codes zero) are ignored; the others
    of a row must have one value, else ``UnsupportedModelError``. A row with
    no live block gets scale 0.
    """
    d = np.asarray(block_scales, dtype=np.float32)
    rows = d.shape[0]
    if rows == 0 or d.shape[1] == 0:
        return np.zeros(rows, dtype=np.float32)
    any_live = live.any(axis=1)
    first = np.argmax(live, axis=1)
    ref = d[np.arange(rows), first]
    bad = live & (d != ref[:, None])
    if bad.any():
        r = int(np.argmax(bad.any(axis=1)))
        vals = np.unique(d[r][live[r]])[:4]
        raise UnsupportedModelError(
            f"{what}: row {r} has different per-block scales {vals.tolist()}; bitnet takes "
            "one scale per row (re-quantize the weight with one scale per row)"
        )
    return np.where(any_live, ref, np.float32(0)).astype(np.float32)


def pad_cols(codes: np.ndarray, multiple: int) -> np.ndarray:
    """Codes padded with zeros on the right to a multiple of ``multiple`` columns."""
    rows, cols = codes.shape
    padded = -(-cols // multiple) * multiple
    if padded == cols:
        return codes
    out = np.zeros((rows, padded), dtype=np.int8)
    out[:, :cols] = codes
    return out
