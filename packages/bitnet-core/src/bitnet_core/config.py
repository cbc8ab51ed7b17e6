"""The BitNet b1.58 model configuration and the GGUF names it maps to.

One place for the hyper-parameters (read from GGUF metadata by the loader,
written by the converter) and for the tensor names of llama.cpp's ``bitnet``
architecture (``src/llama-arch.cpp``), which our files use too.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass
from typing import Literal

from .errors import ConfigError

FfnActivation = Literal["silu", "relu2", "gelu"]
#: How an embedding model pools its last hidden states (``"none"``: a language model).
Pooling = Literal["none", "mean", "cls", "last"]
#: llama.cpp's ``{arch}.pooling_type`` values (``enum llama_pooling_type``).
POOLING_BY_GGUF: dict[int, Pooling] = {0: "none", 1: "mean", 2: "cls", 3: "last"}

#: Our own metadata key for the FFN activation: GGUF has none. llama.cpp's
#: ``bitnet`` graph computes SiLU; bitnet-b1.58-2B-4T (transformers' default) relu².
KEY_FFN_ACTIVATION = "{arch}.ffn_activation"

#: Default FFN activation per GGUF architecture name when the key is absent.
DEFAULT_ACTIVATION_BY_ARCH: dict[str, FfnActivation] = {
    "bitnet": "silu",  # llama.cpp's bitnet graph (1bitLLM bitnet_b1_58 family)
    "bitnet-b1.58": "relu2",  # bitnet.cpp's name for the 2B-4T family
    "bitnet-25": "relu2",
    "llama": "silu",  # llama-architecture 1.58-bit checkpoints (HF1BitLLM, Falcon-Edge)
    "qwen3": "silu",  # bitnet-embedding-0.6B (Qwen3 backbone)
    "gemma3": "gelu",  # bitnet-embedding-270M (Gemma3 backbone): GELU, tanh approximation
}

#: The Qwen3 and Gemma3 graphs (llama.cpp's ``qwen3``/``gemma3``, as bitnet.cpp's embedding
#: models use them): QK head norms, no sub-norms, head_dim from ``attention.key_length``.
ARCH_QWEN3 = "qwen3"
ARCH_GEMMA3 = "gemma3"
QK_NORM_ARCHS = (ARCH_QWEN3, ARCH_GEMMA3)

#: The GGUF architecture of llama-architecture 1.58-bit checkpoints, as llama.cpp's
#: converter writes them: plain llama blocks, no ``attn_sub_norm``/``ffn_sub_norm``,
#: q/k rows permuted for llama.cpp's "normal" (adjacent pairs) rope.
ARCH_LLAMA = "llama"

#: The rope pairing of each GGUF architecture: llama.cpp's ``llama`` graph rotates adjacent
#: pairs (its converter permutes q/k rows to match); its ``bitnet`` graph, NEOX halves.
ROPE_STYLE_BY_ARCH: dict[str, Literal["neox", "norm"]] = {ARCH_LLAMA: "norm"}
#: Architectures without ``attn_sub_norm``/``ffn_sub_norm``.
NO_SUB_NORM_ARCHS = (ARCH_LLAMA, *QK_NORM_ARCHS)

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
ATTN_Q_NORM = "blk.{i}.attn_q_norm.weight"  # QK head norms (qwen3, gemma3): [head_dim]
ATTN_K_NORM = "blk.{i}.attn_k_norm.weight"
POST_ATTN_NORM = "blk.{i}.post_attention_norm.weight"  # gemma3's post-attention norm
POST_FFN_NORM = "blk.{i}.post_ffw_norm.weight"  # gemma3's post-feed-forward norm
#: The input RMSNorm weight of BitLinear ``blk.{i}.<name>.weight`` (``use_rms_norm``): ours.
LINEAR_NORM_SUFFIX = "_in_norm"
#: The same in bitnet.cpp's embedding files (qwen3, gemma3): ``blk.N.attn_q_norm_in.weight``.
LINEAR_NORM_SUFFIX_BITNET_CPP = "_norm_in"

#: The ternary (BitLinear) weights of one layer, in forward order.
TERNARY_LAYER_TENSORS = (ATTN_Q, ATTN_K, ATTN_V, ATTN_OUT, FFN_GATE, FFN_UP, FFN_DOWN)
#: The float (norm) weights of one layer (the sub-norms only where ``BitNetConfig.sub_norms``).
NORM_LAYER_TENSORS = (ATTN_NORM, ATTN_SUB_NORM, FFN_NORM, FFN_SUB_NORM)
SUB_NORM_TENSORS = (ATTN_SUB_NORM, FFN_SUB_NORM)


def linear_norm_name(weight_template: str, arch: str = "bitnet") -> str:
    """The input-norm tensor of a BitLinear weight: ``blk.{i}.attn_q_in_norm.weight``
    (``blk.{i}.attn_q_norm_in.weight`` in the qwen3/gemma3 graphs, bitnet.cpp's name)."""
    suffix = LINEAR_NORM_SUFFIX_BITNET_CPP if arch in QK_NORM_ARCHS else LINEAR_NORM_SUFFIX
    return weight_template[: -len(".weight")] + suffix + ".weight"


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
    #: per-head size of q/k/v (GGUF ``attention.key_length``); 0: hidden_size / num_heads
    key_length: int = 0
    #: attention scores are scaled by ``attn_scalar ** -0.5`` (Gemma's
    #: ``query_pre_attn_scalar``); 0: by ``head_dim ** -0.5``
    attn_scalar: float = 0.0
    #: the token embeddings are multiplied by this (Gemma: sqrt(hidden_size))
    embedding_scale: float = 1.0
    #: local layers attend to the last ``sliding_window`` positions only (0: none)
    sliding_window: int = 0
    #: every ``sliding_window_pattern``-th layer is global, the others local (Gemma3: 6)
    sliding_window_pattern: int = 0
    #: the rope base of the local layers (0: ``rope_theta``)
    rope_theta_local: float = 0.0
    #: an embedding model's pooling (``"none"``: a language model, with a head)
    pooling: Pooling = "none"

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
        if self.key_length < 0 or (self.key_length and self.key_length % 2):
            raise ConfigError(f"model config: bad key_length {self.key_length!r}")
        if self.sliding_window < 0 or self.sliding_window_pattern < 0:
            raise ConfigError("model config: sliding_window and its pattern must be >= 0")
        if self.pooling not in ("none", "mean", "cls", "last"):
            raise ConfigError(f"model config: unknown pooling {self.pooling!r}")
        if not self.key_length and self.hidden_size % self.num_heads:
            raise ConfigError(
                f"model config: hidden_size {self.hidden_size} is not a multiple of "
                f"num_heads {self.num_heads}"
            )
        if self.num_heads % self.num_kv_heads:
            raise ConfigError(
                f"model config: num_heads {self.num_heads} is not a multiple of "
                f"num_kv_heads {self.num_kv_heads}"
            )
        if self.ffn_activation not in ("silu", "relu2", "gelu"):
            raise ConfigError(f"model config: unknown ffn_activation {self.ffn_activation!r}")
        if self.ffn_activation == "gelu" and self.arch not in QK_NORM_ARCHS:
            raise ConfigError(f"model config: ffn_activation 'gelu' in the {self.arch} graph")
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
        return self.arch not in NO_SUB_NORM_ARCHS

    @property
    def qk_norms(self) -> bool:
        """Whether q and k are RMS-normalized per head (``attn_q_norm``/``attn_k_norm``)."""
        return self.arch in QK_NORM_ARCHS

    @property
    def post_norms(self) -> bool:
        """Whether attention and FFN outputs are normalized before the residual (Gemma3)."""
        return self.arch == ARCH_GEMMA3

    @property
    def is_embedding(self) -> bool:
        """An embedding model: pooled hidden states out, no output head."""
        return self.pooling != "none"

    def linear_norm_tensor(self, weight_template: str) -> str:
        """The input-norm tensor of BitLinear ``weight_template`` in this model's files."""
        return linear_norm_name(weight_template, self.arch)

    def layer_norm_tensors(self) -> tuple[str, ...]:
        """The norm tensor templates of one layer this model has (``blk.{i}....``)."""
        norms = tuple(n for n in NORM_LAYER_TENSORS if self.sub_norms or n not in SUB_NORM_TENSORS)
        if self.qk_norms:
            norms += (ATTN_Q_NORM, ATTN_K_NORM)
        if self.post_norms:
            norms += (POST_ATTN_NORM, POST_FFN_NORM)
        if self.linear_norms:
            norms += tuple(self.linear_norm_tensor(t) for t in TERNARY_LAYER_TENSORS)
        return norms

    def layer_is_local(self, layer: int) -> bool:
        """Whether ``layer`` attends through the sliding window (Gemma3's local layers)."""
        if not self.sliding_window or not self.sliding_window_pattern:
            return False
        return (layer + 1) % self.sliding_window_pattern != 0

    def layer_rope_theta(self, layer: int) -> float:
        """The rope base of ``layer``: ``rope_theta_local`` on local layers."""
        if self.layer_is_local(layer) and self.rope_theta_local:
            return self.rope_theta_local
        return self.rope_theta

    @property
    def head_dim(self) -> int:
        return self.key_length or self.hidden_size // self.num_heads

    @property
    def q_dim(self) -> int:
        """The width of q and of the attention output: heads x head_dim."""
        return self.head_dim * self.num_heads

    @property
    def kv_dim(self) -> int:
        return self.head_dim * self.num_kv_heads

    @property
    def rot_dim(self) -> int:
        return self.rope_dim or self.head_dim

    def as_dict(self) -> dict:
        return asdict(self)
