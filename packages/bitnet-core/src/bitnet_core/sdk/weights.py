"""A model's weights on the host (``ModelWeights``) and on a provider's device (``DeviceWeights``).

``ModelWeights`` holds a ``BitNetConfig``, the ternary layer weights as
``TernaryWeight`` (views into the memory-mapped GGUF; nothing is unpacked
until a provider asks) and the dense tensors (embeddings, norms) as numpy
arrays (a BF16 table as a ``BF16Array`` view, widened only for providers
that do not list ``"bfloat16"`` in ``table_dtypes``). It comes from a
``ModelFile`` (``from_model_file``) or is built in memory
(``bitnet_core.model.random``). ``upload`` makes it resident on one provider,
once: ``load_ternary`` for ternary weights, ``to_device`` for the rest.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .. import config as names
from ..config import BitNetConfig
from ..errors import ShapeError, UnsupportedModelError
from ..hal.bf16 import BF16Array
from ..hal.weights import TernaryWeight
from .load_stages import stage

LAYER_TERNARY = {
    "q": names.ATTN_Q,
    "k": names.ATTN_K,
    "v": names.ATTN_V,
    "o": names.ATTN_OUT,
    "gate": names.FFN_GATE,
    "up": names.FFN_UP,
    "down": names.FFN_DOWN,
}
LAYER_NORMS = {
    "attn_norm": names.ATTN_NORM,
    "attn_sub_norm": names.ATTN_SUB_NORM,
    "ffn_norm": names.FFN_NORM,
    "ffn_sub_norm": names.FFN_SUB_NORM,
    "q_norm": names.ATTN_Q_NORM,
    "k_norm": names.ATTN_K_NORM,
    "post_attn_norm": names.POST_ATTN_NORM,
    "post_ffn_norm": names.POST_FFN_NORM,
}


def expected_shapes(cfg: BitNetConfig) -> dict[str, tuple[int, ...]]:
    """GGUF name -> shape ``[rows (out), cols (in)]`` (norms 1-D) the model needs."""
    from ..gguf.metadata import expected_shapes as shapes_of  # the one list of tensors

    return shapes_of(cfg)


@dataclass
class ModelWeights:
    """Every tensor of a BitNet model, on the host, by GGUF name."""

    config: BitNetConfig
    ternary: dict[str, TernaryWeight]
    dense: dict[str, np.ndarray | BF16Array]
    metadata: dict[str, Any] = field(default_factory=dict)
    source: str = "<memory>"

    def __post_init__(self) -> None:
        self.validate()

    def validate(self) -> None:
        """Every tensor the config needs is there with the right shape (else ``UnsupportedModelError``)."""
        for name, shape in expected_shapes(self.config).items():
            if name in self.ternary:
                w = self.ternary[name]
                got: tuple[int, ...] = (w.rows, w.cols)
            elif name in self.dense:
                got = tuple(self.dense[name].shape)
                if len(shape) == 1:
                    got = (int(np.prod(got)),)
            else:
                raise UnsupportedModelError(f"missing tensor {name}", self.source)
            if got != shape:
                raise UnsupportedModelError(
                    f"tensor {name} has shape {got}, the config needs {shape}", self.source
                )

    @property
    def head_name(self) -> str:
        """The output projection: ``output.weight``, or the tied ``token_embd.weight``."""
        if self.config.is_embedding:
            return ""  # no head
        if not self.config.tied_embeddings and names.OUTPUT in self.dense:
            return names.OUTPUT
        return names.TOKEN_EMBD

    @classmethod
    def from_model_file(cls, mf: Any) -> ModelWeights:
        """Collect the tensors of a ``bitnet_core.gguf.ModelFile`` (no copies of ternary data)."""
        cfg: BitNetConfig = mf.config
        ternary: dict[str, TernaryWeight] = {}
        dense: dict[str, np.ndarray | BF16Array] = {}
        for name, shape in expected_shapes(cfg).items():
            if not mf.has(name):
                raise UnsupportedModelError(f"missing tensor {name}", mf.path)
            if len(shape) == 2 and name not in (names.TOKEN_EMBD, names.OUTPUT):
                ternary[name] = mf.ternary(name)
            elif len(shape) == 2:
                dense[name] = mf.table(name)  # (a BF16 table stays bfloat16)
            else:
                dense[name] = np.asarray(mf.dense(name)).reshape(-1)
        return cls(cfg, ternary, dense, dict(mf.metadata), str(mf.path))

    def nbytes(self) -> int:
        t = sum(int(np.asarray(w.raw).nbytes) for w in self.ternary.values())
        return t + sum(int(a.nbytes) for a in self.dense.values())


@dataclass
class LayerWeights:
    """One layer's tensors on the device (provider handles).

    ``attn_sub_norm``/``ffn_sub_norm`` are None in the ``llama``, ``qwen3`` and
    ``gemma3`` graphs (no sub-norms); ``q_norm``/``k_norm`` (QK head norms, ``[head_dim]``)
    only in ``qwen3``/``gemma3``, ``q_norm`` times ``sqrt(head_dim / attn_scalar)`` (the
    attention's own scale is ``1/sqrt(head_dim)``); ``post_attn_norm``/``post_ffn_norm``
    only in ``gemma3``; ``in_norms`` maps a BitLinear (``"q"`` ... ``"down"``) to the RMSNorm weight of its
    input when the model has them (``use_rms_norm``), else it is empty.
    """

    attn_norm: Any
    attn_sub_norm: Any
    ffn_norm: Any
    ffn_sub_norm: Any
    q: Any
    k: Any
    v: Any
    o: Any
    gate: Any
    up: Any
    down: Any
    in_norms: dict[str, Any] = field(default_factory=dict)
    q_norm: Any = None
    k_norm: Any = None
    post_attn_norm: Any = None
    post_ffn_norm: Any = None


@dataclass
class DeviceWeights:
    """A model's tensors resident on one provider's device (``embedding`` already times
    ``config.embedding_scale``; ``head`` None for an embedding model)."""

    embedding: Any
    head: Any
    output_norm: Any
    layers: list[LayerWeights]

    @classmethod
    def upload(
        cls, provider: Any, weights: ModelWeights, progress: bool | None = None
    ) -> DeviceWeights:
        """``load_ternary``/``to_device`` every tensor once, with a progress bar on a terminal."""
        cfg = weights.config
        norms = {k: n for k, n in LAYER_NORMS.items() if n in cfg.layer_norm_tensors()}
        in_norms = {k: cfg.linear_norm_tensor(n) for k, n in LAYER_TERNARY.items()}
        if not cfg.linear_norms:
            in_norms = {}
        steps = 3 + cfg.num_layers * (len(LAYER_TERNARY) + len(norms) + len(in_norms))
        host = getattr(provider, "device_kind", "cpu") == "cpu"
        with (
            stage("repack" if host else "upload"),
            _progress(steps, progress, "loading " + _short(weights.source)) as bar,
        ):

            def dense(name: str, scale: float = 1.0) -> Any:
                arr = host_dense_for(provider, weights.dense[name])
                if scale != 1.0:  # folded in once (the embedding scale, the q scale)
                    arr = scaled(arr, scale)
                out = provider.to_device(arr)
                bar.update(1)
                return out

            def ternary(name: str) -> Any:
                out = provider.load_ternary(weights.ternary[name])
                bar.update(1)
                return out

            embedding = dense(names.TOKEN_EMBD, cfg.embedding_scale)
            if cfg.is_embedding:
                head = None
            elif weights.head_name == names.TOKEN_EMBD and cfg.embedding_scale == 1.0:
                head = embedding
            else:
                head = dense(weights.head_name)
            if head is embedding or head is None:
                bar.update(1)
            output_norm = dense(names.OUTPUT_NORM)
            q_scale = float(np.sqrt(cfg.head_dim / cfg.attn_scalar)) if cfg.attn_scalar else 1.0
            layers = []
            for i in range(cfg.num_layers):
                parts = {k: None for k in LAYER_NORMS}
                parts.update(
                    {
                        k: dense(n.format(i=i), q_scale if k == "q_norm" else 1.0)
                        for k, n in norms.items()
                    }
                )
                parts.update({k: ternary(n.format(i=i)) for k, n in LAYER_TERNARY.items()})
                own = {k: dense(n.format(i=i)) for k, n in in_norms.items()}
                layers.append(LayerWeights(**parts, in_norms=own))
        return cls(embedding, head, output_norm, layers)


def scaled(arr: np.ndarray | BF16Array, scale: float) -> np.ndarray:
    """``arr * scale`` in float32 (a float16 table stays float16)."""
    if isinstance(arr, BF16Array):
        arr = arr.to_float32()
    out = np.asarray(arr, dtype=np.float32) * np.float32(scale)
    return out.astype(np.float16) if arr.dtype == np.float16 else out


def host_dense_for(provider: Any, arr: np.ndarray | BF16Array) -> np.ndarray | BF16Array:
    """What ``to_device`` gets for a dense tensor: norms as float32, tables in a dtype
    the provider lists in ``table_dtypes`` (a bfloat16 table widened to float32 else)."""
    if isinstance(arr, BF16Array):
        tables = getattr(provider, "table_dtypes", ("float32", "float16"))
        return arr if arr.ndim == 2 and "bfloat16" in tables else arr.to_float32()
    if arr.ndim == 1 or arr.dtype not in (np.float16, np.float32):
        return np.ascontiguousarray(arr, dtype=np.float32)
    return arr


def _short(source: str) -> str:
    return source if len(source) <= 40 else "..." + source[-37:]


class _NoBar:
    def update(self, n: int = 1) -> None:
        pass

    def __enter__(self) -> _NoBar:
        return self

    def __exit__(self, *exc: object) -> None:
        pass


def _stderr_is_terminal() -> bool:
    try:
        return sys.stderr is not None and sys.stderr.isatty()
    except (AttributeError, ValueError):  # replaced or closed stream
        return False


def _progress(total: int, enabled: bool | None, desc: str) -> Any:
    """A tqdm bar on stderr (``enabled=None``: only when stderr is a terminal)."""
    if enabled is False or (enabled is None and not _stderr_is_terminal()):
        return _NoBar()  # (tqdm.auto, with asyncio and ssl, is only imported for a bar)
    try:
        from tqdm.auto import tqdm
    except ImportError:  # pragma: no cover - tqdm is a dependency
        return _NoBar()
    return tqdm(
        total=total,
        desc=desc,
        unit="tensor",
        disable=False,  # (enabled, or None with stderr a terminal: checked above)
        leave=False,
    )


def iter_ternary_names(cfg: BitNetConfig) -> Iterator[str]:
    for i in range(cfg.num_layers):
        for n in LAYER_TERNARY.values():
            yield n.format(i=i)


def check_token_ids(ids: np.ndarray, vocab_size: int) -> None:
    if ids.ndim != 1:
        raise ShapeError(f"token ids must be 1-D, got shape {ids.shape}")
    if ids.size and (ids.min() < 0 or ids.max() >= vocab_size):
        bad = ids[(ids < 0) | (ids >= vocab_size)][0]
        raise ShapeError(f"token id {int(bad)} out of range [0, {vocab_size})")
