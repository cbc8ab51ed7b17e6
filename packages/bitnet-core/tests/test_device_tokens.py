"""Greedy tokens chosen on the device (``generate_steps`` with a runner's optional
``decode_greedy``, hal/runner.py): the same tokens, finish reasons and session state
as the host path, ``DEVICE_TOKENS`` a launch and never more than the request or the
context has room for; penalties and processors keep the host path."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.model.api import load
from bitnet_core.model.generation import (
    DEVICE_TOKENS,
    GenerationStats,
    Session,
    generate_steps,
)
from bitnet_core.model.random import random_model_file
from bitnet_core.model.sampling import SamplingParams

CONFIG = BitNetConfig(
    vocab_size=300, hidden_size=256, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=256, context_length=48,
)  # fmt: skip


class Counting:
    """A runner as it is, counting its forward passes."""

    def __init__(self, runner) -> None:
        self.inner, self.forwards = runner, 0

    def __getattr__(self, name: str):
        return getattr(self.inner, name)

    def forward(self, ids, cache, *args, **kwargs):
        self.forwards += 1
        return self.inner.forward(ids, cache, *args, **kwargs)


class DeviceGreedy(Counting):
    """The runner with ``decode_greedy`` as a device runs it (bitnet-cuda's fallback
    loop): ``k`` one-token forwards, each next token the argmax, cut after an eos. The
    ``k`` of every call is kept."""

    def __init__(self, runner) -> None:
        super().__init__(runner)
        self.asked: list[int] = []

    def decode_greedy(self, token: int, cache, k: int, eos=()) -> list[int]:
        self.asked.append(k)
        out: list[int] = []
        for _ in range(k):
            token = int(np.argmax(self.inner.forward(np.asarray([token]), cache)))
            out.append(token)
            if token in eos:
                break
        return out


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    path = tmp_path_factory.mktemp("device") / "m.gguf"
    random_model_file(path, CONFIG, seed=33)
    return load(path, device="cpu")


def _prompt(n: int, seed: int) -> list[int]:
    return [(seed * 41 + 13 * i) % (CONFIG.vocab_size - 10) + 5 for i in range(n)]


def _run(runner, ids, params, eos=(), session=None):
    stats = GenerationStats()
    steps = generate_steps(runner, ids, params, eos_ids=eos, stats=stats, session=session)
    tokens = [s.token for s in steps if s.token is not None]
    return tokens, stats


def _launches(room: int, max_tokens: int) -> list[int]:
    """The ``k`` of each launch, given the cache rows left after the prompt: the first
    token comes from the prefill's logits, each later one fills a row."""
    left, out = min(max_tokens - 1, room), []
    while left > 0:
        out.append(min(DEVICE_TOKENS, left))
        left -= out[-1]
    return out


@pytest.mark.parametrize("max_tokens", [1, 2, 8, 9, 17, 20])
@pytest.mark.parametrize("seed", [1, 2])
def test_device_tokens_equal_the_host_path(model, max_tokens, seed):
    ids, params = _prompt(7, seed), SamplingParams(temperature=0.0, max_tokens=max_tokens)
    host, host_stats = _run(model.runner, ids, params)
    dev = DeviceGreedy(model.runner)
    got, stats = _run(dev, ids, params)
    assert got == host and len(got) == max_tokens
    assert (stats.token_path, host_stats.token_path) == ("device", "host")
    assert stats.finish_reason == host_stats.finish_reason == "length"
    assert dev.asked == _launches(CONFIG.context_length - len(ids), max_tokens)
    assert stats.decode_steps == sum(dev.asked)  # one device step a token it chose


def test_device_tokens_stop_at_eos(model):
    ids = _prompt(6, 3)
    free, _ = _run(model.runner, ids, SamplingParams(temperature=0.0, max_tokens=20))
    at = next(i for i in range(3, len(free)) if free[i] not in free[:i])  # a first occurrence
    params = SamplingParams(temperature=0.0, max_tokens=20)
    host, host_stats = _run(model.runner, ids, params, eos=(free[at],))
    got, stats = _run(DeviceGreedy(model.runner), ids, params, eos=(free[at],))
    assert got == host == free[:at]
    assert stats.finish_reason == host_stats.finish_reason == "stop"


def test_the_context_end_on_the_device(model):
    ids = _prompt(CONFIG.context_length - 6, 4)
    params = SamplingParams(temperature=0.0, max_tokens=20)
    host, host_stats = _run(model.runner, ids, params)
    dev = DeviceGreedy(model.runner)
    got, stats = _run(dev, ids, params)
    assert got == host and stats.finish_reason == host_stats.finish_reason == "context"
    assert dev.asked == _launches(CONFIG.context_length - len(ids), 20)


@pytest.mark.parametrize("penalty", [0.8, 1.3])
def test_penalties_keep_the_host_path(model, penalty):
    ids = _prompt(9, 5)
    params = SamplingParams(temperature=0.0, max_tokens=12, repeat_penalty=penalty)
    host, _ = _run(model.runner, ids, params)
    dev = DeviceGreedy(model.runner)
    got, stats = _run(dev, ids, params)
    assert stats.token_path == "host" and dev.asked == [] and got == host
    plain, _ = _run(model.runner, ids, SamplingParams(temperature=0.0, max_tokens=12))
    assert got != plain  # the penalty changed the tokens: a path without it would show


def test_a_session_holds_the_device_tokens_rows(model):
    """After device tokens, a session's ids are exactly the tokens its cache holds, so
    the next turn reuses them and gives a fresh prefill's tokens."""
    first, params = _prompt(8, 6), SamplingParams(temperature=0.0, max_tokens=11)
    dev = DeviceGreedy(model.runner)
    with Session(dev) as sess:
        got, _ = _run(dev, first, params, session=sess)
        assert sess.ids == first + got[:-1] and len(sess.ids) == sess.length
        follow = first + got + _prompt(3, 7)
        again, stats = _run(dev, follow, params, session=sess)
        assert stats.cached_tokens == len(first) + len(got) - 1
    fresh, _ = _run(model.runner, follow, params)
    assert again == fresh


def test_statistics_count_forwards_and_time(model):
    ids, params = _prompt(10, 8), SamplingParams(temperature=0.0, max_tokens=6)
    runner = Counting(model.runner)
    t0 = time.perf_counter()
    tokens, stats = _run(runner, ids, params)
    wall = time.perf_counter() - t0
    assert len(tokens) == 6 and stats.token_path == "host"
    assert stats.decode_steps == runner.forwards - 1 == 5  # one prefill, then a token each
    assert 0.0 <= stats.prompt_s <= wall and 0.0 <= stats.decode_s <= wall
