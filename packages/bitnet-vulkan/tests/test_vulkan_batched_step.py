"""``VulkanRunner.forward_batch``: the sequences of a server step in one recorded step.

Each row equals the sequence decoded alone by the same runner, bit for bit
(the matmuls are exact integer sums and every other shader works a row at a
time; attention runs per sequence with its own split count), for sequences
at different positions and cache capacities, float32 and float16 caches, a
prompt chunk mixed in. A step of decode tokens is one submission and is
replayed while the batch's composition holds; a sequence growing its cache,
leaving or joining records another.
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.model.api import Model
from bitnet_core.model.random import random_weights
from bitnet_core.sdk.kv_cache import KVCacheConfig
from bitnet_core.testing.batching import (
    check_batched_greedy,
    check_prompt_chunk_beside_decodes,
    check_scheduler_streams,
    prefill_pairs,
)


def config() -> BitNetConfig:
    return BitNetConfig(
        vocab_size=301, hidden_size=96, num_layers=2, num_heads=6, num_kv_heads=2,
        intermediate_size=200, context_length=256, ffn_activation="silu", rope_style="neox",
    )  # fmt: skip


# cache capacities 64 (four attention splits) and 128 (eight); the 62-token prompt crosses
# 64 -> 128 rows two steps in, the 124-token one 128 -> 256 (sixteen splits) four steps in
PROMPTS = [[1, 2, 3], list(range(7, 69)), [11], list(range(20, 144))]


def batched_programs(runner, n: int) -> set:
    return {key for key in runner._programs if len(key) == n}


@pytest.mark.parametrize("kv_type", ["float32", "float16"])
def test_batched_decode_step_equals_each_sequence_alone(vk, kv_type):
    dev = Model.from_weights(
        random_weights(config(), seed=5), device="vulkan", kv_cache=KVCacheConfig(dtype=kv_type)
    )
    runner, trace = dev.runner, dev.provider.trace
    assert runner.fused
    bseqs, aseqs = prefill_pairs(runner, PROMPTS)
    try:
        submissions, layouts = [], set()
        for step in range(6):
            toks = [(step * 31 + 7 * j) % 300 for j in range(len(PROMPTS))]
            layouts.add(tuple(s.k[0].shape[0] for s in bseqs))
            kernels, before = sum(trace.kernels.values()), trace.submissions
            got = runner.forward_batch([([t], s) for t, s in zip(toks, bseqs, strict=True)])
            submissions.append(trace.submissions - before)
            recorded = sum(trace.kernels.values()) > kernels
            want = [runner.forward([t], s) for t, s in zip(toks, aseqs, strict=True)]
            np.testing.assert_array_equal(got, np.stack(want))
            if step in (1, 3):  # the composition as in the step before: replayed
                assert not recorded
        # one vkQueueSubmit a step, recorded or replayed; a cache that grows (steps 2 and 4)
        # copies its rows into the new buffers first: one more
        assert submissions == [1, 1, 2, 1, 2, 1]
        assert len(layouts) == 3  # capacities at the start, after each crossing
        assert len(batched_programs(runner, 4)) == 3  # re-recorded on each crossing only
        assert {s.k[0].shape[0] for s in bseqs} == {64, 128, 256}
        assert [s.length for s in bseqs] == [s.length for s in aseqs]

        # one leaves: another composition, recorded once, then replayed
        kernels = sum(trace.kernels.values())
        for step in range(2):
            got = runner.forward_batch([([40 + step], s) for s in bseqs[1:]])
            want = [runner.forward([40 + step], s) for s in aseqs[1:]]
            np.testing.assert_array_equal(got, np.stack(want))
            if step == 0:
                assert sum(trace.kernels.values()) > kernels
                kernels = sum(trace.kernels.values())
        assert sum(trace.kernels.values()) == kernels
        assert len(batched_programs(runner, 3)) == 1

        # one joins with its prompt chunk: a step of its own, one submission, the same rows
        check_prompt_chunk_beside_decodes(runner, bseqs, aseqs, submissions=1)
    finally:
        for s in bseqs + aseqs:
            s.close()
    names = set(trace.kernel_names())
    assert {"rope_store", "attention_split", "norm_quant"} <= names


def test_batched_greedy_decode_equals_the_reference_engine(vk):
    """Greedy tokens of three sequences decoded in batched steps equal the CPU reference's."""
    check_batched_greedy("vulkan", random_weights(config(), seed=9))


def test_a_step_over_max_batch_tokens_splits_and_stays_exact(vk):
    """More tokens than ``max_batch``: the decode tokens in steps of at most ``max_batch``
    sequences, a longer chunk alone in ``max_batch`` pieces; the rows are still each
    sequence's own, bit for bit."""
    from bitnet_vulkan.runner import VulkanRunner

    runner = VulkanRunner(vk, random_weights(config(), seed=8), max_batch=3)
    assert runner.fused
    prompts = [[4], [5, 6, 7, 8, 9, 10, 11], [12], [13], [14], [15]]
    bseqs = [runner.new_cache() for _ in prompts]
    aseqs = [runner.new_cache() for _ in prompts]
    try:
        for s, a in zip(bseqs, aseqs, strict=True):  # different positions
            runner.forward([1, 2] * (1 + s.id % 3), s)
            runner.forward([1, 2] * (1 + s.id % 3), a)
        got = runner.forward_batch(list(zip(prompts, bseqs, strict=True)))
        want = [runner.forward(p, a) for p, a in zip(prompts, aseqs, strict=True)]
        np.testing.assert_array_equal(got, np.stack(want))
        assert [s.length for s in bseqs] == [s.length for s in aseqs]
    finally:
        for s in bseqs + aseqs:
            s.close()


def test_scheduler_streams_equal_solo_generation(vk, tmp_path):
    """The server's scheduler on this backend: five requests at once (prompts chunked,
    decode tokens batched), each stream equal to its solo greedy run."""
    model = check_scheduler_streams("vulkan", tmp_path)
    # the fused batched step ran (a step over several sequences' caches)
    assert any(len(key) > 1 for key in model.runner._programs)
