"""Small Hugging Face checkpoints built with numpy (no torch): config.json, safetensors, tokenizer.

``bitnet_checkpoint(dir, ...)`` writes transformers' ``BitNetForCausalLM``
layout: BitLinear weights that are ternary codes times one scale per tensor
(so conversion is exact), norms near 1, embeddings exact in float16.
"""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np

from bitnet_core.convert.hf_random import write_tokenizer
from bitnet_core.convert.safetensors import write_safetensors

PROJ = {
    "self_attn": ("q_proj", "k_proj", "v_proj", "o_proj"),
    "mlp": ("gate_proj", "up_proj", "down_proj"),
}


def bitnet_tensors(
    *,
    vocab_size: int,
    hidden_size: int,
    intermediate_size: int,
    num_layers: int,
    num_heads: int,
    num_kv_heads: int,
    tie: bool,
    seed: int,
) -> dict[str, np.ndarray]:
    """HF name -> float32 array of a random BitNetForCausalLM with ternary-times-scale weights."""
    rng = np.random.default_rng(seed)
    head_dim = hidden_size // num_heads
    kv = num_kv_heads * head_dim
    shapes = {
        "q_proj": (hidden_size, hidden_size),
        "k_proj": (kv, hidden_size),
        "v_proj": (kv, hidden_size),
        "o_proj": (hidden_size, hidden_size),
        "gate_proj": (intermediate_size, hidden_size),
        "up_proj": (intermediate_size, hidden_size),
        "down_proj": (hidden_size, intermediate_size),
    }

    def f16(shape: tuple[int, ...]) -> np.ndarray:
        return rng.normal(0, 1, shape).astype(np.float16).astype(np.float32)

    def norm(n: int) -> np.ndarray:
        return rng.uniform(0.8, 1.2, n).astype(np.float32)

    out = {"model.embed_tokens.weight": f16((vocab_size, hidden_size))}
    for i in range(num_layers):
        p = f"model.layers.{i}."
        out[p + "input_layernorm.weight"] = norm(hidden_size)
        out[p + "post_attention_layernorm.weight"] = norm(hidden_size)
        out[p + "self_attn.attn_sub_norm.weight"] = norm(hidden_size)
        out[p + "mlp.ffn_sub_norm.weight"] = norm(intermediate_size)
        for block, projs in PROJ.items():
            for proj in projs:
                shape = shapes[proj]
                codes = rng.integers(-1, 2, shape).astype(np.float32)
                scale = np.float32(np.float16(rng.uniform(0.5, 1.5) / np.sqrt(shape[1])))
                out[f"{p}{block}.{proj}.weight"] = codes * scale
    out["model.norm.weight"] = norm(hidden_size)
    if not tie:
        out["lm_head.weight"] = f16((vocab_size, hidden_size))
    return out


def bitnet_checkpoint(
    directory: str | Path,
    *,
    vocab_size: int = 320,
    hidden_size: int = 256,
    intermediate_size: int = 512,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    hidden_act: str = "relu2",
    tie: bool = True,
    seed: int = 0,
    bf16: bool = False,
) -> Path:
    """Write a BitNetForCausalLM checkpoint (config, one safetensors file, tokenizer)."""
    d = Path(directory)
    d.mkdir(parents=True, exist_ok=True)
    write_tokenizer(d, vocab_size)
    tensors = bitnet_tensors(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_layers=num_layers,
        num_heads=num_heads,
        num_kv_heads=num_kv_heads,
        tie=tie,
        seed=seed,
    )
    write_safetensors(d / "model.safetensors", tensors, bf16=tuple(tensors) if bf16 else ())
    config = {
        "architectures": ["BitNetForCausalLM"],
        "model_type": "bitnet",
        "vocab_size": vocab_size,
        "hidden_size": hidden_size,
        "intermediate_size": intermediate_size,
        "num_hidden_layers": num_layers,
        "num_attention_heads": num_heads,
        "num_key_value_heads": num_kv_heads,
        "hidden_act": hidden_act,
        "max_position_embeddings": 256,
        "rms_norm_eps": 1e-5,
        "rope_theta": 500000.0,
        "tie_word_embeddings": tie,
        "bos_token_id": 0,
        "eos_token_id": 1,
        "torch_dtype": "bfloat16" if bf16 else "float32",
    }
    (d / "config.json").write_text(json.dumps(config, indent=2))
    return d
