"""The safetensors reader of the converter: values, bf16, and clear errors on bad files."""

from __future__ import annotations

import json
import struct

import numpy as np
import pytest

from bitnet_core.convert.safetensors import Checkpoint, SafetensorsFile
from bitnet_core.errors import ModelFileError


def _write(path, tensors: dict[str, tuple[str, tuple, bytes]], header_extra=None):
    header, blobs, offset = {}, [], 0
    for name, (dtype, shape, data) in tensors.items():
        header[name] = {
            "dtype": dtype,
            "shape": list(shape),
            "data_offsets": [offset, offset + len(data)],
        }
        blobs.append(data)
        offset += len(data)
    header.update(header_extra or {})
    raw = json.dumps(header).encode()
    path.write_bytes(struct.pack("<Q", len(raw)) + raw + b"".join(blobs))
    return path


def test_values_and_bf16(tmp_path):
    a = np.arange(6, dtype=np.float32).reshape(2, 3)
    b = np.array([1.5, -2.25, 3e-3], np.float32)
    bf16 = (b.view(np.uint32) >> 16).astype(np.uint16)  # exact in bf16 for these values
    f = _write(
        tmp_path / "m.safetensors",
        {"a": ("F32", (2, 3), a.tobytes()), "b": ("BF16", (3,), bf16.tobytes())},
        {"__metadata__": {"format": "pt"}},
    )
    st = SafetensorsFile(f)
    assert sorted(st.names) == ["a", "b"]
    np.testing.assert_array_equal(st.get("a"), a)
    np.testing.assert_array_equal(st.get("b"), (bf16.astype(np.uint32) << 16).view(np.float32))
    assert st.get("b").dtype == np.float32


@pytest.mark.parametrize(
    "content, match",
    [
        (b"\x01\x02", "truncated"),
        (struct.pack("<Q", 10**12) + b"{}", "too large"),
        (struct.pack("<Q", 4) + b"{no}", "bad safetensors header"),
        (struct.pack("<Q", 2) + b"[]", "bad safetensors header"),
    ],
)
def test_bad_headers(tmp_path, content, match):
    f = tmp_path / "bad.safetensors"
    f.write_bytes(content)
    with pytest.raises(ModelFileError, match=match):
        SafetensorsFile(f)


def test_bad_entries(tmp_path):
    good = np.zeros(4, np.float32).tobytes()
    with pytest.raises(ModelFileError, match="unsupported dtype"):
        SafetensorsFile(_write(tmp_path / "a.safetensors", {"x": ("C64", (4,), good)}))
    with pytest.raises(ModelFileError, match="offsets do not match"):
        SafetensorsFile(_write(tmp_path / "b.safetensors", {"x": ("F32", (5,), good)}))
    f = _write(tmp_path / "c.safetensors", {"x": ("F32", (4,), good)})
    f.write_bytes(f.read_bytes()[:-4])  # data cut short
    with pytest.raises(ModelFileError, match="offsets do not match"):
        SafetensorsFile(f)


def test_checkpoint_errors(tmp_path):
    with pytest.raises(ModelFileError, match="no safetensors"):
        Checkpoint(tmp_path)
    good = np.zeros(2, np.float32).tobytes()
    _write(tmp_path / "a.safetensors", {"x": ("F32", (2,), good)})
    _write(tmp_path / "b.safetensors", {"x": ("F32", (2,), good)})
    with pytest.raises(ModelFileError, match="two shards"):
        Checkpoint(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": "a.safetensors", "y": "missing.safetensors"}})
    )
    with pytest.raises(ModelFileError, match="missing"):
        Checkpoint(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text("{")
    with pytest.raises(ModelFileError, match="bad index"):
        Checkpoint(tmp_path)
    (tmp_path / "model.safetensors.index.json").write_text(
        json.dumps({"weight_map": {"x": "a.safetensors"}})
    )
    ck = Checkpoint(tmp_path)
    assert "x" in ck and ck.shape("x") == (2,)
    with pytest.raises(ModelFileError, match="missing from the checkpoint"):
        ck.get("nope")
