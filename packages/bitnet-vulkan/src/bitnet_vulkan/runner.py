"""The Vulkan backend: a decode token in four dispatches a layer, steps recorded once.

The generic engine (``bitnet_core.sdk.runner.GenericRunner``) calls ~20 provider
ops a layer, each a Python call that looks up a pipeline, a descriptor set and
a pooled buffer; even when the stream replays the step's command buffer, the
host pays for every op (about 20 ms a step for 30 layers on lavapipe).
``VulkanRunner`` keeps the generic engine's weights upload, KV cache, locking
and chunked prefill, and replaces its forward pass with fused shaders::

    norm_quant(x, attn_norm)              rmsnorm + int8 quantization (one workgroup a row)
    matmul_i2s(q|k|v)                     one ternary matmul (weights stacked at load)
    rope_store                            q rotated; k rotated and v written into the cache
    attention_split                       split-K (flash-decoding): (token, head, split) jobs
    norm_quant(combine, attn_sub_norm)    splits combined + sub-norm + int8
    matmul_i2s(o, ADD)                    x += o(...)  (the residual in the epilogue)
    norm_quant(x, ffn_norm)
    matmul_i2s(gate|up)
    norm_quant(act(gate) * up, ffn_sub_norm)
    matmul_i2s(down, ADD)                 x += down(...)

The token ids and the position live in host-visible buffers the shaders read,
and the rope tables cover the whole context (computed once on the host, in
float64), so a decode step is the same at every position: it is recorded
once per KV-cache layout (the cache's buffers change when a sequence's cache
grows) into a command buffer of its own and then costs the host one write of
the token id and position, one ``vkQueueSubmit``, one fence wait and a copy of
the logits. Prefill (several tokens) runs the same shaders, recorded for that
call (split count 1).

One token's step (a sequence decoding alone) runs each layer in four dispatches
instead (``shaders/qkv_attend.comp`` and ``norm_gemv.comp``, issue 48: a launch
boundary only before each all-to-all GEMV)::

    qkv_attend(x)                         a workgroup a query head: norm + int8 of x, its q,
                                          k and v rows, rope, K/V store, the splits, combine
    norm_gemv_add(att, attn_sub_norm, o)  every workgroup: norm + int8 of att; x += o rows
    norm_gemv_act(x, ffn_norm, gate|up)   f = act(gate) * up rows
    norm_gemv_add(f, ffn_sub_norm, down)  x += down rows

so a step is 1 + 4 x layers + 2 dispatches (123 for 30 layers, not 303). Each
workgroup computes the norm of the whole input with the workgroup size and
sums of ``norm_quant`` (``norm_row.glsl``), the attention in the chunks and
split order of ``attention_split`` and the combine's order, so the logits are
bit for bit the ten dispatches' (on a device whose subgroups have one size for
every shader: lavapipe, NVIDIA; a compiler choosing another subgroup size for
one shader may change a norm's last bit). ``BITNET_VULKAN_LAYER=0`` (read
when the runner is made) keeps the ten, as do devices whose limits the
shaders exceed (shared memory, storage buffers a stage).

``forward_batch`` (the server's step) runs the sequences of one step as one
recorded step: embedding, norms and matmuls on all their rows (the weights read
once for the n tokens), then per sequence ``rope_store``, ``attention_split``
and the combine over its own cache at its own position (``first``: its rows in
the step, its position at ``positions[first]``; its own split count, so each row
equals the sequence decoded alone bit for bit). A step of decode tokens only is
recorded once per tuple of the sequences' cache layouts and replayed while the
composition holds (a sequence joining, leaving or growing its cache records
another; the least recently used are dropped): one ``vkQueueSubmit`` a step. A
step with a prompt chunk in it is recorded for that call.

``BITNET_VULKAN_FUSED=0`` keeps the generic engine; ``quantize_activations=False``
always takes it (float matmuls, for debugging). The fused shaders need subgroup
arithmetic and an even head dim; elsewhere the generic engine runs and the
provider's trace records the fallback (an error under ``BITNET_STRICT_MODE=1``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.kv_cache import Sequence
from bitnet_core.sdk.runner import GenericRunner

from .arrays import Lease, VulkanArray, VulkanWeight
from .launch import MATMUL_SG_CPU, MATMUL_SG_GPU, norm_wg, pow2_at_least
from .layer import LayerPlan, layer_plan
from .stream import Program, pack_push

ENV_FUSED = "BITNET_VULKAN_FUSED"
ENV_LAYER = "BITNET_VULKAN_LAYER"  # 0: one token's layer in the ten dispatches too
ELEMENTWISE_WG = 256
ATTENTION_SLOTS = 4  # MAX_SLOTS in attention.comp
KEYS_PER_SPLIT = 16  # cache rows per split of the decode attention (see docs/GPU.md)
MAX_SPLITS = 16
MAX_PROGRAMS = 16  # recorded decode steps kept (sequences x layouts; least recently used dropped)
NORM_MODES = {"plain": 0, "silu": 1, "relu2": 2, "combine": 3}


@dataclass(frozen=True)
class Segment:
    """One sequence's rows of a step: ``first .. first + tokens - 1``, attention in ``splits``."""

    first: int
    tokens: int
    cache: Sequence
    splits: int


def split_count(capacity: int, keys_per_split: int = KEYS_PER_SPLIT) -> int:
    """Key splits of the decode attention over a cache of ``capacity`` rows."""
    return max(1, min(MAX_SPLITS, capacity // keys_per_split))


def stack_weights(provider: Any, parts: list[VulkanWeight], name: str) -> VulkanWeight:
    """One ternary matrix of ``parts`` stacked by rows (device copies; the parts stay)."""
    stream = provider.stream
    words = parts[0].words_per_row
    rows = sum(p.rows for p in parts)
    codes = stream.allocate_exact(rows * words * 4)
    scales = stream.allocate_exact(rows * 4)
    row = 0
    for p in parts:
        stream.copy(p.codes.buffer, codes, p.rows * words * 4, 0, row * words * 4)
        stream.copy(p.scales.buffer, scales, p.rows * 4, 0, row * 4)
        row += p.rows
    stream.flush()
    return VulkanWeight(
        name, rows, parts[0].cols, words, Lease(stream, codes), Lease(stream, scales)
    )


class StepBuffers:
    """Every array a forward pass of ``t`` tokens writes (kept for decode: fixed buffers).

    ``splits``: the most attention splits its partial results have room for.
    """

    def __init__(self, provider: Any, cfg: Any, t: int, rows: int, splits: int) -> None:
        new = provider._new
        hq, hkv, d, f = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, cfg.intermediate_size
        self.t, self.rows = t, rows
        self.x = new((t, cfg.hidden_size))
        self.xq, self.xs = new((t, cfg.hidden_size), np.int8), new((t,))
        self.qkv = new((t, (hq + 2 * hkv) * d))
        self.q = new((t, hq * d))
        self.parts = new((t * hq * splits * (d + 2),))  # [m, l, acc[d]] a (token, head, split)
        self.aq, self.as_ = new((t, hq * d), np.int8), new((t,))
        self.gu = new((t, 2 * f))
        self.fq, self.fs = new((t, f), np.int8), new((t,))
        self.last = new((rows, cfg.hidden_size)) if rows < t else self.x
        self.hx = new((rows, cfg.hidden_size))


class VulkanRunner(GenericRunner):
    """``GenericRunner`` with the fused forward pass and recorded decode steps."""

    #: cache rows per split of the decode attention (fewer: more, shorter splits)
    keys_per_split = KEYS_PER_SPLIT

    def __init__(self, provider: Any, weights: Any, **opts: Any) -> None:
        super().__init__(provider, weights, **opts)
        cfg = self.config
        ctx = provider.context
        reason = None
        if not ctx.use_subgroup:
            reason = "the device has no subgroup arithmetic"
        elif cfg.head_dim % 2 or cfg.head_dim > ATTENTION_SLOTS * 1024:
            reason = f"head dim {cfg.head_dim} (needs an even one up to {ATTENTION_SLOTS * 1024})"
        self.fused = self.quantize_activations and reason is None
        if self.quantize_activations and reason is not None:
            provider.trace.fallback(f"vulkan: fused forward pass unavailable ({reason})")
        self._programs: OrderedDict[tuple, tuple[Program, np.ndarray]] = OrderedDict()
        self._decode_bufs: dict[int, tuple[StepBuffers, VulkanArray]] = {}  # by batch size
        if not self.fused:
            return
        self.stream = provider.stream
        w = self.weights
        self.qkv = [stack_weights(provider, [lw.q, lw.k, lw.v], "qkv") for lw in w.layers]
        self.gate_up = [stack_weights(provider, [lw.gate, lw.up], "gate_up") for lw in w.layers]
        half = cfg.rot_dim // 2
        inv_freq = float(cfg.rope_theta) ** (
            -np.arange(half, dtype=np.float64) * 2.0 / max(cfg.rot_dim, 1)
        )
        # every position a sequence can reach (the KV cache caps them at the context length)
        ang = np.arange(cfg.context_length, dtype=np.float64)[:, None] * inv_freq[None, :]
        self._cos = provider.to_device(np.cos(ang).astype(np.float32).reshape(-1) if half else [0])
        self._sin = provider.to_device(np.sin(ang).astype(np.float32).reshape(-1) if half else [0])
        # positions[first] is a step's sequence's position; last rows: its logits rows
        self._pos = self._host_array((self.max_batch,), np.uint32)
        self._ids = self._host_array((self.max_batch,), np.int32)
        self._last_row = self._host_array((self.max_batch,), np.int32)
        self._logits = self._host_array((1, cfg.vocab_size), np.float32)
        self._pos_h, self._ids_h, self._last_h, self._logits_h = (
            self._view(a) for a in (self._pos, self._ids, self._last_row, self._logits)
        )
        wg = MATMUL_SG_CPU if ctx.info.is_cpu else MATMUL_SG_GPU
        self._row_wg = wg
        self._rows_per_group = max(1, wg // max(ctx.info.subgroup_size, 1))
        self._norm_wg = norm_wg(ctx.info)  # norm_quant: a workgroup a row
        self._attn_wg = pow2_at_least(-(-cfg.head_dim // ATTENTION_SLOTS), 64, 1024)
        self._layer_plan: LayerPlan | None = None
        if env_enabled(ENV_LAYER):
            self._layer_plan = layer_plan(
                ctx, cfg, self._norm_wg, self._attn_wg, MAX_SPLITS, self.qkv[0], w
            )

    def _host_array(self, shape: tuple[int, ...], dtype: Any) -> VulkanArray:
        """A host-visible array of the backend's own (written or read by the host directly)."""
        dtype = np.dtype(dtype)
        buf = self.stream.ctx.allocate(
            int(np.prod(shape)) * dtype.itemsize, host=True, pooled=False
        )
        return VulkanArray(Lease(self.stream, buf), shape, dtype)

    @staticmethod
    def _view(arr: VulkanArray) -> np.ndarray:
        """The host's view of a host-visible array (stays valid while ``arr`` lives)."""
        return arr.buffer.mapped[: arr.nbytes].view(arr.dtype).reshape(arr.shape)

    # --- the forward pass -------------------------------------------------------------
    def _forward(self, ids: np.ndarray, cache: Sequence, all_logits: bool) -> np.ndarray:
        if not self.fused:
            return super()._forward(ids, cache, all_logits)
        t = int(ids.size)
        cache.reserve(cache.length + t)
        if t == 1:
            out = self._step([(ids, cache)])
        else:
            out = self._step([(ids, cache)], rows=t if all_logits else 1)
        return out if all_logits else out[-1]

    def _forward_batch(self, batch: list[tuple[np.ndarray, Sequence]]) -> np.ndarray:
        """One recorded step for all the sequences (at most ``max_batch`` tokens a step;
        beyond that, the decode tokens in steps of their own and each longer chunk alone)."""
        if not self.fused:
            return super()._forward_batch(batch)
        if sum(int(ids.size) for ids, _ in batch) <= self.max_batch:
            return self._step(batch)
        rows: list[Any] = [None] * len(batch)
        decoding = [j for j, (ids, _) in enumerate(batch) if ids.size == 1]
        for i in range(0, len(decoding), self.max_batch):
            part = decoding[i : i + self.max_batch]
            for j, row in zip(part, self._step([batch[j] for j in part]), strict=True):
                rows[j] = row
        for j, (ids, cache) in enumerate(batch):
            if rows[j] is None:
                for i in range(0, ids.size, self.max_batch):
                    rows[j] = self._step([(ids[i : i + self.max_batch], cache)])[0]
        return np.stack(rows)

    def _step(self, items: list[tuple[np.ndarray, Sequence]], rows: int = 0) -> np.ndarray:
        """Run ``items`` (their caches reserved) as one step; float32 logits ``[rows, vocab]``:
        each sequence's last token (``rows`` 0), or all ``rows`` tokens of a single item."""
        segments, first = [], 0
        for j, (ids, cache) in enumerate(items):
            t = int(ids.size)
            splits = split_count(cache.k[0].shape[0], self.keys_per_split) if t == 1 else 1
            segments.append(Segment(first, t, cache, splits))
            self._pos_h[first] = cache.length
            self._ids_h[first : first + t] = ids
            self._last_h[j] = first + t - 1
            first += t
        if first == len(items):  # decode tokens only: the recorded step of this composition
            program, logits = self._decode_program(segments)
            self.stream.run_program(program)
            out = logits.copy()
        else:
            rows = rows or len(items)
            stride = max(s.splits for s in segments)
            b = StepBuffers(self._provider, self.config, first, rows, stride)
            logits_arr = self._provider._new((rows, self.config.vocab_size))
            program = self._record(b, segments, logits_arr, stride)
            try:
                self.stream.run_program(program)
            finally:
                self.stream.free_program(program)
            out = np.asarray(self._provider.to_host(logits_arr), dtype=np.float32)
        for s in segments:
            s.cache.advance(s.tokens)
        return out

    @staticmethod
    def _layout(segment: Segment) -> tuple:
        """What a recorded step depends on in one sequence: its cache's buffers and splits."""
        cache = segment.cache
        return (
            tuple([a.lease.buffer.key for a in cache.k]),
            tuple([a.lease.buffer.key for a in cache.v]),
            cache.k[0].shape,
            cache.k[0].dtype.itemsize,
            segment.splits,
        )

    def _decode_program(self, segments: list[Segment]) -> tuple[Program, np.ndarray]:
        """The recorded decode step of these sequences' caches, in this order (recorded on
        first use), and the host view of its logits."""
        key = tuple([self._layout(s) for s in segments])
        found = self._programs.get(key)
        if found is not None and found[0].generation == self.stream.generation:
            self._programs.move_to_end(key)
            return found
        if found is not None:  # its descriptor sets were freed: record it again
            self.stream.free_program(self._programs.pop(key)[0])
        n = len(segments)
        bufs = self._decode_bufs.get(n)
        if bufs is None:
            logits = (
                self._logits
                if n == 1
                else self._host_array((n, self.config.vocab_size), np.float32)
            )
            bufs = self._decode_bufs[n] = (
                StepBuffers(self._provider, self.config, n, n, MAX_SPLITS),
                logits,
            )
        b, logits = bufs
        program = self._record(b, segments, logits, max(s.splits for s in segments))
        found = self._programs[key] = (program, self._view(logits))
        if len(self._programs) > MAX_PROGRAMS:
            self.stream.free_program(self._programs.popitem(last=False)[1][0])
        return found

    def _record(
        self, b: StepBuffers, segments: list[Segment], logits: VulkanArray, stride: int
    ) -> Program:
        """Record a step of ``b.t`` tokens into a program (again if sets were reset)."""
        stream = self.stream
        if stream.recording:
            stream.flush()
        for _ in range(2):
            generation = stream.generation
            self._dispatch_step(b, segments, logits, stride)
            program = stream.record_program()
            if program.generation == generation:
                return program
            stream.free_program(program)  # the set cache was reset halfway: once more
        return program

    # --- the dispatches of one forward pass ------------------------------------------
    def _run(
        self,
        shader: str,
        arrays: list[Any],
        push: bytes,
        groups: tuple[int, int, int],
        spec: tuple[int, ...],
    ) -> None:
        p = self._provider
        pipe = p.context.pipelines.get(shader, len(arrays), spec)
        self.stream.dispatch(pipe, [a.buffer for a in arrays], push, groups)
        p.trace.kernel(shader)

    def _norm_quant(
        self,
        mode: str,
        x: Any,
        g: Any,
        xq: Any,
        xs: Any,
        rows: int,
        cols: int,
        seg: Segment | None = None,
        stride: int = 1,
    ) -> None:
        """Rows ``0 .. rows - 1``, or the combine of ``seg``'s rows (its splits, ``stride``)."""
        words = xq.nbytes // max(xq.shape[0], 1) // 4
        d, eps = self.config.head_dim, float(self.config.rms_norm_eps)
        first, splits = (seg.first, seg.splits) if seg is not None else (0, 1)
        push = pack_push("IIIfIIII", rows, cols, words, eps, d, splits, first, stride)
        groups = (self._provider._groups(rows, 1), 1, 1)
        self._run("norm_quant", [x, g, xq, xs], push, groups, (self._norm_wg, NORM_MODES[mode]))

    def _matmul(self, w: VulkanWeight, xq: Any, xs: Any, y: Any, t: int, add: bool) -> None:
        p = self._provider
        name = "matmul_i2s_dot" if p.context.use_int_dot else "matmul_i2s"
        shader, groups, spec = p._matmul_launch(name, w.rows, t)
        push = pack_push("III", w.rows, t, w.words_per_row)
        self._run(shader, [xq, xs, w.codes, w.scales, y], push, groups, (*spec, int(add)))

    def _layer(self, plan: LayerPlan, b: StepBuffers, i: int, s: Segment, f16: int) -> None:
        """Layer ``i`` of one token in four dispatches (``b.q``: the attention's output,
        ``b.gu``: act(gate) * up, ``b.parts``: each head's splits)."""
        lw, cfg = self.weights.layers[i], self.config
        kc, vc = s.cache.layer(i)
        qkv, gu = self.qkv[i], self.gate_up[i]
        hidden, f = cfg.hidden_size, cfg.intermediate_size
        eps = float(cfg.rms_norm_eps)
        push = pack_push(
            "IIfIIIIIfI",
            hidden,
            -(-hidden // 4),
            eps,
            qkv.words_per_row,
            cfg.num_heads,
            cfg.num_kv_heads,
            cfg.head_dim,
            cfg.rot_dim,
            1.0 / math.sqrt(cfg.head_dim),
            s.splits,
        )
        neox = int(cfg.rope_style == "neox")
        self._run(
            plan.shader("qkv_attend"),
            [b.x, lw.attn_norm, qkv.codes, qkv.scales, self._cos, self._sin, kc, vc]
            + [self._pos, b.parts, b.q],
            push,
            (cfg.num_heads, 1, 1),
            plan.qkv_spec(neox, f16, qkv.words_per_row),
        )
        relu2 = int(cfg.ffn_activation != "silu")
        for name, x, g, w, y, rows in (
            ("norm_gemv_add", b.q, lw.attn_sub_norm, lw.o, b.x, hidden),
            ("norm_gemv_act", b.x, lw.ffn_norm, gu, b.gu, f),
            ("norm_gemv_add", b.gu, lw.ffn_sub_norm, lw.down, b.x, hidden),
        ):
            self._run(
                plan.shader(name),
                [x, g, w.codes, w.scales, y],
                pack_push("IIfII", w.cols, -(-w.cols // 4), eps, rows, w.words_per_row),
                (self._provider._groups(rows, plan.rows_per_group), 1, 1),
                plan.gemv_spec(w.words_per_row, relu2),
            )

    def _dispatch_step(
        self, b: StepBuffers, segments: list[Segment], logits: VulkanArray, stride: int
    ) -> None:
        """Every dispatch of a step of ``b.t`` tokens: norms and matmuls on all rows, rope,
        KV store, attention and its combine per segment (``stride``: its split records a row)."""
        p, cfg, w = self._provider, self.config, self.weights
        t, hidden, f = b.t, cfg.hidden_size, cfg.intermediate_size
        hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        p.launch_embedding(w.embedding, self._ids, b.x, t)
        f16 = int(segments[0].cache.k[0].dtype == np.float16)  # one runner, one cache dtype
        rope_spec = (ELEMENTWISE_WG, int(cfg.rope_style == "neox"), f16)
        scale = 1.0 / math.sqrt(d)
        act = "silu" if cfg.ffn_activation == "silu" else "relu2"
        plan = self._layer_plan if t == 1 and len(segments) == 1 else None
        for i, lw in enumerate(w.layers):
            if plan is not None:
                self._layer(plan, b, i, segments[0], f16)
                continue
            self._norm_quant("plain", b.x, lw.attn_norm, b.xq, b.xs, t, hidden)
            self._matmul(self.qkv[i], b.xq, b.xs, b.qkv, t, add=False)
            for s in segments:
                kc, vc = s.cache.layer(i)
                pairs = s.tokens * (hq + 2 * hkv) * (d // 2)
                self._run(
                    "rope_store",
                    [b.qkv, self._cos, self._sin, b.q, kc, vc, self._pos],
                    pack_push("IIIIII", s.tokens, hq, hkv, d, cfg.rot_dim, s.first),
                    (p._groups(pairs, ELEMENTWISE_WG), 1, 1),
                    rope_spec,
                )
                self._run(
                    "attention_split",
                    [b.q, kc, vc, b.parts, self._pos],
                    pack_push("IIIIfIII", s.tokens, hq, hkv, d, scale, s.splits, s.first, stride),
                    (p._groups(s.tokens * hq * s.splits, 1), 1, 1),
                    (self._attn_wg, f16),
                )
            for s in segments:
                self._norm_quant(
                    "combine", b.parts, lw.attn_sub_norm, b.aq, b.as_, s.tokens, hq * d, s, stride
                )
            self._matmul(lw.o, b.aq, b.as_, b.x, t, add=True)
            self._norm_quant("plain", b.x, lw.ffn_norm, b.xq, b.xs, t, hidden)
            self._matmul(self.gate_up[i], b.xq, b.xs, b.gu, t, add=False)
            self._norm_quant(act, b.gu, lw.ffn_sub_norm, b.fq, b.fs, t, f)
            self._matmul(lw.down, b.fq, b.fs, b.x, t, add=True)
        rows = b.rows
        if b.last is not b.x:
            p.launch_embedding(b.x, self._last_row, b.last, rows)
        push = pack_push("IIf", rows, hidden, float(cfg.rms_norm_eps))
        groups = (p._groups(rows, self._rows_per_group), 1, 1)
        self._run("rmsnorm_sg", [b.last, w.output_norm, b.hx], push, groups, (self._row_wg,))
        p.launch_dense(b.hx, w.head, logits, rows)


def fused_enabled() -> bool:
    """``BITNET_VULKAN_FUSED`` (default on)."""
    return env_enabled(ENV_FUSED)
