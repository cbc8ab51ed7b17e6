"""The Vulkan backend: a forward pass in ten dispatches a layer, decode steps recorded once.

The generic engine (``bitnet_core.model.GenericRunner``) calls ~20 provider
ops a layer, each a Python call that looks up a pipeline, a descriptor set and
a pooled buffer; even when the stream replays the step's command buffer, the
host pays for every op (about 20 ms a step for 30 layers on lavapipe).
``VulkanRunner`` keeps the generic engine's weights upload, KV cache, locking
and chunked prefill, and replaces its forward pass with fused shaders::

    norm_quant(x, attn_norm)              rmsnorm + int8 quantization (one subgroup a row)
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

``BITNET_VULKAN_FUSED=0`` keeps the generic engine; ``quantize_activations=False``
always takes it (float matmuls, for debugging). The fused shaders need subgroup
arithmetic and an even head dim; elsewhere the generic engine runs and the
provider's trace records the fallback (an error under ``BITNET_STRICT_MODE=1``).
"""

from __future__ import annotations

import math
from collections import OrderedDict
from typing import Any

import numpy as np

from bitnet_core.hal.switches import env_enabled
from bitnet_core.model.kv_cache import Sequence
from bitnet_core.model.runner import GenericRunner

from .arrays import Lease, VulkanArray, VulkanWeight
from .launch import MATMUL_SG_CPU, MATMUL_SG_GPU, pow2_at_least
from .stream import Program, pack_push

ENV_FUSED = "BITNET_VULKAN_FUSED"
ELEMENTWISE_WG = 256
ATTENTION_SLOTS = 4  # MAX_SLOTS in attention.comp
KEYS_PER_SPLIT = 64  # cache rows per split of the decode attention
MAX_SPLITS = 16
MAX_PROGRAMS = 16  # recorded decode steps kept (sequences x layouts; least recently used dropped)
NORM_MODES = {"plain": 0, "silu": 1, "relu2": 2, "combine": 3}


def split_count(capacity: int) -> int:
    """Key splits of the decode attention over a cache of ``capacity`` rows."""
    return max(1, min(MAX_SPLITS, capacity // KEYS_PER_SPLIT))


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
        self._programs: OrderedDict[tuple, tuple[Program, StepBuffers]] = OrderedDict()
        self._decode_bufs: StepBuffers | None = None
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
        self._pos = self._host_array((1,), np.uint32)
        self._ids = self._host_array((self.max_batch,), np.int32)
        self._last_row = self._host_array((1,), np.int32)
        self._logits = self._host_array((1, cfg.vocab_size), np.float32)
        self._pos_h, self._ids_h, self._last_h, self._logits_h = (
            self._view(a) for a in (self._pos, self._ids, self._last_row, self._logits)
        )
        wg = MATMUL_SG_CPU if ctx.info.is_cpu else MATMUL_SG_GPU
        self._row_wg = wg
        self._rows_per_group = max(1, wg // max(ctx.info.subgroup_size, 1))
        self._attn_wg = pow2_at_least(-(-cfg.head_dim // ATTENTION_SLOTS), 64, 1024)

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
        t, start = int(ids.size), cache.length
        cache.reserve(start + t)
        self._pos_h[0] = start
        self._ids_h[:t] = ids
        rows = t if all_logits else 1
        if t == 1:
            program, b = self._decode_program(cache)
            self.stream.run_program(program)
            out = self._logits_h.copy()
        else:
            self._last_h[0] = t - 1
            b = StepBuffers(self._provider, self.config, t, rows, 1)
            logits_arr = self._provider._new((rows, self.config.vocab_size))
            program = self._record(b, cache, logits_arr, 1)
            try:
                self.stream.run_program(program)
            finally:
                self.stream.free_program(program)
            out = np.asarray(self._provider.to_host(logits_arr), dtype=np.float32)
        cache.advance(t)
        return out if all_logits else out[-1]

    def _forward_batch(self, batch: list[tuple[np.ndarray, Sequence]]) -> np.ndarray:
        """Fused: the sequences one after the other (chunks of ``max_batch``); else generic."""
        if not self.fused:
            return super()._forward_batch(batch)
        rows = []
        for ids, cache in batch:
            for i in range(0, ids.size, self.max_batch):
                last = self._forward(ids[i : i + self.max_batch], cache, False)
            rows.append(last)
        return np.stack(rows)

    def _decode_program(self, cache: Sequence) -> tuple[Program, StepBuffers]:
        """The recorded decode step for this cache's buffers (recorded on first use)."""
        kc0 = cache.k[0]
        splits = split_count(kc0.shape[0])
        key = (
            tuple([a.lease.buffer.key for a in cache.k]),
            tuple([a.lease.buffer.key for a in cache.v]),
            kc0.shape,
            kc0.dtype.itemsize,
            splits,
        )
        found = self._programs.get(key)
        if found is not None and found[0].generation == self.stream.generation:
            self._programs.move_to_end(key)
            return found
        if found is not None:  # its descriptor sets were freed: record it again
            self.stream.free_program(self._programs.pop(key)[0])
        if self._decode_bufs is None:
            self._decode_bufs = StepBuffers(self._provider, self.config, 1, 1, MAX_SPLITS)
        b = self._decode_bufs
        program = self._record(b, cache, self._logits, splits)
        self._programs[key] = (program, b)
        if len(self._programs) > MAX_PROGRAMS:
            self.stream.free_program(self._programs.popitem(last=False)[1][0])
        return program, b

    def _record(self, b: StepBuffers, cache: Sequence, logits: VulkanArray, splits: int) -> Program:
        """Record a forward pass of ``b.t`` tokens into a program (again if sets were reset)."""
        stream = self.stream
        if stream.recording:
            stream.flush()
        for _ in range(2):
            generation = stream.generation
            self._dispatch_step(b, cache, logits, splits)
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
        self, mode: str, x: Any, g: Any, xq: Any, xs: Any, rows: int, cols: int, splits: int = 1
    ) -> None:
        words = xq.nbytes // max(rows, 1) // 4
        d = self.config.head_dim
        push = pack_push("IIIfII", rows, cols, words, float(self.config.rms_norm_eps), d, splits)
        groups = (self._provider._groups(rows, self._rows_per_group), 1, 1)
        self._run("norm_quant", [x, g, xq, xs], push, groups, (self._row_wg, NORM_MODES[mode]))

    def _matmul(self, w: VulkanWeight, xq: Any, xs: Any, y: Any, t: int, add: bool) -> None:
        p = self._provider
        name = "matmul_i2s_dot" if p.context.use_int_dot else "matmul_i2s"
        shader, groups, spec = p._matmul_launch(name, w.rows, t)
        push = pack_push("III", w.rows, t, w.words_per_row)
        self._run(shader, [xq, xs, w.codes, w.scales, y], push, groups, (*spec, int(add)))

    def _dispatch_step(
        self, b: StepBuffers, cache: Sequence, logits: VulkanArray, splits: int
    ) -> None:
        """Every dispatch of a forward pass of ``b.t`` tokens, attention in ``splits`` parts."""
        p, cfg, w = self._provider, self.config, self.weights
        t, hidden, f = b.t, cfg.hidden_size, cfg.intermediate_size
        hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        p.launch_embedding(w.embedding, self._ids, b.x, t)
        f16 = int(cache.k[0].dtype == np.float16)
        pairs = t * (hq + 2 * hkv) * (d // 2)
        rope_push = pack_push("IIIII", t, hq, hkv, d, cfg.rot_dim)
        rope_spec = (ELEMENTWISE_WG, int(cfg.rope_style == "neox"), f16)
        rope_groups = (p._groups(pairs, ELEMENTWISE_WG), 1, 1)
        attn_push = pack_push("IIIIfI", t, hq, hkv, d, 1.0 / math.sqrt(d), splits)
        attn_groups = (p._groups(t * hq * splits, 1), 1, 1)
        act = "silu" if cfg.ffn_activation == "silu" else "relu2"
        for i, lw in enumerate(w.layers):
            kc, vc = cache.layer(i)
            self._norm_quant("plain", b.x, lw.attn_norm, b.xq, b.xs, t, hidden)
            self._matmul(self.qkv[i], b.xq, b.xs, b.qkv, t, add=False)
            self._run(
                "rope_store",
                [b.qkv, self._cos, self._sin, b.q, kc, vc, self._pos],
                rope_push,
                rope_groups,
                rope_spec,
            )
            self._run(
                "attention_split",
                [b.q, kc, vc, b.parts, self._pos],
                attn_push,
                attn_groups,
                (self._attn_wg, f16),
            )
            self._norm_quant("combine", b.parts, lw.attn_sub_norm, b.aq, b.as_, t, hq * d, splits)
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
