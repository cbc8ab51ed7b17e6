"""Quantizers (seed 003: I2S, TL1, TL2), absmean and activation quantization."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bitnet_core.errors import QuantizationError
from bitnet_core.formats import absmean_ternary, quantize, quantize_activations, ternarize_rows
from bitnet_core.providers.reference import quantize_act_ref

QTYPES = ("i2s", "tl1", "tl2")
SHAPES = ((1, 1), (1, 7), (3, 5), (13, 33), (4, 256), (9,))


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_exact_round_trip_on_ternary_input(qtype, shape):
    rng = np.random.default_rng(sum(shape))
    codes = rng.integers(-1, 2, size=shape).astype(np.float32)
    rows = 1 if len(shape) == 1 else shape[0]
    s = rng.uniform(1e-3, 10, rows).astype(np.float32)
    x = codes * (s[0] if len(shape) == 1 else s[:, None])
    q = quantize(x, qtype)
    assert q.dequantize().shape == x.shape
    np.testing.assert_array_equal(q.dequantize(), x)


@pytest.mark.parametrize("qtype", QTYPES)
@pytest.mark.parametrize("shape", SHAPES)
def test_documented_error_bound_on_general_input(qtype, shape):
    rng = np.random.default_rng(len(shape) * 100 + shape[-1])
    x = (rng.standard_normal(shape) * rng.uniform(0.01, 5)).astype(np.float32)
    q = quantize(x, qtype)
    x2 = x.reshape(q.rows, q.cols)
    s = np.mean(np.abs(x2), axis=1, keepdims=True)
    bound = np.maximum(s / 2, np.abs(x2) - s)
    err = np.abs(q.dequantize().reshape(q.rows, q.cols) - x2)
    assert (err <= bound * (1 + 1e-5) + 1e-7).all()
    np.testing.assert_allclose(q.scales, s.reshape(-1), rtol=1e-6)


def test_quantized_sizes():
    x = np.ones((4, 12), np.float32)
    assert quantize(x, "i2s").data.size == 4 * 3 + 16  # 2 bits/weight + f32 scales
    assert quantize(x, "tl1").data.size == 4 * 3 + 16
    assert quantize(x, "tl2").data.size == 4 * (2 + 1) + 16  # 4 triples: 2 nibble + 1 sign byte
    with pytest.raises(dataclasses.FrozenInstanceError):  # a result is not changed in place
        quantize(x, "i2s").qtype = "tl1"


def test_quantize_rejects_bad_input():
    with pytest.raises(QuantizationError, match="unknown quantization type"):
        quantize(np.ones((2, 2)), "q4_0")
    with pytest.raises(QuantizationError):
        quantize(np.ones((2, 2, 2)), "i2s")
    with pytest.raises(QuantizationError, match="NaN"):
        quantize(np.array([[1.0, np.nan]]), "tl1")


def test_absmean_ternary_is_the_bitnet_rule():
    w = np.array([[0.5, -1.5, 0.1], [2.0, -0.2, 0.0]], dtype=np.float32)
    codes, scale = absmean_ternary(w)
    assert scale == pytest.approx(np.abs(w).mean())  # 0.716..
    # w / s = [0.70, -2.09, 0.14, 2.79, -0.28, 0] -> round, clamp
    np.testing.assert_array_equal(codes, [[1, -1, 0], [1, 0, 0]])
    assert absmean_ternary(np.zeros((2, 2)))[1] == pytest.approx(1e-5)  # clamped away from 0


def test_ternarize_keeps_exact_scale_of_ternary_weights():
    codes = np.array([[1, 0, -1, 0], [0, 0, 1, 1]], np.int8)
    w = codes * np.array([[0.25], [3.0]], np.float32)
    got, s = ternarize_rows(w, per_row=False)
    np.testing.assert_array_equal(got, codes)
    np.testing.assert_array_equal(s, [0.25, 3.0])
    # absmean would give 0.125 for row 0 (half zeros): not what the file meant
    assert absmean_ternary(w[:1])[1] == pytest.approx(0.125)


def test_activation_quantization_is_the_reference_one():
    assert quantize_activations is quantize_act_ref
    x = np.array([[0.5, -1.0, 0.25], [0.5, -2.0, 0.25], [0.0, 0.0, 0.0]], np.float32)
    xq, s = quantize_activations(x)
    np.testing.assert_array_equal(xq, [[64, -127, 32], [32, -127, 16], [0, 0, 0]])
    np.testing.assert_allclose(s, [127.0, 63.5, 127.0 / 1e-5], rtol=1e-6)  # 127 / absmax
