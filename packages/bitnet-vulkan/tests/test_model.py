"""Whole-model agreement with the CPU reference engine on small generated models."""

from __future__ import annotations

import gc

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.model.api import Model
from bitnet_core.model.random import random_weights

PROMPT = [5, 300, 17, 17, 0, 42, 299, 8, 150, 3, 77]


@pytest.fixture(scope="module", params=["silu", "relu2"])
def weights(request):
    cfg = BitNetConfig(
        vocab_size=301,
        hidden_size=96,
        num_layers=3,
        num_heads=6,
        num_kv_heads=2,
        intermediate_size=200,
        context_length=64,
        ffn_activation=request.param,
        rope_style="neox" if request.param == "silu" else "norm",
    )
    return random_weights(cfg, seed=3)


def rel_l2(a, b):
    return float(np.linalg.norm(a - b) / np.linalg.norm(a))


def test_logits_without_activation_quantization(vk, weights):
    ref = Model.from_weights(weights, device="cpu-reference", quantize_activations=False)
    dev = Model.from_weights(weights, device="vulkan", quantize_activations=False)
    a, b = ref.logits(PROMPT), dev.logits(PROMPT)
    assert rel_l2(a, b) < 1e-4
    assert (a.argmax(-1) == b.argmax(-1)).all()


def test_logits_and_greedy_tokens(vk, weights):
    ref = Model.from_weights(weights, device="cpu-reference")
    dev = Model.from_weights(weights, device="vulkan")
    a, b = ref.logits(PROMPT), dev.logits(PROMPT)
    # int8 rounding is discontinuous: the band of docs/FORMATS.md, "Model facts" (a few % on small models);
    # in practice this provider's activation quantization is bit-exact with numpy's.
    assert rel_l2(a, b) < 3e-2
    assert (a.argmax(-1) == b.argmax(-1)).mean() >= 0.9
    provider = dev.provider
    gc.collect()  # models of earlier tests dropping their weights would reset the recorded steps
    before = dict(provider.stream.stats)
    got = dev.generate_ids(PROMPT, max_tokens=10, temperature=0)
    submits = provider.stream.stats["submits"] - before["submits"]
    replays = provider.stream.stats["replays"] - before["replays"]
    assert got == ref.generate_ids(PROMPT, max_tokens=10, temperature=0)
    assert submits <= len(got) + 1  # one submission a forward pass (prefill + each decode step)
    # decode steps repeat once the buffer pool settles: their command buffer is replayed,
    # with the new token id, rope table and cache position in the buffers it reads
    assert replays >= len(got) - 5


@pytest.mark.parametrize("ternary_type", ["tq2_0", "tq1_0"])
def test_gguf_file_through_the_cli_loader(vk, tmp_path, ternary_type):
    """A real GGUF file (TQ2_0 / TQ1_0 blocks unpacked on load) on both devices."""
    import bitnet_core
    from bitnet_core.model.random import random_model_file
    from bitnet_core.testing.model import FILE_CONFIG

    # the kit's block-format model (multiples of 256), with two layers
    cfg = BitNetConfig(**{**FILE_CONFIG, "num_layers": 2, "context_length": 64})
    path = random_model_file(tmp_path / "m.gguf", cfg, seed=9, ternary_type=ternary_type)
    ref = bitnet_core.load(path, device="cpu-reference", progress=False)
    dev = bitnet_core.load(path, device="vulkan", progress=False)
    prompt = [1, 72, 101, 108, 108, 111]
    a, b = ref.logits(prompt), dev.logits(prompt)
    assert rel_l2(a, b) < 3e-2 and (a.argmax(-1) == b.argmax(-1)).mean() >= 0.9
    assert dev.generate_ids(prompt, max_tokens=6, temperature=0) == ref.generate_ids(
        prompt, max_tokens=6, temperature=0
    )
