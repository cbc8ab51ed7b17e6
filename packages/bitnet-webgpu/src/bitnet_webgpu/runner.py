"""The WebGPU backend: a token's forward pass in four dispatches a layer, from a prebuilt list.

The generic engine (``bitnet_core.sdk.runner.GenericRunner``) calls ~25 provider
ops a layer, each a Python call that sets up a dispatch. ``WebGPURunner``
keeps the generic engine's weights upload, KV cache and locking, and runs a
token through the shaders of the four-launch layer, each workgroup normalising
its input row itself (``layer_gemv``)::

    embedding                    (token id read from the step's input buffer)
    qkv_attend                   norm + int8 of x, q rows of a workgroup's query heads (one,
                                 or a kv head's on CPU adapters) and their kv head's k, v
                                 rows, rope, K/V store, the attention's splits and merge -> att
    norm_gemv                    attn_sub_norm + int8 of att, o rows, x += o
    norm_gemv ACT                ffn_norm + int8 of x, gate|up rows, f = act(gate) * up
    norm_gemv                    ffn_sub_norm + int8 of f, down rows, x += down
    rmsnorm, matmul_dense        (the head)

bit for bit the ten dispatches a layer that batched steps run
(``BITNET_WEBGPU_LAYER=0`` gives one token those too; so does a row too long
for a workgroup's memory, ``layer_fits``)::

    embedding                    (token id read from the step's input buffer)
    rmsnorm_quant(x)             -> q|k|v in one ternary matmul (weights fused at load)
    rope_store                   -> q rotated; k rotated and v written into the cache
    attn_split                   (flash-decoding: heads x splits workgroups)
    attn_combine_norm_quant      -> merged heads, attn_sub_norm, int8
    matmul_i2s ADD               -> x += o(...)            (the residual in the epilogue)
    rmsnorm_quant(x)             -> gate|up in one ternary matmul
    act_norm_quant               -> act(gate) * up, ffn_sub_norm, int8
    matmul_i2s ADD               -> x += down(...)
    rmsnorm, matmul_dense        (the head)

WebGPU cannot replay a command buffer, so a step is encoded again each time,
from a ``StepPlan``: the list of (pipeline, bind group, workgroups) built once
per shape (the KV cache's buffers and capacity), with every uniform written
once into the plan's own buffer. The token id, position and length live in a
16-byte input buffer the shaders read, so a decode step is one
``queue.write_buffer``, one compute pass, one copy of the logits into a
mappable buffer and one ``queue.submit``; nothing is allocated. A prompt runs
as one such pass per token, 64 tokens a submission (each pass's inputs copied
from a buffer written once). ``BITNET_WEBGPU_FUSED=0`` keeps the generic
engine; ``quantize_activations=False`` always does.

``forward_batch`` (the server's step) decodes the sequences that bring one
token each in one pass: the norms, matmuls and head on all n rows, then
``rope_store``, ``attn_split`` and ``attn_combine_norm_quant`` per sequence
(its row, where its position and length are in the input buffer, where its
partials start, its own split count: each row equals the sequence decoded
alone bit for bit), from a plan built once per tuple of the sequences' cache
layouts: one submission a step. A sequence with a prompt chunk runs its own
prefill in the same call.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.fused import decode_together, fused_layers
from bitnet_core.sdk.kv_cache import Sequence
from bitnet_core.sdk.runner import GenericRunner

from .memory import GpuArray, GpuTernary
from .provider import WebGPUProvider
from .runtime import Device, _entry, _raw

MAX_D = 256  # attn_split keeps 4 output values an invocation: head_dim <= 4 * 64
MAX_SPLITS = 64
MAX_PLANS = 8  # step plans kept (least recently used dropped)
UNIFORM_SLOT = 256  # bytes a distinct parameter block takes in a plan's uniform buffer
INPUT_BYTES = 16  # token id, position, length, pad (u32)
#: tokens of a prompt encoded into one submission (a bounded command buffer: a driver
#: may reset a device whose single submission runs for seconds)
PREFILL_SUBMIT_TOKENS = 64
ENV_NATIVE = "BITNET_WEBGPU_NATIVE_ENCODE"  # 0: encode through wgpu-py's API, not its C functions
ENV_LAYER = "BITNET_WEBGPU_LAYER"  # 0: one token's layer in the ten dispatches batched steps run
XL_WORDS = 2048  # layer_gemv.wgsl: int8 words of the longest row a workgroup normalises
HV = 1024  # qkv_attend.wgsl: floats of a workgroup's q heads and k, v rows
LAYER_LANES = 16  # invocations a row of the four-launch matmuls on a GPU (one on a CPU adapter)


def split_count(capacity: int, keys_per_split: int = 128) -> int:
    """Key splits of the decode attention over a cache of ``capacity`` (1 to 64)."""
    return max(1, min(MAX_SPLITS, capacity // keys_per_split))


def q8_words(k: int) -> int:
    """u32 words of an int8 row of ``k`` values (padded to 16 values, as the matmul reads)."""
    return max(1, -(-k // 16)) * 4


@dataclass(eq=False)
class FusedTernary:
    """Ternary weights of several linears stacked by rows (q|k|v or gate|up)."""

    words: Any
    scales: Any
    rows: int
    kw16: int


def fuse_ternary(dev: Device, parts: list[GpuTernary]) -> FusedTernary:
    """One matrix of ``parts`` stacked by rows (copied on the device); the parts' buffers go."""
    kw16 = parts[0].kw16
    rows = sum(p.rows for p in parts)
    words = dev._create_buffer(max(16, -(-rows * kw16 * 4 // 16) * 16))
    scales = dev._create_buffer(max(16, -(-rows * 4 // 16) * 16))
    row = 0
    for p in parts:
        dev.copy(p.words, 0, words, row * kw16 * 4, p.rows * kw16 * 4)
        dev.copy(p.scales, 0, scales, row * 4, p.rows * 4)
        row += p.rows
    dev.flush()
    for p in parts:  # only the fused copy is read from now on
        p.words = p.scales = None
    return FusedTernary(words, scales, rows, kw16)


def layer_fits(cfg: Any) -> str | None:
    """Why the four-launch layer cannot run ``cfg`` (None: it can)."""
    for what, k in (
        ("hidden", cfg.hidden_size),
        ("heads x head_dim", cfg.num_heads * cfg.head_dim),
        ("intermediate", cfg.intermediate_size),
    ):
        if q8_words(k) > XL_WORDS:
            return f"{what} size {k} is over the {4 * XL_WORDS} a workgroup normalises"
    if cfg.num_heads % cfg.num_kv_heads:
        return f"{cfg.num_heads} query heads do not group over {cfg.num_kv_heads} kv heads"
    return None


def layer_lanes(dev: Device) -> tuple[int, frozenset[str]]:
    """Invocations a row of the four-launch layer's matmuls on ``dev``, and the defines of
    its shaders (``ROWS``: one a row, on CPU-like adapters; ``DOT4``)."""
    defines = frozenset({"DOT4"}) if dev.dot4 else frozenset()
    if dev.rows_layout:
        return 1, defines | {"ROWS"}
    return LAYER_LANES, defines


def attend_heads(cfg: Any, dev: Device) -> int:
    """Query heads a ``qkv_attend`` workgroup takes: one on a GPU (Hq workgroups); on a
    CPU adapter as many of a kv head's as fit its memory (each workgroup's norm and k, v
    rows are made once, not once a query head)."""
    if not dev.rows_layout:
        return 1
    group = cfg.num_heads // cfg.num_kv_heads
    return max(h for h in range(1, group + 1) if group % h == 0 and (h + 2) * cfg.head_dim <= HV)


def qkv_attend_params(cfg: Any, splits: int, lanes: int, heads: int = 1) -> np.ndarray:
    """``qkv_attend.wgsl``'s parameters for a model of ``cfg``, ``splits`` key splits,
    ``heads`` query heads a workgroup (of one kv head's)."""
    u32, d = np.uint32, cfg.head_dim
    params = np.zeros(16, u32)
    params[:3] = (cfg.hidden_size, q8_words(cfg.hidden_size), q8_words(cfg.hidden_size) // 4)
    params[3] = np.float32(cfg.rms_norm_eps).view(u32)
    params[4:10] = (lanes, cfg.num_heads, cfg.num_kv_heads, d, cfg.rot_dim, 0)
    params[9] = 0 if cfg.rope_style == "neox" else 1
    params[10] = np.float32(math.log2(cfg.rope_theta)).view(u32)
    params[11] = splits
    params[12] = np.float32(1.0 / math.sqrt(d)).view(u32)
    params[13] = heads
    return params


def norm_gemv_launch(
    rows: int, kw16: int, k: int, eps: float, lanes: int, act: int | None
) -> tuple[np.ndarray, tuple[int, int, int], frozenset[str]]:
    """``norm_gemv.wgsl``'s parameters, grid and defines for a weight of ``rows`` rows over
    ``k`` inputs: ``y += W x`` (act None), or ``y = act(gate x) * (up x)`` of W = gate|up
    (act 0 silu, 1 relu^2)."""
    n = rows if act is None else rows // 2
    eps_bits = np.float32(eps).view(np.uint32)
    params = np.array([n, k, q8_words(k), kw16, eps_bits, lanes, act or 0, 0], np.uint32)
    per_group = 256 // lanes // (1 if act is None else 2)
    return params, (-(-n // per_group), 1, 1), frozenset() if act is None else frozenset({"ACT"})


class StepBuffers:
    """Every buffer a step of ``n`` one-token sequences writes, made once per batch size.

    The input buffer holds the n token ids, then each sequence's (position, length)
    (one sequence: token, position, length, as ``INPUT_BYTES``); sequence ``j``'s
    attention partials start at ``j * hq * MAX_SPLITS``."""

    def __init__(self, dev: Device, cfg: Any, n: int = 1, layer: bool = False) -> None:
        hidden, hq, hkv, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        f = cfg.intermediate_size

        def buf(nbytes: int) -> Any:
            return dev._create_buffer(max(16, -(-nbytes // 16) * 16))

        self.n = n
        self.inp = buf(max(INPUT_BYTES, 3 * n * 4))
        self.x, self.head_x = buf(n * hidden * 4), buf(n * hidden * 4)
        self.xq, self.aq, self.fq = (buf(n * q8_words(k) * 4) for k in (hidden, hq * d, f))
        self.xs, self.as_, self.fs = (buf(n * 4) for _ in range(3))  # scales of the int8 rows
        self.xsum, self.asum, self.fsum = (buf(n * 4) for _ in range(3))  # their sums
        self.qkv = buf(n * (hq + 2 * hkv) * d * 4)
        self.q = buf(n * hq * d * 4)
        self.part_m, self.part_l = (buf(n * hq * MAX_SPLITS * 4) for _ in range(2))
        self.part_acc = buf(n * hq * MAX_SPLITS * d * 4)
        self.gu = buf(n * 2 * f * 4)
        if layer:  # the four-launch layer's: att | partials (qkv_attend), act(gate) * up
            self.att = buf((hq * d + hq * MAX_SPLITS * (2 + d)) * 4)
            self.f = buf(f * 4)
        self.logits_bytes = cfg.vocab_size * 4
        self.logits = buf(n * self.logits_bytes)
        BU = dev.wgpu.BufferUsage
        self.readback = dev.device.create_buffer(
            size=n * self.logits_bytes, usage=BU.MAP_READ | BU.COPY_DST
        )


@dataclass(eq=False)
class StepPlan:
    """The dispatches of one token's step for one KV cache layout, ready to encode."""

    ops: list[tuple[Any, Any, tuple[int, int, int]]] = field(default_factory=list)
    kernels: list[str] = field(default_factory=list)
    uniforms: Any = None
    #: ``ops`` as wgpu-native handles (``NativeEncoder``), made on first use
    native: list[tuple[Any, Any, int, int, int]] | None = None


class PlanBuilder:
    """Collects a plan's dispatches: parameter blocks deduplicated into one uniform buffer."""

    def __init__(self, dev: Device) -> None:
        self.dev = dev
        self.plan = StepPlan()
        self._params: dict[bytes, int] = {}
        self._pending: list[tuple[str, frozenset[str], bytes, list[Any], tuple[int, int, int]]] = []

    def add(
        self,
        name: str,
        params: np.ndarray,
        buffers: list[Any],
        groups: tuple[int, int, int],
        defines: frozenset[str] = frozenset(),
    ) -> None:
        raw = np.ascontiguousarray(params).tobytes()
        self._params.setdefault(raw, len(self._params))
        self._pending.append((name, defines, raw, buffers, groups))

    def build(self) -> StepPlan:
        dev = self.dev
        BU = dev.wgpu.BufferUsage
        host = np.zeros(len(self._params) * UNIFORM_SLOT, dtype=np.uint8)
        for raw, slot in self._params.items():
            host[slot * UNIFORM_SLOT : slot * UNIFORM_SLOT + len(raw)] = np.frombuffer(
                raw, np.uint8
            )
        uniforms = dev.device.create_buffer(size=host.size, usage=BU.UNIFORM | BU.COPY_DST)
        dev.device.queue.write_buffer(uniforms, 0, host)
        plan = self.plan
        plan.uniforms = uniforms
        for name, defines, raw, buffers, groups in self._pending:
            pipe = dev.pipeline(name, defines)
            off = self._params[raw] * UNIFORM_SLOT
            entries = [
                {"binding": 0, "resource": {"buffer": uniforms, "offset": off, "size": len(raw)}}
            ]
            entries += [_entry(i + 1, b) for i, b in enumerate(buffers)]
            bind = dev.device.create_bind_group(
                layout=pipe.get_bind_group_layout(0), entries=entries
            )
            plan.ops.append((pipe, bind, groups))
            plan.kernels.append(name)
        return plan


class NativeEncoder:
    """Encodes a plan's dispatches by calling wgpu-native's C functions through wgpu-py's cffi.

    wgpu-py wraps every C call in Python error capture (a few microseconds a call;
    three calls a dispatch, ~300 dispatches a step of a 30-layer model). Encoding
    errors in WebGPU surface at ``encoder.finish()``, which still goes through
    wgpu-py, so nothing is lost by calling the three encoding functions directly.
    """

    def __init__(self, lib: Any, ffi: Any) -> None:
        self.set_pipeline = lib.wgpuComputePassEncoderSetPipeline
        self.set_bind_group = lib.wgpuComputePassEncoderSetBindGroup
        self.dispatch = lib.wgpuComputePassEncoderDispatchWorkgroups
        self.null = ffi.NULL

    @classmethod
    def load(cls, trace: Any) -> NativeEncoder | None:
        """The encoder, or None (a ``trace.fallback``) where this wgpu-py lacks what it needs."""
        try:
            from wgpu.backends.wgpu_native import _api

            return cls(_api.lib, _api.ffi)
        except Exception as exc:  # another wgpu-py layout: encode through its Python API
            trace.fallback(f"webgpu: no direct wgpu-native calls ({exc}); encoding via wgpu-py")
            return None

    def encode(self, cpass: Any, plan: StepPlan) -> None:
        if plan.native is None:
            last, ops = None, []
            for pipe, bind, (gx, gy, gz) in plan.ops:
                ops.append((None if pipe is last else pipe._internal, bind._internal, gx, gy, gz))
                last = pipe
            plan.native = ops
        handle, null = cpass._internal, self.null
        set_pipeline, set_bind_group, dispatch = (
            self.set_pipeline,
            self.set_bind_group,
            self.dispatch,
        )
        for pipe, bind, gx, gy, gz in plan.native:
            if pipe is not None:
                set_pipeline(handle, pipe)
            set_bind_group(handle, 0, bind, 0, null)
            dispatch(handle, gx, gy, gz)


class WebGPURunner(GenericRunner):
    """``GenericRunner`` whose forward pass runs the fused shaders from prebuilt step plans."""

    #: cache capacity per split of the decode attention (fewer: more, shorter splits)
    keys_per_split = 128

    def __init__(self, provider: WebGPUProvider, weights: Any, **opts: Any) -> None:
        super().__init__(provider, weights, **opts)
        cfg = self.config
        self.fused = self.quantize_activations
        if self.fused and (cfg.head_dim > MAX_D or cfg.head_dim % 2):
            provider.trace.fallback(
                f"webgpu: head_dim {cfg.head_dim} (fused shaders take an even head_dim <= "
                f"{MAX_D}): the generic engine runs this model"
            )
            self.fused = False
        self._plans: OrderedDict[tuple[Any, ...], StepPlan] = OrderedDict()
        self._layout_of: dict[int, tuple[Any, ...]] = {}  # id(sequence) -> its latest layout
        self.plans_built = 0
        if not self.fused:
            return
        self.dev = dev = provider.dev
        self.layers = fused_layers(self.weights, lambda ws: fuse_ternary(dev, ws))
        self.layer = env_enabled(ENV_LAYER)
        why = layer_fits(cfg) if self.layer else None
        if why is not None:
            provider.trace.fallback(f"webgpu: ten dispatches a layer ({why})")
            self.layer = False
        self.bufs = StepBuffers(dev, cfg, layer=self.layer)
        self._batch_bufs: dict[int, StepBuffers] = {}  # batched decode steps, by batch size
        self._input = np.zeros(INPUT_BYTES // 4, dtype=np.uint32)
        self.native = NativeEncoder.load(provider.trace) if env_enabled(ENV_NATIVE) else None
        self._map_mode: Any = "READ_NOSYNC"

    # --- the forward pass -------------------------------------------------------------
    def _forward(self, ids: np.ndarray, cache: Sequence, all_logits: bool) -> np.ndarray:
        if not self.fused:
            return super()._forward(ids, cache, all_logits)
        t, start = int(ids.size), cache.length
        cache.reserve(start + t)
        plan = self._plan([cache], self.bufs)
        if t == 1:
            logits = self._decode(plan, int(ids[0]), start)[None]
        else:
            logits = self._prefill(plan, ids, start, all_logits)
        cache.advance(t)
        return logits if all_logits else logits[-1]

    def _decode(self, plan: StepPlan, token: int, start: int) -> np.ndarray:
        dev, b = self.dev, self.bufs
        dev.flush()  # recorded provider work (a KV cache that grew) goes first
        self._input[:3] = (token, start, start + 1)
        queue = dev.device.queue
        queue.write_buffer(b.inp, 0, self._input)
        encoder = dev.device.create_command_encoder()
        self._encode(encoder, plan)
        encoder.copy_buffer_to_buffer(b.logits, 0, b.readback, 0, b.logits_bytes)
        queue.submit([encoder.finish()])
        self._provider.trace.submit()
        return self._read(b.readback, b.logits_bytes)

    def _forward_batch(self, batch: list[tuple[np.ndarray, Sequence]]) -> np.ndarray:
        """The sequences with one new token in one pass; a longer chunk (a prompt) runs
        its own prefill in the same call."""
        if not self.fused:
            return super()._forward_batch(batch)
        return decode_together(batch, self._decode_batch, self._prefill_chunks)

    def _prefill_chunks(self, ids: np.ndarray, cache: Sequence) -> np.ndarray:
        for i in range(0, ids.size, self.max_batch):
            last = self._forward(ids[i : i + self.max_batch], cache, False)
        return last

    def _decode_batch(self, items: list[tuple[np.ndarray, Sequence]]) -> np.ndarray:
        """Logits ``[n, vocab]`` of one token of each sequence (caches reserved; the caller
        advances them): one pass, one submission."""
        n = len(items)
        b = self._batch_bufs.get(n)
        if b is None:
            b = self._batch_bufs[n] = StepBuffers(self.dev, self.config, n)
        caches = [cache for _, cache in items]
        plan = self._plan(caches, b)
        dev = self.dev
        dev.flush()  # recorded provider work (a KV cache that grew) goes first
        starts = np.array([c.length for c in caches], dtype=np.uint32)
        inp = np.concatenate(
            [
                np.array([int(ids[0]) for ids, _ in items], dtype=np.uint32),
                np.stack([starts, starts + 1], axis=1).reshape(-1),
            ]
        )
        queue = dev.device.queue
        queue.write_buffer(b.inp, 0, inp)
        encoder = dev.device.create_command_encoder()
        self._encode(encoder, plan)
        nbytes = n * b.logits_bytes
        encoder.copy_buffer_to_buffer(b.logits, 0, b.readback, 0, nbytes)
        queue.submit([encoder.finish()])
        self._provider.trace.submit()
        return self._read(b.readback, nbytes).reshape(n, -1)

    def _prefill(self, plan: StepPlan, ids: np.ndarray, start: int, all_logits: bool) -> np.ndarray:
        """One pass a token, a submission per ``PREFILL_SUBMIT_TOKENS``; every token's logits
        or the last's."""
        dev, b = self.dev, self.bufs
        dev.flush()
        t = int(ids.size)
        inputs = np.zeros((t, INPUT_BYTES // 4), dtype=np.uint32)
        inputs[:, 0] = ids
        inputs[:, 1] = np.arange(start, start + t)
        inputs[:, 2] = inputs[:, 1] + 1
        BU = dev.wgpu.BufferUsage
        staged = dev.device.create_buffer(size=inputs.nbytes, usage=BU.COPY_SRC | BU.COPY_DST)
        queue = dev.device.queue
        queue.write_buffer(staged, 0, inputs)
        rows = t if all_logits else 1
        readback = b.readback
        if rows > 1:
            readback = dev.device.create_buffer(
                size=rows * b.logits_bytes, usage=BU.MAP_READ | BU.COPY_DST
            )
        for first in range(0, t, PREFILL_SUBMIT_TOKENS):
            encoder = dev.device.create_command_encoder()
            for i in range(first, min(t, first + PREFILL_SUBMIT_TOKENS)):
                encoder.copy_buffer_to_buffer(staged, i * INPUT_BYTES, b.inp, 0, INPUT_BYTES)
                self._encode(encoder, plan)
                row = i - (t - rows)
                if row >= 0:
                    off = row * b.logits_bytes
                    encoder.copy_buffer_to_buffer(b.logits, 0, readback, off, b.logits_bytes)
            queue.submit([encoder.finish()])
            self._provider.trace.submit()
        return self._read(readback, rows * b.logits_bytes).reshape(rows, -1)

    def _encode(self, encoder: Any, plan: StepPlan) -> None:
        """One compute pass with the plan's dispatches."""
        self._provider.trace.launched(len(plan.ops))
        cpass = encoder.begin_compute_pass()
        if self.native is not None:
            self.native.encode(cpass, plan)
        else:
            last = None
            for pipe, bind, groups in plan.ops:
                if pipe is not last:
                    cpass.set_pipeline(pipe)
                    last = pipe
                cpass.set_bind_group(0, bind)
                cpass.dispatch_workgroups(*groups)
        cpass.end()

    def _read(self, readback: Any, nbytes: int) -> np.ndarray:
        """The logits the step's submission copied into ``readback``.

        wgpu-py's plain READ mapping submits an empty command buffer first (a
        workaround for a mapping that no submission preceded); the step's own
        submission precedes this one, so the mode that skips it is used where
        this wgpu-py knows it.
        """
        try:
            readback.map_sync(self._map_mode, 0, nbytes)
        except (KeyError, ValueError, TypeError):  # a wgpu-py without READ_NOSYNC
            self._map_mode = self.dev.wgpu.MapMode.READ
            readback.map_sync(self._map_mode, 0, nbytes)
        try:
            return np.frombuffer(readback.read_mapped(0, nbytes, copy=False), np.float32).copy()
        finally:
            readback.unmap()

    # --- step plans -------------------------------------------------------------------
    @staticmethod
    def _layout(cache: Sequence) -> tuple[Any, ...]:
        """What a plan depends on in one sequence: its cache's buffers, shape and kind."""
        key = tuple(id(_raw(a.buffer)) for a in (*cache.k, *cache.v))
        return (*key, tuple(cache.k[0].shape), cache.k[0].kind)

    def _plan(self, caches: list[Sequence], b: StepBuffers) -> StepPlan:
        """The step plan of these caches' buffers, in this order (built on first use, kept
        LRU).

        A sequence whose cache grew gets new plans and the plans over its old
        layout go (their bind groups would keep the old cache's memory).
        """
        key = tuple(self._layout(c) for c in caches)
        plan = self._plans.get(key)
        if plan is not None:
            self._plans.move_to_end(key)
            return plan
        plan = self._build_plan(caches, b)
        self.plans_built += 1
        for cache, layout in zip(caches, key, strict=True):
            old = self._layout_of.get(id(cache))
            if old is not None and old != layout:
                for stale in [k for k in self._plans if old in k]:
                    del self._plans[stale]
            self._layout_of[id(cache)] = layout
        if len(self._layout_of) > 4 * MAX_PLANS:  # sequences long closed
            live = {layout for k in self._plans for layout in k} | set(key)
            self._layout_of = {s: lay for s, lay in self._layout_of.items() if lay in live}
        self._plans[key] = plan
        if len(self._plans) > MAX_PLANS:
            self._plans.popitem(last=False)
        trace = self._provider.trace
        for name in plan.kernels:
            trace.kernel(name)
        return plan

    def _build_plan(self, caches: list[Sequence], b: StepBuffers) -> StepPlan:
        cfg, dev, p = self.config, self.dev, self._provider
        u32 = np.uint32
        hidden, hq, hkv, d = cfg.hidden_size, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        f, qdim = cfg.intermediate_size, hq * d
        eps = np.float32(cfg.rms_norm_eps).view(u32)
        f16 = caches[0].k[0].kind == "f16"  # one runner, one cache kind
        cache_defs = frozenset({"F16"}) if f16 else frozenset()
        n = len(caches)
        splits = [split_count(int(c.k[0].shape[0]), self.keys_per_split) for c in caches]
        # sequence j: its row, where its position and length are, where its partials start
        at = [1] if n == 1 else [n + 2 * j for j in range(n)]
        part0 = [j * hq * MAX_SPLITS for j in range(n)]
        pb = PlanBuilder(dev)

        for params, binding in p.embedding_params(self.weights.embedding, n):
            pb.add("embedding", params, [binding, b.inp, b.x], (-(-n * hidden // 64), 1, 1))

        def norm_quant(x: Any, g: GpuArray, k: int, out: tuple[Any, Any, Any]) -> None:
            params = np.array([k, q8_words(k), eps, 0], u32)
            pb.add("rmsnorm_quant", params, [x, g.buffer, *out], (n, 1, 1))

        def matmul(w: Any, xin: tuple[Any, Any, Any], k: int, y: Any, add: bool) -> None:
            groups, defines = p.dev.matmul_grid(w.rows, n)
            if dev.dot4:
                defines |= {"DOT4"}
            if add:
                defines |= {"ADD"}
            params = np.array([w.rows, w.kw16, n, q8_words(k), groups[0], 0, 0, 0], u32)
            pb.add("matmul_i2s", params, [w.words, w.scales, *xin, y], groups, defines)

        rope, split_params, combine = [], [], []
        for j in range(n):
            r = np.zeros(8, u32)
            r[:5] = (hq, hkv, d, cfg.rot_dim, 0 if cfg.rope_style == "neox" else 1)
            r[5] = np.float32(math.log2(cfg.rope_theta)).view(u32)
            r[6:] = (j, at[j])
            rope.append(r)
            sp = np.zeros(8, u32)
            sp[:4] = (hq, hkv, d, splits[j])
            sp[4] = np.float32(1.0 / math.sqrt(d)).view(u32)
            sp[5:] = (j, at[j], part0[j])
            split_params.append(sp)
            combine.append(np.array([hq, d, splits[j], q8_words(qdim), eps, j, part0[j], 0], u32))
        act = np.array([f, q8_words(f), 0 if cfg.ffn_activation == "silu" else 1, eps], u32)
        x_in, a_in, f_in = (b.xq, b.xs, b.xsum), (b.aq, b.as_, b.asum), (b.fq, b.fs, b.fsum)
        parts = [b.part_m, b.part_l, b.part_acc]
        rope_groups = (-(-(hq + 2 * hkv) * d // 2 // 64), 1, 1)
        if n == 1 and self.layer:
            self._layer_ops(pb, caches[0], b, splits[0], cache_defs)
        for i, lw in enumerate(self.layers if n > 1 or not self.layer else ()):
            norm_quant(b.x, lw.attn_norm, hidden, x_in)
            matmul(lw.qkv, x_in, hidden, b.qkv, add=False)
            for j, cache in enumerate(caches):
                kc, vc = cache.layer(i)
                pb.add(
                    "rope_store",
                    rope[j],
                    [b.qkv, b.inp, b.q, kc.buffer, vc.buffer],
                    rope_groups,
                    cache_defs,
                )
                pb.add(
                    "attn_split",
                    split_params[j],
                    [b.q, kc.buffer, vc.buffer, b.inp, *parts],
                    (hq, splits[j], 1),
                    cache_defs,
                )
                pb.add(
                    "attn_combine_norm_quant",
                    combine[j],
                    [*parts, lw.attn_sub_norm.buffer, *a_in],
                    (1, 1, 1),
                )
            matmul(lw.o, a_in, qdim, b.x, add=True)
            norm_quant(b.x, lw.ffn_norm, hidden, x_in)
            matmul(lw.gate_up, x_in, hidden, b.gu, add=False)
            pb.add("act_norm_quant", act, [b.gu, lw.ffn_sub_norm.buffer, *f_in], (n, 1, 1))
            matmul(lw.down, f_in, f, b.x, add=True)
        norm = np.zeros(4, u32)
        norm[:3] = (hidden, n, eps)
        pb.add("rmsnorm", norm, [b.x, self.weights.output_norm.buffer, b.head_x], (n, 1, 1))
        for params, binding, groups, defines in p.dense_params(self.weights.head, n):
            pb.add("matmul_dense", params, [binding, b.head_x, b.logits], groups, defines)
        return pb.build()

    def _layer_ops(
        self, pb: PlanBuilder, cache: Sequence, b: StepBuffers, splits: int, cache_defs: frozenset
    ) -> None:
        """One token's layers in four dispatches each (``qkv_attend``, ``norm_gemv`` x 3)."""
        cfg = self.config
        lanes, defines = layer_lanes(self.dev)
        heads = attend_heads(cfg, self.dev)
        attend = qkv_attend_params(cfg, splits, lanes, heads)
        act = 0 if cfg.ffn_activation == "silu" else 1
        for i, lw in enumerate(self.layers):
            kc, vc = cache.layer(i)
            bufs = [b.x, lw.attn_norm.buffer, lw.qkv.words, lw.qkv.scales, b.inp]
            bufs += [kc.buffer, vc.buffer, b.att]
            groups = (cfg.num_heads // heads, 1, 1)
            pb.add("qkv_attend", attend, bufs, groups, cache_defs | defines)
            for w, xin, g, k, y, a in (
                (lw.o, b.att, lw.attn_sub_norm, cfg.num_heads * cfg.head_dim, b.x, None),
                (lw.gate_up, b.x, lw.ffn_norm, cfg.hidden_size, b.f, act),
                (lw.down, b.f, lw.ffn_sub_norm, cfg.intermediate_size, b.x, None),
            ):
                params, groups, acts = norm_gemv_launch(
                    w.rows, w.kw16, k, cfg.rms_norm_eps, lanes, a
                )
                pb.add(
                    "norm_gemv",
                    params,
                    [xin, g.buffer, w.words, w.scales, y],
                    groups,
                    defines | acts,
                )
