"""Prefix caching in the server's scheduler (``model/prefix_cache.py``).

A request that reuses cached KV blocks must give the very logprobs (so the
same greedy tokens) as a server without the cache; concurrent requests that
share a prompt compute it once; a budget too small for every prefix evicts
cached blocks, never a running sequence, and stays within the budget.
"""

from __future__ import annotations

import asyncio
import json

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.model import prefix_cache as prefix_cache_module
from bitnet_core.model.api import load
from bitnet_core.model.processors import LogprobRecorder
from bitnet_core.model.random import random_model_file
from bitnet_core.model.sampling import SamplingParams
from bitnet_core.sdk import shared_pages
from bitnet_core.sdk.kv_cache import KVCacheConfig
from bitnet_core.server.scheduler import DONE, Scheduler

CONFIG = BitNetConfig(
    vocab_size=300, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=256, context_length=160,
)  # fmt: skip
GREEDY = SamplingParams(temperature=0, max_tokens=8)


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("prefix") / "m.gguf"
    random_model_file(path, CONFIG, seed=47)
    return path


@pytest.fixture(scope="module", params=["cpu", "cpu-reference"])
def model(request, model_file):
    return load(model_file, device=request.param)


def _prompt(n: int, seed: int) -> list[int]:
    return [(seed * 31 + 7 * i) % (CONFIG.vocab_size - 10) + 5 for i in range(n)]


def _run(sched: Scheduler, requests: list[list[int]], params=GREEDY) -> list[tuple]:
    """Submit the prompts together; per request (text, logprobs, cached tokens)."""

    async def go():
        recs = [LogprobRecorder(top_n=3) for _ in requests]
        with sched._cv:
            jobs = [sched.submit(ids, params, (r,)) for ids, r in zip(requests, recs, strict=True)]
        out = []
        for job, rec in zip(jobs, recs, strict=True):
            parts = []
            while (item := (await asyncio.wait_for(job.out.get(), 120))[0]) is not DONE:
                parts.append(item)
            assert job.error is None, job.error
            lps = [(e.token, e.logprob, e.top) for e in rec.entries]
            out.append(("".join(parts), lps, job.stats.cached_tokens))
        return out

    return asyncio.run(go())


def _fresh(model, requests: list[list[int]], params=GREEDY) -> list[tuple]:
    sched = Scheduler(model, prefix_cache=False)
    try:
        return [_run(sched, [ids], params)[0][:2] for ids in requests]
    finally:
        sched.close()


def test_reused_prefix_gives_the_fresh_logprobs(model):
    base = _prompt(50, 1)
    turns = [base, base + _prompt(9, 2), base, _prompt(5, 3) + base]
    want = _fresh(model, turns)
    sched = Scheduler(model)
    try:
        got = [_run(sched, [ids])[0] for ids in turns]
        pc = sched.prefix.as_dict()
    finally:
        sched.close()
    assert [g[:2] for g in got] == want  # logprobs equal to the last bit, every step
    # 48 of the 50: whole blocks of 16 that leave a token to compute; a prompt that starts
    # otherwise shares no prefix
    # the next turn: 3 whole blocks of 16, then the 2 tokens it shares with the first
    # turn's cached last partial block (which goes on with the generated tokens); the
    # repeat: all but the 2 tokens a lookup leaves to compute; a prompt that starts
    # otherwise shares no prefix
    assert [g[2] for g in got] == [0, 50, 48, 0]
    assert pc["hit_tokens"] == 98 and pc["miss_tokens"] == sum(map(len, turns)) - 98
    # host memory on Linux: the whole blocks' pages mapped into the sequence, not copied
    assert pc["shared_tokens"] == (96 if shared_pages.supported() else 0)
    assert model.runner.kv.stats()["used_blocks"] == 0  # the last user gave the blocks back


def test_concurrent_requests_compute_a_shared_prompt_once(model):
    system = _prompt(70, 4)
    requests = [system + _prompt(3 + i, 10 + i) for i in range(4)]
    want = _fresh(model, requests)
    sched = Scheduler(model, max_active=4, step_tokens=32)
    try:
        got = _run(sched, requests)
        step_tokens = sched.stats.step_tokens_total
        shared = sched.prefix.as_dict()["shared_tokens"]
    finally:
        sched.close()
    assert [g[:2] for g in got] == want
    assert shared == (3 * 64 if shared_pages.supported() else 0)
    # the first computes; the others copy its 4 whole blocks and the 6 system-prompt rows
    # of its partial last block (64..72), and compute only their own questions
    assert [g[2] for g in got] == [0, 70, 70, 70]
    n_gen = sum(len(g[1]) - 1 for g in got)  # decode tokens fed
    assert step_tokens == len(requests[0]) + sum(len(r) - 70 for r in requests[1:]) + n_gen


def test_budget_too_small_evicts_cached_blocks_not_running_sequences(model_file):
    # f16 KV on the native CPU: 2 layers * 2 * 2 heads * 64 * 2 bytes = 1 KiB a token, so
    # a KV block of 64 tokens is 64 KiB; 6 blocks hold two full-context sequences.
    budget = 6 * 64 * 1024
    model = load(model_file, device="cpu", kv_cache=KVCacheConfig(max_bytes=budget))
    kv = model.runner.kv
    assert kv.max_blocks == 6
    seen: list[int] = []
    reserve = kv._reserve_locked

    def watched(seq, n):  # the budget after every reservation
        reserve(seq, n)
        seen.append(kv.used_blocks)

    kv._reserve_locked = watched
    prompts = [_prompt(90, 20 + i) for i in range(5)]
    long = SamplingParams(temperature=0, max_tokens=60)
    want = _fresh(model, prompts) + _fresh(model, prompts[:2])
    sched = Scheduler(model, max_active=2)
    try:
        got = [_run(sched, [ids])[0] for ids in prompts]  # each evicts older blocks
        got += _run(sched, prompts[:2])  # evicted: computed again, side by side
        pc = sched.prefix.as_dict()
        both = _run(sched, prompts[2:4], long)  # two running sequences fill the budget
        assert max(seen) <= kv.max_blocks and kv.used_blocks <= kv.max_blocks
        assert kv.evictions == 0  # no sequence was evicted
    finally:
        sched.close()
    assert [g[:2] for g in got] == want
    assert pc["evictions"] > 0 and [g[2] for g in got[-2:]] == [0, 0]
    assert all(len(b[1]) == 60 for b in both)


def test_a_block_dropped_while_mapped_keeps_its_rows(model_file):
    """A follower maps a cached prompt's blocks; while it decodes, another request's
    prefill and store need the room, the cache drops those blocks, and its new blocks
    go to other slots: the follower's rows (so its logprobs) stay the fresh ones. Were
    a mapped slot reused, the new block's rows would show through the follower's map."""
    # 64 KiB KV blocks (as above); 6 of them: the first prompt's 6 cached blocks of 16
    # take 2, the follower's 150 tokens 3, the other's 90 the rest: its store must drop
    budget = 6 * 64 * 1024
    model = load(model_file, device="cpu", kv_cache=KVCacheConfig(max_bytes=budget))
    first = _prompt(90, 30)
    follower, other = first[:80] + _prompt(10, 31), _prompt(90, 32)
    long, short = SamplingParams(temperature=0, max_tokens=60), SamplingParams(max_tokens=2)
    want = _fresh(model, [follower], long)
    sched = Scheduler(model, max_active=2)
    try:
        _run(sched, [first])
        arena = sched.prefix.arena
        slots = {b.slot for b in sched.prefix.blocks.values()}

        async def both():
            with sched._cv:
                f = sched.submit(follower, long, (rec := LogprobRecorder(top_n=3),))
                o = sched.submit(other, short)
            for job in (o, f):
                while (await asyncio.wait_for(job.out.get(), 120))[0] is not DONE:
                    pass
                assert job.error is None, job.error
            return f, rec

        job, rec = asyncio.run(both())
        pc = sched.prefix.as_dict()
    finally:
        sched.close()
    assert job.stats.cached_tokens == 80 and pc["evictions"] > 0
    if arena is not None:  # the mapped path ran, and the other's blocks avoided its slots
        assert pc["shared_tokens"] == 80 and None not in slots
    assert [(e.token, e.logprob, e.top) for e in rec.entries] == want[0][1]


def test_mixed_families_under_a_tight_budget_give_the_fresh_logprobs(model_file):
    """Rounds of requests from three prompt families (shared beginnings, own endings of
    random lengths), four at a time, in a budget that keeps dropping cached blocks that
    running sequences map or copied: every request's logprobs are the fresh ones."""
    rng = np.random.default_rng(5)
    model = load(model_file, device="cpu", kv_cache=KVCacheConfig(max_bytes=8 * 64 * 1024))
    families = [_prompt(int(n), 40 + i) for i, n in enumerate(rng.integers(20, 70, 3))]
    rounds = [
        [families[f][: int(rng.integers(10, len(families[f]) + 1))] + _prompt(int(k), 60 + 7 * r + f)
         for f, k in zip(rng.integers(0, 3, 4), rng.integers(2, 30, 4), strict=True)]
        for r in range(4)
    ]  # fmt: skip
    params = SamplingParams(temperature=0, max_tokens=12)
    want = [_fresh(model, reqs, params) for reqs in rounds]
    sched = Scheduler(model, max_active=4, step_tokens=48)
    try:
        got = [[g[:2] for g in _run(sched, reqs, params)] for reqs in rounds]
        pc = sched.prefix.as_dict()
    finally:
        sched.close()
    assert got == want
    assert pc["hit_tokens"] > 0 and pc["evictions"] > 0
    assert model.runner.kv.used_blocks == 0


@pytest.mark.skipif(not shared_pages.supported(), reason="Linux memfd only")
def test_closing_the_cache_while_a_sequence_maps_its_blocks(model_file):
    """The last scheduler leaving gives the blocks back; a sequence still mapping two of
    them keeps their rows, and the arena closes when that sequence ends."""
    runner = load(model_file, device="cpu").runner
    cache = prefix_cache_module.attach(runner)
    ids = _prompt(40, 7)
    with runner.new_cache() as first:
        runner.forward(np.asarray(ids), first)
        cache.store(first, ids)
        want = [a[:32].copy() for a in first.layer(1)]
    seq = runner.new_cache()
    assert cache.start(seq, ids) == 38 and cache.stats.shared_tokens == 32
    prefix_cache_module.detach(runner)
    assert not cache.arena.closed and runner.kv.on_drop == [cache._unmap]
    for got, rows in zip(seq.layer(1), want, strict=True):
        np.testing.assert_array_equal(got[:32], rows)
    seq.close()
    assert cache.arena.closed and runner.kv.on_drop == []


def test_server_reports_cached_tokens(model_file):
    fastapi = pytest.importorskip("fastapi", reason="the server extra is not installed")
    httpx = pytest.importorskip("httpx")
    del fastapi
    from bitnet_core.server.app import create_app
    from bitnet_core.server.live import LiveServer

    model = load(model_file, device="cpu")
    body = {"prompt": _prompt(40, 5), "max_tokens": 4, "temperature": 0}
    with LiveServer(create_app(model, "m")) as live:
        url = live.url
        first = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
        again = httpx.post(url + "/v1/completions", json=body, timeout=60).json()
        with httpx.stream(
            "POST", url + "/v1/completions", json={**body, "stream": True}, timeout=60
        ) as r:
            events = [line[6:] for line in r.iter_lines() if line.startswith("data: {")]
        metrics = httpx.get(url + "/metrics", timeout=10).text
    cached = [x["usage"]["prompt_tokens_details"]["cached_tokens"] for x in (first, again)]
    # all but the 2 tokens a lookup leaves to compute: 2 whole blocks and 6 rows of the
    # partial third (the first request's 40 prompt and 3 generated tokens fed)
    assert cached == [0, 38] and first["choices"][0]["text"] == again["choices"][0]["text"]
    assert json.loads(events[-1])["usage"]["prompt_tokens_details"]["cached_tokens"] == 38
    assert "bitnet_prefix_cache_hit_tokens_total 76" in metrics
    assert "bitnet_prefix_cache_miss_tokens_total 44" in metrics
    # the 2 whole blocks of each hit were mapped (the partial third's 6 rows copied)
    shared = 64 if shared_pages.supported() else 0
    assert f"bitnet_prefix_cache_shared_tokens_total {shared}" in metrics
    assert "bitnet_prefix_cache_blocks 3" in metrics
