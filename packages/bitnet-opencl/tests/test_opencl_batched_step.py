"""``OpenCLRunner.forward_batch``: the decode tokens of a server step in one recorded step.

Each row equals the sequence decoded alone by the same runner, bit for bit (the
GEMVs are exact integer sums, the norms and the head work a row at a time, and
attention runs per sequence with its own split count), for sequences at
different positions and cache capacities, float32 and float16 caches, through
the command buffer and the ctypes loop; the step is replayed while the batch's
composition holds and recorded again when a cache grows or a sequence leaves;
a prompt chunk in the same call runs its own prefill.
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.model import Model, random_weights
from bitnet_core.model.kv_cache import KVCacheConfig
from bitnet_core.testing.strict import strict_config
from bitnet_opencl import runner as runner_module
from bitnet_opencl.replay import COMMAND_BUFFER_EXT

BLOCK = 16
# capacities 16 and 32 tokens at first; the 30-token sequence grows to 64 two steps in,
# the 13-token one to 32 three steps in (7 keys a split: 3, 5 and 10 splits)
PROMPTS = [[1, 2, 3], list(range(40, 53)), [11], list(range(60, 90))]


@pytest.fixture(params=["command-buffer", "loop"])
def mode(request, ocl, monkeypatch):
    if request.param == "command-buffer":
        if COMMAND_BUFFER_EXT not in ocl.runtime.info.extensions:
            pytest.skip(f"the device has no {COMMAND_BUFFER_EXT}")
        monkeypatch.delenv("BITNET_OPENCL_COMMAND_BUFFER", raising=False)
    else:
        monkeypatch.setenv("BITNET_OPENCL_COMMAND_BUFFER", "0")
    monkeypatch.delenv("BITNET_STRICT_MODE", raising=False)
    return request.param


def batched(runner, n: int) -> set:
    return {key for key in runner._recordings if len(key) == n}


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_batched_decode_step_equals_each_sequence_alone(ocl, mode, kv, monkeypatch):
    monkeypatch.setattr(runner_module, "KEYS_PER_SPLIT", 7)
    weights = random_weights(strict_config("silu", context=128), seed=13)
    model = Model.from_weights(
        weights, device="opencl", kv_cache=KVCacheConfig(block_size=BLOCK, dtype=kv)
    )
    runner, trace = model.runner, model.provider.trace
    assert runner.fused
    bseqs = [runner.new_cache() for _ in PROMPTS]
    aseqs = [runner.new_cache() for _ in PROMPTS]
    try:
        for p, bs, as_ in zip(PROMPTS, bseqs, aseqs, strict=True):
            np.testing.assert_array_equal(runner.forward(p, bs), runner.forward(p, as_))
        submissions, recorded = [], []
        for step in range(6):
            toks = [(step * 31 + 7 * j) % 300 for j in range(len(PROMPTS))]
            kernels, before = sum(trace.kernels.values()), trace.submissions
            got = runner.forward_batch([([t], s) for t, s in zip(toks, bseqs, strict=True)])
            submissions.append(trace.submissions - before)
            recorded.append(sum(trace.kernels.values()) > kernels)
            want = [runner.forward([t], s) for t, s in zip(toks, aseqs, strict=True)]
            np.testing.assert_array_equal(got, np.stack(want))
        assert {s.k[0].shape[0] for s in bseqs} == {16, 32, 64}
        assert [s.length for s in bseqs] == [s.length for s in aseqs]
        # recorded at the start and on each crossing, replayed otherwise
        assert recorded == [True, False, True, True, False, False]
        # only the latest layout's step is kept (the stale ones released)
        assert len(batched(runner, 4)) == 1
        (rec,) = (runner._recordings[k] for k in batched(runner, 4))
        layers = weights.config.num_layers
        assert len(rec.launches) == 7 * layers + 3 * 4 * layers + 3  # 3 a sequence a layer
        # the token ids and positions written, the step, the logits read
        assert submissions[-1] == 2 + (1 if mode == "command-buffer" else len(rec.launches))

        # one leaves: another composition, recorded once, then replayed
        for step in range(2):
            kernels = sum(trace.kernels.values())
            got = runner.forward_batch([([40 + step], s) for s in bseqs[1:]])
            want = [runner.forward([40 + step], s) for s in aseqs[1:]]
            np.testing.assert_array_equal(got, np.stack(want))
            assert (sum(trace.kernels.values()) > kernels) == (step == 0)

        # a prompt chunk in the same call: its own prefill, the decode tokens one step
        with runner.new_cache() as new_b, runner.new_cache() as new_a:
            got = runner.forward_batch([([5], bseqs[0]), ([9, 8, 7], new_b), ([6], bseqs[3])])
            want = [runner.forward([5], aseqs[0]), runner.forward([9, 8, 7], new_a)]
            want.append(runner.forward([6], aseqs[3]))
            np.testing.assert_array_equal(got, np.stack(want))
            assert new_b.length == 3
    finally:
        for s in bseqs + aseqs:
            s.close()


def test_batched_greedy_decode_equals_the_reference_engine(ocl):
    weights = random_weights(strict_config("relu2", context=64), seed=17)
    ref = Model.from_weights(weights, device="cpu-reference")
    runner = Model.from_weights(weights, device="opencl").runner
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


def test_scheduler_streams_equal_solo_generation(ocl, tmp_path):
    """The server's scheduler on this backend: five requests submitted at once (prompts
    chunked, decode tokens batched); each stream's text equals its solo greedy run."""
    import asyncio

    from bitnet_core.config import BitNetConfig
    from bitnet_core.model.api import load
    from bitnet_core.model.generation import generate_tokens, stream_text
    from bitnet_core.model.random import random_model_file
    from bitnet_core.model.sampling import SamplingParams
    from bitnet_core.server.scheduler import DONE, Scheduler

    cfg = BitNetConfig(
        vocab_size=300, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=256, context_length=160,
    )  # fmt: skip
    random_model_file(tmp_path / "m.gguf", cfg, seed=9)
    model = load(tmp_path / "m.gguf", device="opencl")
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
        assert any(len(key) > 1 for key in model.runner._recordings)
    finally:
        sched.close()
