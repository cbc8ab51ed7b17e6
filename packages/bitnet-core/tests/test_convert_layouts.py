"""Every published checkpoint layout converts: a small fixture of each, with the published field names.

Cross-checked against transformers where it loads the layout (marker ``crossval``):
logits with activation quantization off in both, within 1e-3 relative.
"""

from __future__ import annotations

import json

import numpy as np
import pytest
from hf_layouts import LAYOUTS, LLAMA_LAYOUTS, RMS_NORM_LAYOUTS, layout_checkpoint

import bitnet_core
from bitnet_core.cli.main import main
from bitnet_core.convert import convert_checkpoint, read_hf_config
from bitnet_core.convert.checkpoint import llama_rope_permutation
from bitnet_core.errors import UnsupportedModelError
from bitnet_core.gguf import open_model_file

SHAPE = dict(hidden_size=256, intermediate_size=512, num_layers=2, num_heads=4, num_kv_heads=2)
IDS = [0, 5, 17, 42, 99, 7, 3, 250, 31]
TERNARY = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
EXACT = (
    "bitlinear-packed",
    "autobitlinear-offline",
    "autobitlinear-offline-packed",
    "llama-bitlinear",
    "llama-autobitlinear-rmsnorm",
)


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
            heads = {"attn_q": SHAPE["num_heads"], "attn_k": SHAPE["num_kv_heads"]}
            kind = name.split(".")[2]
            if layout in LLAMA_LAYOUTS and kind in heads:  # llama.cpp's q/k row order
                order = llama_rope_permutation(want_codes.shape[0], heads[kind])
                want_codes, want_scales = want_codes[order], want_scales[order]
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
        "llama-bitlinear": "bitlinear",
        "llama-autobitlinear-rmsnorm": "autobitlinear-offline",
        "autobitlinear-online-rmsnorm": "autobitlinear-online",
    }[layout]
    assert info.linear == expected_linear
    cfg = mf.config
    assert cfg.arch == ("llama" if layout in LLAMA_LAYOUTS else "bitnet")
    assert cfg.sub_norms == (layout not in LLAMA_LAYOUTS)
    assert cfg.rope_style == ("norm" if layout in LLAMA_LAYOUTS else "neox")
    assert cfg.linear_norms == (layout in RMS_NORM_LAYOUTS)
    has_sub_norm = any("sub_norm" in n for n in mf.tensor_names)
    assert has_sub_norm == cfg.sub_norms
    in_norms = [n for n in mf.tensor_names if n.endswith("_in_norm.weight")]
    assert len(in_norms) == (7 * SHAPE["num_layers"] if cfg.linear_norms else 0)
    if cfg.linear_norms:
        assert cfg.linear_norm_eps == pytest.approx(1e-6)
    logits = bitnet_core.load(out, "cpu", progress=False).logits(IDS)
    assert logits.shape == (len(IDS), info.config.vocab_size) and np.isfinite(logits).all()


def test_not_bitnet_llama_and_unknown_quantization_are_refused(tmp_path, capsys):
    src = layout_checkpoint(tmp_path / "hf", "llama-bitlinear", **SHAPE)
    cfg = json.loads((src / "config.json").read_text())
    plain = {k: v for k, v in cfg.items() if k != "quantization_config"}
    (src / "config.json").write_text(json.dumps(plain))  # a plain (16-bit) Llama
    with pytest.raises(UnsupportedModelError, match=r"is not a BitNet \(1.58-bit\) model"):
        read_hf_config(src)
    bad_eps = dict(cfg, quantization_config={**cfg["quantization_config"], "use_rms_norm": True})
    bad_eps["quantization_config"]["rms_norm_eps"] = "tiny"
    (src / "config.json").write_text(json.dumps(bad_eps))
    with pytest.raises(UnsupportedModelError, match="rms_norm_eps 'tiny'"):
        read_hf_config(src)
    cfg["quantization_config"]["linear_class"] = "gptq_linear"
    (src / "config.json").write_text(json.dumps(cfg))
    assert main(["convert", str(src), str(tmp_path / "x.gguf"), "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "linear_class 'gptq_linear'" in err and err.count("\n") == 1


def test_use_rms_norm_without_its_norm_tensors_is_refused(tmp_path):
    src = layout_checkpoint(tmp_path / "hf", "autobitlinear-online", **SHAPE)
    cfg = json.loads((src / "config.json").read_text())
    cfg["quantization_config"]["use_rms_norm"] = True
    (src / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(UnsupportedModelError, match=r"lacks 14 tensor\(s\).*rms_norm"):
        convert_checkpoint(src, tmp_path / "x.gguf")
    assert not (tmp_path / "x.gguf").exists()


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
        # BitNetForCausalLM, or LlamaForCausalLM with BitLinear layers (its quantization_config)
        model = transformers.AutoModelForCausalLM.from_pretrained(src, torch_dtype=torch.float32)
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


@pytest.mark.crossval
def test_llama_layout_runs_in_llama_cpp(tmp_path):
    """The llama-architecture file is llama.cpp's own ``llama`` graph: llama-cpp-python runs
    it (F16 weights, float activations) with our logits (float activations) within 2e-3."""
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is a test extra")
    src = layout_checkpoint(tmp_path / "hf", "llama-bitlinear", **SHAPE)
    out = convert_checkpoint(src, tmp_path / "m.gguf", ternary_type="f16")
    model = bitnet_core.load(out, "cpu-reference", quantize_activations=False, progress=False)
    got = model.logits(IDS)
    llm = llama_cpp.Llama(str(out), logits_all=True, verbose=False, n_ctx=64)
    llm.eval(IDS)
    want = np.array(llm.scores[: len(IDS)], dtype=np.float32)
    rel = np.linalg.norm(got - want) / np.linalg.norm(want)
    assert rel < 2e-3, rel
    assert (got.argmax(-1) == want.argmax(-1)).all()


@pytest.mark.parametrize("layout", LLAMA_LAYOUTS + RMS_NORM_LAYOUTS[1:])
def test_layout_runs_greedy_through_the_cli(tmp_path, layout, capsys, clean_registry, monkeypatch):
    """``bitnet convert`` then ``bitnet run`` (greedy): the fused CPU pass for every
    layout (the llama graph, BitLinear input norms), no fallback; the same tokens from
    the op-by-op engine (``BITNET_CPU_FUSED=0``)."""
    src = layout_checkpoint(tmp_path / "hf", layout, **SHAPE)
    out = tmp_path / "m.gguf"
    assert main(["convert", str(src), str(out), "--no-progress"]) == 0
    capsys.readouterr()
    assert main(["inspect", str(out)]) == 0
    graph = next(ln for ln in capsys.readouterr().out.splitlines() if ln.startswith("graph"))
    assert ("no sub-norms" in graph) == (layout in LLAMA_LAYOUTS)
    assert ("fall back to the generic engine" in graph) == (layout in RMS_NORM_LAYOUTS)
    receipt = tmp_path / "r.json"
    argv = ["run", "-m", str(out), "-p", "hello world", "-n", "8", "--temp", "0", "--no-progress"]
    assert main([*argv, "--device", "cpu", "--receipt", str(receipt)]) == 0
    text, err = capsys.readouterr()
    assert text.strip()
    r = json.loads(receipt.read_text())
    assert r["provider"]["runner"] == "FusedCpuRunner" and r["provider"]["fallbacks"] == []
    assert r["model"]["config"]["arch"] == ("llama" if layout in LLAMA_LAYOUTS else "bitnet")
    monkeypatch.setenv("BITNET_CPU_FUSED", "0")
    assert main([*argv, "--device", "cpu"]) == 0  # the op-by-op engine: the same tokens
    assert capsys.readouterr().out == text
