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
from bitnet_core.sdk.kv_cache import KVCacheConfig
from bitnet_core.testing.batching import (
    check_batched_greedy,
    check_prompt_chunk_beside_decodes,
    check_scheduler_streams,
    prefill_pairs,
)
from bitnet_core.testing.strict import strict_config
from bitnet_opencl import runner as runner_module

BLOCK = 16
# capacities 16 and 32 tokens at first; the 30-token sequence grows to 64 two steps in,
# the 13-token one to 32 three steps in (7 keys a split: 3, 5 and 10 splits)
PROMPTS = [[1, 2, 3], list(range(40, 53)), [11], list(range(60, 90))]


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
    bseqs, aseqs = prefill_pairs(runner, PROMPTS)
    try:
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
        check_prompt_chunk_beside_decodes(runner, bseqs, aseqs)
    finally:
        for s in bseqs + aseqs:
            s.close()


def test_batched_greedy_decode_equals_the_reference_engine(ocl):
    """Greedy tokens of three sequences decoded in batched steps equal the CPU reference's."""
    check_batched_greedy("opencl", random_weights(strict_config("relu2", context=64), seed=17))


def test_scheduler_streams_equal_solo_generation(ocl, tmp_path):
    """The server's scheduler on this backend: five requests at once (prompts chunked,
    decode tokens batched), each stream equal to its solo greedy run."""
    model = check_scheduler_streams("opencl", tmp_path)
    # the fused batched step ran (a step over several sequences' caches)
    assert any(len(key) > 1 for key in model.runner._recordings)
