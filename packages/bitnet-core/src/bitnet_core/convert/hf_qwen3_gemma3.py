"""Hugging Face Qwen3 and Gemma3 (text) checkpoints with BitNet quantization: bitnet.cpp's
embedding models (bitnet-embedding-0.6B, -270M) and their kind.

``read_qk_config`` maps ``config.json`` (``model_type`` ``qwen3`` or ``gemma3_text``,
a ``quantization_config`` with ``quant_method`` ``bitnet``) to our ``BitNetConfig``
(GGUF ``qwen3``/``gemma3``), with the pooling of sentence-transformers' ``modules.json``
and ``1_Pooling/config.json``. ``gguf_name`` maps tensor names, as bitnet.cpp's
converter does (``utils/convert-bitnet-embedding-to-gguf.py``): a BitLinear's input
norm, ``*_proj.rms_norm.weight`` (transformers' ``use_rms_norm``) or
``*_proj.norm.weight`` (released checkpoints), becomes ``blk.N.<proj>_norm_in.weight``;
Gemma3's ``post_attention_layernorm`` is ``post_attention_norm`` and its
``pre_feedforward_layernorm`` ``ffn_norm``. Gemma's own norms compute ``x * (1 + w)``:
``GEMMA_PLUS_ONE`` says which get the 1 added on conversion (not the BitLinear ones,
plain RMSNorms in transformers).
"""

from __future__ import annotations

import json
import math
import re
from pathlib import Path
from typing import Any

from .. import config as c
from ..config import ARCH_GEMMA3, ARCH_QWEN3, BitNetConfig, Pooling
from ..errors import ConfigError, UnsupportedModelError
from .names import PROJECTIONS

#: ``model_type`` -> GGUF architecture
MODEL_TYPES = {"qwen3": ARCH_QWEN3, "gemma3_text": ARCH_GEMMA3}
_ACTIVATIONS = {"silu": "silu", "swish": "silu", "gelu_pytorch_tanh": "gelu"}
_COMMON = {
    "input_layernorm.weight": c.ATTN_NORM,
    "self_attn.q_norm.weight": c.ATTN_Q_NORM,
    "self_attn.k_norm.weight": c.ATTN_K_NORM,
    **{f"{m}.weight": g for m, g in PROJECTIONS.items()},
}
_BY_ARCH = {
    ARCH_QWEN3: {"post_attention_layernorm.weight": c.FFN_NORM},
    ARCH_GEMMA3: {
        "post_attention_layernorm.weight": c.POST_ATTN_NORM,
        "pre_feedforward_layernorm.weight": c.FFN_NORM,
        "post_feedforward_layernorm.weight": c.POST_FFN_NORM,
    },
}
#: Gemma3's own RMSNorms (``x * (1 + w)``): the GGUF holds ``1 + w``, as bitnet.cpp writes
GEMMA_PLUS_ONE = (
    c.ATTN_NORM,
    c.ATTN_Q_NORM,
    c.ATTN_K_NORM,
    c.POST_ATTN_NORM,
    c.FFN_NORM,
    c.POST_FFN_NORM,
)
_LAYER_RE = re.compile(r"^(?:model\.)?layers\.(\d+)\.(.+)$")


def is_qk_checkpoint(cfg: dict) -> bool:
    """Whether ``config.json`` (a dict) is a Qwen3 or Gemma3 text model."""
    return cfg.get("model_type") in MODEL_TYPES


def layer_map(arch: str) -> dict[str, str]:
    """HF name within a layer -> GGUF template, both input-norm spellings included."""
    out = dict(_COMMON)
    out.update(_BY_ARCH[arch])
    for m, g in PROJECTIONS.items():
        norm = c.linear_norm_name(g, arch)
        out[f"{m}.rms_norm.weight"] = norm
        out[f"{m}.norm.weight"] = norm
    return out


def gguf_name(hf_name: str, arch: str) -> str | None:
    """The GGUF name of a HF tensor (with or without the ``model.`` prefix), or None."""
    name = hf_name[len("model.") :] if hf_name.startswith("model.") else hf_name
    if name == "embed_tokens.weight":
        return c.TOKEN_EMBD
    if name == "norm.weight":
        return c.OUTPUT_NORM
    m = _LAYER_RE.match(hf_name)
    if m:
        tmpl = layer_map(arch).get(m.group(2))
        return tmpl.format(i=int(m.group(1))) if tmpl else None
    return None


def hf_names(i: int, gguf_template: str, arch: str) -> list[str]:
    """The HF names (aliases, each with and without ``model.``) of layer ``i``'s tensor."""
    found = [k for k, g in layer_map(arch).items() if g == gguf_template]
    return [f"{pre}layers.{i}.{k}" for k in found for pre in ("model.", "")]


def read_pooling(directory: Path) -> Pooling | None:
    """The pooling of sentence-transformers' ``modules.json`` + ``<Pooling>/config.json``,
    or None when the directory has none."""
    modules_path = directory / "modules.json"
    if not modules_path.is_file():
        return None
    try:
        modules = json.loads(modules_path.read_text(encoding="utf-8"))
        for mod in modules:
            if str(mod.get("type", "")).endswith("Pooling"):
                pooling = json.loads(
                    (directory / mod["path"] / "config.json").read_text(encoding="utf-8")
                )
                break
        else:
            return None
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        raise UnsupportedModelError(f"cannot read the pooling config: {exc}", modules_path) from exc
    for key, mode in (
        ("pooling_mode_lasttoken", "last"),
        ("pooling_mode_mean_tokens", "mean"),
        ("pooling_mode_cls_token", "cls"),
    ):
        if pooling.get(key):
            return mode  # type: ignore[return-value]
    raise UnsupportedModelError(
        "pooling config: none of lasttoken, mean_tokens, cls_token is set (others are not "
        "supported)",
        modules_path,
    )


def _rope_thetas(cfg: dict, arch: str) -> tuple[float, float]:
    """(global, local) rope bases; refuses rope scaling."""
    params = cfg.get("rope_parameters") or {}
    if arch == ARCH_GEMMA3 and "full_attention" in params:
        full, local = params.get("full_attention") or {}, params.get("sliding_attention") or {}
    else:
        full = local = params
    for p in (full, local, cfg.get("rope_scaling") or {}):
        if (p.get("rope_type") or p.get("type") or "default") != "default":
            raise UnsupportedModelError(f"config.json: rope scaling {p!r} is not supported")
    default = 1_000_000.0 if arch == ARCH_GEMMA3 else 10_000.0
    g = float(full.get("rope_theta", cfg.get("rope_theta", default)))
    loc = float(local.get("rope_theta", cfg.get("rope_local_base_freq", 10_000.0)))
    return g, loc


def _window_pattern(cfg: dict, layers: int, path: Path) -> tuple[int, int]:
    """(sliding_window, every-Nth-layer-global pattern) of a Gemma3 config."""
    types = cfg.get("layer_types")
    if types is None:
        n = int(cfg.get("sliding_window_pattern", 6))
        types = ["sliding_attention" if (i + 1) % n else "full_attention" for i in range(layers)]
    full = [i for i, t in enumerate(types) if t == "full_attention"]
    n = full[0] + 1 if full else layers + 1
    want = ["sliding_attention" if (i + 1) % n else "full_attention" for i in range(layers)]
    if list(types) != want:
        raise UnsupportedModelError(
            "config.json: layer_types is not every Nth layer global (not supported)", path
        )
    return int(cfg.get("sliding_window") or 0), n


def read_qk_config(cfg: dict, directory: Path, norm_eps: float | None) -> BitNetConfig:
    """``BitNetConfig`` of a Qwen3/Gemma3 ``config.json`` (see the module docstring)."""
    path = directory / "config.json"
    arch = MODEL_TYPES[cfg["model_type"]]
    act_key = "hidden_activation" if arch == ARCH_GEMMA3 else "hidden_act"
    act = cfg.get(act_key) or cfg.get("hidden_act") or "silu"
    if act not in _ACTIVATIONS:
        raise UnsupportedModelError(f"config.json: {act_key} {act!r} is not supported", path)
    if cfg.get("attention_bias") or cfg.get("attn_logit_softcapping"):
        raise UnsupportedModelError("config.json: attention bias/softcapping not supported", path)
    if cfg.get("use_bidirectional_attention"):
        raise UnsupportedModelError("config.json: bidirectional attention not supported", path)
    hidden, heads = int(cfg["hidden_size"]), int(cfg["num_attention_heads"])
    head_dim = int(cfg.get("head_dim") or hidden // heads)
    layers = int(cfg["num_hidden_layers"])
    theta, theta_local = _rope_thetas(cfg, arch)
    window, pattern = (0, 0)
    if arch == ARCH_GEMMA3:
        window, pattern = _window_pattern(cfg, layers, path)
    pooling = read_pooling(directory)
    if pooling is None:  # a language model, or an embedding model without its pooling file
        archs = cfg.get("architectures") or []
        pooling = "none" if any(a.endswith("ForCausalLM") for a in archs) else "last"
    try:
        return BitNetConfig(
            vocab_size=int(cfg["vocab_size"]),
            hidden_size=hidden,
            num_layers=layers,
            num_heads=heads,
            num_kv_heads=int(cfg.get("num_key_value_heads") or heads),
            intermediate_size=int(cfg["intermediate_size"]),
            context_length=int(cfg.get("max_position_embeddings", 32768)),
            rope_theta=theta,
            rms_norm_eps=float(cfg.get("rms_norm_eps", 1e-6)),
            ffn_activation=_ACTIVATIONS[act],  # type: ignore[arg-type]
            tied_embeddings=bool(cfg.get("tie_word_embeddings", True)),
            arch=arch,
            linear_norms=norm_eps is not None,
            linear_norm_eps=1e-6 if norm_eps is None else norm_eps,
            key_length=0 if head_dim * heads == hidden else head_dim,
            attn_scalar=float(cfg.get("query_pre_attn_scalar") or 0)
            if arch == ARCH_GEMMA3
            else 0.0,
            embedding_scale=math.sqrt(hidden) if arch == ARCH_GEMMA3 else 1.0,
            sliding_window=window,
            sliding_window_pattern=pattern,
            rope_theta_local=theta_local if arch == ARCH_GEMMA3 else 0.0,
            pooling=pooling,
        )
    except (ConfigError, KeyError, TypeError, ValueError) as exc:
        raise UnsupportedModelError(f"config.json: {exc}", path) from exc


def plus_one(gguf: str, arch: str) -> bool:
    """Whether tensor ``gguf`` is one of Gemma's ``(1 + w)`` norms (stored as ``1 + w``)."""
    if arch != ARCH_GEMMA3:
        return False
    if gguf == c.OUTPUT_NORM:
        return True
    parts = gguf.split(".")
    if len(parts) < 3 or parts[0] != "blk":
        return False
    return "blk.{i}." + ".".join(parts[2:]) in GEMMA_PLUS_ONE


def extra_metadata(config: BitNetConfig, tokenizer_meta: dict[str, Any]) -> dict[str, Any]:
    """Tokenizer keys bitnet.cpp's converter sets for these embedding models: Qwen3
    appends ``<|endoftext|>`` (the token pooled) as its end-of-sequence token."""
    out: dict[str, Any] = {}
    if config.arch == ARCH_QWEN3 and config.is_embedding:
        tokens = list(tokenizer_meta.get("tokenizer.ggml.tokens") or [])
        if "<|endoftext|>" in tokens:
            out["tokenizer.ggml.eos_token_id"] = tokens.index("<|endoftext|>")
        out["tokenizer.ggml.add_eos_token"] = True
    return out
