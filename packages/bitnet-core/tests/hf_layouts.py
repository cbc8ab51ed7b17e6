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


#: The published checkpoint layouts ``layout_checkpoint`` writes (docs/CONVERT.md).
LAYOUTS = (
    "bitnet-bf16",  # transformers BitNetForCausalLM, bf16 master weights (ternary x scale)
    "bitlinear-packed",  # microsoft/bitnet-b1.58-2B-4T: uint8 [out/4, in] + weight_scale (divides)
    "autobitlinear-offline",  # codes as floats + weight_scale (multiplies)
    "autobitlinear-offline-packed",  # codes packed as transformers packs + weight_scale
    "autobitlinear-online",  # latent bf16 weights, absmean-quantized at run time
    "1bitllm",  # 1bitLLM/bitnet_b1_58-*: model_type llama, BitnetForCausalLM, fp16 latent
    "llama-bitlinear",  # HF1BitLLM/Llama3-8B-1.58: LlamaForCausalLM, packed, no sub-norms
    "llama-autobitlinear-rmsnorm",  # Falcon-Edge: LlamaForCausalLM, autobitlinear, use_rms_norm
    "autobitlinear-online-rmsnorm",  # onebitllms: BitNetForCausalLM, latent, use_rms_norm
)
#: layouts of the llama graph (``LlamaForCausalLM``: no attn_sub_norm / ffn_sub_norm)
LLAMA_LAYOUTS = ("llama-bitlinear", "llama-autobitlinear-rmsnorm")
#: layouts whose BitLinears RMS-normalize their input with their own weight
RMS_NORM_LAYOUTS = ("llama-autobitlinear-rmsnorm", "autobitlinear-online-rmsnorm")
_QUANT = {
    "bitlinear-packed": ("bitlinear", "offline"),
    "autobitlinear-offline": ("autobitlinear", "offline"),
    "autobitlinear-offline-packed": ("autobitlinear", "offline"),
    "autobitlinear-online": ("autobitlinear", "online"),
    "llama-bitlinear": ("bitlinear", "offline"),
    "llama-autobitlinear-rmsnorm": ("autobitlinear", "offline"),
    "autobitlinear-online-rmsnorm": ("autobitlinear", "online"),
}
_PACKED = ("bitlinear-packed", "autobitlinear-offline-packed", "llama-bitlinear")
_BITLINEAR = ("bitlinear-packed", "llama-bitlinear")  # output divided by weight_scale
_CODES = ("autobitlinear-offline", "llama-autobitlinear-rmsnorm")  # codes as floats


def pack_codes(codes: np.ndarray) -> np.ndarray:
    """transformers' ``pack_weights``: row ``r`` in packed row ``r mod out/4``, bits ``2k``."""
    r = codes.shape[0] // 4
    u = (codes.astype(np.int16) + 1).astype(np.uint8)
    return u[:r] | (u[r : 2 * r] << 2) | (u[2 * r : 3 * r] << 4) | (u[3 * r :] << 6)


def layout_checkpoint(directory: str | Path, layout: str, *, seed: int = 0, **shape: int) -> Path:
    """A small checkpoint of ``layout`` (:data:`LAYOUTS`) with the published configs' field names."""
    d = Path(directory)
    if layout == "bitnet-bf16":
        return bitnet_checkpoint(d, seed=seed, bf16=True, **shape)
    is_1bitllm = layout == "1bitllm"
    is_llama = layout in LLAMA_LAYOUTS
    bitnet_checkpoint(d, seed=seed, tie=not (is_1bitllm or is_llama), hidden_act="silu", **shape)
    tensors = bitnet_tensors_from(d)
    rng = np.random.default_rng(seed + 1)
    out: dict[str, np.ndarray] = {}
    bf16: list[str] = []
    for name, w in tensors.items():
        if is_llama and "_sub_norm." in name:
            continue  # plain llama blocks
        is_linear = any(f".{p}.weight" in name for ps in PROJ.values() for p in ps)
        if not is_linear:
            out[name] = w
            bf16.append(name)
            continue
        scale = float(np.abs(w).max())
        codes = np.round(w / scale).astype(np.int8)
        module = name[: -len(".weight")]
        if layout in _PACKED:
            out[name] = pack_codes(codes)
            ws = 1.0 / scale if layout in _BITLINEAR else scale
            out[module + ".weight_scale"] = np.array([ws], np.float32)
        elif layout in _CODES:
            out[name] = codes.astype(np.float32)
            out[module + ".weight_scale"] = np.array([scale], np.float32)
        else:  # latent weights: transformers/llama.cpp absmean-quantize them
            out[name] = rng.normal(0, 0.02, w.shape).astype(np.float32)
        if out[name].dtype != np.uint8:
            bf16.append(name)
        if layout in RMS_NORM_LAYOUTS:  # transformers' BitLinear(use_rms_norm): its own RMSNorm
            out[module + ".rms_norm.weight"] = rng.uniform(0.5, 1.5, w.shape[1]).astype(np.float32)
            bf16.append(module + ".rms_norm.weight")
    cfg = json.loads((d / "config.json").read_text())
    if is_1bitllm:  # fields of 1bitLLM/bitnet_b1_58-large's config.json
        out = {
            k.replace("self_attn.attn_sub_norm", "self_attn.inner_attn_ln").replace(
                "mlp.ffn_sub_norm", "mlp.ffn_layernorm"
            ): v.astype(np.float16)
            for k, v in out.items()
        }
        bf16 = []
        cfg.update(
            architectures=["BitnetForCausalLM"],
            model_type="llama",
            input_bits=8,
            weight_bits=1,
            pretraining_tp=1,
            rope_scaling=None,
            attention_bias=False,
            torch_dtype="float16",
        )
    elif layout == "llama-bitlinear":  # fields of HF1BitLLM/Llama3-8B-1.58-100B-tokens
        cfg.update(
            architectures=["LlamaForCausalLM"],
            model_type="llama",
            attention_bias=False,
            mlp_bias=False,
            pretraining_tp=1,
            rope_scaling=None,
            torch_dtype="bfloat16",
            quantization_config={"modules_to_not_convert": None, "quant_method": "bitnet"},
        )
    else:
        linear_class, mode = _QUANT[layout]
        cfg["quantization_config"] = {
            "quant_method": "bitnet",
            "linear_class": linear_class,
            "quantization_mode": mode,
            "use_rms_norm": layout in RMS_NORM_LAYOUTS,
            "rms_norm_eps": 1e-6,
            "modules_to_not_convert": ["lm_head"],
        }
        cfg["torch_dtype"] = "bfloat16"
        if is_llama:  # Falcon-Edge ships as LlamaForCausalLM
            cfg.update(architectures=["LlamaForCausalLM"], model_type="llama", rms_norm_eps=1e-5)
    (d / "config.json").write_text(json.dumps(cfg, indent=2))
    write_safetensors(d / "model.safetensors", out, bf16=tuple(bf16))
    return d


def bitnet_tensors_from(d: Path) -> dict[str, np.ndarray]:
    """The tensors of a checkpoint ``bitnet_checkpoint`` wrote, as float32 arrays."""
    from bitnet_core.convert.safetensors import Checkpoint

    ck = Checkpoint(d)
    return {n: np.asarray(ck.get(n), dtype=np.float32).copy() for n in ck}
