"""Truncated, corrupt and hostile GGUF files fail with a clear ModelFileError, fast and small."""

from __future__ import annotations

import os
import struct
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from formats_testlib import ARRAY, STRING, TINY, UINT32, gguf_blob, one_tensor_blob, random_tensors
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bitnet_core.cli.main import main
from bitnet_core.errors import GGUFFormatError, ModelFileError, UnsupportedModelError
from bitnet_core.gguf import GGUFFile, open_model_file, write_gguf

ARCH = [("general.architecture", STRING, "test")]


def _write(tmp_path, data: bytes, name: str = "bad.gguf"):
    p = tmp_path / name
    p.write_bytes(data)
    return p


def _fails(tmp_path, data: bytes, match: str, cls=GGUFFormatError):
    p = _write(tmp_path, data)
    with pytest.raises(cls, match=match) as info:
        GGUFFile(p)
    assert str(p) in str(info.value)
    return info.value


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    p = tmp_path_factory.mktemp("m") / "tiny.gguf"
    return write_gguf(p, TINY, random_tensors(TINY), ternary_type="tq1_0")


@pytest.fixture(scope="module")
def model_bytes(model_file):
    return model_file.read_bytes()


def test_valid_container_opens(tmp_path):
    f = GGUFFile(_write(tmp_path, one_tensor_blob()))
    assert f.tensor_names == ["t.weight"]


def test_not_gguf(tmp_path):
    _fails(tmp_path, b"", "too small")
    _fails(tmp_path, b"GGUF\x03\x00", "too small")
    _fails(tmp_path, b"\x89PNG" + bytes(100), "bad magic")
    _fails(tmp_path, one_tensor_blob(version=1), "unsupported GGUF version 1")
    _fails(tmp_path, one_tensor_blob(version=99), "unsupported GGUF version 99")
    _fails(tmp_path, one_tensor_blob(version=3 << 24), "big-endian GGUF files are not supported")
    with pytest.raises(ModelFileError, match="no such file"):
        GGUFFile(tmp_path / "missing.gguf")
    with pytest.raises(ModelFileError, match="not a regular file"):
        GGUFFile(tmp_path)


def test_huge_counts_refused_before_any_work(tmp_path):
    _fails(tmp_path, one_tensor_blob(n_tensors=1 << 62), "tensor count .* larger than")
    _fails(tmp_path, one_tensor_blob(n_kv=1 << 40), "metadata count .* larger than")
    _fails(tmp_path, one_tensor_blob(n_kv=5000), "metadata count 5000 cannot fit")
    big = gguf_blob([("k", ARRAY, (UINT32, [1, 2]))], [])
    pos = big.find(b"k") + 1 + 4 + 4  # key, value type, item type -> count
    hostile = big[:pos] + struct.pack("<Q", 1 << 23) + big[pos + 8 :]
    _fails(tmp_path, hostile, "array length 8388608 cannot fit")
    long_key = gguf_blob([("abc", UINT32, 1)], [])
    pos = long_key.find(b"abc") - 8
    hostile = long_key[:pos] + struct.pack("<Q", 1 << 50) + long_key[pos + 8 :]
    _fails(tmp_path, hostile, "truncated: metadata key needs")


def test_bad_values_and_directory(tmp_path):
    _fails(tmp_path, gguf_blob(ARCH + [("k", 4, 1), ("k", 4, 2)], []), "duplicate metadata key")
    _fails(tmp_path, gguf_blob(ARCH + [("general.alignment", UINT32, 3)], []), "power of two")
    data = bytearray(gguf_blob(ARCH + [("k", UINT32, 1)], []))
    struct.pack_into("<I", data, data.find(b"k") + 1, 99)
    _fails(tmp_path, bytes(data), "unknown metadata value type 99")
    t = [("a", (8,), 0, 0), ("a", (8,), 0, 32)]
    _fails(tmp_path, gguf_blob(ARCH, t, bytes(64)), "duplicate tensor 'a'")
    _fails(tmp_path, gguf_blob(ARCH, [("a", (), 0, 0)], bytes(32)), "0 dimensions")
    _fails(tmp_path, gguf_blob(ARCH, [("a", (1,) * 5, 0, 0)], bytes(32)), "5 dimensions")
    _fails(tmp_path, gguf_blob(ARCH, [("a", (8,), 0, 4)], bytes(64)), "not aligned")


def test_offsets_types_and_sizes(tmp_path):
    _fails(tmp_path, gguf_blob(ARCH, [("a", (8,), 0, 1 << 40)], bytes(32)), "past the end")
    _fails(tmp_path, gguf_blob(ARCH, [("a", (64,), 0, 0)], bytes(32)), "runs past the end")
    _fails(
        tmp_path,
        gguf_blob(ARCH, [("a", (1 << 40, 1 << 20), 0, 0)], bytes(32)),
        "more than the file can hold",
    )
    _fails(tmp_path, gguf_blob(ARCH, [("a", (8,), 99, 0)], bytes(32)), "unknown tensor type 99")
    _fails(tmp_path, gguf_blob(ARCH, [("a", (8,), 38, 0)], bytes(32)), "TL1", UnsupportedModelError)
    _fails(
        tmp_path,
        gguf_blob(ARCH, [("a", (100, 1), 35, 0)], bytes(128)),
        "not a multiple of the TQ2_0 block size 256",
    )
    t = [("a", (16,), 0, 0), ("b", (8,), 0, 32)]
    _fails(tmp_path, gguf_blob(ARCH, t, bytes(96)), "overlaps tensor 'a'")


def test_every_truncation_of_a_model_fails_cleanly(tmp_path, model_bytes):
    rng = np.random.default_rng(0)
    cuts = set(range(0, 64)) | set(rng.integers(0, len(model_bytes) - 1, 150).tolist())
    for cut in sorted(cuts):
        p = _write(tmp_path, model_bytes[:cut], "cut.gguf")
        with pytest.raises(ModelFileError):
            open_model_file(p)


def test_missing_tensor_is_named(tmp_path, model_bytes):
    data = model_bytes.replace(b"blk.1.ffn_up.weight", b"blk.1.ffn_up.weighX")
    with pytest.raises(ModelFileError, match=r"bad\.gguf: missing tensor 'blk\.1\.ffn_up\.weight'"):
        open_model_file(_write(tmp_path, data))


#: Open a file in a child capped at 1 GiB of address space: a regression fails
#: with a MemoryError or the timeout instead of eating the machine.
_CAPPED_OPEN = """
import resource, sys
resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))
from bitnet_core.errors import ModelFileError
from bitnet_core.gguf import open_model_file
try:
    open_model_file(sys.argv[1])
except ModelFileError as exc:
    print(type(exc).__name__, exc)
"""


def _open_capped(path) -> str:
    run = subprocess.run(
        [sys.executable, "-c", _CAPPED_OPEN, str(path)],
        capture_output=True,
        text=True,
        timeout=60,
        env={**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"},
    )
    assert run.returncode == 0, run.stderr[-2000:]
    return run.stdout


@pytest.mark.parametrize("high", [0x01, 0xDB])
def test_hostile_block_count_fails_at_once(tmp_path, model_bytes, high):
    """One byte of ``block_count`` (2 -> 16777218 or 3674210306, as the fuzz test once drew)
    must not expand into a tensor-name list of billions of entries."""
    key = b"bitnet.block_count"
    pos = model_bytes.index(key) + len(key) + 4  # key, value type -> the uint32 value
    assert struct.unpack_from("<I", model_bytes, pos)[0] == 2
    data = bytearray(model_bytes)
    data[pos + 3] = high
    p = _write(tmp_path, bytes(data))
    out = _open_capped(p)
    assert out.startswith("ModelFileError"), out
    assert "missing tensor 'blk.2.attn_norm.weight'" in out


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.data())
def test_mutated_model_never_crashes(tmp_path, model_file, model_bytes, data):
    """Random byte edits in the header: the file opens and unpacks, or a ModelFileError."""
    buf = bytearray(model_bytes)
    header_end = GGUFFile(model_file).header.data_offset
    for _ in range(data.draw(st.integers(1, 8))):
        pos = data.draw(st.integers(0, min(header_end, len(buf) - 1)))
        buf[pos] = data.draw(st.integers(0, 255))
    p = _write(tmp_path, bytes(buf), "mut.gguf")
    try:
        m = open_model_file(p)
        for name in m.tensor_names:
            if m.tensor_info(name).codec and len(m.tensor_info(name).shape) == 2:
                codes, _ = m.ternary(name).unpack()
                assert codes.min() >= -1 and codes.max() <= 1
    except ModelFileError:
        pass


def test_cli_reports_one_line(tmp_path, capsys):
    p = _write(tmp_path, one_tensor_blob(n_tensors=1 << 62))
    assert main(["inspect", str(p)]) == 3
    err = capsys.readouterr().err.strip()
    assert err.startswith(f"error: {p}: tensor count") and "\n" not in err


def _string_array(rng: np.random.Generator, n: int) -> bytes:
    """``n`` GGUF strings of random bytes (invalid UTF-8 among them), lengths 0..12."""
    out = b""
    for _ in range(n):
        raw = rng.integers(0, 256, rng.integers(0, 13), dtype=np.uint8).tobytes()
        out += len(raw).to_bytes(8, "little") + raw
    return out


def _read_strings(data: bytes, n: int, native: bool, monkeypatch) -> tuple:
    """``_Cursor.strings`` on ``data``: (strings, position) or the error's message."""
    from bitnet_core.gguf import header

    if not native:
        monkeypatch.setattr(header, "load_native", lambda: (None, "off"))
    cur = header._Cursor(np.frombuffer(data, dtype=np.uint8), Path("t.gguf"))
    try:
        return cur.strings(n, "tokenizer.ggml.tokens"), cur.pos
    except GGUFFormatError as exc:
        return (str(exc),)
    finally:
        monkeypatch.undo()


def test_native_string_arrays_read_as_the_python_loop(monkeypatch):
    """The native string decoder (``_native.gguf_strings``) gives the Python loop's
    strings (invalid UTF-8 replaced alike) and position, and, cut anywhere, its error."""
    rng = np.random.default_rng(49)
    for _ in range(60):
        n = int(rng.integers(1, 40))
        data = _string_array(rng, n)
        cut = data[: int(rng.integers(0, len(data) + 1))]
        if rng.random() < 0.2:  # a hostile length
            cut += rng.integers(1 << 40, 1 << 62, dtype=np.int64).item().to_bytes(8, "little")
            n += 1
        for blob in (data, cut):
            want = _read_strings(blob, n, native=False, monkeypatch=monkeypatch)
            assert _read_strings(blob, n, native=True, monkeypatch=monkeypatch) == want
