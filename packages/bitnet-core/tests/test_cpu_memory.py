"""Memory of the native CPU providers: file pages let go, KV caches that grow in place."""

from __future__ import annotations

import json
import subprocess
import sys

import numpy as np
import pytest
from memory_maps import mapping_of
from native_cpu import available_providers

from bitnet_core.config import BitNetConfig
from bitnet_core.gguf import open_model_file
from bitnet_core.model import load, random_model_file
from bitnet_core.providers.file_pages import release_file_pages

linux = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/statm")


def _rss() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096


def _native_name() -> str:
    provs = available_providers()
    if not provs:
        pytest.skip("no native CPU provider here")
    return provs[0].name


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    cfg = BitNetConfig(
        vocab_size=8192, hidden_size=512, num_layers=1, num_heads=4, num_kv_heads=4,
        intermediate_size=512, context_length=64,
    )  # fmt: skip
    path = tmp_path_factory.mktemp("m") / "m.gguf"
    return random_model_file(path, cfg, seed=3, ternary_type="tq2_0", tokenizer=None)


@linux
def test_release_file_pages_of_a_read_only_map(gguf):
    table = open_model_file(gguf).dense("token_embd.weight")  # 8 MB of float16
    rows = np.asarray(table[[0, 4095, 8191]]).copy()
    float(np.asarray(table, np.float32).sum())  # every page resident
    before = _rss()
    assert release_file_pages(table)
    assert _rss() < before - 6e6
    np.testing.assert_array_equal(table[[0, 4095, 8191]], rows)  # read back from the file


def test_release_file_pages_leaves_other_memory_alone():
    a = np.arange(1 << 20, dtype=np.float32)
    assert not release_file_pages(a)  # writable
    a.flags.writeable = False
    assert not release_file_pages(a)  # read-only, but not a file
    assert a[12345] == 12345.0


_INT8_HEAD_RSS = """
import json, os, sys
import numpy as np
from bitnet_core.model import load

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * 4096

path, name = sys.argv[1:3]
ids = [1, 2, 3, 4]
exact = load(path, name, progress=False).runner.logits(ids)  # (imports, warm-up)
os.environ["BITNET_CPU_INT8_HEAD"] = "1"
base = rss()
m = load(path, name, progress=False)
got = m.runner.logits(ids)
grew = rss() - base
print(json.dumps({
    "grew": grew,
    "repeatable": bool(np.array_equal(got, m.runner.logits(ids))),
    "differs": bool(not np.array_equal(got, exact)),
    "max_diff": float(np.abs(got - exact).max()),
    "max_exact": float(np.abs(exact).max()),
}))
"""


@linux
def test_int8_head_lets_the_float16_table_go(gguf):
    """With BITNET_CPU_INT8_HEAD=1 the head reads an int8 copy: the GGUF's float16
    table (8 MB here) stops being resident, and the logits are the int8 head's.
    Measured in a fresh process: the RSS of one that already ran other tests
    depends on what its allocator kept (it grew 0.3 MB more after the kernel and
    runner suites)."""
    done = subprocess.run(
        [sys.executable, "-c", _INT8_HEAD_RSS, str(gguf), _native_name()],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    r = json.loads(done.stdout.strip().splitlines()[-1])
    # int8 copy 4 MB + the rest < 6 MB; keeping the float16 table would add its 8 MB
    assert r["grew"] < 6e6, r["grew"] / 1e6
    assert r["repeatable"] and r["differs"]
    assert r["max_diff"] <= 0.05 * r["max_exact"]


@linux
@pytest.mark.parametrize("pread", [True, False], ids=["pread", "release"])
def test_embedding_rows_stay_out_of_rss_when_only_gathered(gguf, monkeypatch, pread):
    """With the int8 head the float16 table is only gathered from, a row per token:
    its rows are read from the file with pread (or, where that cannot be set up,
    its pages are let go after each forward pass), so running over the whole
    vocabulary does not make the 8 MB table resident (a row read through the
    mapping maps 64 KB to 2 MB around it), and the logits are the same."""
    from bitnet_core.providers import cpu_runner

    monkeypatch.setenv("BITNET_CPU_INT8_HEAD", "1")
    if not pread:
        monkeypatch.setattr(cpu_runner, "_open_rows_source", lambda model, table: None)
    m = load(gguf, _native_name(), progress=False)
    assert (m.runner._embedding_file is not None) == pread
    m.runner.logits([1, 2, 3])  # warm-up: scratch, caches
    base = _rss()
    # (kept: a corner of each result, not 2 MB of logits that would count in the RSS)
    got = [m.runner.logits(np.arange(k * 64, (k + 1) * 64) * 16)[:, :64].copy() for k in range(8)]
    # 512 ids, 16 rows apart: every 64 KB of the table
    assert _rss() - base < 3e6, (_rss() - base) / 1e6
    monkeypatch.undo()
    monkeypatch.setenv("BITNET_CPU_INT8_HEAD", "1")
    if pread:  # the same numbers as rows read through the mapping
        m.runner._model.read_embedding_from(-1, 0)
        for k in (0, 7):
            np.testing.assert_array_equal(
                m.runner.logits(np.arange(k * 64, (k + 1) * 64) * 16)[:, :64], got[k]
            )


@linux
def test_checked_head_reads_its_rows_with_pread(gguf, monkeypatch):
    """The checked int8 head recomputes the rows it cannot rule out on the float16
    table, read with pread like the embedding rows (the RSS stays flat over the whole
    vocabulary): every token's argmax is the exact head's, and the recomputed logits
    are the exact head's bit for bit, as through the mapping."""
    name = _native_name()
    ids = np.arange(512) * 16  # every 64 KB of the table
    exact = np.concatenate(
        [load(gguf, name, progress=False).runner.logits(ids[k : k + 64]) for k in (0, 448)]
    )
    monkeypatch.setenv("BITNET_CPU_INT8_HEAD", "checked")
    m = load(gguf, name, progress=False)
    assert m.runner._embedding_file is not None
    m.runner.logits([1, 2, 3])  # warm-up: scratch, caches
    base = _rss()
    # (kept: each result's argmax, not 2 MB of logits that would count in the RSS)
    picks = [m.runner.logits(ids[k * 64 : (k + 1) * 64]).argmax(axis=1) for k in range(8)]
    assert _rss() - base < 3e6, (_rss() - base) / 1e6
    np.testing.assert_array_equal(np.concatenate([picks[0], picks[7]]), exact.argmax(axis=1))
    tokens, recomputed = m.runner._model.head_checks
    assert tokens >= 512 and recomputed >= tokens
    got = np.concatenate([m.runner.logits(ids[k : k + 64]) for k in (0, 448)])
    redone = got == exact  # the rows recomputed: the exact head's bit for bit
    np.testing.assert_array_equal(got.argmax(axis=1), exact.argmax(axis=1))
    assert redone.sum() >= len(got) and not redone.all()
    m.runner._model.read_embedding_from(-1, 0)  # through the mapping: the same numbers
    np.testing.assert_array_equal(m.runner.logits(ids[:64]), got[:64])


def test_no_progress_bar_no_tqdm_import(gguf):
    """Loading with stderr not a terminal shows no bar and does not import tqdm.auto
    (with asyncio and ssl: several MB of RSS and ~50 ms for nothing)."""
    code = (
        "import sys, bitnet_core; "
        f"bitnet_core.load({str(gguf)!r}, 'cpu'); "
        "print('tqdm.auto' in sys.modules, 'asyncio' in sys.modules)"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    assert out.stdout.split() == ["False", "False"], out


def _thp_eligible(addr: int) -> bool | None:
    """The kernel's THPeligible flag of the mapping holding ``addr`` (None: not reported)."""
    found = mapping_of(addr)
    if found is None or "THPeligible" not in found[2]:
        return None
    return found[2]["THPeligible"] == "1"


@linux
def test_host_arrays_commit_4k_pages_where_written():
    """KV caches are made at full context length and written a few rows per layer.
    numpy advises huge pages for arrays of 4 MiB and more, and each first write then
    committed 2 MiB (measured: the same `bitnet run` peaked at 358 or 448 MB, by
    whether the kernel had huge pages free): the provider's arrays are never huge."""
    from bitnet_core.providers.reference import ReferenceProvider

    for shape, dtype in [((2048, 4096), np.float16), ((3, 5), np.float32), ((1 << 20,), np.int8)]:
        a = ReferenceProvider().empty(shape, dtype)
        assert a.shape == shape and a.dtype == dtype and a.flags.writeable
        assert not a.any()
    a = ReferenceProvider().empty((2048, 4096), np.float16)  # 16 MiB
    if _thp_eligible(a.ctypes.data) is None:
        pytest.skip("this kernel does not report THPeligible")
    base = _rss()
    a[::512, 0] = 1.0  # a row every 4 MiB
    assert _rss() - base < 1e6, (_rss() - base) / 1e6
    assert _thp_eligible(a.ctypes.data) is False
    assert a.sum() == 4.0
