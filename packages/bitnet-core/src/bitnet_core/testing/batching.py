"""Checks of a runner's batched step (``forward_batch``) that every backend runs alike.

``check_batched_greedy(device, weights)``: greedy decoding of three prompts, the prompts
and then every step through ``forward_batch``, gives the reference engine's
tokens. ``check_scheduler_streams(device, tmp_path)``: the server's scheduler
on the device, five requests submitted at once (prompts chunked, decode
tokens batched), each stream's text equal to its solo greedy run, then the
same five again, all but two of their prompts' rows copied from the prefix cache
(``model/prefix_cache.py``) and their texts unchanged; it returns
the model so that a backend's test can ask its runner what it recorded.
``prefill_pairs`` and ``check_prompt_chunk_beside_decodes``: the frame of a
backend's "each row equals the sequence alone" test (two sequences a prompt,
one for the batched steps and one decoded alone by the same runner).
``assert_row_as_alone``: a batched kernel's outputs at one row of a step equal
the same token's outputs alone, and leave the other rows untouched.
"""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..config import BitNetConfig
from ..model.api import Model, load
from ..model.generation import generate_tokens, stream_text
from ..model.random import random_model_file
from ..model.sampling import SamplingParams
from ..server.scheduler import DONE, Scheduler

#: the scheduler check's model: small, two layers, GQA
SCHEDULER_CONFIG = dict(
    vocab_size=300, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=256, context_length=160,
)  # fmt: skip
#: (prompt tokens, seed, max tokens) of the scheduler check's five requests
REQUESTS = ((3, 1, 9), (40, 2, 5), (7, 3, 12), (1, 4, 6), (18, 5, 7))


def check_batched_greedy(device: str, weights: Any) -> None:
    """Greedy tokens of three sequences decoded together (``weights``: a model of at least
    43 tokens' vocabulary and 17 of context) equal the reference engine's."""
    ref = Model.from_weights(weights, device="cpu-reference")
    runner = Model.from_weights(weights, device=device).runner
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


def check_scheduler_streams(device: str, tmp_path: Path) -> Model:
    """Five requests through the server's ``Scheduler`` at once on ``device``: every stream
    ends without error and its text equals its solo greedy run; sent again, each reuses its
    prompt's cached blocks and gives the same text. Returns the model."""
    random_model_file(tmp_path / "m.gguf", BitNetConfig(**SCHEDULER_CONFIG), seed=9)
    model = load(tmp_path / "m.gguf", device=device)
    sched = Scheduler(model, max_active=4, step_tokens=24)

    async def collect(job: Any) -> str:
        parts = []
        while (item := (await asyncio.wait_for(job.out.get(), 120))[0]) is not DONE:
            parts.append(item)
        return "".join(parts)

    async def go(requests: list) -> list:
        with sched._cv:  # the worker sees them in one step
            jobs = [sched.submit(ids, params) for ids, params in requests]
        return list(zip(jobs, await asyncio.gather(*(collect(j) for j in jobs)), strict=True))

    def solo(job: Any) -> str:
        stats = type(job.stats)()
        toks = generate_tokens(
            model.runner, job.prompt_ids, job.params, eos_ids=model.eos_ids, stats=stats
        )
        return "".join(stream_text(toks, model.decode, job.prompt_ids, job.params.stop, stats))

    try:
        requests = [
            ([(s * 31 + 7 * i) % 290 + 5 for i in range(n)], SamplingParams(temperature=0.0, max_tokens=m))
            for n, s, m in REQUESTS
        ]  # fmt: skip
        first = asyncio.run(go(requests))
        for job, text in first:
            assert job.error is None
            assert text == solo(job)
        assert sched.stats.steps_total > 0
        # again: the prompts' rows now come from the prefix cache, all but the two tokens
        # a lookup leaves to compute
        for (job, text), (_, want) in zip(asyncio.run(go(requests)), first, strict=True):
            assert job.error is None and text == want
            assert job.stats.cached_tokens == max(len(job.prompt_ids) - 2, 0)
    finally:
        sched.close()
    return model


def prefill_pairs(runner: Any, prompts: Sequence[Sequence[int]]) -> tuple[list, list]:
    """Two new sequences a prompt, each prefilled with it (equal logits): the ones the
    batched steps will carry and the ones decoded alone."""
    batched = [runner.new_cache() for _ in prompts]
    alone = [runner.new_cache() for _ in prompts]
    for p, b, a in zip(prompts, batched, alone, strict=True):
        np.testing.assert_array_equal(runner.forward(p, b), runner.forward(p, a))
    return batched, alone


def check_prompt_chunk_beside_decodes(
    runner: Any, batched: list, alone: list, submissions: int | None = None
) -> None:
    """A new sequence's prompt chunk in the same ``forward_batch`` as two decode tokens,
    then its first decode token beside theirs: every row equals the sequence alone.
    ``submissions``: what the mixed step must cost in the provider's trace."""
    trace = runner.provider.trace
    with runner.new_cache() as new_b, runner.new_cache() as new_a:
        before = trace.submissions
        got = runner.forward_batch([([5], batched[0]), ([9, 8, 7], new_b), ([6], batched[-1])])
        if submissions is not None:
            assert trace.submissions - before == submissions
        want = [runner.forward([5], alone[0]), runner.forward([9, 8, 7], new_a)]
        want.append(runner.forward([6], alone[-1]))
        np.testing.assert_array_equal(got, np.stack(want))
        assert new_b.length == 3
        got = runner.forward_batch([([4], new_b), ([3], batched[1]), ([2], batched[0])])
        want = [runner.forward(t, s) for t, s in (([4], new_a), ([3], alone[1]), ([2], alone[0]))]
        np.testing.assert_array_equal(got, np.stack(want))


def assert_row_as_alone(
    alone: Sequence[np.ndarray], batched: Sequence[np.ndarray], row: int, outputs: int
) -> None:
    """The first ``outputs`` arrays of a batched launch: row ``row`` equals the lone
    launch's row 0, every other row still holds the fill value; the rest (the caches)
    equal the lone launch's whole."""
    for a, b in zip(alone[:outputs], batched[:outputs], strict=True):
        np.testing.assert_array_equal(b[row], a[0])
        others = np.arange(len(b)) != row
        assert len(np.unique(b[others])) == 1  # untouched: still the fill value
    for a, b in zip(alone[outputs:], batched[outputs:], strict=True):
        np.testing.assert_array_equal(a, b)
