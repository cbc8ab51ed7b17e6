"""The native CPU providers' own runner: the whole forward pass in one C++ call.

``FusedCpuRunner`` is the generic engine (``bitnet_core.sdk.runner.GenericRunner``:
same weights upload, KV cache, locking, chunked prefill) whose ``_forward``
runs every layer inside ``bitnet_core._native.CpuModel`` with the GIL
released, instead of ~15 Python-level ops a layer. The C++ runs the same ops
(``csrc/compute.cpp``) in the same order as the generic path, so the logits
are equal bit for bit (``tests/test_cpu_runner.py`` checks it); what it saves
is Python between ops, a new array per intermediate, and one activation
quantization and thread hand-off for each of q/k/v and gate/up.
``forward_batch`` (a server step of several sequences) is one
``CpuModel.forward_batch`` call: every token of the step through each ternary
matmul and the head at once, attention per sequence; each sequence's logits
equal its own ``forward``'s bit for bit.

The ``llama`` graph (no sub-norms) runs here too: its layers hand the C++
``None`` for ``attn_sub_norm``/``ffn_sub_norm``, which it skips. So do the
``qwen3`` and ``gemma3`` graphs (bitnet.cpp's embedding models): BitLinear input
norms (``use_rms_norm``: each projection normalizes and quantizes its own input),
QK head norms, head_dim from ``key_length``, Gemma3's GELU (tanh), post-attention and
post-FFN norms, and sliding-window layers with their own rope base (the embedding
scale and query scale are folded into the uploaded weights, as in the generic
engine). An embedding model has no head: ``hidden_states`` (``Model.embed``) runs
``CpuModel.hidden_batch``, the output-normed states of every token. A graph the C++
cannot run (``fused_gap``) goes to the generic engine, recorded as a trace fallback.

``BITNET_CPU_FUSED=0`` turns it off (the generic op-by-op engine runs);
``quantize_activations=False`` always takes the generic path (float matmuls).

Each native call records in ``provider.trace`` the ``Compute`` kernels it ran
(``CpuModel.<kernel>``, ``fused_kernels``) and one submission: a receipt's
``kernels`` name what ran, and ``bitnet bench --profile`` counts native calls.
"""

from __future__ import annotations

import os
from typing import Any, BinaryIO

import numpy as np

from ..errors import ShapeError, UnsupportedOperationError
from ..hal.switches import env_enabled
from ..sdk.kv_cache import Sequence
from ..sdk.runner import NO_HEAD, GenericRunner
from ..sdk.weights import LAYER_TERNARY
from .file_pages import file_extent, release_file_pages


def fused_kernels(
    layers: int,
    decode: bool,
    prefill: bool,
    head: str | None = "dense",
    sub_norms: bool = True,
    *,
    qk_norms: bool = False,
    post_norms: bool = False,
    linear_norms: bool = False,
) -> dict[str, int]:
    """The ``Compute`` kernels one ``CpuModel`` pass runs (``csrc/model.cpp``), by name, with
    their calls; ``decode``/``prefill``: it has one-token / longer sequences (a ternary call
    covers q|k|v or gate|up, unless each BitLinear has its own input norm:
    ``linear_norms``); ``head``: the head's kernel (``HEAD_KERNELS``; None: the hidden
    states, no head); ``sub_norms``: two a layer (the llama, qwen3 and gemma3 graphs have
    none); ``qk_norms``: two a layer; ``post_norms``: gemma3's two a layer."""
    projections = 7 if linear_norms else 4
    per_layer = {
        "rmsnorm": 2 + 2 * sub_norms + 2 * qk_norms + 2 * post_norms + 7 * linear_norms,
        "quantize": projections,
        "ternary": projections,
        "rope": 2,
        "kv_store": 1,
        "gated": 1,
    }
    if decode:
        per_layer["attention_decode"] = 1
    if prefill:
        per_layer["attention"] = 1
    calls = {name: n * layers for name, n in per_layer.items()}
    calls["embedding"] = 1
    calls["rmsnorm"] += 1  # the output norm
    if head is not None:
        calls[head] = 1
    return {f"CpuModel.{name}": n for name, n in calls.items()}


#: the BitLinears in the order ``CpuModel`` takes their input norms
IN_NORM_ORDER = tuple(LAYER_TERNARY)

#: The head's ``Compute`` kernel for each of the provider's ``head_mode``s.
HEAD_KERNELS = {"exact": "dense", "int8": "dense_i8", "checked": "dense_i8_checked"}


#: The ternary matrices each timed op of a pass reads (``CpuModel.op_times``).
TERNARY_OPS = {
    "ternary_qkv": ("q", "k", "v"),
    "ternary_o": ("o",),
    "ternary_gate_up": ("gate", "up"),
    "ternary_down": ("down",),
}


def op_bytes(provider: Any, weights: Any) -> dict[str, int]:
    """Bytes the weight-reading ops of a pass read, on a native CPU provider's uploaded
    ``weights``: each ternary op's matrices with their scales (``TERNARY_OPS``), and
    ``head`` as it runs (its table, or the int8 copy and its scales; a checked head's
    recomputed float rows are not counted)."""
    out = dict.fromkeys(TERNARY_OPS, 0)
    for layer in weights.layers:
        for op, names in TERNARY_OPS.items():
            for name in names:
                m = getattr(layer, name)
                # TQ2_0 in place holds its scales in its blocks; the repacked layouts a float a row
                out[op] += int(m.nbytes) + (0 if m.layout == "tq2_0" else 4 * int(m.rows))
    if weights.head is None:  # an embedding model
        out["head"] = 0
        return out
    head = provider.head_table(weights.head)
    out["head"] = (
        head.nbytes if isinstance(head, np.ndarray) else int(head.nbytes) + 4 * int(head.rows)
    )
    return out


#: what ``CpuModel`` computes of a config's choices (``csrc/model.cpp``)
FUSED_ACTIVATIONS = ("silu", "relu2", "gelu")
FUSED_ROPE_STYLES = ("neox", "norm")


def fused_gap(cfg: Any) -> str | None:
    """Why ``CpuModel`` cannot run the graph of ``cfg`` (a ``BitNetConfig``), or None."""
    if cfg.ffn_activation not in FUSED_ACTIVATIONS:
        return f"the {cfg.ffn_activation} feed-forward activation"
    if cfg.rope_style not in FUSED_ROPE_STYLES:
        return f"the {cfg.rope_style} rope style"
    return None


def fused_enabled() -> bool:
    """``BITNET_CPU_FUSED`` is unset or not one of ``0``, ``false``, ``no``, ``off``."""
    return env_enabled("BITNET_CPU_FUSED")


class FusedCpuRunner(GenericRunner):
    """``GenericRunner`` with the forward pass of ``bitnet_core._native.CpuModel``."""

    def __init__(self, provider: Any, weights: Any, **opts: Any) -> None:
        gap = fused_gap(weights.config)
        if gap is not None:  # make_runner gives these to the generic engine
            raise UnsupportedOperationError(
                f"{provider.name}: the fused forward pass has no {gap} "
                f"({weights.config.arch} graph): run this model on GenericRunner"
            )
        super().__init__(provider, weights, **opts)
        self._gather_only = False
        self._embedding_file: BinaryIO | None = None  # embedding rows read with pread
        self._head_file: BinaryIO | None = None  # an untied checked head's rows, likewise
        self._model = self._build() if self.quantize_activations else None

    @property
    def fused(self) -> bool:
        """Whether the C++ pass runs this model (not with ``quantize_activations=False``)."""
        return self._model is not None

    def _build(self) -> Any:
        p, cfg, w = self._provider, self.config, self.weights
        mode = p.head_mode_for(w.head) if w.head is not None else None
        head = p.head_table(w.head, mode) if w.head is not None else None
        self._head_kernel = HEAD_KERNELS[mode] if mode is not None else None
        # checked: the rows the int8 head cannot rule out are recomputed on the float table
        check = np.asarray(w.head) if mode == "checked" else None
        # the embedding table is only gathered from (the head reads another table, or
        # an int8 copy): its rows are read from the file (pread) instead of the mapping,
        # where a row read maps its whole page-cache folio (up to 2 MB on ext4), or
        # else its file pages are let go after each forward pass; a checked head reads
        # the float rows it recomputes the same way
        self._gather_only = not (
            isinstance(head, np.ndarray) and np.may_share_memory(head, w.embedding)
        )
        layers = [
            (
                lw.attn_norm,
                lw.attn_sub_norm,
                lw.ffn_norm,
                lw.ffn_sub_norm,
                lw.q,
                lw.k,
                lw.v,
                lw.o,
                lw.gate,
                lw.up,
                lw.down,
                lw.q_norm,
                lw.k_norm,
                lw.post_attn_norm,
                lw.post_ffn_norm,
                tuple(lw.in_norms[k] for k in IN_NORM_ORDER) if lw.in_norms else None,
                float(cfg.layer_rope_theta(i)),
                int(cfg.sliding_window) if cfg.layer_is_local(i) else 0,
            )
            for i, lw in enumerate(w.layers)
        ]
        try:
            model = p.native_module().CpuModel(
                p.isa,
                hidden=cfg.hidden_size,
                heads=cfg.num_heads,
                kv_heads=cfg.num_kv_heads,
                head_dim=cfg.head_dim,
                rot_dim=cfg.rot_dim,
                rope_theta=float(cfg.rope_theta),
                rope_style=cfg.rope_style,
                eps=float(cfg.rms_norm_eps),
                ffn_activation=cfg.ffn_activation,
                embedding=w.embedding,
                head=head,
                output_norm=w.output_norm,
                layers=layers,
                head_check=check,
                linear_eps=float(cfg.linear_norm_eps),
            )
        except (ValueError, TypeError) as exc:
            raise ShapeError(f"{p.name}: cannot build the fused model: {exc}") from None
        if self._gather_only:
            self._embedding_file = _open_rows_source(model.read_embedding_from, w.embedding)
            release_file_pages(w.embedding)
        if mode == "checked" and not np.may_share_memory(w.head, w.embedding):
            self._head_file = _open_rows_source(model.read_head_from, w.head)
            release_file_pages(w.head)
        return model

    def _forward(self, ids: np.ndarray, cache: Sequence, all_logits: bool) -> np.ndarray:
        if self._model is None:
            return super()._forward(ids, cache, all_logits)
        if self.weights.head is None:
            raise ShapeError(NO_HEAD)
        t = int(ids.size)
        start = cache.length
        cache.reserve(start + t)
        try:
            logits = self._model.forward(
                ids, cache.k, cache.v, start, all_logits, self._provider.threads
            )
        except ValueError as exc:
            raise ShapeError(f"{self._provider.name}: {exc}") from None
        cache.advance(t)
        self._record(decode=t == 1, prefill=t > 1)
        if self._gather_only and self._embedding_file is None:
            release_file_pages(self.weights.embedding)
        return logits if all_logits else logits[-1]

    # --- where a pass spends its time (``bitnet bench --profile``) ------------------
    def time_ops(self, enabled: bool) -> bool:
        """Time each op of the fused passes from now on (True; the totals restart) or stop
        (False); False where no fused model runs (``op_times`` is then empty)."""
        if self._model is None:
            return False
        self._model.set_op_timing(enabled)
        return True

    def op_times(self) -> dict[str, float]:
        """Seconds by op (``norms_quant``, ``ternary_qkv``, ``rope_kv_store``,
        ``attention``, ``ternary_o``, ``ternary_gate_up``, ``gated``, ``ternary_down``,
        ``head``, ``other``) over the timed passes, and ``passes``."""
        return dict(self._model.op_times()) if self._model is not None else {}

    def head_checks(self) -> tuple[int, int]:
        """The checked int8 head's tokens and the rows it recomputed exactly for them,
        since the model was built ((0, 0) for another head)."""
        return tuple(self._model.head_checks) if self._model is not None else (0, 0)

    def op_bytes(self) -> dict[str, int]:
        """Bytes the weight-reading ops read a pass (``op_bytes``)."""
        return op_bytes(self._provider, self.weights)

    def _record(self, decode: bool, prefill: bool, hidden: bool = False) -> None:
        """One native call's kernels and submission in the provider's trace."""
        trace = self._provider.trace
        cfg = self.config
        kernels = fused_kernels(
            cfg.num_layers,
            decode,
            prefill,
            None if hidden else self._head_kernel,
            cfg.sub_norms,
            qk_norms=cfg.qk_norms,
            post_norms=cfg.post_norms,
            linear_norms=cfg.linear_norms,
        )
        for name, calls in kernels.items():
            trace.kernel(name, calls)
        trace.submit()
        trace.launched(sum(kernels.values()))

    def _forward_batch(
        self, batch: list[tuple[np.ndarray, Sequence]], hidden: bool = False
    ) -> np.ndarray:
        if self._model is None:
            return super()._forward_batch(batch, hidden)
        if self.weights.head is None and not hidden:
            raise ShapeError(NO_HEAD)
        run = self._model.hidden_batch if hidden else self._model.forward_batch
        try:
            logits = run(
                np.concatenate([ids for ids, _ in batch]),
                [int(ids.size) for ids, _ in batch],
                [cache.length for _, cache in batch],
                [cache.k for _, cache in batch],
                [cache.v for _, cache in batch],
                self._provider.threads,
            )
        except ValueError as exc:
            raise ShapeError(f"{self._provider.name}: {exc}") from None
        for ids, cache in batch:
            cache.advance(int(ids.size))
        sizes = [int(ids.size) for ids, _ in batch]
        self._record(decode=min(sizes) == 1, prefill=max(sizes) > 1, hidden=hidden)
        if self._gather_only and self._embedding_file is None:
            release_file_pages(self.weights.embedding)
        return logits


def _open_rows_source(read_from: Any, table: np.ndarray) -> BinaryIO | None:
    """Have the model read ``table``'s rows from its file with pread (``read_from(fd,
    offset)``, a ``CpuModel`` method; the file, kept open, is returned), if ``table`` is a
    view of a file whose bytes there are still the mapping's (checked on the first row);
    else None."""
    extent = file_extent(table)
    if extent is None or not table.size or not hasattr(os, "pread"):
        return None
    path, offset = extent
    try:
        f = open(path, "rb")  # noqa: SIM115 - kept open for the model's lifetime
    except OSError:
        return None
    row = table[0].tobytes()
    if os.pread(f.fileno(), len(row), offset) != row or not read_from(f.fileno(), offset):
        f.close()  # the file changed under the mapping, or no pread here
        return None
    return f
