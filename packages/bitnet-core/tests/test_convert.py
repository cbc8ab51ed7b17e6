"""``bitnet convert``: a transformers BitNetForCausalLM checkpoint built here, converted, read back."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

import bitnet_core.gguf
from bitnet_core.cli.main import main
from bitnet_core.convert import convert_checkpoint, read_hf_config, unpack_bitnet_weight

torch = pytest.importorskip("torch", reason="torch is not installed (bash ci/python-extras.sh)")
pytest.importorskip("transformers", reason="transformers is not installed")

from bitnet_core.convert.hf_random import (  # noqa: E402
    TERNARY_PROJ,
    pack_bitnet_weight,
    random_hf_checkpoint,
)
from bitnet_core.tokenizer import Tokenizer  # noqa: E402

HF_TO_GGUF = {
    "q_proj": "attn_q",
    "k_proj": "attn_k",
    "v_proj": "attn_v",
    "o_proj": "attn_output",
    "gate_proj": "ffn_gate",
    "up_proj": "ffn_up",
    "down_proj": "ffn_down",
}
SHAPE = dict(hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4, num_kv_heads=2)


def _expected(model):
    """GGUF name -> (codes, scale) / float array, from the torch model."""
    out = {}
    for name, p in model.named_parameters():
        w = p.detach().float().numpy()
        if name == "model.embed_tokens.weight":
            out["token_embd.weight"] = w
        elif name == "lm_head.weight":
            out["output.weight"] = w
        elif name == "model.norm.weight":
            out["output_norm.weight"] = w
        else:
            i = int(name.split(".")[2])
            proj = next((m for m in TERNARY_PROJ if f".{m}." in name), None)
            if proj:
                s = np.abs(w).max()
                out[f"blk.{i}.{HF_TO_GGUF[proj]}.weight"] = (np.sign(w).astype(np.int8), s)
            else:
                short = {
                    "input_layernorm": "attn_norm",
                    "post_attention_layernorm": "ffn_norm",
                    "attn_sub_norm": "attn_sub_norm",
                    "ffn_sub_norm": "ffn_sub_norm",
                }
                key = next(k for k in short if f".{k}." in name)
                out[f"blk.{i}.{short[key]}.weight"] = w
    return out


def _check(path, model, *, tied):
    mf = bitnet_core.gguf.open_model_file(path)
    want = _expected(model)
    if tied:
        want.pop("output.weight", None)
        assert not mf.has("output.weight")
    for name, value in want.items():
        if isinstance(value, tuple):
            codes, scales = mf.ternary(name).unpack()
            np.testing.assert_array_equal(codes, value[0], err_msg=name)
            np.testing.assert_allclose(scales, value[1], rtol=1e-6, err_msg=name)
        else:
            got = mf.dense(name) if value.ndim == 2 else np.asarray(mf.dense(name)).reshape(-1)
            np.testing.assert_array_equal(np.asarray(got, np.float32).reshape(value.shape), value)
    return mf


@pytest.fixture(scope="module")
def silu_ckpt(tmp_path_factory):
    d = tmp_path_factory.mktemp("hf")
    return d, random_hf_checkpoint(d, hidden_act="silu", **SHAPE)


@pytest.mark.parametrize("ternary_type", ["tq2_0", "tq1_0", "i2_s", "f16", "f32"])
def test_convert_round_trip(tmp_path, silu_ckpt, ternary_type):
    src, model = silu_ckpt
    out = convert_checkpoint(src, tmp_path / "m.gguf", ternary_type=ternary_type)
    mf = _check(out, model, tied=True)
    cfg = mf.config
    assert (cfg.hidden_size, cfg.num_layers, cfg.num_kv_heads) == (256, 2, 2)
    assert cfg.ffn_activation == "silu" and cfg.tied_embeddings
    assert mf.metadata["bitnet.ffn_activation"] == "silu"
    tok = Tokenizer.from_metadata(mf.metadata)
    assert tok.vocab_size == cfg.vocab_size == 320
    from tokenizers import Tokenizer as HF

    hf = HF.from_file(str(src / "tokenizer.json"))
    for text in ["Hello world", "café 日本語 🤖 123456", "  spaces\n\nnewlines"]:
        assert tok.encode(text) == hf.encode(text).ids


def test_convert_relu2_untied_sharded_bf16(tmp_path):
    model = random_hf_checkpoint(
        tmp_path / "hf",
        hidden_act="relu2",
        tie_word_embeddings=False,
        dtype="bfloat16",
        max_shard_size="200KB",
        **SHAPE,
    )
    assert (tmp_path / "hf" / "model.safetensors.index.json").is_file()
    out = convert_checkpoint(tmp_path / "hf", tmp_path / "m.gguf", ternary_type="tq2_0")
    mf = _check(out, model, tied=False)
    assert mf.config.ffn_activation == "relu2" and not mf.config.tied_embeddings


def test_convert_packed_checkpoint(tmp_path):
    model = random_hf_checkpoint(tmp_path / "hf", packed=True, **SHAPE)
    info = read_hf_config(tmp_path / "hf")
    assert info.packed
    out = convert_checkpoint(tmp_path / "hf", tmp_path / "m.gguf", ternary_type="i2_s")
    _check(out, model, tied=True)


def _transformers_pack_weights():
    """transformers' own ``pack_weights``, run from its source: importing its module
    costs ~30 s here (it sets up torch.compile for the unpacking kernels)."""
    import ast
    import importlib.util

    spec = importlib.util.find_spec("transformers.integrations.bitnet")
    tree = ast.parse(Path(spec.origin).read_text())
    fn = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "pack_weights")
    consts = [
        n for n in tree.body if isinstance(n, ast.Assign) and "VALUES_PER_ITEM" in ast.dump(n)
    ]
    scope = {"torch": torch}
    exec(compile(ast.Module(body=[*consts, fn], type_ignores=[]), spec.origin, "exec"), scope)
    return scope["pack_weights"]


def test_packing_matches_transformers():
    pack_weights = _transformers_pack_weights()
    rng = np.random.default_rng(1)
    codes = rng.integers(-1, 2, size=(12, 7)).astype(np.int8)
    packed = pack_weights(torch.from_numpy(codes.astype(np.float32))).numpy()
    np.testing.assert_array_equal(pack_bitnet_weight(codes), packed)
    np.testing.assert_array_equal(unpack_bitnet_weight(packed, 12), codes)


def test_cli_convert_and_refusals(tmp_path, silu_ckpt, capsys):
    import shutil

    shutil.copytree(silu_ckpt[0], tmp_path / "hf")
    out = tmp_path / "m.gguf"
    assert main(["convert", str(tmp_path / "hf"), str(out), "--no-progress"]) == 0
    before = out.read_bytes()
    assert main(["convert", str(tmp_path / "hf"), str(out), "--no-progress"]) != 0
    assert "exists" in capsys.readouterr().err and out.read_bytes() == before
    assert main(["convert", str(tmp_path / "hf"), str(out), "--force", "--type", "f16"]) == 0
    assert out.read_bytes() != before

    cfg_path = tmp_path / "hf" / "config.json"
    cfg = json.loads(cfg_path.read_text())
    for change, message in [
        ({"hidden_act": "gelu"}, "hidden_act 'gelu'"),
        ({"model_type": "llama", "architectures": ["LlamaForCausalLM"]}, "not a BitNet"),
        ({"attention_bias": True}, "bias"),
        ({"rope_parameters": {"rope_type": "yarn", "factor": 4.0}}, "rope scaling"),
        ({"quantization_config": {"quant_method": "gptq"}}, "gptq"),
        ({"num_hidden_layers": 3}, "lacks"),
    ]:
        cfg_path.write_text(json.dumps(cfg | change))
        rc = main(["convert", str(tmp_path / "hf"), str(tmp_path / "x.gguf"), "--no-progress"])
        err = capsys.readouterr().err
        assert rc != 0 and message in err and err.count("\n") == 1, err
        assert not (tmp_path / "x.gguf").exists()
    cfg_path.write_text(json.dumps(cfg))


def test_1bitllm_names(tmp_path, silu_ckpt):
    """1bitLLM's bitnet_b1_58 layout: model_type llama, BitnetForCausalLM, other sub-norm names."""
    from safetensors.numpy import load_file, save_file

    src, model = silu_ckpt
    d = tmp_path / "hf"
    d.mkdir()
    for f in src.iterdir():
        if f.suffix == ".safetensors":
            renamed = {
                k.replace("self_attn.attn_sub_norm", "self_attn.inner_attn_ln").replace(
                    "mlp.ffn_sub_norm", "mlp.ffn_layernorm"
                ): v
                for k, v in load_file(str(f)).items()
            }
            save_file(renamed, str(d / f.name))
        else:
            (d / f.name).write_bytes(f.read_bytes())
    cfg = json.loads((d / "config.json").read_text())
    cfg.update(model_type="llama", architectures=["BitnetForCausalLM"])
    (d / "config.json").write_text(json.dumps(cfg))
    _check(convert_checkpoint(d, tmp_path / "m.gguf"), model, tied=True)


def test_tq_types_fall_back_to_f16_below_256(tmp_path):
    """64/128-wide rows fit no TQ block: every layer falls back to F16, and the summary says so."""
    model = random_hf_checkpoint(
        tmp_path / "hf", hidden_size=64, intermediate_size=128, num_heads=4
    )
    lines: list[str] = []
    out = convert_checkpoint(
        tmp_path / "hf", tmp_path / "m.gguf", ternary_type="tq2_0", report=lines.append
    )
    mf = _check(out, model, tied=True)
    assert mf.tensor_info("blk.0.attn_q.weight").type_name == "F16"
    assert len(lines) == 2 and all("in f16 instead of tq2_0" in line for line in lines)


_BITNET_CFG = {
    "model_type": "bitnet", "architectures": ["BitNetForCausalLM"], "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
    "intermediate_size": 128, "vocab_size": 100, "hidden_act": "relu2",
    "max_position_embeddings": 128, "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
}  # fmt: skip
_QWEN3_CFG = {
    "model_type": "qwen3", "architectures": ["Qwen3ForCausalLM"], "hidden_size": 64,
    "num_attention_heads": 4, "num_key_value_heads": 2, "num_hidden_layers": 2,
    "intermediate_size": 128, "vocab_size": 100, "head_dim": 16,
    "quantization_config": {"quant_method": "bitnet", "linear_class": "autobitlinear",
                            "quantization_mode": "offline"},
}  # fmt: skip


@pytest.mark.parametrize(
    ("base", "change", "message"),
    [
        (_BITNET_CFG, {"rope_theta": "bfloat16"}, "rope_theta must be a positive number"),
        (_BITNET_CFG, {"rope_theta": -1}, "rope_theta must be a positive number"),
        (_BITNET_CFG, {"rms_norm_eps": [1]}, "rms_norm_eps must be a positive number"),
        (_BITNET_CFG, {"rope_parameters": [1]}, "rope_parameters must be an object"),
        (_QWEN3_CFG, {"hidden_size": None}, "'hidden_size' is missing"),
        (_QWEN3_CFG, {"num_attention_heads": "four"}, "a malformed field"),
        (_QWEN3_CFG, {"num_attention_heads": 0, "head_dim": None}, "a malformed field"),
        (_QWEN3_CFG, {"rope_parameters": {"rope_theta": "x"}}, "a malformed field"),
    ],
)
def test_malformed_config_fields_are_clear_errors(tmp_path, base, change, message):
    """Found by the convert fuzzer: a string where rope_theta's number goes was a bare
    ValueError. Each field of the wrong type or value is an UnsupportedModelError."""
    from bitnet_core.errors import UnsupportedModelError

    (tmp_path / "config.json").write_text(json.dumps(base))
    read_hf_config(tmp_path)  # the base is a valid config
    cfg = {k: v for k, v in {**base, **change}.items() if v is not None}
    (tmp_path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match=message):
        read_hf_config(tmp_path)
