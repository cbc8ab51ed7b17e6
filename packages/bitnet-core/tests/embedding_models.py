"""Small Qwen3/Gemma3 BitNet embedding checkpoints built with transformers (test extras).

``hf_embedding_checkpoint(dir, arch)`` saves transformers' ``Qwen3Model`` or
``Gemma3TextModel`` with random weights, then adds what bitnet-embedding checkpoints
have: a BitNet ``quantization_config`` (AutoBitLinear, online, ``use_rms_norm``: an
RMSNorm with its own weight before every BitLinear, ``*_proj.rms_norm.weight``), a
tokenizer, and sentence-transformers' pooling files (``modules.json``,
``1_Pooling/config.json``). Sizes are multiples of 256, so every ternary type holds every
layer. Qwen3 has head_dim 128 (not hidden / heads = 64); Gemma3 has head_dim 256 (not
128), ``query_pre_attn_scalar`` 20, and alternate local (window 5, rope base 1e4) and
global (rope base 1e6) layers. ``transformers_embeddings`` is the reference:
transformers' model of the directory, last-token pooled and L2-normalized.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from bitnet_core.convert.hf_random import write_tokenizer
from bitnet_core.convert.safetensors import Checkpoint, write_safetensors

VOCAB = 320
PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
WINDOW = 5


def _config(transformers, arch: str):
    common = dict(
        vocab_size=VOCAB,
        hidden_size=256,
        intermediate_size=512,
        max_position_embeddings=256,
        rms_norm_eps=1e-6,
        tie_word_embeddings=True,
        bos_token_id=0,
        eos_token_id=1,
        pad_token_id=1,
    )
    if arch == "qwen3":
        return transformers.Qwen3Config(
            num_hidden_layers=2,
            num_attention_heads=4,
            num_key_value_heads=2,
            head_dim=128,
            rope_parameters={"rope_type": "default", "rope_theta": 1e6},
            **common,
        )
    return transformers.Gemma3TextConfig(
        num_hidden_layers=4,
        num_attention_heads=2,
        num_key_value_heads=1,
        head_dim=256,
        query_pre_attn_scalar=20,
        sliding_window=WINDOW,
        layer_types=["sliding_attention", "full_attention"] * 2,
        rope_parameters={
            "full_attention": {"rope_type": "default", "rope_theta": 1e6},
            "sliding_attention": {"rope_type": "default", "rope_theta": 1e4},
        },
        hidden_activation="gelu_pytorch_tanh",
        **common,
    )


def hf_embedding_checkpoint(
    directory: str | Path, arch: str, *, seed: int = 0, norm_name: str = "rms_norm"
) -> Path:
    """Save a random BitNet embedding checkpoint of ``arch`` (``qwen3``/``gemma3``)."""
    torch = pytest.importorskip("torch", reason="torch is a test extra (bash ci/python-extras.sh)")
    transformers = pytest.importorskip("transformers", reason="transformers is a test extra")
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    write_tokenizer(d, VOCAB)
    cfg = _config(transformers, arch)
    cls = transformers.Qwen3Model if arch == "qwen3" else transformers.Gemma3TextModel
    torch.manual_seed(seed)
    model = cls(cfg).eval()
    rng = np.random.default_rng(seed)
    gemma = arch == "gemma3"
    with torch.no_grad():
        for name, p in model.named_parameters():
            shape = tuple(p.shape)
            if p.ndim == 1:  # Gemma's norms are x * (1 + w): w near 0; Qwen's near 1
                base = 0.0 if gemma else 1.0
                w = base + rng.uniform(-0.2, 0.2, shape)
            elif "embed_tokens" in name:  # exact in float16 (the GGUF stores it so)
                w = rng.normal(0, 1.0, shape).astype(np.float16)
            else:  # latent BitLinear weights: absmean-ternarized at run time
                w = rng.normal(0, 1.0 / np.sqrt(shape[1]), shape)
            p.copy_(torch.from_numpy(np.asarray(w, dtype=np.float32)))
    model.save_pretrained(d, safe_serialization=True)
    ckpt = Checkpoint(d)
    tensors = {n: np.asarray(ckpt.get(n), dtype=np.float32) for n in ckpt}
    for f in d.glob("*.safetensors"):
        f.unlink()
    for name in list(tensors):
        module = name[: -len(".weight")]
        if module.rsplit(".", 1)[-1] in PROJ:
            cols = tensors[name].shape[1]
            tensors[f"{module}.{norm_name}.weight"] = rng.uniform(0.5, 1.5, cols).astype(np.float32)
    write_safetensors(d / "model.safetensors", tensors)
    config = json.loads((d / "config.json").read_text())
    config["quantization_config"] = {
        "quant_method": "bitnet",
        "linear_class": "autobitlinear",
        "quantization_mode": "online",
        "use_rms_norm": True,
        "rms_norm_eps": 1e-6,
    }
    (d / "config.json").write_text(json.dumps(config, indent=2))
    (d / "modules.json").write_text(
        json.dumps(
            [
                {
                    "idx": 0,
                    "name": "0",
                    "path": "",
                    "type": "sentence_transformers.models.Transformer",
                },
                {
                    "idx": 1,
                    "name": "1",
                    "path": "1_Pooling",
                    "type": "sentence_transformers.models.Pooling",
                },
                {
                    "idx": 2,
                    "name": "2",
                    "path": "2_Normalize",
                    "type": "sentence_transformers.models.Normalize",
                },
            ]
        )
    )
    (d / "1_Pooling").mkdir(exist_ok=True)
    (d / "1_Pooling" / "config.json").write_text(
        json.dumps({"word_embedding_dimension": 256, "pooling_mode_lasttoken": True})
    )
    return d


def transformers_embeddings(src: Path, inputs: list[list[int]], quantize: bool) -> np.ndarray:
    """transformers' last-token pooled, L2-normalized embeddings of ``src`` (float32), with
    activation quantization on or off."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    pytest.importorskip("accelerate", reason="transformers loads quantized layouts with accelerate")
    import transformers.integrations.bitnet as tb

    def eager(f):
        return getattr(f, "_torchdynamo_orig_callable", f)  # the body under torch.compile

    patch = pytest.MonkeyPatch()
    try:
        patch.setattr(tb.WeightQuant, "forward", staticmethod(eager(tb.WeightQuant.forward)))
        act = eager(tb.ActQuant.forward) if quantize else (lambda ctx, a: a)
        patch.setattr(tb.ActQuant, "forward", staticmethod(act))
        model = transformers.AutoModel.from_pretrained(
            src, dtype=torch.float32, attn_implementation="eager"
        ).eval()
        out = []
        with torch.no_grad():
            for ids in inputs:
                h = model(torch.tensor([ids])).last_hidden_state[0, -1].double().numpy()
                out.append(h / np.linalg.norm(h))
        return np.stack(out).astype(np.float32)
    finally:
        patch.undo()
