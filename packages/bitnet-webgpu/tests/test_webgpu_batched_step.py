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
from bitnet_core.model import KVCacheConfig, Model, random_weights
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
    bseqs = [runner.new_cache() for _ in PROMPTS]
    aseqs = [runner.new_cache() for _ in PROMPTS]
    try:
        for p, bs, as_ in zip(PROMPTS, bseqs, aseqs, strict=True):
            np.testing.assert_array_equal(runner.forward(p, bs), runner.forward(p, as_))
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

        # a prompt chunk in the same call: its own prefill, the decode tokens one pass
        with runner.new_cache() as new_b, runner.new_cache() as new_a:
            got = runner.forward_batch([([5], bseqs[0]), ([9, 8, 7], new_b), ([6], bseqs[3])])
            want = [runner.forward([5], aseqs[0]), runner.forward([9, 8, 7], new_a)]
            want.append(runner.forward([6], aseqs[3]))
            np.testing.assert_array_equal(got, np.stack(want))
            assert new_b.length == 3
    finally:
        for s in bseqs + aseqs:
            s.close()


def test_batched_greedy_decode_equals_the_reference_engine():
    weights = random_weights(CFG, seed=6)
    ref = Model.from_weights(weights, device="cpu-reference")
    runner = Model.from_weights(weights, device="webgpu").runner
    if not isinstance(runner, WebGPURunner):
        pytest.skip("no WebGPU adapter")
    prompts = [[5, 30, 17], [9, 8, 7, 6, 5, 4, 3], [42]]
    want = [ref.generate_ids(p, max_tokens=10, temperature=0) for p in prompts]
    seqs = [runner.new_cache() for _ in prompts]
    try:
        logits = runner.forward_batch(list(zip(prompts, seqs, strict=True)))
        toks = [[int(row.argmax())] for row in logits]
        for _ in range(9):
            logits = runner.forward_batch([([t[-1]], s) for t, s in zip(toks, seqs, strict=True)])
            for t, row in zip(toks, logits, strict=True):
                t.append(int(row.argmax()))
    finally:
        for s in seqs:
            s.close()
    assert toks == want


def test_scheduler_streams_equal_solo_generation(tmp_path):
    """The server's scheduler on this backend: five requests submitted at once (prompts
    chunked, decode tokens batched); each stream's text equals its solo greedy run."""
    import asyncio

    from bitnet_core.config import BitNetConfig
    from bitnet_core.hal import REGISTRY
    from bitnet_core.model.api import load
    from bitnet_core.model.generation import generate_tokens, stream_text
    from bitnet_core.model.random import random_model_file
    from bitnet_core.model.sampling import SamplingParams
    from bitnet_core.server.scheduler import DONE, Scheduler

    rec = REGISTRY.get("webgpu")
    if rec is None or not rec.probe(explicit=True).available:
        pytest.skip("no WebGPU adapter")
    cfg = BitNetConfig(
        vocab_size=300, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=256, context_length=160,
    )  # fmt: skip
    random_model_file(tmp_path / "m.gguf", cfg, seed=9)
    model = load(tmp_path / "m.gguf", device="webgpu")
    sched = Scheduler(model, max_active=4, step_tokens=24)

    async def collect(job) -> str:
        parts = []
        while (item := (await asyncio.wait_for(job.out.get(), 120))[0]) is not DONE:
            parts.append(item)
        return "".join(parts)

    async def go(requests):
        with sched._cv:  # the worker sees them in one step
            jobs = [sched.submit(ids, params) for ids, params in requests]
        return list(zip(jobs, await asyncio.gather(*(collect(j) for j in jobs)), strict=True))

    def solo(job) -> str:
        stats = type(job.stats)()
        toks = generate_tokens(
            model.runner, job.prompt_ids, job.params, eos_ids=model.eos_ids, stats=stats
        )
        return "".join(stream_text(toks, model.decode, job.prompt_ids, job.params.stop, stats))

    try:
        requests = [
            ([(s * 31 + 7 * i) % 290 + 5 for i in range(n)], SamplingParams(temperature=0.0, max_tokens=m))
            for n, s, m in ((3, 1, 9), (40, 2, 5), (7, 3, 12), (1, 4, 6), (18, 5, 7))
        ]  # fmt: skip
        for job, text in asyncio.run(go(requests)):
            assert job.error is None
            assert text == solo(job)
        assert sched.stats.steps_total > 0
        # the fused batched step ran (a step over several sequences' caches)
        assert any(len(key) > 1 for key in model.runner._plans)
    finally:
        sched.close()
