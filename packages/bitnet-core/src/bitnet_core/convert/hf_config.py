"""A Hugging Face ``config.json`` of a BitNet model to our :class:`BitNetConfig`.

Accepts what transformers' ``BitNetForCausalLM`` saves (``model_type`` ``bitnet``,
``architectures`` ``BitNetForCausalLM`` / ``BitnetForCausalLM``), and
llama-architecture 1.58-bit checkpoints (``LlamaForCausalLM`` with transformers'
``bitnet`` quantization: HF1BitLLM, Falcon-Edge), which become the GGUF
``llama`` graph (no sub-norms). Refuses, naming the field, what neither graph
can express: attention bias, rope scaling, a head size other than
hidden/heads, an activation other than relu² or SiLU, quantization other than
transformers' ``bitnet`` one (``bitlinear``, or ``autobitlinear`` online or
offline; each with or without ``use_rms_norm``).
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass
from pathlib import Path

from ..config import ARCH_LLAMA, BitNetConfig, FfnActivation
from ..errors import ConfigError, UnsupportedModelError
from .hf_qwen3_gemma3 import is_qk_checkpoint, read_qk_config

_ACTIVATIONS: dict[str, FfnActivation] = {"relu2": "relu2", "silu": "silu", "swish": "silu"}
_ARCHITECTURES = {"BitNetForCausalLM", "BitnetForCausalLM"}
#: llama-architecture checkpoints that are 1.58-bit through their ``quantization_config``
_LLAMA_ARCHITECTURES = {"LlamaForCausalLM"}


@dataclass(frozen=True)
class HFModelInfo:
    """What the converter needs from ``config.json``."""

    config: BitNetConfig
    packed: bool  # transformers' quant_method "bitnet": uint8-packed weights + weight_scale
    not_converted: tuple[str, ...] = ()  # modules the quantization config leaves in float
    name: str | None = None
    #: how a BitLinear weight is stored (``quantization_config.linear_class`` and mode):
    #: ``"float"`` (master or already-ternary floats), ``"bitlinear"`` (packed codes,
    #: layer output divided by ``weight_scale``), ``"autobitlinear-offline"`` (codes,
    #: packed or not, output multiplied by ``weight_scale``), ``"autobitlinear-online"``
    #: (latent floats, absmean-quantized at run time)
    linear: str = "float"
    #: the GGUF graph: ``"bitnet"`` (sub-norms) or ``"llama"`` (none; q/k rows permuted)
    arch: str = "bitnet"

    @property
    def has_weight_scale(self) -> bool:
        """Whether each BitLinear has a ``weight_scale`` tensor."""
        return self.linear in ("bitlinear", "autobitlinear-offline")


def _int(cfg: dict, key: str, path: Path, default: int | None = None) -> int:
    value = cfg.get(key, default)
    if not isinstance(value, int) or isinstance(value, bool):
        raise UnsupportedModelError(f"config.json: {key} must be an integer, got {value!r}", path)
    return value


def _positive(value: object, key: str, path: Path) -> float:
    """``value`` as a float if it is a finite positive number (JSON int or float)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < math.inf:
        raise UnsupportedModelError(
            f"config.json: {key} must be a positive number, got {value!r}", path
        )
    return float(value)


def _rope_theta(cfg: dict, path: Path) -> float:
    params = cfg.get("rope_parameters") or {}
    if not isinstance(params, dict):
        raise UnsupportedModelError(
            f"config.json: rope_parameters must be an object, got {params!r}", path
        )
    scaling = cfg.get("rope_scaling")
    rope_type = (params.get("rope_type") or params.get("type") or "default") if params else None
    if scaling or (rope_type not in (None, "default")):
        raise UnsupportedModelError(
            f"config.json: rope scaling {scaling or params!r} is not supported", path
        )
    theta = params.get("rope_theta", cfg.get("rope_theta", 500000.0))
    return _positive(theta, "rope_theta", path)


def read_hf_config(directory: Path) -> HFModelInfo:
    """Read and check ``directory/config.json``."""
    path = Path(directory) / "config.json"
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise UnsupportedModelError("no config.json: not a Hugging Face checkpoint", path) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise UnsupportedModelError(f"cannot read config.json: {exc}", path) from exc
    if not isinstance(cfg, dict):
        raise UnsupportedModelError("config.json is not a JSON object", path)
    names = cfg.get("architectures") or []
    if not isinstance(names, list) or not all(isinstance(a, str) for a in names):
        raise UnsupportedModelError("config.json: architectures is not a list of names", path)
    archs = set(names)
    quant = cfg.get("quantization_config")
    if quant is not None and not isinstance(quant, dict):
        raise UnsupportedModelError("config.json: quantization_config is not an object", path)
    is_bitnet_quant = isinstance(quant, dict) and quant.get("quant_method") == "bitnet"
    if is_qk_checkpoint(cfg):
        return _read_qk(cfg, Path(directory), quant, path)
    is_llama = (
        not archs & _ARCHITECTURES
        and cfg.get("model_type") == "llama"
        and bool(archs & _LLAMA_ARCHITECTURES)
    )
    if is_llama and not is_bitnet_quant:
        raise UnsupportedModelError(
            "a llama checkpoint without transformers' BitNet quantization_config (quant_method "
            "'bitnet') is not a BitNet (1.58-bit) model",
            path,
        )
    if cfg.get("model_type") != "bitnet" and not archs & _ARCHITECTURES and not is_llama:
        raise UnsupportedModelError(
            f"model_type {cfg.get('model_type')!r} / architectures {sorted(archs)} is not a "
            "BitNet checkpoint (expected model_type 'bitnet', BitNetForCausalLM, or a "
            "LlamaForCausalLM with quant_method 'bitnet')",
            path,
        )
    if cfg.get("attention_bias") or cfg.get("mlp_bias"):
        raise UnsupportedModelError("config.json: attention/MLP bias is not supported", path)
    act = cfg.get("hidden_act", "relu2")
    if act not in _ACTIVATIONS:
        raise UnsupportedModelError(
            f"config.json: hidden_act {act!r} is not supported (relu2 or silu)", path
        )
    hidden = _int(cfg, "hidden_size", path)
    heads = _int(cfg, "num_attention_heads", path)
    head_dim = cfg.get("head_dim")
    if head_dim is not None and heads and head_dim * heads != hidden:
        raise UnsupportedModelError(
            f"config.json: head_dim {head_dim} x {heads} heads != hidden_size {hidden}", path
        )
    packed, skip, linear, norm_eps = False, (), "float", None
    if quant:
        linear = _linear_kind(quant, path)
        packed = linear == "bitlinear"
        skip = tuple(quant.get("modules_to_not_convert") or ())
        norm_eps = _linear_norm_eps(quant, path)
    try:
        config = BitNetConfig(
            vocab_size=_int(cfg, "vocab_size", path),
            hidden_size=hidden,
            num_layers=_int(cfg, "num_hidden_layers", path),
            num_heads=heads,
            num_kv_heads=_int(cfg, "num_key_value_heads", path, heads),
            intermediate_size=_int(cfg, "intermediate_size", path),
            context_length=_int(cfg, "max_position_embeddings", path, 2048),
            rope_theta=_rope_theta(cfg, path),
            rms_norm_eps=_positive(cfg.get("rms_norm_eps", 1e-5), "rms_norm_eps", path),
            ffn_activation=_ACTIVATIONS[act],
            tied_embeddings=bool(cfg.get("tie_word_embeddings", False)),
            arch=ARCH_LLAMA if is_llama else "bitnet",
            rope_style="norm" if is_llama else "neox",  # q/k rows permuted to match (llama.cpp)
            linear_norms=norm_eps is not None,
            linear_norm_eps=1e-6 if norm_eps is None else norm_eps,
        )
    except ConfigError as exc:
        raise UnsupportedModelError(f"config.json: {exc}", path) from exc
    return HFModelInfo(
        config=config,
        packed=packed,
        not_converted=skip,
        name=cfg.get("_name_or_path"),
        linear=linear,
        arch=config.arch,
    )


def _read_qk(cfg: dict, directory: Path, quant: dict | None, path: Path) -> HFModelInfo:
    """A Qwen3/Gemma3 checkpoint (``hf_qwen3_gemma3``): BitNet quantization required."""
    if not quant:
        raise UnsupportedModelError(
            f"a {cfg.get('model_type')} checkpoint without transformers' BitNet "
            "quantization_config (quant_method 'bitnet') is not a BitNet (1.58-bit) model",
            path,
        )
    linear = _linear_kind(quant, path)
    try:
        config = read_qk_config(cfg, directory, _linear_norm_eps(quant, path))
    except KeyError as exc:
        raise UnsupportedModelError(f"config.json: {exc.args[0]!r} is missing", path) from exc
    except (TypeError, ValueError, AttributeError, ZeroDivisionError, OverflowError) as exc:
        # a field of the wrong type or value (a string for a number, 0 heads, a list for
        # an object): the reader converts as transformers would, this names the failure
        raise UnsupportedModelError(f"config.json: a malformed field ({exc})", path) from exc
    return HFModelInfo(
        config=config,
        packed=linear == "bitlinear",
        not_converted=tuple(quant.get("modules_to_not_convert") or ()),
        name=cfg.get("_name_or_path"),
        linear=linear,
        arch=config.arch,
    )


def _linear_kind(quant: dict, path: Path) -> str:
    """``HFModelInfo.linear`` of a ``quantization_config`` (transformers' ``BitNetQuantConfig``)."""
    method = quant.get("quant_method")
    if method != "bitnet":
        raise UnsupportedModelError(
            f"config.json: quantization {method!r} is not supported (only 'bitnet')", path
        )
    linear_class = quant.get("linear_class", "bitlinear")
    mode = quant.get("quantization_mode", "offline")
    if linear_class not in ("bitlinear", "autobitlinear") or mode not in ("offline", "online"):
        raise UnsupportedModelError(
            f"config.json: quantization_config linear_class {linear_class!r} / quantization_mode "
            f"{mode!r} is not one of transformers' (bitlinear | autobitlinear, offline | online)",
            path,
        )
    if linear_class == "bitlinear":
        return "bitlinear"  # transformers' BitLinear is always offline (packed)
    return f"autobitlinear-{mode}"


def _linear_norm_eps(quant: dict, path: Path) -> float | None:
    """``quantization_config.rms_norm_eps`` when ``use_rms_norm`` (an RMSNorm with its own
    weight on every BitLinear's input, transformers' ``BitLinear``/``AutoBitLinear``), else None."""
    if not quant.get("use_rms_norm"):
        return None
    eps = quant.get("rms_norm_eps", 1e-6)  # transformers' BitNetQuantConfig default
    if isinstance(eps, bool) or not isinstance(eps, (int, float)) or not 0 <= eps < 1:
        raise UnsupportedModelError(
            f"config.json: quantization_config.rms_norm_eps {eps!r} is not a small number", path
        )
    return float(eps)
