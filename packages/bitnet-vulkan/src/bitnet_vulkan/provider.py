"""``VulkanProvider``: every op of the ``KernelProvider`` protocol as a SPIR-V compute shader.

Arrays stay on the device between ops; ops only record into the open
command buffer (``stream.CommandStream``), which runs when something is read
back (``to_host``), so a whole forward pass is one submission. Numerics follow
``bitnet_core.providers.reference`` (see ``bitnet_core.hal.provider``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bitnet_core.errors import ShapeError, UnsupportedOperationError
from bitnet_core.hal.provider import RopeStyle
from bitnet_core.sdk.arrays import row_split
from bitnet_core.sdk.attention import AttentionShape
from bitnet_core.sdk.elementwise import ELEMENTWISE_OPS, ElementwiseOps
from bitnet_core.sdk.fused import fused_graph_supported
from bitnet_core.sdk.provider import GpuProvider

from .arrays import SplitTable, VulkanArray, VulkanWeight, padded_cols
from .launch import VulkanLaunch, pow2_at_least
from .memory import VulkanMemory
from .runtime.session import VulkanRuntime
from .stream import pack_push

ACT_EPS = 1e-5
ELEMENTWISE_WG = 256
ATTENTION_SLOTS = 4  # MAX_SLOTS in attention.comp


class VulkanProvider(
    VulkanRuntime,
    VulkanMemory,
    VulkanLaunch,
    ElementwiseOps,
    GpuProvider,
    family="vulkan",
    priority=40,
):
    """Ternary BitNet kernels on one Vulkan device (float16 KV caches: two elements a word)."""

    #: the shaders store and read float32 and float16 caches (float32 preferred)
    kv_dtypes = ("float32", "float16")

    def __init__(self) -> None:
        VulkanRuntime.__init__(self)
        self._rope_cache: tuple[tuple, VulkanArray, VulkanArray] | None = None
        self._step_values: dict = {}
        self._quant_memo: tuple | None = None  # (x, epoch, xq, xs) of the last linear

    def make_runner(self, weights: Any, **opts: Any) -> Any:
        """The fused forward pass with recorded decode steps (``runner.py``); None with
        ``BITNET_VULKAN_FUSED=0``."""
        from .runner import VulkanRunner, fused_enabled

        if not fused_enabled() or not fused_graph_supported(self, weights):
            return None
        return VulkanRunner(self, weights, **opts)

    def close(self) -> None:
        """Release the device (arrays still alive become unusable)."""
        self._rope_cache, self._step_values, self._quant_memo = None, {}, None
        VulkanRuntime.close(self)

    # --- ops ---------------------------------------------------------------------------
    def embedding(self, table: Any, ids: np.ndarray) -> VulkanArray:
        table = self._table(table, "embedding")
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        cols = table.shape[1]
        out = self._new((ids.size, cols))
        if out.size == 0:
            return out
        self.launch_embedding(table, self.to_device(ids.astype(np.int32)), out, ids.size)
        return out

    def launch_embedding(self, table: Any, ids: Any, out: Any, t: int) -> None:
        """Record ``out[:t] = table[ids[:t]]`` (device arrays; a split table: a dispatch a part)."""
        cols = int(table.shape[1])
        total = t * cols
        parts = table.parts if isinstance(table, SplitTable) else [(0, table)]
        for row0, part in parts:
            self._run(
                "embedding",
                [part, ids, out],
                pack_push("IIII", total, cols, row0, part.shape[0]),
                (self._groups(total, ELEMENTWISE_WG), 1, 1),
                (ELEMENTWISE_WG, int(table.dtype == np.float16)),
            )

    def rmsnorm(self, x: Any, weight: Any, eps: float) -> VulkanArray:
        x, weight = self._dev(x, "rmsnorm"), self._dev(weight, "rmsnorm")
        rows, cols = row_split(x.shape)
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
        self.launch_dense(x, table, out, tokens)
        return out

    def launch_dense(self, x: Any, table: Any, out: Any, tokens: int) -> None:
        """Record ``out[:tokens] = x @ table.T`` (device arrays; a split table: a dispatch a part)."""
        n, k = int(table.shape[0]), int(table.shape[1])
        parts = table.parts if isinstance(table, SplitTable) else [(0, table)]
        for row0, part in parts:
            rows = int(part.shape[0])
            shader, groups, spec = self._matmul_launch(
                "matmul_dense", rows, tokens, (int(table.dtype == np.float16),)
            )
            push = pack_push("IIIII", rows, tokens, k, n, row0)
            self._run(shader, [x, part, out], push, groups, spec)

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

    def kv_store(self, cache: Any, x: Any, start: int) -> None:
        if not isinstance(cache, VulkanArray):
            raise UnsupportedOperationError("kv_store: the cache must be a device array")
        half = cache.dtype == np.float16
        x = self._dev(x, "kv_store", cache.dtype if not half or _is_half(x) else np.float32)
        if self._quant_memo is not None and self._quant_memo[0].buffer is cache.buffer:
            self._quant_memo = None  # the array it quantized changes
        t = x.shape[0] if x.ndim else 0
        row = int(math.prod(cache.shape[1:]))
        if x.dtype == cache.dtype and cache.dtype.itemsize != 4:  # same 16-bit rows: a copy
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
            (ELEMENTWISE_WG, int(half)),
        )

    def attention(self, q: Any, k_cache: Any, v_cache: Any, start: int) -> VulkanArray:
        q = self._dev(q, "attention")
        k_cache = self._dev(k_cache, "attention", _cache_dtype(k_cache))
        v_cache = self._dev(v_cache, "attention", _cache_dtype(k_cache))
        geo = AttentionShape.of(q, k_cache, start)
        out = self._new(q.shape)
        if q.size == 0:
            return out
        wg = pow2_at_least(-(-geo.dim // ATTENTION_SLOTS), 64, 1024)
        if geo.dim > wg * ATTENTION_SLOTS:
            raise UnsupportedOperationError(f"attention: head dim {geo.dim} is too large")
        self._run(
            "attention",
            [q, k_cache, v_cache, out, self._step_value(start)],
            pack_push(  # splits 1, first row 0, stride 1 (the fused runner's batched step)
                "IIIIfIII", geo.tokens, geo.heads, geo.kv_heads, geo.dim, geo.scale, 1, 0, 1
            ),
            (self._groups(geo.tokens * geo.heads, 1), 1, 1),
            (wg, int(k_cache.dtype == np.float16)),
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


def _is_half(x: Any) -> bool:
    return getattr(x, "dtype", None) == np.float16


def _cache_dtype(cache: Any) -> Any:
    """float16 for a float16 cache (device or host), else float32."""
    return np.float16 if _is_half(cache) else np.float32
