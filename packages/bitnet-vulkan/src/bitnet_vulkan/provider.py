"""``VulkanProvider``: every op of the ``KernelProvider`` protocol as a SPIR-V compute shader.

Arrays stay on the device between ops; ops only record into the open
command buffer (``stream.CommandStream``), which runs when something is read
back (``to_host``), so a whole forward pass is one submission. Numerics follow
``bitnet_core.providers.reference`` (see ``bitnet_core.hal.provider``).
"""

from __future__ import annotations

import math
import os
import threading
from typing import Any

import numpy as np

from bitnet_core.errors import (
    ProviderError,
    ShapeError,
    UnsupportedOperationError,
)
from bitnet_core.hal.provider import Availability, RopeStyle
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.sdk.elementwise import ELEMENTWISE_OPS, ElementwiseOps
from bitnet_core.sdk.packing import PACKINGS
from bitnet_core.sdk.provider import DeviceProvider
from bitnet_core.sdk.runtime import never_raises

from . import vkapi
from ._version import __version__
from .arrays import Lease, VulkanArray, VulkanWeight, device_nbytes, padded_cols
from .context import VulkanContext
from .devices import ENV_DEVICE
from .pipelines import PipelineCache, spirv_modules
from .stream import CommandStream, pack_push

ACT_EPS = 1e-5
#: matmul threads a row x rows a workgroup: GPUs (warp-sized rows) and CPU devices (lavapipe)
MATMUL_GPU = (32, 4)
MATMUL_CPU = (8, 16)
#: workgroup size of the subgroup-reduced matmuls (one subgroup a row)
MATMUL_SG_GPU, MATMUL_SG_CPU = 128, 64
SG_TOKENS_PER_PASS = 4  # TOKENS_PER_PASS in matmul_i2s.comp (subgroup variants)
ELEMENTWISE_WG = 256
#: CPU devices (lavapipe) pay per workgroup: a few large ones, each looping, run faster.
CPU_DEVICE_GROUPS = int(os.environ.get("BITNET_VULKAN_CPU_GROUPS", "64"))
ATTENTION_SLOTS = 4  # MAX_SLOTS in attention.comp


def _pow2_at_least(n: int, lo: int, hi: int) -> int:
    return max(lo, min(hi, 1 << max(int(n) - 1, 0).bit_length()))


class VulkanProvider(ElementwiseOps, DeviceProvider):
    """Ternary BitNet kernels on one Vulkan device."""

    name = "vulkan"
    family = "vulkan"
    device_kind = "gpu"
    priority = 40
    distribution = "bitnet-vulkan"
    fakeable = True

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._ctx: VulkanContext | None = None
        self._explicit = True  # constructed directly: the caller asked for this provider
        self._rope_cache: tuple[tuple, VulkanArray, VulkanArray] | None = None
        self._step_values: dict = {}
        self._quant_memo: tuple | None = None  # (x, epoch, xq, xs) of the last linear

    # --- probe and lifetime -----------------------------------------------------
    @never_raises
    def probe(self, explicit: bool = False) -> Availability:
        """Shaders built, loader loads, instance, a device with a compute queue."""
        try:
            spirv_modules()
        except ProviderError as exc:
            return Availability.no(str(exc), step="kernels")
        vkapi.load()
        with self._lock:
            if self._ctx is None:
                self._ctx = self._create(explicit)
                self._explicit = explicit
            ctx = self._ctx
        info = ctx.info
        if not explicit and info.is_cpu and not os.environ.get(ENV_DEVICE):
            return Availability.no(
                f"only a CPU Vulkan device ({info.describe()}); ask for it with "
                f"--device vulkan or {ENV_DEVICE}={info.index}",
            )
        return Availability.yes(
            info.describe(),
            **info.details(),
            integer_dot_product=ctx.use_int_dot,
            bitnet_vulkan=__version__,
        )

    @staticmethod
    def _create(explicit: bool) -> VulkanContext:
        ctx = VulkanContext.create(explicit)
        try:
            ctx.pipelines = PipelineCache(ctx)  # type: ignore[attr-defined]
            ctx.stream = CommandStream(ctx)  # type: ignore[attr-defined]
        except BaseException:
            ctx.close()
            raise
        return ctx

    @property
    def context(self) -> VulkanContext:
        """The device context (created on first use; explicit, as direct use asks for it)."""
        if self._ctx is None:
            with self._lock:
                if self._ctx is None:
                    self._ctx = self._create(self._explicit)
        return self._ctx

    @property
    def stream(self) -> CommandStream:
        return self.context.stream  # type: ignore[attr-defined]

    @property
    def device_info(self):
        return self.context.info

    def synchronize(self) -> None:
        """Run everything recorded so far and wait for it."""
        self.stream.flush()

    def close(self) -> None:
        """Release the device (arrays still alive become unusable)."""
        with self._lock:
            ctx, self._ctx = self._ctx, None
            self._rope_cache = None
            self._step_values = {}
            self._quant_memo = None
            if ctx is not None:
                ctx.stream.close()
                ctx.pipelines.close()
                ctx.close()

    # --- helpers -------------------------------------------------------------------
    def _new(self, shape: tuple[int, ...], dtype: Any = np.float32) -> VulkanArray:
        dtype = np.dtype(dtype)
        buf = self.stream.acquire(device_nbytes(dtype, shape))
        return VulkanArray(Lease(self.stream, buf), shape, dtype)

    def _dev(self, x: Any, op: str, dtype: Any = np.float32) -> VulkanArray:
        """``x`` as a device array of ``dtype`` (host arrays are uploaded, for convenience)."""
        if not isinstance(x, VulkanArray):
            if isinstance(x, VulkanWeight):
                raise ShapeError(f"{op}: got a ternary weight where an array is expected")
            x = self.to_device(np.asarray(x, dtype=dtype))
        if x.dtype != np.dtype(dtype):
            raise UnsupportedOperationError(
                f"{op}: expects {np.dtype(dtype)} arrays, got {x.dtype}"
            )
        return x

    def _table(self, x: Any, op: str) -> VulkanArray:
        if not isinstance(x, VulkanArray):
            arr = np.asarray(x)
            x = self.to_device(arr if arr.dtype == np.float16 else arr.astype(np.float32))
        if x.dtype not in (np.float16, np.float32) or x.ndim != 2:
            raise UnsupportedOperationError(
                f"{op}: tables must be 2-D float16/float32, got {x.dtype} {x.shape}"
            )
        return x

    def _run(
        self,
        shader: str,
        buffers: list[Any],
        push: bytes,
        groups: tuple[int, int, int],
        spec: tuple[int, ...] = (),
    ) -> None:
        pipe = self.context.pipelines.get(shader, len(buffers), spec)
        bufs = [b.buffer if isinstance(b, VulkanArray) else b.buffer for b in buffers]
        self.stream.dispatch(pipe, bufs, push, groups)

    def _row_launch(self, shader: str, rows: int, cols: int):
        """(variant, workgroups, specialization) of a one-row-at-a-time shader (rmsnorm, quantize)."""
        ctx = self.context
        if ctx.use_subgroup:
            wg = MATMUL_SG_CPU if ctx.info.is_cpu else MATMUL_SG_GPU
            per_group = max(1, wg // max(ctx.info.subgroup_size, 1))
            return shader + "_sg", (self._groups(rows, per_group), 1, 1), (wg,)
        return shader, (self._groups(rows, 1), 1, 1), (_pow2_at_least(cols, 32, 256),)

    def _groups(self, n: int, per_group: int) -> int:
        """Workgroups for ``n`` items (the shaders loop over the rest): few on CPU devices."""
        info = self.context.info
        cap = CPU_DEVICE_GROUPS if info.is_cpu else info.limits["max_workgroup_count_x"]
        return max(1, min(-(-n // per_group), cap))

    # --- memory -----------------------------------------------------------------------
    def to_device(self, array: np.ndarray) -> VulkanArray:
        """Upload a host array (float64 becomes float32; 1-D float16 too; int8 rows padded)."""
        a = np.asarray(array)
        if a.dtype == np.float64 or (a.dtype == np.float16 and a.ndim != 2):
            a = a.astype(np.float32)
        elif a.dtype == np.int64:
            a = a.astype(np.int32)
        elif a.dtype.kind not in "fiub":
            raise UnsupportedOperationError(f"to_device: unsupported dtype {a.dtype}")
        out_shape = a.shape
        if a.dtype == np.int8 and a.ndim == 2:
            padded = np.zeros((a.shape[0], padded_cols(a.dtype, a.shape)), dtype=np.int8)
            padded[:, : a.shape[1]] = a
            a = padded
        a = np.ascontiguousarray(a)
        stream = self.stream
        if a.nbytes >= (1 << 20):  # big (weights, tables): a buffer of its own
            buf = stream.allocate_exact(a.nbytes)
        else:
            buf = stream.acquire(a.nbytes, host_write=True)
        stream.upload(buf, a)
        return VulkanArray(Lease(stream, buf), out_shape, a.dtype)

    def to_host(self, array: Any) -> np.ndarray:
        """Download a device array (runs everything recorded so far)."""
        if not isinstance(array, VulkanArray):
            return np.asarray(array)
        raw = self.stream.download(array.buffer, array.nbytes)
        if array.dtype == np.int8 and array.ndim == 2:
            rows, cols = array.shape
            return (
                raw.view(np.int8)
                .reshape(rows, padded_cols(array.dtype, array.shape))[:, :cols]
                .copy()
            )
        return raw.view(array.dtype).reshape(array.shape)

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> VulkanArray:
        """A zero-filled device array."""
        shape = tuple(int(s) for s in shape)
        out = self._new(shape, dtype)
        self.stream.fill_zero(out.buffer, out.nbytes)
        return out

    def reshape(self, x: VulkanArray, shape: tuple[int, ...]) -> VulkanArray:
        return self._dev(
            x, "reshape", x.dtype if isinstance(x, VulkanArray) else np.float32
        ).reshape(shape)

    def load_ternary(self, weight: TernaryWeight) -> VulkanWeight:
        """Upload in the SDK's ``"i2_rows"`` layout (16 codes a uint32 word) and scales."""
        rows, cols = int(weight.rows), int(weight.cols)
        codes, scales = weight.unpack()
        padded = PACKINGS["i2_rows"].pack(codes)
        words = padded.shape[1] // 4
        stream = self.stream
        wbuf = stream.allocate_exact(padded.nbytes)
        stream.upload(wbuf, padded)
        sbuf = stream.allocate_exact(max(rows, 1) * 4)
        stream.upload(sbuf, np.asarray(scales, dtype=np.float32))
        return VulkanWeight(
            weight.name, rows, cols, words, Lease(stream, wbuf), Lease(stream, sbuf)
        )

    # --- ops ---------------------------------------------------------------------------
    def embedding(self, table: Any, ids: np.ndarray) -> VulkanArray:
        table = self._table(table, "embedding")
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        cols = table.shape[1]
        out = self._new((ids.size, cols))
        if out.size == 0:
            return out
        id_buf = self.to_device(ids.astype(np.int32))
        total = ids.size * cols
        self._run(
            "embedding",
            [table, id_buf, out],
            pack_push("II", total, cols),
            (self._groups(total, ELEMENTWISE_WG), 1, 1),
            (ELEMENTWISE_WG, int(table.dtype == np.float16)),
        )
        return out

    def rmsnorm(self, x: Any, weight: Any, eps: float) -> VulkanArray:
        x = self._dev(x, "rmsnorm")
        weight = self._dev(weight, "rmsnorm")
        cols = x.shape[-1]
        rows = x.size // cols if cols else 0
        out = self._new(x.shape)
        if rows == 0 or cols == 0:
            return out
        shader, groups, spec = self._row_launch("rmsnorm", rows, cols)
        self._run(shader, [x, weight, out], pack_push("IIf", rows, cols, float(eps)), groups, spec)
        return out

    def quantize_act(self, x: Any) -> tuple[VulkanArray, VulkanArray]:
        x = self._dev(x, "quantize_act")
        rows, cols = x.shape
        xq = self._new((rows, cols), np.int8)
        xs = self._new((rows,), np.float32)
        if rows == 0:
            return xq, xs
        words = padded_cols(np.dtype(np.int8), (rows, cols)) // 4
        shader, groups, spec = self._row_launch("quantize_act", rows, cols)
        self._run(shader, [x, xq, xs], pack_push("III", rows, cols, words), groups, spec)
        return xq, xs

    @property
    def _matmul_cfg(self) -> tuple[int, int]:
        return MATMUL_CPU if self.context.info.is_cpu else MATMUL_GPU

    def _plain_groups(self, rows: int, tokens: int) -> tuple[int, int, int]:
        """Workgroups of a shared-memory matmul (``_matmul_cfg`` rows each)."""
        ctx = self.context
        lim = ctx.info.limits
        cap = CPU_DEVICE_GROUPS if ctx.info.is_cpu else lim["max_workgroup_count_x"]
        return (
            max(1, min(-(-rows // self._matmul_cfg[1]), cap)),
            max(1, min(tokens, lim["max_workgroup_count_y"])),
            1,
        )

    def _matmul_launch(self, shader: str, rows: int, tokens: int, extra: tuple[int, ...] = ()):
        """(shader variant, workgroups, specialization constants) of a matmul over ``rows``."""
        ctx = self.context
        lim = ctx.info.limits
        cap = CPU_DEVICE_GROUPS if ctx.info.is_cpu else lim["max_workgroup_count_x"]
        if ctx.use_subgroup:
            wg = MATMUL_SG_CPU if ctx.info.is_cpu else MATMUL_SG_GPU
            per_group = max(1, wg // max(ctx.info.subgroup_size, 1))
            spec: tuple[int, ...] = (wg, 1, *extra)
            shader += "_sg"
        else:
            per_group = self._matmul_cfg[1]
            spec = (*self._matmul_cfg, *extra)
        token_groups = tokens
        if shader == "matmul_i2s_sg" or shader == "matmul_i2s_dot_sg":
            token_groups = -(-tokens // SG_TOKENS_PER_PASS)
        groups = (
            max(1, min(-(-rows // per_group), cap)),
            max(1, min(token_groups, lim["max_workgroup_count_y"])),
            1,
        )
        return shader, groups, spec

    def matmul_i2s(self, xq: Any, xscale: Any, weight: VulkanWeight) -> VulkanArray:
        if not isinstance(weight, VulkanWeight):
            raise ShapeError("matmul_i2s: weight must come from load_ternary")
        xq = self._dev(xq, "matmul_i2s", np.int8)
        xscale = self._dev(xscale, "matmul_i2s")
        tokens = xq.shape[0]
        out = self._new((tokens, weight.rows))
        if out.size == 0:
            return out
        shader, groups, spec = self._matmul_launch(
            "matmul_i2s_dot" if self.context.use_int_dot else "matmul_i2s", weight.rows, tokens
        )
        self._run(
            shader,
            [xq, xscale, weight.codes, weight.scales, out],
            pack_push("III", weight.rows, tokens, weight.words_per_row),
            groups,
            spec,
        )
        return out

    def linear(self, x: Any, weight: VulkanWeight) -> VulkanArray:
        """``matmul_i2s(quantize_act(x))``; q/k/v (and gate/up) share one quantization of ``x``."""
        memo = self._quant_memo
        if memo is not None and memo[0] is x and memo[1] == self.stream.epoch:
            xq, xs = memo[2], memo[3]
        else:
            xq, xs = self.quantize_act(x)
            if isinstance(x, VulkanArray):  # holding x keeps its buffer from being reused
                self._quant_memo = (x, self.stream.epoch, xq, xs)
        return self.matmul_i2s(xq, xs, weight)

    def matmul_ternary_float(self, x: Any, weight: VulkanWeight) -> VulkanArray:
        if not isinstance(weight, VulkanWeight):
            raise ShapeError("matmul_ternary_float: weight must come from load_ternary")
        x = self._dev(x, "matmul_ternary_float")
        tokens = x.shape[0]
        out = self._new((tokens, weight.rows))
        if out.size == 0:
            return out
        self._run(
            "matmul_ternary_float",
            [x, weight.codes, weight.scales, out],
            pack_push("IIII", weight.rows, tokens, weight.words_per_row, weight.cols),
            self._plain_groups(weight.rows, tokens),
            self._matmul_cfg,
        )
        return out

    def matmul_dense(self, x: Any, table: Any) -> VulkanArray:
        x = self._dev(x, "matmul_dense")
        table = self._table(table, "matmul_dense")
        tokens, n = x.shape[0], table.shape[0]
        out = self._new((tokens, n))
        if out.size == 0:
            return out
        if x.shape[1] == 0:
            return self.empty((tokens, n))
        shader, groups, spec = self._matmul_launch(
            "matmul_dense", n, tokens, (int(table.dtype == np.float16),)
        )
        self._run(shader, [x, table, out], pack_push("III", n, tokens, x.shape[1]), groups, spec)
        return out

    def rope(
        self, x: Any, positions: np.ndarray, theta: float, style: RopeStyle, rot_dim: int
    ) -> VulkanArray:
        x = self._dev(x, "rope")
        h, d = x.shape[1:]
        positions = np.asarray(positions, dtype=np.float64).reshape(-1)
        out = self._new(x.shape)
        if x.size == 0:
            return out
        cos_t, sin_t = self._rope_tables(positions, float(theta), int(rot_dim))
        self._run(
            "rope",
            [x, cos_t, sin_t, out],
            pack_push("IIII", x.size, h, d, rot_dim),
            (self._groups(x.size, ELEMENTWISE_WG), 1, 1),
            (ELEMENTWISE_WG, int(style == "neox")),
        )
        return out

    def _rope_tables(
        self, positions: np.ndarray, theta: float, rot_dim: int
    ) -> tuple[VulkanArray, VulkanArray]:
        """cos/sin ``[T, rot_dim/2]`` in float64 on the host (q and k share the last ones)."""
        key = (positions.tobytes(), theta, rot_dim)
        if self._rope_cache is not None and self._rope_cache[0] == key:
            return self._rope_cache[1], self._rope_cache[2]
        half = rot_dim // 2
        inv_freq = theta ** (-np.arange(half, dtype=np.float64) * 2.0 / max(rot_dim, 1))
        ang = positions[:, None] * inv_freq[None, :]
        cos_t = self.to_device(np.cos(ang).astype(np.float32).reshape(-1) if half else np.zeros(1))
        sin_t = self.to_device(np.sin(ang).astype(np.float32).reshape(-1) if half else np.zeros(1))
        self._rope_cache = (key, cos_t, sin_t)
        return cos_t, sin_t

    def kv_store(self, cache: Any, x: Any, start: int) -> None:
        if not isinstance(cache, VulkanArray):
            raise UnsupportedOperationError("kv_store: the cache must be a device array")
        x = self._dev(x, "kv_store", cache.dtype)
        if self._quant_memo is not None and self._quant_memo[0].buffer is cache.buffer:
            self._quant_memo = None  # the array it quantized changes
        t = x.shape[0] if x.ndim else 0
        row = int(math.prod(cache.shape[1:]))
        if cache.dtype.itemsize != 4:  # 32-bit caches go through the shader (replayable)
            nbytes = row * cache.dtype.itemsize
            self.stream.copy(x.buffer, cache.buffer, t * nbytes, 0, start * nbytes)
            return
        if t * row == 0:
            return
        self._run(
            "kv_store",
            [x, cache, self._step_value(start)],
            pack_push("II", t * row, row),
            (self._groups(t * row, ELEMENTWISE_WG), 1, 1),
            (ELEMENTWISE_WG,),
        )

    def _step_value(self, value: int) -> VulkanArray:
        """``value`` in a one-word device buffer, shared by the ops of the open step."""
        epoch = self.stream.epoch
        if self._step_values.get("epoch") != epoch:
            self._step_values = {"epoch": epoch}
        found = self._step_values.get(value)
        if found is None:
            found = self._step_values[value] = self.to_device(np.array([value], np.uint32))
        return found

    def attention(self, q: Any, k_cache: Any, v_cache: Any, start: int) -> VulkanArray:
        q = self._dev(q, "attention")
        k_cache = self._dev(k_cache, "attention")
        v_cache = self._dev(v_cache, "attention")
        t, hq, d = q.shape
        hkv = k_cache.shape[1]
        out = self._new(q.shape)
        if q.size == 0:
            return out
        wg = _pow2_at_least(-(-d // ATTENTION_SLOTS), 64, 1024)
        if d > wg * ATTENTION_SLOTS:
            raise UnsupportedOperationError(f"attention: head dim {d} is too large")
        self._run(
            "attention",
            [q, k_cache, v_cache, out, self._step_value(start)],
            pack_push("IIIIf", t, hq, hkv, d, 1.0 / math.sqrt(d)),
            (self._groups(t * hq, 1), 1, 1),
            (wg,),
        )
        return out

    def _elementwise(self, op: str, a: Any, b: Any | None = None) -> VulkanArray:
        a = self._dev(a, op)
        if b is None:
            b_arr, b_size = a, max(a.size, 1)
        else:
            b_arr = self._dev(b, op)
            if b_arr.shape != a.shape:
                try:
                    shape = np.broadcast_shapes(a.shape, b_arr.shape)
                except ValueError:
                    raise ShapeError(
                        f"{op}: shapes {a.shape} and {b_arr.shape} do not broadcast"
                    ) from None
                if shape != a.shape and op in ("add", "mul") and shape == b_arr.shape:
                    a, b_arr = b_arr, a  # commutative: broadcast the smaller one
                    shape = a.shape
                trailing = tuple(
                    b_arr.shape[i]
                    for i in range(b_arr.ndim)
                    if b_arr.shape[i:] != (1,) * (b_arr.ndim - i)
                )
                if shape != a.shape or a.shape[a.ndim - len(trailing) :] != trailing:
                    raise UnsupportedOperationError(
                        f"{op}: broadcasting {a.shape} with {b_arr.shape} is not supported"
                    )
            b_size = max(b_arr.size, 1)
        out = self._new(a.shape)
        if a.size == 0:
            return out
        self._run(
            "elementwise",
            [a, b_arr, out],
            pack_push("II", a.size, b_size),
            (self._groups(a.size, ELEMENTWISE_WG), 1, 1),
            (ELEMENTWISE_WG, ELEMENTWISE_OPS[op]),
        )
        return out
