"""The BitNet b1.58 model configuration and the GGUF names it maps to.

One place for the hyper-parameters (read from GGUF metadata by the loader,
written by the converter) and for the tensor names of llama.cpp's ``bitnet``
architecture (``src/llama-arch.cpp``), which our files use too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from .errors import ConfigError

FfnActivation = Literal["silu", "relu2"]

#: Our own metadata key for the FFN activation: GGUF has none. llama.cpp's
#: ``bitnet`` graph computes SiLU; bitnet-b1.58-2B-4T (transformers' default) relu².
KEY_FFN_ACTIVATION = "{arch}.ffn_activation"

#: Default FFN activation per GGUF architecture name when the key is absent.
DEFAULT_ACTIVATION_BY_ARCH: dict[str, FfnActivation] = {
    "bitnet": "silu",  # llama.cpp's bitnet graph (1bitLLM bitnet_b1_58 family)
    "bitnet-b1.58": "relu2",  # bitnet.cpp's name for the 2B-4T family
    "bitnet-25": "relu2",
    "llama": "silu",  # llama-architecture 1.58-bit checkpoints (HF1BitLLM, Falcon-Edge)
}

#: The GGUF architecture of llama-architecture 1.58-bit checkpoints, as llama.cpp's
#: converter writes them: plain llama blocks, no ``attn_sub_norm``/``ffn_sub_norm``,
#: q/k rows permuted for llama.cpp's "normal" (adjacent pairs) rope.
ARCH_LLAMA = "llama"

#: The rope pairing of each GGUF architecture: llama.cpp's ``llama`` graph rotates adjacent
#: pairs (its converter permutes q/k rows to match); its ``bitnet`` graph, NEOX halves.
ROPE_STYLE_BY_ARCH: dict[str, Literal["neox", "norm"]] = {ARCH_LLAMA: "norm"}

#: Our own key (present only when the model has them): the epsilon of the RMSNorm each
#: BitLinear applies to its input (``use_rms_norm``; tensors ``blk.N.<weight>_in_norm.weight``).
KEY_LINEAR_NORM_EPS = "{arch}.linear_norm_rms_epsilon"

# Tensor names (llama.cpp `bitnet`); per layer names take the layer index.
TOKEN_EMBD = "token_embd.weight"
OUTPUT_NORM = "output_norm.weight"
OUTPUT = "output.weight"  # absent when embeddings are tied
ATTN_NORM = "blk.{i}.attn_norm.weight"
ATTN_Q = "blk.{i}.attn_q.weight"
ATTN_K = "blk.{i}.attn_k.weight"
ATTN_V = "blk.{i}.attn_v.weight"
ATTN_OUT = "blk.{i}.attn_output.weight"
ATTN_SUB_NORM = "blk.{i}.attn_sub_norm.weight"
FFN_NORM = "blk.{i}.ffn_norm.weight"
FFN_GATE = "blk.{i}.ffn_gate.weight"
FFN_UP = "blk.{i}.ffn_up.weight"
FFN_DOWN = "blk.{i}.ffn_down.weight"
FFN_SUB_NORM = "blk.{i}.ffn_sub_norm.weight"
#: The input RMSNorm weight of BitLinear ``blk.{i}.<name>.weight`` (``use_rms_norm``): ours.
LINEAR_NORM_SUFFIX = "_in_norm"

#: The ternary (BitLinear) weights of one layer, in forward order.
TERNARY_LAYER_TENSORS = (ATTN_Q, ATTN_K, ATTN_V, ATTN_OUT, FFN_GATE, FFN_UP, FFN_DOWN)
#: The float (norm) weights of one layer (the sub-norms only where ``BitNetConfig.sub_norms``).
NORM_LAYER_TENSORS = (ATTN_NORM, ATTN_SUB_NORM, FFN_NORM, FFN_SUB_NORM)
SUB_NORM_TENSORS = (ATTN_SUB_NORM, FFN_SUB_NORM)


def linear_norm_name(weight_template: str) -> str:
    """The input-norm tensor of a BitLinear weight: ``blk.{i}.attn_q_in_norm.weight``."""
    return weight_template[: -len(".weight")] + LINEAR_NORM_SUFFIX + ".weight"


@dataclass(frozen=True)
class BitNetConfig:
    """Hyper-parameters of a BitNet b1.58 decoder."""

    vocab_size: int
    hidden_size: int
    num_layers: int
    num_heads: int
    num_kv_heads: int
    intermediate_size: int
    context_length: int = 2048
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5
    #: "neox": pairs (i, i + d/2), as Hugging Face and llama.cpp's bitnet use.
    rope_style: Literal["neox", "norm"] = "neox"
    rope_dim: int = 0  # 0: the whole head dimension
    ffn_activation: FfnActivation = "silu"
    tied_embeddings: bool = True
    arch: str = "bitnet"
    #: each BitLinear RMS-normalizes its input with its own weight first (``use_rms_norm``)
    linear_norms: bool = False
    linear_norm_eps: float = 1e-6

    def __post_init__(self) -> None:
        checks = {
            "vocab_size": self.vocab_size,
            "hidden_size": self.hidden_size,
            "num_layers": self.num_layers,
            "num_heads": self.num_heads,
            "num_kv_heads": self.num_kv_heads,
            "intermediate_size": self.intermediate_size,
            "context_length": self.context_length,
        }
        for name, value in checks.items():
            if not isinstance(value, int) or value <= 0:
                raise ConfigError(f"model config: {name} must be a positive integer, got {value!r}")
        if self.hidden_size % self.num_heads:
            raise ConfigError(
                f"model config: hidden_size {self.hidden_size} is not a multiple of "
                f"num_heads {self.num_heads}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model config: num_heads {self.num_heads} is not a multiple of "
                f"num_kv_heads {self.num_kv_heads}"
            )
        if self.ffn_activation not in ("silu", "relu2"):
            raise ConfigError(f"model config: unknown ffn_activation {self.ffn_activation!r}")
        if self.linear_norms and not (0.0 <= self.linear_norm_eps < 1.0):
            raise ConfigError(f"model config: bad linear_norm_eps {self.linear_norm_eps!r}")
        if self.rope_style not in ("neox", "norm"):
            raise ConfigError(f"model config: unknown rope_style {self.rope_style!r}")
        if self.rope_dim < 0 or self.rope_dim > self.head_dim or self.rope_dim % 2:
            raise ConfigError(
                f"model config: bad rope_dim {self.rope_dim} for head_dim {self.head_dim}"
            )

    @property
    def sub_norms(self) -> bool:
        """Whether each layer has ``attn_sub_norm``/``ffn_sub_norm`` (not the ``llama`` graph)."""
        return self.arch != ARCH_LLAMA

    def layer_norm_tensors(self) -> tuple[str, ...]:
        """The norm tensor templates of one layer this model has (``blk.{i}....``)."""
        norms = tuple(n for n in NORM_LAYER_TENSORS if self.sub_norms or n not in SUB_NORM_TENSORS)
        if self.linear_norms:
            norms += tuple(linear_norm_name(t) for t in TERNARY_LAYER_TENSORS)
        return norms

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_dim(self) -> int:
        return self.head_dim * self.num_kv_heads

    @property
    def rot_dim(self) -> int:
        return self.rope_dim or self.head_dim

    def as_dict(self) -> dict:
        return asdict(self)
