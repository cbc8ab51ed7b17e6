"""One per-token step (``model/step.py``): the library's generation and the server's
scheduler give the same tokens, text, logprobs and finish reasons, request by request:
stop strings, repeat penalties with seeded sampling, max_tokens 0, the context's end."""

from __future__ import annotations

import asyncio

import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.model.api import load
from bitnet_core.model.generation import GenerationStats, generate_steps
from bitnet_core.model.processors import LogprobRecorder
from bitnet_core.model.random import random_model_file
from bitnet_core.model.sampling import SamplingParams
from bitnet_core.server.scheduler import DONE, Scheduler

CONFIG = BitNetConfig(
    vocab_size=300, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=256, context_length=48,
)  # fmt: skip


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("step") / "m.gguf"
    random_model_file(path, CONFIG, seed=21)
    return load(path, device="cpu")


def _prompt(n: int, seed: int) -> list[int]:
    return [(seed * 37 + 11 * i) % (CONFIG.vocab_size - 10) + 5 for i in range(n)]


def _library(model, ids, params):
    stats, rec = GenerationStats(), LogprobRecorder(top_n=2)
    steps = generate_steps(
        model.runner, ids, params, eos_ids=model.eos_ids, stats=stats,
        processors=(rec,), decode=model.decode,
    )  # fmt: skip
    text = "".join(s.piece for s in steps)
    return text, stats.finish_reason, stats.generated_tokens, rec.entries


def _server(model, requests):
    sched = Scheduler(model, max_active=4, step_tokens=24)

    async def go():
        recs = [LogprobRecorder(top_n=2) for _ in requests]
        with sched._cv:  # every request in the same steps
            jobs = [sched.submit(ids, p, (r,)) for (ids, p), r in zip(requests, recs, strict=True)]
        out = []
        for job, rec in zip(jobs, recs, strict=True):
            parts = []
            while (item := (await asyncio.wait_for(job.out.get(), 120))[0]) is not DONE:
                parts.append(item)
            assert job.error is None
            s = job.stats
            out.append(("".join(parts), s.finish_reason, s.generated_tokens, rec.entries))
        return out

    try:
        return asyncio.run(go())
    finally:
        sched.close()


def _stop_string(model, ids) -> str:
    """A stop string that occurs in the greedy text after its start (so it cuts it)."""
    text = _library(model, ids, SamplingParams(temperature=0, max_tokens=12))[0]
    assert len(text) > 4, text
    return text[len(text) // 2 : len(text) // 2 + 2]


def test_library_and_scheduler_take_the_same_steps(model):
    ids = _prompt(6, 1)
    penalised = dict(temperature=0.9, top_k=0, top_p=1.0, min_p=0.0, repeat_penalty=1.7)
    requests = [
        (ids, SamplingParams(temperature=0, max_tokens=12, stop=(_stop_string(model, ids),))),
        (_prompt(9, 2), SamplingParams(seed=5, max_tokens=10, repeat_last_n=8, **penalised)),
        (_prompt(4, 3), SamplingParams(seed=7, max_tokens=9, temperature=1.2)),
        (_prompt(5, 4), SamplingParams(temperature=0, max_tokens=0)),
        (_prompt(40, 5), SamplingParams(temperature=0, max_tokens=30)),  # the context ends it
    ]
    want = [_library(model, i, p) for i, p in requests]
    assert [w[1] for w in want] == ["stop", "length", "length", "length", "context"]
    assert want[0][2] < 12 and want[3][2] == 0 and want[4][2] == CONFIG.context_length - 40 + 1
    got = _server(model, requests)
    for (text, reason, n, entries), (t2, r2, n2, e2) in zip(want, got, strict=True):
        assert (t2, r2, n2) == (text, reason, n)
        assert [(e.token, e.logprob, e.top) for e in e2] == [
            (e.token, e.logprob, e.top) for e in entries
        ]
