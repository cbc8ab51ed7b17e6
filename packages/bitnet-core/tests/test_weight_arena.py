"""Weights in huge pages (csrc/weight_arena.cpp): where they live, and that they go
with their model; ``BITNET_CPU_HUGE_PAGES=0`` keeps TQ2_0 bytes in the file's mapping."""

from __future__ import annotations

import gc
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from memory_maps import mapping_of
from native_cpu import available_providers

from bitnet_core.config import BitNetConfig
from bitnet_core.model import load, random_model_file

TERNARY = ("q", "k", "v", "o", "gate", "up", "down")
THP = Path("/sys/kernel/mm/transparent_hugepage/enabled")


def _native():
    provs = available_providers()
    if not provs:
        pytest.skip("no native CPU provider here")
    return provs[0]


@pytest.fixture(scope="module")
def gguf(tmp_path_factory):
    cfg = BitNetConfig(
        vocab_size=8192, hidden_size=1024, num_layers=2, num_heads=8, num_kv_heads=8,
        intermediate_size=1536, context_length=64,
    )  # fmt: skip  # a 16 MiB float16 head: the checked int8 head by default
    path = tmp_path_factory.mktemp("m") / "m.gguf"
    return random_model_file(path, cfg, seed=5, ternary_type="tq2_0", tokenizer=None)


@pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or "[never]" in (THP.read_text() if THP.exists() else "[never]"),
    reason="transparent huge pages: Linux, not switched off",
)
def test_ternary_weights_live_in_2mib_aligned_huge_page_segments(gguf):
    prov = _native()
    mod = prov.native_module()
    assert mod.huge_page_weights()
    model = load(gguf, prov.name, progress=False)
    if mod.deferred_huge_pages():  # advised once the runner is built, off the critical path
        model.provider.promotion.join(timeout=120)
    weights = [getattr(layer, n) for layer in model.runner.weights.layers for n in TERNARY]
    assert weights and not any(w.in_place for w in weights)
    for w in weights:
        start, end, fields = mapping_of(w.address)
        assert fields["THPeligible"] == "1", fields  # advised MADV_HUGEPAGE (and anonymous)
        assert start % (2 << 20) == 0 and end % (2 << 20) == 0
    stats = mod.weight_arena_stats()
    assert stats["live_bytes"] >= sum(w.nbytes for w in weights)
    assert stats["segment_bytes"] < stats["live_bytes"] + stats["segments"] * (32 << 20)


_PROMOTION = """
import json, sys
sys.path.insert(0, {tests!r})
from memory_maps import mapping_of
from native_cpu import available_providers
import numpy as np
mod = available_providers()[0].native_module()
codes = np.random.default_rng(1).integers(-1, 2, size=(4096, 1024)).astype(np.int8)
m = mod.TernaryMatrix.from_codes(codes, np.ones(4096, np.float32))
before = mapping_of(m.address)[2]["THPeligible"]
{between}
done = mod.promote_weight_arena()
after = mapping_of(m.address)[2]["THPeligible"]
print(json.dumps({{"before": before, "after": after, "done": done,
                  "again": mod.promote_weight_arena()}}))
"""


@pytest.mark.skipif(
    not sys.platform.startswith("linux")
    or "[never]" in (THP.read_text() if THP.exists() else "[never]"),
    reason="transparent huge pages: Linux, not switched off",
)
@pytest.mark.parametrize("stopped", [False, True])
def test_weights_are_advised_huge_pages_when_promoted_not_when_written(stopped):
    """Deferred huge pages (the default): a weight segment is mapped without the advice
    (its first writes are 4 KiB pages, cheap) and advised by ``promote_weight_arena``,
    once; after ``stop_weight_promotion`` (process exit) nothing more is done."""
    _native()
    prog = _PROMOTION.format(
        tests=str(Path(__file__).parent),
        between="mod.stop_weight_promotion()" if stopped else "",
    )
    env = {k: v for k, v in os.environ.items() if k != "BITNET_CPU_HUGE_PAGES"}
    out = subprocess.run(
        [sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["before"] == "0", got
    assert got["again"] == 0, got  # each segment is promoted once
    if stopped:
        assert got["after"] == "0" and got["done"] == 0, got
    else:
        assert got["after"] == "1", got  # MADV_COLLAPSE itself may find no free huge page


def test_a_model_let_go_frees_its_weights_and_int8_head(gguf):
    """The arena's segments are unmapped with the last matrix in them; the provider's
    int8 copy of a head goes with the head's table (it was kept by the provider)."""
    prov = _native()
    mod = prov.native_module()
    gc.collect()
    before = mod.weight_arena_stats()["live_bytes"]
    model = load(gguf, prov.name, progress=False)
    logits = model.runner.logits([1, 2, 3])
    assert prov.head_mode_for(model.runner.weights.head) == "checked"
    if mod.huge_page_weights():  # the ternary matrices and the int8 head (8192 x 1024 bytes)
        ternary = sum(
            getattr(layer, n).nbytes for layer in model.runner.weights.layers for n in TERNARY
        )
        assert mod.weight_arena_stats()["live_bytes"] >= before + ternary + 8192 * 1024
    del model
    gc.collect()
    assert mod.weight_arena_stats()["live_bytes"] == before
    again = load(gguf, prov.name, progress=False)
    np.testing.assert_array_equal(again.runner.logits([1, 2, 3]), logits)


def test_switched_off_tq2_0_bytes_stay_in_the_file_mapping(gguf):
    """``BITNET_CPU_HUGE_PAGES=0``: TQ2_0 read in place, nothing in the arena, the
    same logits bit for bit."""
    prov = _native()
    prog = f"""
import json, sys
sys.path.insert(0, {str(Path(__file__).parent)!r})
from native_cpu import available_providers
from bitnet_core.model import load
prov = available_providers()[0]
mod = prov.native_module()
m = load({str(gguf)!r}, prov.name, progress=False)
ws = [getattr(layer, n) for layer in m.runner.weights.layers for n in "q k v o gate up down".split()]
print(json.dumps({{"on": mod.huge_page_weights(), "in_place": all(w.in_place for w in ws),
                  "stats": mod.weight_arena_stats(), "logits": m.runner.logits([1, 2, 3]).tolist()}}))
"""
    env = dict(os.environ, BITNET_CPU_HUGE_PAGES="0", BITNET_CPU_INT8_HEAD="0")
    out = subprocess.run(
        [sys.executable, "-c", prog], capture_output=True, text=True, env=env, timeout=120
    )
    assert out.returncode == 0, out.stderr
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got["on"] is False and got["in_place"] is True
    assert got["stats"]["segments"] == 0
    os.environ["BITNET_CPU_INT8_HEAD"] = "0"
    try:
        here = load(gguf, prov.name, progress=False).runner.logits([1, 2, 3])
    finally:
        del os.environ["BITNET_CPU_INT8_HEAD"]
    np.testing.assert_array_equal(np.asarray(got["logits"], np.float32), here)
