"""Every published checkpoint layout converts: a small fixture of each, with the published field names.

Cross-checked against transformers where it loads the layout (marker ``crossval``):
logits with activation quantization off in both, within 1e-3 relative.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hf_layouts import LAYOUTS, layout_checkpoint

import bitnet_core
from bitnet_core.cli.main import main
from bitnet_core.convert import convert_checkpoint, read_hf_config
from bitnet_core.errors import UnsupportedModelError
from bitnet_core.gguf import open_model_file

SHAPE = dict(hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4, num_kv_heads=2)
IDS = [0, 5, 17, 42, 99, 7, 3, 250, 31]
TERNARY = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
EXACT = ("bitlinear-packed", "autobitlinear-offline", "autobitlinear-offline-packed")


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    """The bf16 master-weight layout of the same random model the exact layouts pack."""
    d = tmp_path_factory.mktemp("ref")
    src = layout_checkpoint(d / "hf", "bitnet-bf16", **SHAPE)
    return open_model_file(convert_checkpoint(src, d / "ref.gguf", ternary_type="f32"))


@pytest.mark.parametrize("layout", LAYOUTS)
def test_layout_converts_and_runs(tmp_path, layout, reference):
    src = layout_checkpoint(tmp_path / "hf", layout, **SHAPE)
    info = read_hf_config(src)
    out = convert_checkpoint(src, tmp_path / "m.gguf", ternary_type="i2_s")
    mf = open_model_file(out)
    names = [f"blk.{i}.{t}.weight" for i in range(SHAPE["num_layers"]) for t in TERNARY]
    if layout in EXACT:  # the same ternary model as the master weights, scale up to bf16
        for name in names:
            codes, scales = mf.ternary(name).unpack()
            want_codes, want_scales = reference.ternary(name).unpack()
            np.testing.assert_array_equal(codes, want_codes, err_msg=name)
            np.testing.assert_allclose(scales, want_scales, rtol=8e-3, err_msg=name)
    else:
        for name in names:
            codes, _ = mf.ternary(name).unpack()
            assert set(np.unique(codes)) == {-1, 0, 1}, name
    expected_linear = {
        "bitnet-bf16": "float",
        "1bitllm": "float",
        "bitlinear-packed": "bitlinear",
        "autobitlinear-offline": "autobitlinear-offline",
        "autobitlinear-offline-packed": "autobitlinear-offline",
        "autobitlinear-online": "autobitlinear-online",
    }[layout]
    assert info.linear == expected_linear
    logits = bitnet_core.load(out, "cpu", progress=False).logits(IDS)
    assert logits.shape == (len(IDS), info.config.vocab_size) and np.isfinite(logits).all()


def test_use_rms_norm_is_refused_with_the_reason(tmp_path, capsys):
    src = layout_checkpoint(tmp_path / "hf", "autobitlinear-online", **SHAPE)
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"]["use_rms_norm"] = True
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match="use_rms_norm adds an RMSNorm"):
        read_hf_config(src)
    cfg["quantization_config"]["use_rms_norm"] = False
    llama = dict(cfg, model_type="llama", architectures=["LlamaForCausalLM"])
    (src / "config.json").write_text(json.dumps(llama))
    with pytest.raises(UnsupportedModelError, match="has no BitNet sub-norms"):
        read_hf_config(src)
    cfg["quantization_config"]["linear_class"] = "gptq_linear"
    (src / "config.json").write_text(json.dumps(cfg))
    assert main(["convert", str(src), str(tmp_path / "x.gguf"), "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "linear_class 'gptq_linear'" in err and err.count("\n") == 1


# --- cross-validation against transformers ---------------------------------------------


def _transformers_logits(src, ids):
    """transformers' own model of ``src`` with activation quantization off, float32 logits."""
    torch = pytest.importorskip("torch", reason="torch is a test extra (bash ci/python-extras.sh)")
    transformers = pytest.importorskip("transformers", reason="transformers is a test extra")
    pytest.importorskip("accelerate", reason="transformers loads quantized layouts with accelerate")
    import transformers.integrations.bitnet as tb

    def eager(f):
        return getattr(f, "_torchdynamo_orig_callable", f)  # the body under torch.compile

    patch = pytest.MonkeyPatch()
    try:
        # activation quantization off (identity), weights as transformers quantizes them
        patch.setattr(tb.ActQuant, "forward", staticmethod(lambda ctx, a: a))
        patch.setattr(tb.WeightQuant, "forward", staticmethod(eager(tb.WeightQuant.forward)))
        patch.setattr(
            tb.BitLinear,
            "activation_quant",
            lambda self, x, num_bits=8: (x, torch.ones_like(x[..., :1])),
        )
        patch.setattr(tb.BitLinear, "post_quant_process", eager(tb.BitLinear.post_quant_process))
        model = transformers.BitNetForCausalLM.from_pretrained(src, torch_dtype=torch.float32)
        model = torch.nn.Module.float(model).eval()  # offline layouts keep their stored dtype
        with torch.no_grad():
            return model(torch.tensor([ids])).logits[0].float().numpy()
    finally:
        patch.undo()


@pytest.mark.crossval
@pytest.mark.parametrize("layout", [x for x in LAYOUTS if x != "1bitllm"])
def test_logits_match_transformers(tmp_path, layout):
    """1bitLLM's layout needs its repo's own modeling code; transformers cannot load it."""
    src = layout_checkpoint(tmp_path / "hf", layout, **SHAPE)
    want = _transformers_logits(src, IDS)
    out = convert_checkpoint(src, tmp_path / "m.gguf", ternary_type="f32")
    model = bitnet_core.load(out, "cpu-reference", quantize_activations=False, progress=False)
    got = model.logits(IDS)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 1e-3, (layout, rel)
    assert (got.argmax(-1) == want.argmax(-1)).mean() >= 0.9
