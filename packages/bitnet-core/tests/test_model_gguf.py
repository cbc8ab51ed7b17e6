"""Random models written as GGUF load back to the very same numbers (every writable ternary type)."""

from __future__ import annotations

import numpy as np
import pytest

import bitnet_core
from bitnet_core.config import BitNetConfig
from bitnet_core.errors import ModelFileError
from bitnet_core.model import Model, random_model_file, random_weights

CFG = BitNetConfig(
    vocab_size=320,
    hidden_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=1,
    intermediate_size=512,
    context_length=64,
    ffn_activation="relu2",
)
IDS = [3, 100, 7, 250, 31, 8]


@pytest.fixture(scope="module")
def in_memory_logits():
    return Model.from_weights(random_weights(CFG, seed=9), "cpu-reference").logits(IDS)


@pytest.mark.parametrize("ternary_type", ["tq2_0", "tq1_0", "i2_s"])
def test_gguf_roundtrip_is_exact(tmp_path, ternary_type, in_memory_logits):
    path = random_model_file(tmp_path / "m.gguf", CFG, seed=9, ternary_type=ternary_type)
    model = bitnet_core.load(path, device="cpu-reference", progress=False)
    assert model.config.ffn_activation == "relu2" and model.config.num_kv_heads == 1
    np.testing.assert_array_equal(model.logits(IDS), in_memory_logits)
    assert model.tokenizer is not None
    text = model.generate("the", max_tokens=6, temperature=0)
    assert isinstance(text, str) and text


def test_random_model_file_never_overwrites(tmp_path):
    path = tmp_path / "m.gguf"
    path.write_bytes(b"precious")
    with pytest.raises(ModelFileError):
        random_model_file(path, CFG, seed=1)
    assert path.read_bytes() == b"precious"


def test_no_act_quant_switch_through_load(tmp_path):
    path = random_model_file(tmp_path / "m.gguf", CFG, seed=2)
    a = bitnet_core.load(path, "cpu-reference", quantize_activations=False, progress=False)
    b = bitnet_core.load(path, "cpu-reference", progress=False)
    assert not a.quantize_activations and b.quantize_activations
    la, lb = a.logits(IDS), b.logits(IDS)
    assert not np.array_equal(la, lb)
    assert np.linalg.norm(la - lb) / np.linalg.norm(la) < 0.05


def test_chat_prompt_from_the_file_template(tmp_path):
    path = random_model_file(tmp_path / "m.gguf", CFG, seed=3)
    model = bitnet_core.load(path, "cpu-reference", progress=False)
    msgs = [{"role": "user", "content": "yo"}]
    assert model.chat_prompt(msgs) == "<|user|>yo\n<|assistant|>"
    ids = model.chat_ids(msgs)
    assert ids.count(model.tokenizer.bos_id) == 1  # the file asks for BOS
    assert model.tokenizer.eos_id in model.eos_ids
    reply = model.generate(ids, max_tokens=4, temperature=0)
    assert isinstance(reply, str)


@pytest.mark.parametrize("device", ["cpu-reference", "cpu"])
def test_bf16_tables_stay_views_and_widen_exactly(tmp_path, device):
    """A BF16 embedding is a view of the file (no float32 copy on the host); a provider
    without ``bfloat16`` in ``table_dtypes`` computes on its exact float32 widening."""
    from bitnet_core.gguf import open_model_file
    from bitnet_core.hal.bf16 import BF16Array
    from bitnet_core.model import ModelWeights

    path = random_model_file(tmp_path / "bf16.gguf", CFG, seed=9, dense_type="bf16")
    mf = open_model_file(path)
    assert mf.tensor_info("token_embd.weight").type_name == "BF16"
    weights = ModelWeights.from_model_file(mf)
    table = weights.dense["token_embd.weight"]
    assert isinstance(table, BF16Array)
    assert np.may_share_memory(table.bits, mf.raw("token_embd.weight"))
    widened = ModelWeights(
        weights.config, weights.ternary, {k: np.asarray(v) for k, v in weights.dense.items()}
    )
    assert widened.dense["token_embd.weight"].dtype == np.float32
    want = Model.from_weights(widened, device).logits(IDS)
    got = bitnet_core.load(path, device=device, progress=False).logits(IDS)
    np.testing.assert_array_equal(got, want)
