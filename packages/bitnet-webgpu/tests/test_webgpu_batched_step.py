"""``WebGPURunner.forward_batch``: the decode tokens of a server step in one pass.

Each row equals the sequence decoded alone by the same runner, bit for bit (the
matmuls are exact integer sums, the norms work a row at a time, the head a
token at a time, attention runs per sequence with its own split count), for
sequences at different positions and cache capacities, float32 and float16
caches; a step is one submission from a plan built once per composition (a
cache growing or a sequence leaving builds another); a prompt chunk in the
same call runs its own prefill.
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.hal import REGISTRY
from bitnet_core.model import KVCacheConfig, random_weights
from bitnet_core.testing.batching import (
    check_batched_greedy,
    check_prompt_chunk_beside_decodes,
    check_scheduler_streams,
    prefill_pairs,
)
from bitnet_webgpu.runner import WebGPURunner

CFG = BitNetConfig(
    vocab_size=97, hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=80, context_length=300,
)  # fmt: skip
# capacities 16 and 32 at first (blocks of 16, 7 keys a split: 2 and 4 splits); the
# 30-token sequence grows to 64 two steps in, the 13-token one to 32 three steps in
PROMPTS = [[1, 2, 3], list(range(40, 53)), [11], [(7 * i) % 97 for i in range(30)]]


def _runner(kv: str) -> WebGPURunner:
    rec = REGISTRY.get("webgpu")
    if rec is None or not rec.probe(explicit=True).available:
        pytest.skip("no WebGPU adapter")
    p = type(rec.provider)()
    runner = p.make_runner(
        random_weights(CFG, seed=4), kv_cache=KVCacheConfig(dtype=kv, block_size=16)
    )
    assert isinstance(runner, WebGPURunner) and runner.fused
    runner.keys_per_split = 7
    return runner


def batched(runner, n: int) -> set:
    return {key for key in runner._plans if len(key) == n}


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_batched_decode_step_equals_each_sequence_alone(kv):
    runner = _runner(kv)
    trace = runner.provider.trace
    bseqs, aseqs = prefill_pairs(runner, PROMPTS)
    try:
        submissions, built = [], []
        for step in range(6):
            toks = [(step * 31 + 7 * j) % 97 for j in range(len(PROMPTS))]
            plans, before = runner.plans_built, trace.submissions
            got = runner.forward_batch([([t], s) for t, s in zip(toks, bseqs, strict=True)])
            submissions.append(trace.submissions - before)
            built.append(runner.plans_built - plans)
            want = [runner.forward([t], s) for t, s in zip(toks, aseqs, strict=True)]
            np.testing.assert_array_equal(got, np.stack(want))
        assert {s.k[0].shape[0] for s in bseqs} == {16, 32, 64}
        assert [s.length for s in bseqs] == [s.length for s in aseqs]
        assert built == [1, 0, 1, 1, 0, 0]  # at the start and on each crossing only
        assert len(batched(runner, 4)) == 1  # the plans over outgrown caches dropped
        # one submission a step; a cache that grows (steps 2 and 3) copies its rows first
        assert submissions == [1, 1, 2, 2, 1, 1]

        # one leaves: another composition, built once
        plans = runner.plans_built
        for step in range(2):
            got = runner.forward_batch([([40 + step], s) for s in bseqs[1:]])
            want = [runner.forward([40 + step], s) for s in aseqs[1:]]
            np.testing.assert_array_equal(got, np.stack(want))
        assert runner.plans_built == plans + 1

        # a prompt chunk in the same call: its own prefill, the decode tokens one step
        check_prompt_chunk_beside_decodes(runner, bseqs, aseqs)
    finally:
        for s in bseqs + aseqs:
            s.close()


def test_batched_greedy_decode_equals_the_reference_engine():
    """Greedy tokens of three sequences decoded in batched steps equal the CPU reference's."""
    if not isinstance(_runner("float32"), WebGPURunner):
        pytest.skip("no WebGPU adapter")
    check_batched_greedy("webgpu", random_weights(CFG, seed=6))


def test_scheduler_streams_equal_solo_generation(tmp_path):
    """The server's scheduler on this backend: five requests at once (prompts chunked,
    decode tokens batched), each stream equal to its solo greedy run."""
    from bitnet_core.hal import REGISTRY

    rec = REGISTRY.get("webgpu")
    if rec is None or not rec.probe(explicit=True).available:
        pytest.skip("no WebGPU adapter")
    model = check_scheduler_streams("webgpu", tmp_path)
    # the fused batched step ran (a step over several sequences' caches)
    assert any(len(key) > 1 for key in model.runner._plans)
