"""The server's scheduler on a real model: batched steps, chunked prefill, budgets.

Every request's text must equal the engine's own greedy generation of the
same prompt (a batched step gives each sequence its own logits); a long
prompt goes in chunks of the step's token budget, so a short request that
arrives with it gets its first token within two steps and decoding streams
advance every step.
"""

from __future__ import annotations

import asyncio
import math

import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.errors import ConfigError, ContextLengthError
from bitnet_core.model.api import load
from bitnet_core.model.random import random_model_file
from bitnet_core.model.sampling import SamplingParams
from bitnet_core.server.scheduler import DONE, Scheduler

CONFIG = BitNetConfig(
    vocab_size=300, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=256, context_length=160,
)  # fmt: skip


@pytest.fixture(scope="module", params=["cpu", "cpu-reference"])
def model(request, tmp_path_factory):
    path = tmp_path_factory.mktemp("sched") / "m.gguf"
    random_model_file(path, CONFIG, seed=9)
    return load(path, device=request.param)


def _greedy(n: int) -> SamplingParams:
    return SamplingParams(temperature=0.0, max_tokens=n)


async def _collect(job) -> str:
    """The job's text; each queue item is (piece or DONE, time, tokens so far)."""
    parts = []
    while (item := (await asyncio.wait_for(job.out.get(), 120))[0]) is not DONE:
        parts.append(item)
    return "".join(parts)


def _run(sched: Scheduler, requests: list[tuple[list[int], SamplingParams]]) -> list:
    """Submit every request at once (the worker sees them in one step); (job, text) each."""

    async def go():
        with sched._cv:  # the worker waits until all are queued
            jobs = [sched.submit(ids, params) for ids, params in requests]
        texts = await asyncio.gather(*(_collect(j) for j in jobs))
        return list(zip(jobs, texts, strict=True))

    return asyncio.run(go())


def _prompt(model, n: int, seed: int) -> list[int]:
    return [(seed * 31 + 7 * i) % (CONFIG.vocab_size - 10) + 5 for i in range(n)]


def test_batched_requests_equal_solo_generation(model):
    sched = Scheduler(model, max_active=4, step_tokens=24)
    try:
        reqs = [(_prompt(model, n, s), _greedy(m)) for n, s, m in ((3, 1, 9), (40, 2, 5), (7, 3, 12), (1, 4, 6), (18, 5, 7))]  # fmt: skip
        for job, text in _run(sched, reqs):
            assert job.error is None
            assert text == _solo_text(model, job)
            assert job.seq is None  # the sequence was freed
        assert sched.stats.step_tokens_max <= 24
        assert model.runner.kv.stats()["sequences"] == 0
    finally:
        sched.close()


def _solo_text(model, job) -> str:
    from bitnet_core.model.generation import generate_tokens, stream_text

    stats = type(job.stats)()
    toks = generate_tokens(
        model.runner, job.prompt_ids, job.params, eos_ids=model.eos_ids, stats=stats
    )
    return "".join(stream_text(toks, model.decode, job.prompt_ids, job.params.stop, stats))


def test_long_prompt_is_chunked_and_a_short_one_goes_first(model):
    budget = 16
    sched = Scheduler(model, max_active=4, step_tokens=budget)
    try:
        long_ids, short_ids = _prompt(model, 120, 1), _prompt(model, 4, 2)
        (long, long_text), (short, short_text) = _run(
            sched, [(long_ids, _greedy(2)), (short_ids, _greedy(3))]
        )
        assert short.first_token_step == 1  # its prompt fits the first step's budget
        # the long prompt got what the short one left, one chunk a step
        assert long.first_token_step >= math.ceil(120 / budget)
        assert short.stats.generated_tokens == 3 and long.stats.generated_tokens == 2
        assert (long_text, short_text) == (_solo_text(model, long), _solo_text(model, short))
        assert sched.stats.step_tokens_max <= budget
    finally:
        sched.close()


def test_plan_gives_every_decoding_stream_a_token(model):
    sched = Scheduler(model, max_active=4, step_tokens=10)
    try:

        async def jobs():
            loop = asyncio.get_running_loop()
            from bitnet_core.server.scheduler import Job

            return [Job(_prompt(model, n, n), _greedy(4), loop) for n in (30, 5, 3, 3)]

        a, b, c, d = asyncio.run(jobs())
        b.prefilled, b.next_token = 5, 11  # decoding
        c.prefilled, c.next_token = 3, 12  # decoding
        d.prefilled = 1  # two prompt tokens left
        plan = sched._plan([a, b, c, d])
        assert [(j, len(ids)) for j, ids in plan] == [(b, 1), (c, 1), (d, 2), (a, 6)]
        assert plan[2][1] == d.prompt_ids[1:3] and plan[3][1] == a.prompt_ids[:6]
    finally:
        sched.close()


def test_prompt_too_long_fails_only_its_request(model):
    sched = Scheduler(model, max_active=4, step_tokens=32)
    try:
        (bad, _), (good, text) = _run(
            sched,
            [(_prompt(model, CONFIG.context_length, 1), _greedy(3)), ([5, 6], _greedy(3))],
        )
        assert isinstance(bad.error, ContextLengthError)
        assert good.error is None and text == _solo_text(model, good)
    finally:
        sched.close()


def test_max_tokens_zero_and_budget_checks(model):
    sched = Scheduler(model, max_active=2, step_tokens=8)
    try:
        ((job, text),) = _run(sched, [(_prompt(model, 20, 3), _greedy(0))])
        assert (text, job.stats.generated_tokens, job.stats.finish_reason) == ("", 0, "length")
    finally:
        sched.close()
    with pytest.raises(ConfigError, match="step_tokens"):
        Scheduler(model, max_active=8, step_tokens=8)


def test_generation_stops_at_the_end_of_the_context(model):
    """A request that would outgrow the KV cache ends with reason "context", not an error."""
    max_len = model.runner.new_cache().max_len
    sched = Scheduler(model, max_active=2, step_tokens=64)
    try:
        prompt = _prompt(model, max_len - 3, 6)
        ((job, _),) = _run(sched, [(prompt, _greedy(50))])
        assert job.error is None
        # the last token sampled is not fed: every token but it fits the cache
        assert (job.stats.finish_reason, job.stats.generated_tokens) == ("context", 4)
        assert sched.queue_depth == 0
        assert sched.stats.requests_failed == 0 and sched.stats.decode_seconds_total > 0
    finally:
        sched.close()


def test_prompts_go_shortest_remaining_first(model):
    """A partly computed long prompt with less left than a fresh one goes first."""
    sched = Scheduler(model, max_active=4, step_tokens=20)
    try:

        async def jobs():
            from bitnet_core.server.scheduler import Job

            loop = asyncio.get_running_loop()
            return [Job(_prompt(model, n, n), _greedy(4), loop) for n in (30, 40)]

        fresh, partial = asyncio.run(jobs())
        partial.prefilled = 24  # 16 left, against the fresh one's 30
        plan = sched._plan([fresh, partial])
        assert [(j, len(ids)) for j, ids in plan] == [(partial, 16), (fresh, 4)]
        assert plan[0][1] == partial.prompt_ids[24:]
    finally:
        sched.close()


def test_no_prompt_chunk_is_a_lone_token(model):
    """A one-token chunk of a longer prompt would run the decode attention (not the
    prompt attention's bits): a chunk that would leave one token takes one fewer, and
    one that would be one token waits for the next step."""
    sched = Scheduler(model, max_active=4, step_tokens=16)
    try:

        async def jobs():
            from bitnet_core.server.scheduler import Job

            loop = asyncio.get_running_loop()
            return [Job(_prompt(model, n, n), _greedy(4), loop) for n in (16, 40, 5, 1, 9)]

        a, b, c, one, dec = asyncio.run(jobs())
        dec.prefilled, dec.next_token = 9, 3  # decoding: 15 prompt tokens left a step
        assert [len(ids) for _, ids in sched._plan([a, dec])] == [1, 14]  # 16: not 15 + 1
        a.prefilled = 14  # 2 left, 15 of budget: both
        assert [len(ids) for _, ids in sched._plan([a, dec])] == [1, 2]
        c.prefilled = 3  # 2 left; the 40-token prompt takes 13 and leaves no lone token
        plan = sched._plan([c, b, dec])
        assert [(j, len(ids)) for j, ids in plan] == [(dec, 1), (c, 2), (b, 13)]
        b.prefilled = 39  # never happens (a lookup leaves 2), but a lone last token runs
        assert [len(ids) for _, ids in sched._plan([b, dec])] == [1, 1]
        b.prefilled = 24  # 16 left, 15 of budget: 14, leaving 2
        assert [len(ids) for _, ids in sched._plan([b, dec])] == [1, 14]
        assert [len(ids) for _, ids in sched._plan([one])] == [1]  # a one-token prompt runs
        sched.step_tokens = 3  # 2 of budget after the decode token, 3 left: wait
        b.prefilled = 37
        assert [len(ids) for _, ids in sched._plan([b, dec])] == [1]
    finally:
        sched.close()


def test_default_step_budget_covers_every_active_stream(model):
    for max_active, want in ((4, 128), (300, 301)):
        sched = Scheduler(model, max_active=max_active)
        try:
            assert sched.step_tokens == want
        finally:
            sched.close()


def test_the_queue_limit_counts_running_and_waiting_requests(model):
    from bitnet_core.server.scheduler import QueueFullError

    sched = Scheduler(model, max_active=1, max_queue=2, prefix_cache=False)

    async def go():
        running = sched.submit(_prompt(model, 3, 1), _greedy(150))
        for _ in range(5000):  # until the worker took it
            if sched.active == 1:
                break
            await asyncio.sleep(0.001)
        with sched._cv:  # the worker waits: one running, then two waiting
            assert sched.active == 1 and sched.queue_depth == 0
            waiting = sched.submit(_prompt(model, 3, 2), _greedy(1))
            with pytest.raises(QueueFullError):
                sched.submit(_prompt(model, 3, 3), _greedy(1))
            waiting.cancel()
            running.cancel()
        # a request cancelled while it waits ends at once, not at a free slot
        await asyncio.wait_for(asyncio.gather(_collect(running), _collect(waiting)), 20)

    try:
        asyncio.run(go())
        assert (sched.stats.requests_total, sched.stats.requests_rejected) == (2, 1)
        assert sched.stats.requests_cancelled == 2
    finally:
        sched.close()


def test_concurrent_requests_wait_for_a_shared_prompt(model):
    """Two requests sharing 40 prompt tokens, sent together: the second waits for the
    first's prefill and starts from its two cached blocks (32 tokens) and the 8 shared
    rows of its partial last block."""
    shared = _prompt(model, 40, 7)
    reqs = [(shared + _prompt(model, 5, s), _greedy(3)) for s in (1, 2)]
    sched = Scheduler(model, max_active=4, step_tokens=24)
    try:
        (first, first_text), (second, second_text) = _run(sched, reqs)
        assert (first.stats.cached_tokens, second.stats.cached_tokens) == (0, 40)
        assert first_text == _solo_text(model, first) and second_text == _solo_text(model, second)
    finally:
        sched.close()


def test_a_request_waiting_for_a_shared_prompt_holds_back_no_other(model):
    """While one request waits for another's prompt blocks, a third that shares nothing
    is planned in the first step all the same."""
    shared = _prompt(model, 40, 8)
    reqs = [
        (shared + _prompt(model, 5, 1), _greedy(2)),
        (shared + _prompt(model, 5, 2), _greedy(2)),  # waits for the first's prefill
        (_prompt(model, 4, 3), _greedy(2)),  # shares nothing
    ]
    sched = Scheduler(model, max_active=4, step_tokens=24)
    try:
        (_, _), (follower, _), (other, other_text) = _run(sched, reqs)
        assert follower.stats.cached_tokens == 40
        assert other.first_token_step == 1 and other_text == _solo_text(model, other)
    finally:
        sched.close()


def test_a_few_shared_tokens_are_not_worth_a_wait(model):
    """Prompts sharing less than a block's worth of tokens (a chat template's header)
    run side by side from the first step: the second does not wait for the first's
    prefill."""
    head = _prompt(model, 6, 9)
    reqs = [(head + _prompt(model, 30, s), _greedy(2)) for s in (1, 2)]
    sched = Scheduler(model, max_active=4, step_tokens=128)
    try:
        (first, _), (second, second_text) = _run(sched, reqs)
        assert first.first_token_step == second.first_token_step == 1
        assert second.stats.cached_tokens == 0 and second_text == _solo_text(model, second)
    finally:
        sched.close()
