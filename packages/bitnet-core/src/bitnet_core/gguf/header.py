"""A bounded scan of a GGUF file's header: metadata and tensor directory.

Every count, length and offset is checked against the file size before it
is used, so a truncated or hostile file fails fast with a ``GGUFFormatError``
naming the file and the problem, in time and memory bounded by the header's
real size. Tensor data is never read here. (gguf-py's ``GGUFReader`` trusts
the counts it reads and rejects bitnet.cpp's type 36, so the scan is ours;
value and tensor types come from gguf-py's ``GGUFValueType`` and
``GGMLQuantizationType``.)
"""

from __future__ import annotations

import struct
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import GGUFFormatError
from ..native import load_native
from .gguf_constants import GGUF_DEFAULT_ALIGNMENT, GGUF_MAGIC, GGUFValueType

MAX_DIMS = 4  # GGML_MAX_DIMS
_U64 = struct.Struct("<Q")
MAX_ARRAY_DEPTH = 3
#: Upper bound of any count (tensors, keys, array items): a 256k-token
#: vocabulary is far below it; a hostile count is refused before any work.
MAX_COUNT = 1 << 24

_SCALAR = {
    GGUFValueType.UINT8: ("<B", 1),
    GGUFValueType.INT8: ("<b", 1),
    GGUFValueType.UINT16: ("<H", 2),
    GGUFValueType.INT16: ("<h", 2),
    GGUFValueType.UINT32: ("<I", 4),
    GGUFValueType.INT32: ("<i", 4),
    GGUFValueType.FLOAT32: ("<f", 4),
    GGUFValueType.BOOL: ("<?", 1),
    GGUFValueType.UINT64: ("<Q", 8),
    GGUFValueType.INT64: ("<q", 8),
    GGUFValueType.FLOAT64: ("<d", 8),
}
_NP = {
    GGUFValueType.UINT8: "<u1",
    GGUFValueType.INT8: "<i1",
    GGUFValueType.UINT16: "<u2",
    GGUFValueType.INT16: "<i2",
    GGUFValueType.UINT32: "<u4",
    GGUFValueType.INT32: "<i4",
    GGUFValueType.FLOAT32: "<f4",
    GGUFValueType.UINT64: "<u8",
    GGUFValueType.INT64: "<i8",
    GGUFValueType.FLOAT64: "<f8",
}


@dataclass(frozen=True)
class RawTensor:
    """One entry of the tensor directory, as stored (dims innermost first)."""

    name: str
    dims: tuple[int, ...]
    type_id: int
    offset: int  # relative to the data section

    @property
    def shape(self) -> tuple[int, ...]:
        """numpy order: ``(rows, cols)`` for a matrix."""
        return tuple(reversed(self.dims))

    @property
    def n_elements(self) -> int:
        n = 1
        for d in self.dims:
            n *= d
        return n


@dataclass
class Header:
    path: Path
    version: int
    file_size: int
    metadata: dict[str, Any]
    value_types: dict[str, str]
    tensors: list[RawTensor]
    alignment: int
    data_offset: int
    metadata_span: tuple[int, int] = field(default=(0, 0))


class _Cursor:
    def __init__(self, buf: np.ndarray, path: Path) -> None:
        self.buf = buf
        self.mv = memoryview(buf)  # cheap slices and struct reads of the map
        self.size = int(buf.shape[0])
        self.pos = 0
        self.path = path

    def fail(self, msg: str) -> GGUFFormatError:
        return GGUFFormatError(msg, self.path)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise self.fail(
                f"truncated: {what} needs {n} bytes at offset {self.pos}, "
                f"file has {self.size - self.pos} left"
            )

    def scalar(self, vtype: GGUFValueType, what: str) -> Any:
        fmt, n = _SCALAR[vtype]
        self.need(n, what)
        (v,) = struct.unpack_from(fmt, self.mv, self.pos)
        self.pos += n
        return v

    def u32(self, what: str) -> int:
        return self.scalar(GGUFValueType.UINT32, what)

    def u64(self, what: str) -> int:
        return self.scalar(GGUFValueType.UINT64, what)

    def string(self, what: str) -> str:
        n = self.u64(f"length of {what}")
        self.need(n, what)
        s = str(self.mv[self.pos : self.pos + n], "utf-8", "replace")
        self.pos += n
        return s

    def strings(self, n: int, what: str) -> list[str]:
        """``n`` strings (the hot loop of token lists: decoded natively where the native
        module is built; the loop below reads what it left, naming any failure)."""
        out: list[str] = []
        native, _ = load_native()
        if native is not None and hasattr(native, "gguf_strings"):  # (an older build: no)
            out, self.pos = native.gguf_strings(self.mv, self.pos, n)
            n -= len(out)
        mv, pos, size = self.mv, self.pos, self.size
        unpack = _U64.unpack_from
        for _ in range(n):
            if pos + 8 > size:
                self.pos = pos
                self.need(8, f"length of {what}")
            (length,) = unpack(mv, pos)
            pos += 8
            if length > size - pos:
                self.pos = pos
                self.need(length, what)
            out.append(str(mv[pos : pos + length], "utf-8", "replace"))
            pos += length
        self.pos = pos
        return out

    def count(self, what: str, min_item: int) -> int:
        n = self.u64(what)
        left = self.size - self.pos
        if n > MAX_COUNT:
            raise self.fail(f"{what} {n} is larger than bitnet accepts ({MAX_COUNT})")
        if n * min_item > left:
            raise self.fail(f"{what} {n} cannot fit in the {left} bytes left in the file")
        return n

    def vtype(self, what: str) -> GGUFValueType:
        raw = self.u32(f"type of {what}")
        try:
            return GGUFValueType(raw)
        except ValueError:
            raise self.fail(f"{what}: unknown metadata value type {raw}") from None

    def value(self, vtype: GGUFValueType, what: str, depth: int = 0) -> Any:
        if vtype in _SCALAR:
            return self.scalar(vtype, what)
        if vtype == GGUFValueType.STRING:
            return self.string(what)
        # ARRAY
        if depth >= MAX_ARRAY_DEPTH:
            raise self.fail(f"{what}: arrays nested deeper than {MAX_ARRAY_DEPTH}")
        itype = self.vtype(f"items of {what}")
        if itype in _NP or itype == GGUFValueType.BOOL:
            item = _SCALAR[itype][1]
            n = self.count(f"{what}: array length", item)
            dtype = _NP.get(itype, "<u1")
            arr = np.frombuffer(self.buf, dtype=dtype, count=n, offset=self.pos)
            self.pos += n * item
            return (arr != 0).tolist() if itype == GGUFValueType.BOOL else arr.tolist()
        min_item = 8 if itype == GGUFValueType.STRING else 12
        n = self.count(f"{what}: array length", min_item)
        if itype == GGUFValueType.STRING:
            return self.strings(n, what)
        return [self.value(itype, what, depth + 1) for _ in range(n)]


def scan_header(buf: np.ndarray, path: Path) -> Header:
    """Parse and check the header of the GGUF bytes ``buf`` (a uint8 memmap)."""
    cur = _Cursor(buf, path)
    if cur.size < 24:
        raise cur.fail(f"not a GGUF file: {cur.size} bytes is too small for a GGUF header")
    magic = struct.unpack_from("<I", buf, 0)[0]
    if magic != GGUF_MAGIC:
        raise cur.fail(f"not a GGUF file: bad magic {buf[:4].tobytes()!r}")
    cur.pos = 4
    version = cur.u32("version")
    if version not in (2, 3) and struct.unpack("<I", struct.pack(">I", version))[0] in (2, 3):
        raise cur.fail("big-endian GGUF files are not supported")
    if version not in (2, 3):
        raise cur.fail(f"unsupported GGUF version {version} (bitnet reads versions 2 and 3)")
    n_tensors = cur.count("tensor count", 24)
    n_kv = cur.count("metadata count", 13)
    start = cur.pos
    metadata: dict[str, Any] = {}
    value_types: dict[str, str] = {}
    for _ in range(n_kv):
        key = cur.string("metadata key")
        vt = cur.vtype(f"metadata {key!r}")
        if vt == GGUFValueType.ARRAY:
            save = cur.pos
            itype = cur.vtype(f"metadata {key!r}")
            cur.pos = save
            value_types[key] = f"array[{itype.name.lower()}]"
        else:
            value_types[key] = vt.name.lower()
        if key in metadata:
            raise cur.fail(f"duplicate metadata key {key!r}")
        metadata[key] = cur.value(vt, f"metadata {key!r}")
    span = (start, cur.pos)
    alignment = metadata.get("general.alignment", GGUF_DEFAULT_ALIGNMENT)
    if (
        isinstance(alignment, bool)
        or not isinstance(alignment, int)
        or alignment <= 0
        or alignment & (alignment - 1)
        or alignment > 1 << 16
    ):
        raise cur.fail(f"general.alignment must be a power of two <= 65536, got {alignment!r}")
    tensors: list[RawTensor] = []
    seen: set[str] = set()
    for _ in range(n_tensors):
        name = cur.string("tensor name")
        if name in seen:
            raise cur.fail(f"duplicate tensor {name!r}")
        seen.add(name)
        n_dims = cur.u32(f"dimension count of tensor {name!r}")
        if not 1 <= n_dims <= MAX_DIMS:
            raise cur.fail(f"tensor {name!r} has {n_dims} dimensions (1 to {MAX_DIMS} allowed)")
        dims = tuple(cur.u64(f"dimensions of tensor {name!r}") for _ in range(n_dims))
        n = 1
        for d in dims:
            n *= d
        if n > cur.size * 8:  # more elements than even 1-bit weights could store
            raise cur.fail(f"tensor {name!r} has {n} elements, more than the file can hold")
        type_id = cur.u32(f"type of tensor {name!r}")
        offset = cur.u64(f"offset of tensor {name!r}")
        if offset % alignment:
            raise cur.fail(f"tensor {name!r} offset {offset} is not aligned to {alignment}")
        tensors.append(RawTensor(name, dims, type_id, offset))
    data_offset = -(-cur.pos // alignment) * alignment
    if data_offset > cur.size and tensors:
        raise cur.fail("truncated: the file ends before its tensor data")
    for t in tensors:
        if data_offset + t.offset > cur.size:
            raise cur.fail(
                f"tensor {t.name!r} starts at {data_offset + t.offset}, past the end of "
                f"the file ({cur.size} bytes)"
            )
    return Header(
        path, version, cur.size, metadata, value_types, tensors, alignment, data_offset, span
    )
