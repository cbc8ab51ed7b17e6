"""Strict whole-model comparisons for a backend package's own tests.

Tighter than the kit's model checks (``bitnet_core.testing.model``: logits
within 1 %, greedy tokens up to a tie): logits within 0.2 % of their range
and greedy tokens identical, on one small model whose sizes are no multiple
of any block (``strict_config``). Used by bitnet-opencl and bitnet-cuda.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ..config import BitNetConfig

#: Bound on logit differences, relative to the largest reference logit: int8
#: activation codes may flip where float rounding differs, a small bounded drift.
STRICT_ATOL = 2e-3


def strict_config(activation: str, context: int = 64) -> BitNetConfig:
    """Odd sizes: head_dim 20, hidden 120, FFN 200 (none a multiple of 64), GQA 6/2, vocab 300."""
    return BitNetConfig(
        vocab_size=300,
        hidden_size=120,
        num_layers=2,
        num_heads=6,
        num_kv_heads=2,
        intermediate_size=200,
        context_length=context,
        ffn_activation=activation,
    )


def assert_logits_close(got: np.ndarray, want: np.ndarray) -> None:
    scale = float(np.abs(want).max())
    np.testing.assert_allclose(got, want, rtol=0, atol=STRICT_ATOL * scale)


def check_decode_steps(
    ref: Any,
    dut: Any,
    prompt: Sequence[int] = (4, 8, 15),
    tokens: Sequence[int] = (16, 23, 42, 0, 299),
) -> None:
    """A prefill of ``prompt`` then one step per token, each step's logits compared
    (``ref`` and ``dut`` are backends: ``new_cache``/``forward``)."""
    with ref.new_cache() as ref_seq, dut.new_cache() as dut_seq:
        assert_logits_close(dut.forward(list(prompt), dut_seq), ref.forward(list(prompt), ref_seq))
        for tok in tokens:
            assert_logits_close(dut.forward([tok], dut_seq), ref.forward([tok], ref_seq))


def check_greedy_equal(
    ref_model: Any,
    dut_model: Any,
    prompt: Sequence[int] = (3, 1, 4, 1, 5, 9, 2, 6),
    steps: int = 12,
) -> None:
    """Greedy decoding of ``steps`` tokens gives the very same ids on both models."""
    want = ref_model.generate_ids(list(prompt), max_tokens=steps, temperature=0.0)
    got = dut_model.generate_ids(list(prompt), max_tokens=steps, temperature=0.0)
    if got != want:
        raise AssertionError(f"greedy tokens differ: got {got}, expected {want}")


def parity_suite(prompt_lengths: Sequence[int]) -> type:
    """A pytest class of the strict checks on a ``models`` fixture giving (reference
    model, model on the backend): prefill logits for prompts of ``prompt_lengths``
    tokens, every decode step's logits, greedy tokens. A backend's test module::

        TestStrictParity = parity_suite([12, 40])
    """
    import pytest

    class TestStrictParity:
        @pytest.mark.parametrize("length", list(prompt_lengths))
        def test_prefill_logits(self, models: Any, length: int) -> None:
            ref_model, dut_model = models
            prompt = (np.arange(length) * 37 + 1) % ref_model.config.vocab_size
            assert_logits_close(dut_model.logits(prompt), ref_model.logits(prompt))

        def test_decode_steps(self, models: Any) -> None:
            check_decode_steps(models[0].runner, models[1].runner)

        def test_greedy_tokens(self, models: Any) -> None:
            check_greedy_equal(*models)

    return TestStrictParity
