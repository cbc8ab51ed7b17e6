"""The OpenCL backend: a decode step in four fused kernels a layer, recorded once and replayed.

The generic engine (``bitnet_core.sdk.runner.GenericRunner``) drives a decode step
op by op from Python: ~25 provider calls a layer, each allocating and setting
kernel arguments. ``OpenCLRunner`` keeps the generic engine's weights upload,
KV cache, locking, prefill and batched steps, and replaces the forward pass of
one token with the kernels of ``kernels/layer.cl`` (q|k|v and gate|up weights
stacked at load), each work-group normalising its input vector itself::

    qkv_attend       norm + int8 of x, one query head's q and its kv head's k, v rows,
                     rope, K/V store, the attention's splits and their merge -> att
    norm_gemv_add    attn_sub_norm + int8 of att, o rows, x += o
    norm_gemv_act    ffn_norm + int8 of x, gate|up rows, f = act(gate) * up
    norm_gemv_add    ffn_sub_norm + int8 of f, down rows, x += down

bit for bit the ten launches of ``kernels/fused.cl`` that batched steps run
(``BITNET_OPENCL_LAYER=0`` gives one token those too)::

    rmsnorm_quant(x)             -> q|k|v in one ternary GEMV
    rope_store                   -> q rotated; k rotated and v written into the cache
    attn_split + attn_merge_norm_quant   (flash-decoding, attn_sub_norm, int8)
    gemv_i2s_add                 -> x += o(...)            (the residual in the epilogue)
    rmsnorm_quant(x)             -> gate|up in one ternary GEMV
    act_norm_quant               -> act(gate) * up, ffn_sub_norm, int8
    gemv_i2s_add                 -> x += down(...)

The token id and the position are read from a device buffer (``meta``), so
the step's launches are the same at every position: they are built once per
KV cache layout (a sequence's arrays change when its cache grows) with every
kernel argument set, and replayed (``replay.StepRecording``): one
``clEnqueueCommandBufferKHR`` where the device offers ``cl_khr_command_buffer``,
else one ctypes loop of ``clEnqueueNDRangeKernel`` (a ``trace.fallback``). A
step is then three submissions: the token write, the replay, the logits read.

``BITNET_OPENCL_FUSED=0`` keeps the generic engine; ``BITNET_OPENCL_COMMAND_BUFFER=0``
forces the ctypes loop. ``quantize_activations=False`` takes the generic path.

``forward_batch`` (the server's step) decodes the sequences that bring one
token each in one recorded step: norms, GEMVs (``gemv_i2s`` over the n rows,
as the provider's matmul for a few tokens) and the head on all n rows, then
``rope_store``, ``attn_split`` and ``attn_merge_norm_quant`` per sequence
(told its row ``tok``, its position at ``meta[n + j]``, its own split count),
so each row equals the sequence decoded alone bit for bit. The caches are
kernel arguments, so such a step is recorded once per tuple of the sequences'
cache layouts and replayed while the composition holds; a sequence with a
prompt chunk runs its own (generic) prefill in the same call.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.errors import ProviderError
from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.fused import decode_together, fused_layers
from bitnet_core.sdk.kv_cache import Sequence
from bitnet_core.sdk.runner import GenericRunner

from .buffers import CLArray
from .memory import cl_op
from .replay import (
    COMMAND_BUFFER_EXT,
    ENV_COMMAND_BUFFER,
    CommandBufferApi,
    Launch,
    StepRecording,
    command_buffers_wanted,
)
from .runtime.context import pow2_floor
from .weights import OpenCLWeight

WG = 64  # work-group size of the reducing kernels (the provider's)
KEYS_PER_SPLIT = 128  # cache capacity per split of the decode attention
MAX_SPLITS = 64
DENSE_TOKENS = 4  # DENSE_TB in dense.cl: tokens a work-group of the head
MAX_RECORDINGS = 8  # recorded steps kept (least recently used dropped)

ENV_LAYER = "BITNET_OPENCL_LAYER"  # 0: one token's layer in fused.cl's ten launches

_i32, _f32 = np.int32, np.float32


@dataclass(frozen=True)
class LayerPlan:
    """The sizes of one token's four-launch layer (``kernels/layer.cl``): the cache's
    kernel suffix, the group sizes its sums are made as (``vls``: the input ``x``,
    ``att``, ``f``, the attention's ``keys``), each kernel's ``(lanes, group size)``,
    and the attention's splits of ``span`` keys."""

    f16: str
    vls: dict[str, int]
    groups: dict[str, tuple[int, int]]
    splits: int
    span: int


def split_count(capacity: int) -> int:
    """Key splits of the decode attention over a cache of ``capacity`` tokens."""
    return max(1, min(MAX_SPLITS, capacity // KEYS_PER_SPLIT))


def fuse_weights(rt: Any, parts: list[OpenCLWeight]) -> OpenCLWeight:
    """One weight of ``parts`` stacked by rows (q|k|v, gate|up): a device-side copy.

    Each part whose rows start at an offset the device can address as a
    sub-buffer (``CL_DEVICE_MEM_BASE_ADDR_ALIGN``) becomes a view of the stacked
    weight and its own buffers are dropped, so the generic path (prefill)
    reads the same memory; other parts keep their copy."""
    cl, q = rt.cl, rt.queue
    rows = sum(p.rows for p in parts)
    row_bytes = parts[0].blocks_per_row * 16
    packed = cl.Buffer(rt.context, cl.mem_flags.READ_ONLY, max(16, rows * row_bytes))
    scales = cl.Buffer(rt.context, cl.mem_flags.READ_ONLY, max(4, rows * 4))
    align = max(1, int(rt.device.mem_base_addr_align) // 8)
    r, views = 0, []
    for p in parts:
        if p.rows:
            cl.enqueue_copy(
                q, packed, p.packed, byte_count=p.rows * row_bytes, dst_offset=r * row_bytes
            )
            cl.enqueue_copy(q, scales, p.scales, byte_count=p.rows * 4, dst_offset=r * 4)
            if (r * row_bytes) % align == 0 and (r * 4) % align == 0:
                views.append((p, r))
        r += p.rows
    q.finish()  # the copies are done before a part's own buffers go
    for p, r in views:
        p.packed = packed.get_sub_region(r * row_bytes, p.rows * row_bytes)
        p.scales = scales.get_sub_region(r * 4, p.rows * 4)
    return OpenCLWeight("|".join(p.name for p in parts), rows, parts[0].cols, packed, scales)


class StepBuffers:
    """Every array a decode step of ``n`` sequences writes (fixed, so the recorded
    arguments stay valid); sequence ``j``'s attention partials from ``j * hq * MAX_SPLITS``."""

    def __init__(self, alloc: Any, cfg: Any, n: int = 1) -> None:
        hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        hidden, f = cfg.hidden_size, cfg.intermediate_size
        self.n = n
        self.meta = alloc((2 * n,), np.int32)  # token ids, then positions
        self.x = alloc((n, hidden))
        self.xq, self.xs = alloc((n, hidden), np.int8), alloc((n,))
        self.qkv = alloc((n, (hq + 2 * hkv) * d))
        self.q = alloc((n, hq * d))
        self.att = alloc((n, hq * d))
        self.aq, self.as_ = alloc((n, hq * d), np.int8), alloc((n,))
        self.gu = alloc((n, 2 * f))
        self.f = alloc((n, f))
        self.fq, self.fs = alloc((n, f), np.int8), alloc((n,))
        self.po = alloc((n * hq * MAX_SPLITS * d,))
        self.pml = alloc((n * hq * MAX_SPLITS * 2,))
        self.head_x = alloc((n, hidden))
        self.logits = alloc((n, cfg.vocab_size))


class OpenCLRunner(GenericRunner):
    """``GenericRunner`` with a fused, recorded and replayed decode step."""

    def __init__(self, provider: Any, weights: Any, **opts: Any) -> None:
        super().__init__(provider, weights, **opts)
        self.fused = self.quantize_activations
        self._recordings: OrderedDict[tuple, StepRecording] = OrderedDict()
        self._spare_kernels: dict[str, list[Any]] = {}  # of released recordings
        self._layouts: dict[int, tuple] = {}  # a sequence's latest cache layout
        if not self.fused:
            return
        rt = self.rt = provider.runtime
        self._api = self._command_buffer_api()
        self.layers = fused_layers(self.weights, lambda ws: fuse_weights(rt, ws))
        self._bufs: dict[int, StepBuffers] = {}  # by batch size

    def _command_buffer_api(self) -> CommandBufferApi | None:
        """The command-buffer entry points, or None (recorded as a trace fallback)."""
        info = self.rt.info
        if not command_buffers_wanted(info.extensions):
            why = (
                f"{ENV_COMMAND_BUFFER}=0"
                if COMMAND_BUFFER_EXT in info.extensions
                else f"{info.name} has no {COMMAND_BUFFER_EXT}"
            )
            self._provider.trace.fallback(
                f"opencl: decode steps replayed from a loop of clEnqueueNDRangeKernel, "
                f"not a command buffer ({why})"
            )
            return None
        try:
            return CommandBufferApi(self.rt.device.platform)
        except ProviderError as exc:
            self._provider.trace.fallback(f"opencl: no command buffers ({exc})")
            return None

    # --- the forward pass ----------------------------------------------------------------
    def _forward_batch(self, batch: list[tuple[np.ndarray, Sequence]]) -> np.ndarray:
        """The sequences with one new token in one fused step; a longer chunk (a prompt)
        runs its own (generic) prefill in the same call."""
        if not self.fused:
            return super()._forward_batch(batch)
        return decode_together(batch, self._decode, self._generic_prefill, min_decode=1)

    def _generic_prefill(self, ids: np.ndarray, cache: Sequence) -> np.ndarray:
        """The generic engine's forward of ``ids``, ``max_batch`` tokens at a time."""
        for i in range(0, ids.size, self.max_batch):
            last = super()._forward(ids[i : i + self.max_batch], cache, False)
        return last

    def _forward(self, ids: np.ndarray, cache: Sequence, all_logits: bool) -> np.ndarray:
        if not self.fused or ids.size != 1:
            return super()._forward(ids, cache, all_logits)
        cache.reserve(cache.length + 1)
        logits = self._decode([(ids, cache)])
        cache.advance(1)
        return logits if all_logits else logits[0]

    @cl_op
    def _decode(self, items: list[tuple[np.ndarray, Sequence]]) -> np.ndarray:
        """Logits ``[n, vocab]`` of one token of each of ``items`` (caches reserved; the
        caller advances them)."""
        n = len(items)
        b = self._bufs.get(n)
        if b is None:
            b = self._bufs[n] = StepBuffers(self._provider._alloc, self.config, n)
        rec = self._recording([cache for _, cache in items], b)
        rt, trace = self.rt, self._provider.trace
        meta = np.array(
            [int(ids[0]) for ids, _ in items] + [cache.length for _, cache in items], np.int32
        )
        rt.cl.enqueue_copy(rt.queue, b.meta.buffer, meta, is_blocking=False)
        rec.run()
        self._provider.trace.launched(len(rec.launches))
        logits = np.empty((n, self.config.vocab_size), dtype=np.float32)
        rt.cl.enqueue_copy(rt.queue, logits, b.logits.buffer, is_blocking=True)
        trace.submit(2 + rec.submissions)
        return logits

    def _recording(self, caches: list[Sequence], b: StepBuffers) -> StepRecording:
        """The replayable step for these caches' arrays, in this order (built on first use).

        A sequence's per-layer lists of K and V arrays are replaced when its cache
        grows, so the lists (kept alive by the recording) identify the layout."""
        key = tuple([(id(c.k), id(c.v)) for c in caches])
        rec = self._recordings.get(key)
        if rec is not None:
            self._recordings.move_to_end(key)
            return rec
        # a sequence's cache grew: the steps over its layout before will not be replayed
        for c, layout in zip(caches, key, strict=True):
            old = self._layouts.get(c.id)
            if old is not None and old != layout:
                for stale in [k for k in self._recordings if old in k]:
                    self._release(stale)
            self._layouts[c.id] = layout
        live = {layout for k in self._recordings for layout in k} | set(key)
        self._layouts = {seq: lay for seq, lay in self._layouts.items() if lay in live}
        capacity = max(int(c.k[0].shape[0]) for c in caches)
        cs, _ = self._provider._rope_table(
            np.arange(capacity), self.config.rope_theta, max(self.config.rot_dim, 2)
        )
        specs, keep = self._build_step(caches, cs, b)
        try:
            rec = StepRecording(self.rt.queue, self._launches(specs), self._api, keep)
        except ProviderError as exc:  # the platform refused to record: replay from the loop
            self._provider.trace.fallback(f"opencl: recording a command buffer failed ({exc})")
            self._api = None
            rec = StepRecording(self.rt.queue, self._launches(specs), None, keep)
        for ln in rec.launches:
            self._provider.trace.kernel(ln.name)
        self._recordings[key] = rec
        if len(self._recordings) > MAX_RECORDINGS:
            self._release(next(iter(self._recordings)))
        return rec

    def _launches(self, specs: list[tuple]) -> list[Launch]:
        """``Launch``es of ``(name, args, gsize, lsize)``, each with a kernel object of its
        own, taken from recordings released before (creating one costs about a
        millisecond on PoCL)."""
        rt, spare = self.rt, self._spare_kernels
        out = []
        for name, *rest in specs:
            free = spare.get(name)
            kernel = free.pop() if free else rt.cl.Kernel(rt.program, name)
            out.append(Launch.make(kernel, name, *rest))
        return out

    def _release(self, key: tuple) -> None:
        """Drop a recording; its kernel objects serve the next one."""
        rec = self._recordings.pop(key, None)
        if rec is None:
            return
        rec.close()
        for ln in rec.launches:
            self._spare_kernels.setdefault(ln.name, []).append(ln.kernel)

    # --- one token's layer in four launches (kernels/layer.cl) ------------------------------
    def _layer_plan(self, cache: Sequence, splits: int, span: int) -> LayerPlan | None:
        """The sizes of ``layer.cl``'s launches for one token over ``cache``, or None where
        ``BITNET_OPENCL_LAYER=0`` or a kernel's group limit is below what its sums need
        (then the ten launches of ``fused.cl``)."""
        if not env_enabled(ENV_LAYER):
            return None
        cfg, rt = self.config, self.rt
        hq, d, f, hidden = cfg.num_heads, cfg.head_dim, cfg.intermediate_size, cfg.hidden_size
        group = lambda name, k: rt.reduce_group(name, WG, k)  # noqa: E731 (the fused.cl sizes)
        f16 = "_f16" if cache.k[0].dtype == np.float16 else ""
        vls = {
            "x": group("rmsnorm_quant", hidden),
            "att": group("attn_merge_norm_quant", hq * d),
            "f": group("act_norm_quant", f),
            "keys": group("attn_split", span),
        }
        plans = {}
        for name, units, need in (
            ("qkv_attend" + f16, max(1, hidden // 64), max(vls["x"], vls["keys"])),
            ("norm_gemv_add", max(1, max(hq * d, f) // 64), max(vls["att"], vls["f"])),
            ("norm_gemv_act", max(1, hidden // 64), vls["x"]),
        ):
            lanes, wg = rt.row_plan(name, units)
            if lanes & (lanes - 1):  # the row exchange in a power-of-two group
                lanes = 1
            wg = max(pow2_floor(wg), lanes, need)
            if wg > min(rt.kernel_max_work_group(name), rt.max_work_group):
                return None
            plans[name.removesuffix(f16)] = (lanes, wg)
        return LayerPlan(f16, vls, plans, splits, span)

    def _layer_launches(
        self, plan: LayerPlan, lw: Any, kv: tuple[Any, Any], cs: CLArray, b: StepBuffers
    ) -> list[tuple]:
        """``(name, args, gsize, lsize)`` of one layer of one token: ``qkv_attend``,
        ``norm_gemv_add`` (o), ``norm_gemv_act`` (gate|up), ``norm_gemv_add`` (down)."""
        cfg, p = self.config, self._provider
        hq, hkv, d, f = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
        eps, acc = _f32(cfg.rms_norm_eps), 8 if self.rt.features.fp64 else 4
        kc, vc = kv

        def buf(a: Any) -> Any:
            return a.buffer if isinstance(a, CLArray) else a

        def norm_gemv(name: str, x: CLArray, nw: Any, vls: int, w: OpenCLWeight, y: CLArray,
                      rows: int, *extra: Any) -> tuple:  # fmt: skip
            lanes, wg = plan.groups[name]
            args = (
                buf(x), buf(nw), _i32(vls), eps, w.packed, _i32(w.blocks_per_row), w.scales,
                buf(y), _i32(rows), _i32(w.cols), _i32(lanes), *extra,
                p._local(w.blocks_per_row * 64), p._local(wg * acc), p._local(wg * 4),
            )  # fmt: skip
            return (name, args, (-(-rows // (wg // lanes)) * wg,), (wg,))

        lanes, wg = plan.groups["qkv_attend"]
        qkv, ct = lw.qkv, 2 if plan.f16 else 4
        attend = (
            "qkv_attend" + plan.f16,
            (
                b.x.buffer, buf(lw.attn_norm), _i32(plan.vls["x"]), eps, qkv.packed,
                _i32(qkv.blocks_per_row), qkv.scales, _i32(qkv.cols), _i32(lanes), cs.buffer,
                b.meta.buffer, _i32(1), buf(kc), buf(vc), _i32(hq), _i32(hkv), _i32(d),
                _i32(cfg.rot_dim), _i32(1 if cfg.rope_style == "neox" else 0),
                _f32(1.0 / math.sqrt(d)), _i32(plan.span), _i32(plan.splits),
                _i32(plan.vls["keys"]), b.po.buffer, b.pml.buffer, b.att.buffer,
                p._local(qkv.blocks_per_row * 64), p._local(wg * acc), p._local(wg * 4),
                p._local(4 * d * 4), p._local(d * 4), p._local(wg * 4), p._local(d * ct),
                p._local(d * ct),
            ),
            (wg * hq,),
            (wg,),
        )  # fmt: skip
        relu2 = _i32(0 if cfg.ffn_activation == "silu" else 1)
        return [
            attend,
            norm_gemv("norm_gemv_add", b.att, lw.attn_sub_norm, plan.vls["att"], lw.o, b.x,
                      cfg.hidden_size),
            norm_gemv("norm_gemv_act", b.x, lw.ffn_norm, plan.vls["x"], lw.gate_up, b.f, f,
                      relu2),
            norm_gemv("norm_gemv_add", b.f, lw.ffn_sub_norm, plan.vls["f"], lw.down, b.x,
                      cfg.hidden_size),
        ]  # fmt: skip

    # --- the launches of one decode step ---------------------------------------------------
    def _build_step(
        self, caches: list[Sequence], cs: CLArray, b: StepBuffers
    ) -> tuple[list[tuple], list[Any]]:
        cfg, rt, p = self.config, self.rt, self._provider
        hidden, eps = cfg.hidden_size, _f32(cfg.rms_norm_eps)
        hq, hkv, d, f = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
        acc = 8 if rt.features.fp64 else 4
        n = len(caches)
        splits = [split_count(int(c.k[0].shape[0])) for c in caches]
        spans = [-(-int(c.k[0].shape[0]) // s) for c, s in zip(caches, splits, strict=True)]
        launches: list[tuple] = []  # (name, args, gsize, lsize)
        keep: list[Any] = [cs, *[c.k for c in caches], *[c.v for c in caches]]

        def launch(name: str, gsize: tuple[int, ...], lsize: tuple[int, ...] | None, *args):
            args = tuple(a.buffer if isinstance(a, CLArray) else a for a in args)
            launches.append((name, args, gsize, lsize))

        def norm_group(name: str, k: int) -> int:
            return rt.reduce_group(name, WG, k)

        def norm_quant(x: CLArray, w: CLArray, xq: CLArray, xs: CLArray) -> None:
            k = x.shape[-1]
            lsz = norm_group("rmsnorm_quant", k)
            launch(
                "rmsnorm_quant", (lsz * n,), (lsz,), x, w, xq, xs, _i32(k), eps,
                p._local(lsz * acc),
            )  # fmt: skip

        def gemv(w: OpenCLWeight, xq: CLArray, xs: CLArray, y: CLArray, add: bool) -> None:
            name = "gemv_i2s_add" if add else "gemv_i2s"
            lanes, wg = rt.row_plan(name, w.blocks_per_row)
            grid = (-(-w.rows // (wg // lanes)) * wg, n)
            launch(
                name, grid, (wg, 1), w.packed, _i32(w.blocks_per_row), xq, xs, w.scales, y,
                _i32(w.rows), _i32(w.cols), _i32(lanes), p._local(wg * 4),
            )  # fmt: skip

        emb = self.weights.embedding
        emb_name = "embedding_f16" if emb.dtype == np.float16 else "embedding_f32"
        launch(emb_name, (hidden, n), None, emb, b.meta, b.x, _i32(hidden))
        neox = _i32(1 if cfg.rope_style == "neox" else 0)
        merge_lsz = norm_group("attn_merge_norm_quant", hq * d)
        f16 = "_f16" if caches[0].k[0].dtype == np.float16 else ""  # one runner, one dtype
        layer_plan = self._layer_plan(caches[0], splits[0], spans[0]) if n == 1 else None
        for i, lw in enumerate(self.layers):
            if layer_plan is not None:  # one token: four launches a layer
                launches.extend(self._layer_launches(layer_plan, lw, caches[0].layer(i), cs, b))
                continue
            norm_quant(b.x, lw.attn_norm, b.xq, b.xs)
            gemv(lw.qkv, b.xq, b.xs, b.qkv, add=False)
            for j, cache in enumerate(caches):
                kc, vc = cache.layer(i)
                part0 = _i32(j * hq * MAX_SPLITS)
                attn_lsz = norm_group("attn_split", spans[j])
                launch(
                    "rope_store" + f16, (d, hq + 2 * hkv), None, b.qkv, cs, b.meta, _i32(n + j),
                    _i32(j), b.q, kc, vc, _i32(hq), _i32(hkv), _i32(d), _i32(cfg.rot_dim), neox,
                )  # fmt: skip
                launch(
                    "attn_split" + f16, (attn_lsz * hq, splits[j]), (attn_lsz, 1), b.q, kc, vc,
                    b.meta, _i32(n + j), _i32(j), part0, b.po, b.pml, _i32(hq), _i32(hkv),
                    _i32(d), _f32(1.0 / math.sqrt(d)), _i32(spans[j]), p._local(d * 4),
                    p._local(d * 4), p._local(attn_lsz * 4), p._local(attn_lsz * 4),
                )  # fmt: skip
                launch(
                    "attn_merge_norm_quant", (merge_lsz,), (merge_lsz,), b.po, b.pml, b.att,
                    lw.attn_sub_norm, b.aq, b.as_, _i32(hq), _i32(d), _i32(splits[j]), eps,
                    _i32(j), part0, p._local(merge_lsz * acc),
                )  # fmt: skip
            gemv(lw.o, b.aq, b.as_, b.x, add=True)
            norm_quant(b.x, lw.ffn_norm, b.xq, b.xs)
            gemv(lw.gate_up, b.xq, b.xs, b.gu, add=False)
            lsz = norm_group("act_norm_quant", f)
            launch(
                "act_norm_quant", (lsz * n,), (lsz,), b.gu, b.f, lw.ffn_sub_norm, b.fq, b.fs, _i32(f),
                _i32(0 if cfg.ffn_activation == "silu" else 1), eps, p._local(lsz * acc),
            )  # fmt: skip
            gemv(lw.down, b.fq, b.fs, b.x, add=True)
        lsz = norm_group("rmsnorm", hidden)
        launch(
            "rmsnorm", (lsz * n,), (lsz,), b.x, self.weights.output_norm, b.head_x, _i32(hidden),
            eps, p._local(lsz * acc),
        )  # fmt: skip
        head = self.weights.head
        name = "dense_f16" if head.dtype == np.float16 else "dense_f32"
        vocab, k = head.shape
        lanes, wg = rt.row_plan(name, max(1, k // 4))
        launch(
            name, (-(-vocab // (wg // lanes)) * wg, -(-n // DENSE_TOKENS)), (wg, 1), b.head_x,
            head, b.logits, _i32(vocab), _i32(k), _i32(n), _i32(lanes), p._local(wg * 4),
        )  # fmt: skip
        return launches, keep
