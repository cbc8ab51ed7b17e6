"""Sampling: greedy, temperature, top-k, top-p, min-p, repetition penalty, seeds, stop strings."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from bitnet_core.errors import ConfigError
from bitnet_core.model.sampling import (
    Sampler,
    SamplingParams,
    StopMatcher,
    apply_repetition_penalty,
    token_probabilities,
)

logit_arrays = st.lists(st.floats(-20, 20, allow_nan=False, width=32), min_size=2, max_size=60).map(
    lambda v: np.array(v, dtype=np.float32)
)


@given(logit_arrays)
def test_greedy_is_argmax(logits):
    s = Sampler(SamplingParams(temperature=0))
    assert s.sample(logits) == int(np.argmax(logits))


@settings(max_examples=50)
@given(logit_arrays, st.integers(1, 10), st.integers(0, 2**32 - 1))
def test_top_k_draws_only_the_k_best(logits, k, seed):
    s = Sampler(SamplingParams(temperature=1.5, top_k=k, top_p=1.0, min_p=0.0, seed=seed))
    kth = np.sort(logits)[::-1][min(k, len(logits)) - 1]
    for _ in range(5):
        assert logits[s.sample(logits)] >= kth


@settings(max_examples=50)
@given(logit_arrays, st.floats(0.05, 1.0), st.floats(0.0, 1.0))
def test_top_p_and_min_p_keep_a_valid_distribution(logits, top_p, min_p):
    p = token_probabilities(
        logits, SamplingParams(temperature=1.0, top_k=0, top_p=top_p, min_p=min_p)
    )
    assert p.sum() == pytest.approx(1.0)
    assert (p >= 0).all()
    assert p[int(np.argmax(logits))] > 0  # the best token always survives
    full = token_probabilities(
        logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0)
    )
    kept = p > 0
    # top-p: the kept set (before min-p) reaches the mass; min-p: survivors are >= min_p * max
    assert (full[kept] >= min_p * full.max() - 1e-12).all()
    if min_p == 0.0:
        assert full[kept].sum() >= top_p - 1e-9


def test_top_p_exact():
    logits = np.log(np.array([0.5, 0.3, 0.15, 0.05]))
    p = token_probabilities(logits, SamplingParams(temperature=1.0, top_k=0, top_p=0.75, min_p=0.0))
    np.testing.assert_allclose(p, [0.625, 0.375, 0, 0])
    p = token_probabilities(logits, SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.2))
    np.testing.assert_allclose(p, [0.5 / 0.95, 0.3 / 0.95, 0.15 / 0.95, 0])


def test_temperature_sharpens_and_flattens():
    logits = np.array([2.0, 1.0, 0.0])
    cold = token_probabilities(logits, SamplingParams(temperature=0.5, top_k=0, top_p=1, min_p=0))
    hot = token_probabilities(logits, SamplingParams(temperature=2.0, top_k=0, top_p=1, min_p=0))
    assert cold[0] > hot[0] and cold[2] < hot[2]
    # empirical frequencies follow the distribution
    s = Sampler(SamplingParams(temperature=2.0, top_k=0, top_p=1, min_p=0, seed=0))
    draws = np.bincount([s.sample(logits) for _ in range(3000)], minlength=3) / 3000
    np.testing.assert_allclose(draws, hot, atol=0.04)


@given(logit_arrays, st.integers(0, 2**31 - 1))
def test_same_seed_same_tokens(logits, seed):
    params = SamplingParams(temperature=1.0, top_k=0, top_p=1.0, min_p=0.0, seed=seed)
    a, b = Sampler(params), Sampler(params)
    assert [a.sample(logits) for _ in range(8)] == [b.sample(logits) for _ in range(8)]


def test_repetition_penalty():
    logits = np.array([2.0, -2.0, 1.0, 0.5], dtype=np.float32)
    out = apply_repetition_penalty(logits, [0, 1, 1], penalty=2.0, last_n=64)
    np.testing.assert_allclose(out, [1.0, -4.0, 1.0, 0.5])
    out = apply_repetition_penalty(logits, [0, 1, 3], penalty=2.0, last_n=1)  # only the last
    np.testing.assert_allclose(out, [2.0, -2.0, 1.0, 0.25])
    s = Sampler(SamplingParams(temperature=0, repeat_penalty=4.0))
    assert s.sample(logits, history=[0]) == 2
    # ids outside the vocabulary in the history (a prompt of another model's ids) are ignored
    out = apply_repetition_penalty(logits, [4, 9, -1, 1], penalty=2.0, last_n=64)
    np.testing.assert_allclose(out, [2.0, -4.0, 1.0, 0.5])


@pytest.mark.parametrize(
    "kw",
    [
        {"temperature": -0.1},
        {"temperature": float("nan")},
        {"temperature": "hot"},
        {"top_k": -1},
        {"top_k": 1.5},
        {"top_p": 0.0},
        {"top_p": 1.5},
        {"min_p": -0.1},
        {"min_p": 2},
        {"repeat_penalty": 0},
        {"repeat_last_n": -1},
        {"repeat_last_n": 2.5},
        {"seed": -1},
        {"seed": 1.5},
        {"max_tokens": -1},
        {"stop": [""]},
        {"stop": [3]},
        {"temp": 1.0},  # unknown name
    ],
)
def test_invalid_values_are_config_errors(kw):
    with pytest.raises(ConfigError):
        SamplingParams.from_kwargs(**kw)


@pytest.mark.parametrize(
    "kw", [{"repeat_last_n": 0}, {"min_p": 0.0}, {"top_p": 1.0}, {"seed": 0}, {"max_tokens": 0}]
)
def test_boundary_values_are_accepted(kw):
    assert SamplingParams.from_kwargs(**kw)


@given(
    st.lists(
        st.sampled_from([np.nan, np.inf, -np.inf, 0.0, 1.0, -3.5, 1.0]), min_size=1, max_size=8
    )
)
def test_greedy_with_nan_and_infinite_logits(values):
    """Greedy picks the largest logit with NaN as -inf (+inf wins), and refuses logits
    none of which is finite, whichever path it takes."""
    logits = np.array(values, dtype=np.float32)
    s = Sampler(SamplingParams(temperature=0))
    if not np.isfinite(logits).any():
        with pytest.raises(ConfigError):
            s.sample(logits)
        return
    assert s.sample(logits) == int(np.argmax(np.where(np.isnan(logits), -np.inf, logits)))


def test_infinite_logits_share_the_draws():
    """+inf logits take all of the probability (softmax's limit), shared equally."""
    s = Sampler(SamplingParams(temperature=1.0, top_k=0, top_p=0.9, min_p=0.0, seed=3))
    logits = np.array([1.0, np.inf, 2.0, np.inf, -np.inf], dtype=np.float32)
    draws = [s.sample(logits) for _ in range(200)]
    assert set(draws) == {1, 3}


def test_nan_logits():
    s = Sampler(SamplingParams(temperature=1.0, seed=1))
    assert s.sample(np.array([np.nan, 1.0, np.nan])) == 1
    with pytest.raises(ConfigError):
        s.sample(np.array([np.nan, np.nan]))


stop_words = st.lists(st.text("ab\n", min_size=1, max_size=3), max_size=3)


@settings(max_examples=400)
@example(text="\naa", stops=["a", "\naa"], cuts=[2])  # an earlier stop string still pending
@given(st.text("abc\n", max_size=30), stop_words, st.lists(st.integers(0, 30), max_size=6))
def test_stop_matcher_equals_cutting_the_whole_text(text, stops, cuts):
    bounds = sorted({0, len(text), *(c for c in cuts if c <= len(text))})
    pieces = [text[a:b] for a, b in zip(bounds[:-1], bounds[1:], strict=True)]
    m = StopMatcher(stops)
    out = "".join(m.feed(p) for p in pieces) + m.flush()
    hits = [i for i in (text.find(s) for s in stops) if i >= 0]
    expected = text[: min(hits)] if hits else text
    assert out == expected
    assert m.stopped == bool(hits)


def test_stop_matcher_streams_safe_text_early():
    m = StopMatcher(["</s>"])
    assert m.feed("hello <") == "hello "
    assert m.feed("/b") == "</b"
    assert m.feed(" x</s> tail") == " x"
    assert m.stopped and m.feed("more") == ""


# --- the same distribution and draws as sorting the whole vocabulary ------------


def _probabilities_by_full_sort(logits: np.ndarray, params: SamplingParams) -> np.ndarray:
    """token_probabilities as first written: exp over the whole vocabulary and a stable
    argsort of all of it for top-p."""
    x = np.asarray(logits, dtype=np.float64)
    n = x.shape[0]
    z = x / params.temperature
    if 0 < params.top_k < n:  # the k-th largest logit by a full sort
        z[x < np.sort(x)[n - params.top_k]] = -np.inf
    z -= z.max()
    p = np.exp(z)
    p /= p.sum()
    if params.top_p < 1.0:
        order = np.argsort(-z, kind="stable")
        cut = int(np.searchsorted(np.cumsum(p[order]), params.top_p)) + 1
        p[order[cut:]] = 0.0
    if params.min_p > 0.0:
        p[p < params.min_p * p.max()] = 0.0
    return p / p.sum()


@settings(max_examples=150, deadline=None)
@given(
    n=st.integers(2, 3000),
    spread=st.sampled_from([0.5, 3.0, 12.0]),
    ties=st.booleans(),
    top_k=st.sampled_from([0, 1, 40, 700]),
    top_p=st.sampled_from([1.0, 0.95, 0.5, 0.999]),
    min_p=st.sampled_from([0.0, 0.05]),
    seed=st.integers(0, 2**32 - 1),
)
def test_probabilities_and_draws_equal_sorting_everything(
    n, spread, ties, top_k, top_p, min_p, seed
):
    """Top-p sorts only the tokens it needs (a threshold widened until their mass
    reaches top_p, ties at it kept whole) and draws over the non-zero tokens: the
    same probabilities and, seed for seed, the same tokens as ``Generator.choice``
    over the fully sorted vocabulary. Large vocabularies and flat logits make the
    threshold widen; rounded logits make ties at it."""
    rng = np.random.default_rng(seed)
    logits = (rng.standard_normal(n) * spread).astype(np.float32)
    if ties:
        logits = np.round(logits)
    params = SamplingParams(temperature=0.9, top_k=top_k, top_p=top_p, min_p=min_p, seed=seed)
    want = _probabilities_by_full_sort(logits, params)
    got = token_probabilities(logits, params)
    np.testing.assert_allclose(got, want, rtol=1e-12, atol=0)
    assert np.array_equal(got > 0, want > 0)
    ours, reference = Sampler(params), np.random.default_rng(seed)
    for _ in range(5):
        assert ours.sample(logits) == int(reference.choice(n, p=want))


def test_flush_cuts_at_a_stop_string_held_behind_an_unfinished_one():
    """A complete stop string held back because a longer one might still begin earlier:
    when generation ends there, the text stops before the complete one."""
    m = StopMatcher(["abcd", "c"])
    assert m.feed("abc") == ""  # "abcd" may still come: nothing is safe yet
    assert m.flush() == "ab" and m.stopped
