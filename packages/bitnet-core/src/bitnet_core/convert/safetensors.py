"""Read safetensors checkpoints (single file or sharded) as numpy arrays, memory-mapped.

The format is a little-endian u64 header length, a JSON header mapping tensor
names to ``dtype``/``shape``/``data_offsets``, then the data. We read it
ourselves because the ``safetensors`` package's numpy backend has no bfloat16,
the dtype BitNet checkpoints are usually saved in; bf16 is widened to float32.
Every offset and size is checked against the file.
"""

from __future__ import annotations

import json
import struct
from collections.abc import Iterator
from pathlib import Path

import numpy as np

from ..errors import ModelFileError

_DTYPES = {
    "F64": np.dtype("<f8"),
    "F32": np.dtype("<f4"),
    "F16": np.dtype("<f2"),
    "BF16": np.dtype("<u2"),  # widened on read
    "I64": np.dtype("<i8"),
    "I32": np.dtype("<i4"),
    "I16": np.dtype("<i2"),
    "I8": np.dtype("i1"),
    "U8": np.dtype("u1"),
    "BOOL": np.dtype("?"),
}
_MAX_HEADER = 100 * 1024 * 1024


class SafetensorsFile:
    """One ``.safetensors`` file: names, shapes and arrays (views of a memory map)."""

    def __init__(self, path: Path) -> None:
        self.path = Path(path)
        try:
            size = self.path.stat().st_size
            with open(self.path, "rb") as f:
                head = f.read(8)
                if len(head) < 8:
                    raise ModelFileError("truncated safetensors header", self.path)
                (n,) = struct.unpack("<Q", head)
                if n > min(size - 8, _MAX_HEADER):
                    raise ModelFileError(f"safetensors header length {n} is too large", self.path)
                header = json.loads(f.read(n))
        except OSError as exc:
            raise ModelFileError(f"cannot read: {exc.strerror or exc}", self.path) from exc
        except (json.JSONDecodeError, UnicodeDecodeError) as exc:
            raise ModelFileError(f"bad safetensors header: {exc}", self.path) from exc
        if not isinstance(header, dict):
            raise ModelFileError("bad safetensors header", self.path)
        header.pop("__metadata__", None)
        self._data_start = 8 + n
        data_size = size - self._data_start
        self._entries: dict[str, tuple[str, tuple[int, ...], int, int]] = {}
        for name, info in header.items():
            try:
                dtype, shape, (begin, end) = (
                    info["dtype"],
                    tuple(info["shape"]),
                    info["data_offsets"],
                )
            except (KeyError, TypeError, ValueError) as exc:
                raise ModelFileError(f"tensor {name!r}: bad header entry", self.path) from exc
            if dtype not in _DTYPES:
                raise ModelFileError(f"tensor {name!r}: unsupported dtype {dtype}", self.path)
            count = int(np.prod(shape, dtype=np.int64)) if shape else 1
            if (
                not (0 <= begin <= end <= data_size)
                or end - begin != count * _DTYPES[dtype].itemsize
            ):
                raise ModelFileError(f"tensor {name!r}: data offsets do not match", self.path)
            self._entries[name] = (dtype, shape, begin, end)
        self._mmap: np.memmap | None = None

    @property
    def names(self) -> list[str]:
        return list(self._entries)

    def dtype(self, name: str) -> str:
        return self._entries[name][0]

    def shape(self, name: str) -> tuple[int, ...]:
        return self._entries[name][1]

    def get(self, name: str) -> np.ndarray:
        """The tensor (bf16 as float32, everything else in its own dtype)."""
        dtype, shape, begin, end = self._entries[name]
        if self._mmap is None:
            self._mmap = np.memmap(self.path, dtype=np.uint8, mode="r", offset=self._data_start)
        raw = self._mmap[begin:end].view(_DTYPES[dtype]).reshape(shape)
        if dtype == "BF16":
            return (raw.astype(np.uint32) << 16).view(np.float32)
        return raw


class Checkpoint:
    """All safetensors files of a checkpoint directory, by tensor name."""

    def __init__(self, directory: Path) -> None:
        directory = Path(directory)
        index = directory / "model.safetensors.index.json"
        if index.is_file():
            try:
                weight_map = json.loads(index.read_text(encoding="utf-8"))["weight_map"]
            except (OSError, KeyError, TypeError, json.JSONDecodeError) as exc:
                raise ModelFileError(f"bad index: {exc}", index) from exc
            files = sorted({directory / f for f in weight_map.values()})
            missing = [f for f in files if not f.is_file()]
            if missing:
                raise ModelFileError(
                    f"shard {missing[0].name} named by the index is missing", index
                )
        else:
            files = sorted(directory.glob("*.safetensors"))
        if not files:
            raise ModelFileError(
                "no safetensors weights (model.safetensors or an index); "
                "PyTorch .bin checkpoints are not supported",
                directory,
            )
        self.files = [SafetensorsFile(f) for f in files]
        self._where: dict[str, SafetensorsFile] = {}
        for f in self.files:
            for name in f.names:
                if name in self._where:
                    raise ModelFileError(f"tensor {name!r} appears in two shards", f.path)
                self._where[name] = f

    def __contains__(self, name: str) -> bool:
        return name in self._where

    def __iter__(self) -> Iterator[str]:
        return iter(self._where)

    def shape(self, name: str) -> tuple[int, ...]:
        return self._where[name].shape(name)

    def dtype(self, name: str) -> str:
        return self._where[name].dtype(name)

    def get(self, name: str) -> np.ndarray:
        if name not in self._where:
            raise ModelFileError(f"tensor {name!r} is missing from the checkpoint")
        return self._where[name].get(name)


def write_safetensors(
    path: str | Path, tensors: dict[str, np.ndarray], *, bf16: tuple[str, ...] = ()
) -> Path:
    """Write ``tensors`` as one ``.safetensors`` file; the names in ``bf16`` as bfloat16.

    For fixtures and small checkpoints: the whole file is built in memory.
    """
    names = {v: k for k, v in _DTYPES.items() if k != "BF16"}
    header: dict[str, dict] = {}
    blobs: list[bytes] = []
    offset = 0
    for name, value in tensors.items():
        arr = np.ascontiguousarray(value)
        if name in bf16:
            from ..hal.bf16 import f32_to_bf16

            data, dtype = f32_to_bf16(arr.astype(np.float32)).astype("<u2").tobytes(), "BF16"
        else:
            arr = arr.astype(arr.dtype.newbyteorder("<"))
            if arr.dtype not in names:
                raise ModelFileError(f"tensor {name!r}: cannot store dtype {arr.dtype}", path)
            data, dtype = arr.tobytes(), names[arr.dtype]
        header[name] = {
            "dtype": dtype,
            "shape": list(arr.shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    header["__metadata__"] = {"format": "pt"}  # type: ignore[assignment]
    raw = json.dumps(header).encode()
    raw += b" " * (-len(raw) % 8)
    path = Path(path)
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    return path
