"""The ``webgpu`` kernel provider: every op of the protocol as a WGSL compute shader.

Arrays live in wgpu storage buffers (``GpuArray``) between ops; ternary weights
are uploaded once in the 2-bit layout ``matmul_i2s.wgsl`` reads; activations
are quantized to int8 packed four to a u32. Dispatches are recorded and
submitted together when the host reads a result (see ``runtime.py``).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bitnet_core.errors import UnsupportedOperationError
from bitnet_core.hal.provider import RopeStyle
from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.elementwise import ELEMENTWISE_OPS, ElementwiseOps
from bitnet_core.sdk.fused import fused_graph_supported
from bitnet_core.sdk.provider import GpuProvider

from .memory import GpuArray, GpuTernary, WebGPUMemory
from .runtime import WebGPURuntime


class WebGPUProvider(
    WebGPURuntime, WebGPUMemory, ElementwiseOps, GpuProvider, family="webgpu", priority=50
):
    """Runs BitNet ops through wgpu (Vulkan, Metal or D3D12; lavapipe when asked); float16
    KV caches hold two halves a u32, read with ``unpack2x16float``."""

    aliases = ("wgpu",)
    #: the shaders store and read float32 and float16 caches (float32 preferred)
    kv_dtypes = ("float32", "float16")
    #: storage buffers are committed when created: KV caches grow block by block
    commits_on_touch = False

    def make_runner(self, weights: Any, **opts: Any) -> Any:
        """The fused decode runner (``runner.py``); None with ``BITNET_WEBGPU_FUSED=0``."""
        from .runner import WebGPURunner

        if not env_enabled("BITNET_WEBGPU_FUSED") or not fused_graph_supported(self, weights):
            return None
        return WebGPURunner(self, weights, **opts)

    # --- ops ------------------------------------------------------------------------
    def embedding(self, table: GpuArray, ids: np.ndarray) -> GpuArray:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        d = table.shape[1]
        out = self._new((ids.size, d))
        if ids.size == 0:
            return out
        idb = self.dev.upload(ids.astype(np.int32), "token ids")
        total = ids.size * d
        for params, binding in self.embedding_params(table, ids.size):
            bufs = [binding, idb, out.buffer]
            self.dev.dispatch("embedding", params, bufs, (-(-total // 64), 1, 1))
        return out

    def embedding_params(self, table: GpuArray, t: int) -> list[tuple[np.ndarray, Any]]:
        """(parameters, table binding) of each embedding dispatch over ``table``'s ranges."""
        f16 = 1 if table.kind == "f16" else 0
        kw = table.row_words if f16 else table.shape[1]
        return [
            (np.array([t, table.shape[1], kw, f16, row0, rows, 0, 0], dtype=np.uint32), binding)
            for row0, rows, binding in self.table_ranges(table)
        ]

    def rmsnorm(self, x: Any, weight: Any, eps: float) -> GpuArray:
        x, g = self._f32(x), self._f32(weight)
        d = x.shape[-1]
        rows = x.size // d
        out = self._new(x.shape)
        params = np.zeros(4, dtype=np.uint32)
        params[0], params[1] = d, rows
        params[2] = np.float32(eps).view(np.uint32)
        if rows:
            self.dev.dispatch("rmsnorm", params, [x.buffer, g.buffer, out.buffer], (rows, 1, 1))
        return out

    def quantize_act(self, x: Any) -> tuple[GpuArray, GpuArray]:
        x = self._f32(x)
        t, k = x.shape
        kw = max(1, -(-k // 16)) * 4
        xq = GpuArray(self.dev.buffer(t * kw * 4, "int8 activations"), (t, k), "q8", row_words=kw)
        xq.xsum = self.dev.buffer(t * 4, "activation sums")
        scale = self._new((t,), "activation scales")
        if t:
            params = np.array([k, kw, t, 0], dtype=np.uint32)
            bufs = [x.buffer, xq.buffer, scale.buffer, xq.xsum]
            self.dev.dispatch("quantize_act", params, bufs, (t, 1, 1))
        return xq, scale

    def matmul_i2s(self, xq: Any, xscale: Any, weight: GpuTernary) -> GpuArray:
        if not isinstance(xq, GpuArray) or xq.kind != "q8":
            xq = self._upload_q8(np.asarray(xq, dtype=np.int8))
        xs = self._f32(xscale)
        t = xq.shape[0]
        out = self._new((t, weight.rows))
        if t and weight.rows:
            groups, defines = self.dev.matmul_grid(weight.rows, t)
            params = np.array(
                [weight.rows, weight.kw16, t, xq.row_words, groups[0], 0, 0, 0], dtype=np.uint32
            )
            bufs = [weight.words, weight.scales, xq.buffer, xs.buffer, xq.xsum, out.buffer]
            if self.dev.dot4:
                defines |= {"DOT4"}
            self.dev.dispatch("matmul_i2s", params, bufs, groups, defines)
        return out

    def linear(self, x: Any, weight: GpuTernary) -> GpuArray:
        xq, xs = self.quantize_act(x)
        return self.matmul_i2s(xq, xs, weight)

    def matmul_ternary_float(self, x: Any, weight: GpuTernary) -> GpuArray:
        """Debug path (activation quantization off): float32 x times the ternary weight.

        Runs as a dense matmul against the weight expanded to float32 once and cached.
        """
        dense = getattr(weight, "_dense", None)
        if dense is None:
            dense = self.to_device(weight.host.dense())
            weight._dense = dense  # type: ignore[attr-defined]
        return self.matmul_dense(x, dense)

    def matmul_dense(self, x: Any, table: Any) -> GpuArray:
        x = self._f32(x)
        table = table if isinstance(table, GpuArray) else self.to_device(np.asarray(table))
        t, k = x.shape
        n = table.shape[0]
        out = self._new((t, n))
        if t and n:
            for params, binding, groups, defines in self.dense_params(table, t):
                bufs = [binding, x.buffer, out.buffer]
                self.dev.dispatch("matmul_dense", params, bufs, groups, defines)
        return out

    def dense_params(self, table: GpuArray, t: int) -> list[tuple[Any, ...]]:
        """(parameters, table binding, grid, defines) of each matmul_dense dispatch."""
        f16 = 1 if table.kind == "f16" else 0
        n, k = table.shape
        kw = table.row_words if f16 else k
        out = []
        for row0, rows, binding in self.table_ranges(table):
            groups, defines = self.dev.matmul_grid(rows, t)
            params = np.array([rows, k, t, kw, f16, groups[0], row0, n], dtype=np.uint32)
            out.append((params, binding, groups, defines))
        return out

    def rope(
        self, x: Any, positions: np.ndarray, theta: float, style: RopeStyle, rot_dim: int
    ) -> GpuArray:
        x = self._f32(x)
        t, h, d = x.shape
        out = self._new(x.shape)
        if x.size:
            pos = self.dev.upload(np.asarray(positions, dtype=np.int32).reshape(-1), "positions")
            params = np.zeros(8, dtype=np.uint32)
            params[:5] = [t, h, d, rot_dim, 0 if style == "neox" else 1]
            params[5] = np.float32(math.log2(theta)).view(np.uint32)
            self.dev.dispatch("rope", params, [x.buffer, pos, out.buffer], (-(-x.size // 64), 1, 1))
        return out

    def kv_store(self, cache: GpuArray, x: Any, start: int) -> None:
        if cache.kind == "f16" and isinstance(x, GpuArray) and x.kind == "f16":
            # a float16 cache copied into a larger one (the KV cache growing)
            nbytes = -(-x.size // 2) * 4
            if start or x.size > cache.size:
                raise UnsupportedOperationError("webgpu: float16 arrays are copied whole, at 0")
            self.dev.copy(x.buffer, 0, cache.buffer, 0, nbytes)
            return
        x = self._f32(x)
        t = x.shape[0]
        row = math.prod(cache.shape[1:])
        if not t:
            return
        if cache.kind == "f16":
            params = np.array([start * row, t * row, 0, 0], dtype=np.uint32)
            words = (start * row + t * row - 1) // 2 - start * row // 2 + 1
            groups = -(-words // 64)
            grid = (*self.dev.grid(groups), 1)
            self.dev.dispatch("kv_store_f16", params, [x.buffer, cache.buffer], grid)
        else:
            self.dev.copy(x.buffer, 0, cache.buffer, start * row * 4, t * row * 4)

    def attention(self, q: Any, k_cache: GpuArray, v_cache: GpuArray, start: int) -> GpuArray:
        q = self._f32(q)
        t, hq, d = q.shape
        hkv = k_cache.shape[1]
        out = self._new(q.shape)
        if t:
            # rows of the scores scratch as long as the cache, not the position: the same
            # buffer size (so the same pooled buffer and bind group) at every decode step
            s_max = int(k_cache.shape[0])
            scratch = self.dev.buffer(t * hq * s_max * 4, "attention scores")
            params = np.zeros(8, dtype=np.uint32)
            params[:6] = [t, hq, hkv, d, s_max, start]
            params[6] = np.float32(1.0 / math.sqrt(d)).view(np.uint32)
            bufs = [q.buffer, k_cache.buffer, v_cache.buffer, scratch, out.buffer]
            f16 = frozenset({"F16"}) if k_cache.kind == "f16" else frozenset()
            self.dev.dispatch("attention", params, bufs, (t, hq, 1), f16)
        return out

    def _elementwise(self, op: str, a: Any, b: Any = None) -> GpuArray:
        a = self._f32(a)
        bb = self._f32(b) if b is not None else a
        if bb.shape != a.shape:
            raise UnsupportedOperationError(
                f"webgpu {op}: broadcasting {bb.shape} is not supported"
            )
        out = self._new(a.shape)
        n = a.size
        if n:
            groups = -(-n // 256)
            params = np.array([n, ELEMENTWISE_OPS[op], 0, 0], dtype=np.uint32)
            bufs = [a.buffer, bb.buffer, out.buffer]
            self.dev.dispatch("elementwise", params, bufs, (*self.dev.grid(groups), 1))
        return out
