"""``sdk.fused``: the layers of a fused step, from a model's weights and a runner's stacking."""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from bitnet_core.errors import UnsupportedOperationError
from bitnet_core.model import random_weights
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.sdk.fused import fused_layers
from bitnet_core.sdk.runner import GenericRunner
from bitnet_core.testing.strict import strict_config


def test_fused_layers_stack_qkv_and_gate_up_in_order() -> None:
    cfg = strict_config("silu")
    runner = GenericRunner(ReferenceProvider(), random_weights(cfg, seed=5), progress=False)
    calls: list[int] = []

    def stack(ws):
        calls.append(len(ws))
        return tuple(ws)

    layers = fused_layers(runner.weights, stack)
    assert len(layers) == cfg.num_layers and calls == [3, 2] * cfg.num_layers
    for got, lw in zip(layers, runner.weights.layers, strict=True):
        assert got.qkv == (lw.q, lw.k, lw.v) and got.gate_up == (lw.gate, lw.up)
        assert got.o is lw.o and got.down is lw.down
        assert np.array_equal(got.attn_norm, lw.attn_norm)
        assert got.ffn_sub_norm is lw.ffn_sub_norm


def test_fused_layers_refuse_a_graph_the_fused_kernels_do_not_compute() -> None:
    cfg = dataclasses.replace(strict_config("silu"), arch="llama", rope_style="norm")
    runner = GenericRunner(ReferenceProvider(), random_weights(cfg, seed=5), progress=False)
    with pytest.raises(UnsupportedOperationError, match="BitNet's graph"):
        fused_layers(runner.weights, tuple)
