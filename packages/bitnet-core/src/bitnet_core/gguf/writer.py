"""``write_gguf``: a BitNet model to a GGUF file, atomically.

Built on gguf-py's ``GGUFWriter``. Ternary layer weights (float arrays are
absmean-quantized, ``TernaryWeight``s are repacked) go in ``ternary_type``;
norms as F32; other matrices (embeddings, untied output) as ``dense_type``.
Types gguf-py does not know (bitnet.cpp's I2_S id 36, also used by the QK256
and BitNet32-F16 flavours) are written through ``GGUFWriter.add_tensor_info``
with their numeric id and the byte size from our codec: gguf-py packs the id
as the uint32 the format stores, and pads every tensor to the alignment.
QK256 keeps its scales in a companion F32 tensor ``blk.N.<name>.scale``.

The file is written to a temporary file beside ``path`` and renamed into
place, with the mode an ordinary new file gets under the umask; an existing
``path`` is kept unless ``overwrite=True``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
from gguf import GGMLQuantizationType, GGUFValueType, GGUFWriter

from ..atomic_file import temp_beside
from ..config import BitNetConfig
from ..errors import ModelFileError, QuantizationError
from ..formats import get_codec, ternarize_rows
from ..hal.bf16 import f32_to_bf16
from ..hal.weights import TernaryWeight
from .metadata import (
    check_shapes,
    metadata_from_config,
    scale_tensor_name,
    ternary_tensor_names,
)

#: ``ternary_type`` values ``write_gguf`` accepts.
WRITABLE_TERNARY_TYPES = ("tq2_0", "tq1_0", "i2_s", "qk256", "bitnet32", "f16", "f32", "bf16")
_DENSE = {
    "f32": (np.dtype("<f4"), None),
    "f16": (np.dtype("<f2"), None),
    "bf16": (np.dtype("<u2"), int(GGMLQuantizationType.BF16)),  # f32_to_bf16 bit patterns
}


def gguf_value(value: Any) -> tuple[Any, GGUFValueType, GGUFValueType | None]:
    """``(value, type, item type)`` for a Python value; ``(value, GGUFValueType)`` forces the type.

    bool -> BOOL, int -> UINT32 (INT32 if negative, 64-bit if large), float ->
    FLOAT32, str -> STRING, sequences -> ARRAY of STRING / BOOL / INT32 / FLOAT32.
    """
    if isinstance(value, tuple) and len(value) == 2 and isinstance(value[1], GGUFValueType):
        val, vt = value
        sub = None
        if vt == GGUFValueType.ARRAY:
            sub = gguf_value(list(val))[2]
        return val, vt, sub
    if isinstance(value, (bool, np.bool_)):
        return bool(value), GGUFValueType.BOOL, None
    if isinstance(value, (int, np.integer)):
        v = int(value)
        if 0 <= v < 1 << 32:
            return v, GGUFValueType.UINT32, None
        if -(1 << 31) <= v < 0:
            return v, GGUFValueType.INT32, None
        return v, (GGUFValueType.UINT64 if v > 0 else GGUFValueType.INT64), None
    if isinstance(value, (float, np.floating)):
        return float(value), GGUFValueType.FLOAT32, None
    if isinstance(value, str):
        return value, GGUFValueType.STRING, None
    if isinstance(value, (list, np.ndarray, tuple)):
        items = value.tolist() if isinstance(value, np.ndarray) else list(value)
        items = [i.item() if isinstance(i, np.generic) else i for i in items]
        if not items:
            raise ModelFileError("GGUF cannot store an empty array")
        if all(isinstance(i, str) for i in items):
            return items, GGUFValueType.ARRAY, GGUFValueType.STRING
        if all(isinstance(i, bool) for i in items):
            return items, GGUFValueType.ARRAY, GGUFValueType.BOOL
        if all(isinstance(i, int) and not isinstance(i, bool) for i in items):
            big = any(not -(1 << 31) <= i < 1 << 31 for i in items)
            return items, GGUFValueType.ARRAY, (GGUFValueType.INT64 if big else GGUFValueType.INT32)
        if all(isinstance(i, (int, float)) and not isinstance(i, bool) for i in items):
            return [float(i) for i in items], GGUFValueType.ARRAY, GGUFValueType.FLOAT32
        raise ModelFileError("GGUF arrays must hold one type (str, bool, int or float)")
    raise ModelFileError(f"cannot store a {type(value).__name__} in GGUF metadata")


def _ternary_bytes(
    name: str, value: Any, ternary_type: str
) -> tuple[np.ndarray, int, tuple[int, int], np.ndarray]:
    """``(raw bytes, ggml type id, (rows, cols), scales)`` of a ternary layer weight."""
    if isinstance(value, TernaryWeight):
        codes, scales = value.unpack()
    else:
        arr = np.asarray(value, dtype=np.float32)
        if arr.ndim != 2:
            raise QuantizationError(f"{name}: a ternary weight must be 2-D, got {arr.shape}")
        codes, scales = ternarize_rows(arr, per_row=False)
    codec = get_codec(ternary_type)
    try:
        raw = codec.pack(codes, scales)
    except QuantizationError as exc:
        raise QuantizationError(f"{name}: {exc}") from None
    assert codec.ggml_type is not None
    return raw, codec.ggml_type, codes.shape, scales


def _float_array(name: str, value: Any) -> np.ndarray:
    if isinstance(value, TernaryWeight):
        return value.dense()
    arr = np.asarray(value)
    if arr.dtype.kind not in "fiu" or arr.ndim not in (1, 2):
        raise ModelFileError(f"tensor {name!r}: expected a 1-D or 2-D float array, got {arr.shape}")
    return arr.astype(np.float32)


def write_gguf(
    path: str | os.PathLike[str],
    config: BitNetConfig,
    tensors: Mapping[str, Any],
    *,
    ternary_type: str = "tq2_0",
    tokenizer_metadata: Mapping[str, Any] | None = None,
    extra_metadata: Mapping[str, Any] | None = None,
    overwrite: bool = False,
    dense_type: str = "f16",
    tensor_types: Mapping[str, str] | None = None,
) -> Path:
    """Write ``config`` and ``tensors`` (GGUF name -> float array or ``TernaryWeight``) to ``path``.

    ``tensor_types`` overrides ``ternary_type`` for the ternary layers it names
    (a converter's per-tensor fallback for rows a type cannot hold).
    """
    path = Path(path)
    ternary_type = str(ternary_type).lower()
    overrides = {k: str(v).lower() for k, v in (tensor_types or {}).items()}
    for t in {ternary_type, *overrides.values()}:
        if t not in WRITABLE_TERNARY_TYPES:
            raise ModelFileError(
                f"cannot write ternary type {t!r} (choose from "
                f"{', '.join(WRITABLE_TERNARY_TYPES)})",
                path,
            )
    if dense_type not in _DENSE:
        raise ModelFileError(f"dense_type must be 'f16', 'bf16' or 'f32', got {dense_type!r}", path)
    if path.exists() and not overwrite:
        raise ModelFileError("file exists (pass overwrite=True to replace it)", path)

    check_shapes(config, {n: _shape_of(v) for n, v in tensors.items()}, path)
    ternary_names = set(ternary_tensor_names(config))
    metadata: dict[str, Any] = {}
    if ternary_type in _FILE_TYPE:
        metadata["general.file_type"] = _FILE_TYPE[ternary_type]
    metadata.update(metadata_from_config(config))
    metadata.update(tokenizer_metadata or {})
    metadata.update(extra_metadata or {})
    metadata.pop("general.architecture", None)

    entries: list[tuple[str, np.ndarray, int | None, tuple[int, ...]]] = []
    for name, value in tensors.items():
        if name in ternary_names:
            ttype = overrides.get(name, ternary_type)
            raw, type_id, shape, scales = _ternary_bytes(name, value, ttype)
            entries.append((name, raw, type_id, shape))
            if ttype == "qk256":
                sname = scale_tensor_name(name)
                if sname in tensors:
                    raise ModelFileError(f"{sname!r} is written by the QK256 codec itself", path)
                one = scales[0] if scales.size and (scales == scales[0]).all() else None
                sc = np.array([one], np.float32) if one is not None else scales.astype("<f4")
                entries.append((sname, sc, None, sc.shape))
            continue
        arr = _float_array(name, value)
        if arr.ndim == 1 or name.endswith(".scale"):
            entries.append((name, np.ascontiguousarray(arr, dtype="<f4"), None, arr.shape))
        elif dense_type == "bf16":
            entries.append((name, f32_to_bf16(arr), _DENSE["bf16"][1], arr.shape))
        else:
            data = np.ascontiguousarray(arr.astype(_DENSE[dense_type][0]))
            entries.append((name, data, None, arr.shape))

    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = temp_beside(path)
    try:
        writer = GGUFWriter(tmp, config.arch)
        for key, value in metadata.items():
            val, vt, sub = gguf_value(value)
            writer.add_key_value(key, val, vt, sub_type=sub)
        for name, data, type_id, shape in entries:
            if type_id is None:
                writer.add_tensor_info(name, shape, data.dtype, data.nbytes)
            else:  # raw bytes of a (possibly gguf-py-unknown) type: logical shape, no dtype check
                writer.add_tensor_info(
                    name,
                    shape,
                    np.dtype(np.float32),
                    data.nbytes,
                    raw_dtype=type_id,  # type: ignore[arg-type]
                )
        writer.write_header_to_file()
        writer.write_kv_data_to_file()
        writer.write_ti_data_to_file()
        for _, data, _, _ in entries:
            writer.write_tensor_data(data)
        writer.close()
        if overwrite:
            os.replace(tmp, path)
        else:
            _link_new(tmp, path)
    except ValueError as exc:  # gguf-py's complaints about values
        raise ModelFileError(f"cannot write: {exc}", path) from None
    finally:
        if tmp.exists():
            tmp.unlink()
    return path


def _shape_of(value: Any) -> tuple[int, ...]:
    if isinstance(value, TernaryWeight):
        return (value.rows, value.cols)
    return tuple(np.shape(value))


#: llama.cpp ``general.file_type`` (``llama_ftype``) for the ternary types it knows.
_FILE_TYPE = {
    "f32": 0,
    "f16": 1,
    "tq1_0": 36,  # LLAMA_FTYPE_MOSTLY_TQ1_0
    "tq2_0": 37,  # LLAMA_FTYPE_MOSTLY_TQ2_0
    "i2_s": 40,  # bitnet.cpp's LLAMA_FTYPE_MOSTLY_I2_S
    "bf16": 32,
}


def _link_new(tmp: Path, path: Path) -> None:
    """Move ``tmp`` to ``path`` only if ``path`` does not exist (atomically where links work)."""
    try:
        os.link(tmp, path)
    except FileExistsError:
        raise ModelFileError("file exists (pass overwrite=True to replace it)", path) from None
    except OSError:  # no hard links on this file system
        if path.exists():
            raise ModelFileError("file exists (pass overwrite=True to replace it)", path) from None
        os.replace(tmp, path)
        return
    tmp.unlink()
