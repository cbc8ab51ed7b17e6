"""GGUF metadata <-> ``BitNetConfig``, and the tensor shapes a config implies."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from ..config import (
    ARCH_GEMMA3,
    ATTN_K,
    ATTN_K_NORM,
    ATTN_NORM,
    ATTN_OUT,
    ATTN_Q,
    ATTN_Q_NORM,
    ATTN_SUB_NORM,
    ATTN_V,
    DEFAULT_ACTIVATION_BY_ARCH,
    FFN_DOWN,
    FFN_GATE,
    FFN_NORM,
    FFN_SUB_NORM,
    FFN_UP,
    KEY_FFN_ACTIVATION,
    KEY_LINEAR_NORM_EPS,
    OUTPUT,
    OUTPUT_NORM,
    POOLING_BY_GGUF,
    POST_ATTN_NORM,
    POST_FFN_NORM,
    QK_NORM_ARCHS,
    ROPE_STYLE_BY_ARCH,
    TERNARY_LAYER_TENSORS,
    TOKEN_EMBD,
    BitNetConfig,
    linear_norm_name,
)
from ..errors import BitnetError, GGUFFormatError, ModelFileError, UnsupportedModelError

KEY_ARCH = "general.architecture"
#: Gemma3's sliding window, layer pattern and local rope base (transformers' and
#: llama.cpp's defaults), for files that do not say (bitnet.cpp's embedding files)
GEMMA3_WINDOW = 512
GEMMA3_PATTERN = 6
GEMMA3_LOCAL_THETA = 10000.0
KEY_TOKENS = "tokenizer.ggml.tokens"


def _uniform_int(value: Any, key: str, path: Path | None) -> int:
    """An integer key; a per-layer array is accepted when all its entries are equal."""
    if isinstance(value, list) and value and all(v == value[0] for v in value):
        value = value[0]
    if isinstance(value, bool) or not isinstance(value, int):
        raise GGUFFormatError(f"metadata {key!r} must be an integer, got {value!r}"[:200], path)
    return value


def _number(value: Any, key: str, path: Path | None) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise GGUFFormatError(f"metadata {key!r} must be a number, got {value!r}"[:200], path)
    value = float(value)
    f32 = np.float32(value)
    # a float32 key (as llama.cpp stores them): its shortest decimal, e.g. 1e-05 not 9.99e-06
    return float(str(f32)) if np.isfinite(f32) and float(f32) == value else value


def config_from_metadata(
    metadata: dict[str, Any],
    tensor_names: set[str] | list[str],
    path: Path | None = None,
    embedding_rows: int | None = None,
) -> BitNetConfig:
    """Read ``BitNetConfig`` from GGUF metadata (``{arch}.*`` keys, llama.cpp's names)."""
    arch = metadata.get(KEY_ARCH)
    if not isinstance(arch, str):
        raise GGUFFormatError(f"metadata has no string {KEY_ARCH!r}", path)
    if arch not in DEFAULT_ACTIVATION_BY_ARCH:
        raise UnsupportedModelError(
            f"architecture {arch!r} is not a BitNet model "
            f"(supported: {', '.join(DEFAULT_ACTIVATION_BY_ARCH)})",
            path,
        )

    def get(key: str, default: Any = None) -> Any:
        full = f"{arch}.{key}"
        if full in metadata:
            return metadata[full]
        if default is None:
            raise ModelFileError(f"missing metadata key {full!r}", path)
        return default

    hidden = _uniform_int(get("embedding_length"), f"{arch}.embedding_length", path)
    heads = _uniform_int(get("attention.head_count"), f"{arch}.attention.head_count", path)
    kv = get("attention.head_count_kv", heads)
    if f"{arch}.vocab_size" in metadata:
        vocab = _uniform_int(metadata[f"{arch}.vocab_size"], f"{arch}.vocab_size", path)
    elif isinstance(metadata.get(KEY_TOKENS), list):
        vocab = len(metadata[KEY_TOKENS])
    elif embedding_rows is not None:
        vocab = embedding_rows
    else:
        raise ModelFileError("cannot tell the vocabulary size (no vocab_size, no tokens)", path)
    act = get("ffn_activation", DEFAULT_ACTIVATION_BY_ARCH[arch])
    rms_eps = _number(
        get("attention.layer_norm_rms_epsilon", 1e-5), "attention.layer_norm_rms_epsilon", path
    )
    linear_eps_key = KEY_LINEAR_NORM_EPS.format(arch=arch)
    # bitnet.cpp's embedding files have the norms (``*_norm_in``) but no eps key: the model's
    linear_norms = linear_eps_key in metadata or (
        arch in QK_NORM_ARCHS and linear_norm_name(ATTN_Q, arch).format(i=0) in set(tensor_names)
    )
    linear_eps = (
        _number(metadata[linear_eps_key], linear_eps_key, path)
        if linear_eps_key in metadata
        else (rms_eps if linear_norms else 1e-6)
    )
    key_length = _uniform_int(get("attention.key_length", 0), "attention.key_length", path)
    if key_length and heads > 0 and key_length * heads == hidden:
        key_length = 0  # hidden / heads, BitNetConfig's default spelling
    value_length = _uniform_int(get("attention.value_length", 0), "attention.value_length", path)
    if value_length and value_length != (key_length or (hidden // heads if heads else 0)):
        raise UnsupportedModelError(
            f"attention.value_length {value_length} differs from key_length: not supported", path
        )
    head_dim = key_length or (hidden // heads if heads > 0 else 0)
    rope_dim = _uniform_int(get("rope.dimension_count", 0), "rope.dimension_count", path)
    if rope_dim == head_dim:
        rope_dim = 0  # the whole head, BitNetConfig's default spelling
    pooling_code = _uniform_int(get("pooling_type", 0), f"{arch}.pooling_type", path)
    if pooling_code not in POOLING_BY_GGUF:
        raise UnsupportedModelError(f"{arch}.pooling_type {pooling_code} is not supported", path)
    gemma = arch == ARCH_GEMMA3
    # bitnet.cpp's gemma3 files carry none of these: Gemma3's (llama.cpp's) defaults
    window = _uniform_int(
        get("attention.sliding_window", GEMMA3_WINDOW if gemma else 0),
        "attention.sliding_window",
        path,
    )
    pattern = _uniform_int(
        get("attention.sliding_window_pattern", GEMMA3_PATTERN if gemma else 0),
        "attention.sliding_window_pattern",
        path,
    )
    theta_local = _number(
        get("rope.freq_base_swa", GEMMA3_LOCAL_THETA if gemma else 0.0), "rope.freq_base_swa", path
    )
    scalar = _number(
        get("attention.query_pre_attn_scalar", float(head_dim) if gemma else 0.0),
        "attention.query_pre_attn_scalar",
        path,
    )
    try:
        return BitNetConfig(
            vocab_size=vocab,
            hidden_size=hidden,
            num_layers=_uniform_int(get("block_count"), f"{arch}.block_count", path),
            num_heads=heads,
            num_kv_heads=_uniform_int(kv, f"{arch}.attention.head_count_kv", path),
            intermediate_size=_uniform_int(
                get("feed_forward_length"), f"{arch}.feed_forward_length", path
            ),
            context_length=_uniform_int(get("context_length", 2048), "context_length", path),
            rope_theta=_number(get("rope.freq_base", 10000.0), "rope.freq_base", path),
            rms_norm_eps=rms_eps,
            rope_dim=rope_dim,
            rope_style=ROPE_STYLE_BY_ARCH.get(arch, "neox"),
            ffn_activation=act,
            tied_embeddings=OUTPUT not in set(tensor_names),
            arch=arch,
            linear_norms=linear_norms,
            linear_norm_eps=linear_eps,
            key_length=key_length,
            attn_scalar=scalar,
            embedding_scale=float(np.sqrt(hidden)) if gemma else 1.0,
            sliding_window=window,
            sliding_window_pattern=pattern,
            rope_theta_local=theta_local,
            pooling=POOLING_BY_GGUF[pooling_code],
        )
    except ModelFileError:
        raise
    except BitnetError as exc:
        raise ModelFileError(f"bad model configuration: {exc}", path) from None


def metadata_from_config(config: BitNetConfig) -> dict[str, Any]:
    """The ``{arch}.*`` keys (and ``general.architecture``) that describe ``config``."""
    a = config.arch
    md: dict[str, Any] = {
        f"{a}.vocab_size": config.vocab_size,
        f"{a}.context_length": config.context_length,
        f"{a}.embedding_length": config.hidden_size,
        f"{a}.block_count": config.num_layers,
        f"{a}.feed_forward_length": config.intermediate_size,
        f"{a}.attention.head_count": config.num_heads,
        f"{a}.attention.head_count_kv": config.num_kv_heads,
        f"{a}.rope.freq_base": float(config.rope_theta),
        f"{a}.attention.layer_norm_rms_epsilon": float(config.rms_norm_eps),
        f"{a}.rope.dimension_count": config.rot_dim,
        KEY_FFN_ACTIVATION.format(arch=a): config.ffn_activation,
    }
    if config.linear_norms:
        md[KEY_LINEAR_NORM_EPS.format(arch=a)] = float(config.linear_norm_eps)
    if config.key_length:  # bitnet.cpp writes both: head_dim != hidden / heads
        md[f"{a}.attention.key_length"] = config.key_length
        md[f"{a}.attention.value_length"] = config.key_length
    if config.attn_scalar:
        md[f"{a}.attention.query_pre_attn_scalar"] = float(config.attn_scalar)
    if config.sliding_window:
        md[f"{a}.attention.sliding_window"] = config.sliding_window
        md[f"{a}.attention.sliding_window_pattern"] = config.sliding_window_pattern
    if config.rope_theta_local:
        md[f"{a}.rope.freq_base_swa"] = float(config.rope_theta_local)
    if config.is_embedding:
        codes = {v: k for k, v in POOLING_BY_GGUF.items()}
        md[f"{a}.pooling_type"] = codes[config.pooling]
    return md


def ternary_tensor_names(config: BitNetConfig) -> list[str]:
    """Every ternary (BitLinear) weight of the model, layer by layer."""
    from ..config import TERNARY_LAYER_TENSORS

    return [n.format(i=i) for i in range(config.num_layers) for n in TERNARY_LAYER_TENSORS]


def iter_expected_shapes(config: BitNetConfig) -> Iterator[tuple[str, tuple[int, ...]]]:
    """``expected_shapes`` one tensor at a time, layer by layer (nothing built up front)."""
    h, ff, kv, v = config.hidden_size, config.intermediate_size, config.kv_dim, config.vocab_size
    qd, d = config.q_dim, config.head_dim
    yield TOKEN_EMBD, (v, h)
    yield OUTPUT_NORM, (h,)
    if not config.tied_embeddings and not config.is_embedding:
        yield OUTPUT, (v, h)
    every = {
        ATTN_NORM: (h,),
        ATTN_Q: (qd, h),
        ATTN_K: (kv, h),
        ATTN_V: (kv, h),
        ATTN_OUT: (h, qd),
        ATTN_SUB_NORM: (qd,),
        ATTN_Q_NORM: (d,),
        ATTN_K_NORM: (d,),
        POST_ATTN_NORM: (h,),
        POST_FFN_NORM: (h,),
        FFN_NORM: (h,),
        FFN_GATE: (ff, h),
        FFN_UP: (ff, h),
        FFN_DOWN: (h, ff),
        FFN_SUB_NORM: (ff,),
    }
    # a BitLinear's input norm has the width of its input (the weight's columns)
    every.update({config.linear_norm_tensor(t): (every[t][1],) for t in TERNARY_LAYER_TENSORS})
    present = set(TERNARY_LAYER_TENSORS) | set(config.layer_norm_tensors())
    per_layer = {name: shape for name, shape in every.items() if name in present}
    for i in range(config.num_layers):
        for name, shape in per_layer.items():
            yield name.format(i=i), shape


def expected_shapes(config: BitNetConfig) -> dict[str, tuple[int, ...]]:
    """Required tensor -> shape in numpy order ((rows, cols): rows = output features)."""
    return dict(iter_expected_shapes(config))


def scale_tensor_name(weight_name: str) -> str:
    """llama.cpp's optional one-element scale of a ternary weight: ``blk.N.attn_q.scale``."""
    base = weight_name[: -len(".weight")] if weight_name.endswith(".weight") else weight_name
    return base + ".scale"


def check_shapes(
    config: BitNetConfig, shapes: dict[str, tuple[int, ...]], path: Path | None
) -> None:
    """Raise ``ModelFileError`` naming the first missing or mis-shaped tensor.

    The required names are walked lazily and the walk stops at the first one
    missing, so its length is bounded by ``len(shapes)``: a hostile
    ``block_count`` (billions of layers) fails at once instead of expanding
    into a list of names that no file could hold.
    """
    for name, want in iter_expected_shapes(config):
        if name not in shapes:
            raise ModelFileError(f"missing tensor {name!r}", path)
        if tuple(shapes[name]) != want:
            raise ModelFileError(
                f"tensor {name!r} has shape {list(shapes[name])}, the config needs {list(want)}",
                path,
            )
    for name in ternary_tensor_names(config):
        sname = scale_tensor_name(name)
        if sname in shapes:
            n = 1
            for d in shapes[sname]:
                n *= d
            rows = shapes[name][0]
            if n not in (1, rows):
                raise ModelFileError(
                    f"scale tensor {sname!r} has {n} values (1 or {rows} allowed)", path
                )
