"""``OpenCLProvider``: every op of the ``KernelProvider`` protocol as OpenCL kernels.

Arrays live on the device between ops as ``CLArray`` (from the buffer pool);
ternary weights are resident in the packed 2-bit layout of
``bitnet_opencl.weights``. Host data moves only in ``to_device``/``to_host``
and for the small per-call inputs the protocol passes as numpy (token ids,
positions: the rope angles are computed on the host in float64, as the
reference does). Every OpenCL failure surfaces as ``ProviderError`` naming
the op.
"""

from __future__ import annotations

import weakref
from collections import OrderedDict
from typing import Any

import numpy as np

from bitnet_core.errors import ShapeError, UnsupportedOperationError
from bitnet_core.hal.provider import RopeStyle
from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.arrays import row_split
from bitnet_core.sdk.attention import AttentionShape
from bitnet_core.sdk.fused import fused_graph_supported
from bitnet_core.sdk.provider import GpuProvider

from .buffers import CLArray
from .memory import OpenCLMemory, cl_op
from .runtime import OpenCLRuntime

#: Attention splits the keys in spans of this many when there are more than one
#: span and fewer (head, query) work-groups than ATTN_SPLIT_BELOW_GROUPS.
ATTN_SPAN = 256
ATTN_SPLIT_BELOW_GROUPS = 512
#: Token counts up to this use the GEMV kernel; larger ones the tiled GEMM.
GEMV_MAX_TOKENS = 8
ENV_FUSED = "BITNET_OPENCL_FUSED"
_WG = 64  # default work-group size of the reducing kernels


def _i32(v: int) -> np.int32:
    return np.int32(v)


class OpenCLProvider(OpenCLRuntime, OpenCLMemory, GpuProvider, family="opencl", priority=30):
    """OpenCL kernels through PyOpenCL on any OpenCL 1.2+ device."""

    aliases = ("ocl",)
    #: the kernels store and read float32 and float16 caches (float32 preferred)
    kv_dtypes = ("float32", "float16")

    def __init__(self, device: str | None = None) -> None:
        """``device``: ``"P:D"`` overriding ``BITNET_OPENCL_DEVICE`` (tests, benchmarks)."""
        OpenCLRuntime.__init__(self, device)
        self._rope_tables: OrderedDict[tuple, CLArray] = OrderedDict()
        self._last_quant: tuple[weakref.ref, CLArray, CLArray] | None = None
        self._locals: dict[int, Any] = {}

    def make_runner(self, weights: Any, **opts: Any) -> Any:
        """The fused runner with replayed decode steps (``runner.py``); None with
        ``BITNET_OPENCL_FUSED=0``."""
        from .runner import OpenCLRunner

        if not env_enabled(ENV_FUSED) or not fused_graph_supported(self, weights):
            return None
        return OpenCLRunner(self, weights, **opts)

    # --- helpers --------------------------------------------------------------
    def _rows(self, name: str, n: int, groups1: int, units: int, item: int, *args) -> None:
        """Launch a row-parallel kernel (``lanes`` items a row) over ``n`` rows."""
        lanes, wg = self.runtime.row_plan(name, units)
        rows_per_group = wg // lanes
        grid = (-(-n // rows_per_group) * wg, groups1)
        self._run(name, grid, (wg, 1), *args, _i32(lanes), self._local(wg * item))

    # --- ops ------------------------------------------------------------------
    @cl_op
    def embedding(self, table: Any, ids: np.ndarray) -> CLArray:
        if isinstance(ids, CLArray):
            ids = self.to_host(ids)
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not isinstance(table, CLArray):
            table = self.to_device(np.asarray(table))
        if table.ndim != 2 or table.dtype not in (np.float32, np.float16):
            raise UnsupportedOperationError(
                f"opencl embedding: table must be 2-D float32/float16, got {table.shape} {table.dtype}"
            )
        k = table.shape[1]
        out = self._alloc((ids.size, k))
        if ids.size and k:
            dev_ids = self.to_device(ids.astype(np.int32))
            name = "embedding_f16" if table.dtype == np.float16 else "embedding_f32"
            self._run(name, (k, ids.size), None, table.buffer, dev_ids.buffer, out.buffer, _i32(k))
        return out

    @cl_op
    def rmsnorm(self, x: Any, weight: Any, eps: float) -> CLArray:
        x, w = self._dev(x, "rmsnorm"), self._dev(weight, "rmsnorm")
        rows, k = row_split(x.shape)
        out = self._alloc(x.shape)
        if rows and k:
            rt = self.runtime
            lsz = rt.reduce_group("rmsnorm", _WG, k)
            acc = 8 if rt.features.fp64 else 4
            self._run(
                "rmsnorm", (lsz * rows,), (lsz,), x.buffer, w.buffer, out.buffer, _i32(k),
                np.float32(eps), self._local(lsz * acc),
            )  # fmt: skip
        return out

    @cl_op
    def quantize_act(self, x: Any) -> tuple[CLArray, CLArray]:
        x = self._dev(x, "quantize_act")
        t, k = x.shape
        xq = self._alloc((t, k), np.int8)
        xs = self._alloc((t,), np.float32)
        if t:
            lsz = self.runtime.reduce_group("quantize_act", _WG, max(k, 1))
            self._run(
                "quantize_act", (lsz * t,), (lsz,), x.buffer, xq.buffer, xs.buffer, _i32(k),
                self._local(lsz * 4),
            )  # fmt: skip
        return xq, xs

    @cl_op
    def matmul_i2s(self, xq: Any, xscale: Any, weight: Any) -> CLArray:
        w = self._check_weight(weight, "matmul_i2s")
        xq = self._dev(xq, "matmul_i2s", np.int8)
        xs = self._dev(xscale, "matmul_i2s", np.float32)
        t = xq.shape[0]
        n, k = w.rows, w.cols
        out = self._alloc((t, n))
        if not (t and n):
            return out
        rt = self.runtime
        args = (w.packed, _i32(w.blocks_per_row), xq.buffer, xs.buffer, w.scales, out.buffer)
        if t > GEMV_MAX_TOKENS and rt.kernel_max_work_group("gemm_i2s") >= 64:
            grid = (8 * -(-n // 32), 8 * -(-t // 32))
            self._run("gemm_i2s", grid, (8, 8), *args, _i32(n), _i32(k), _i32(t))
        else:
            self._rows("gemv_i2s", n, t, w.blocks_per_row, 4, *args, _i32(n), _i32(k))
        return out

    @cl_op
    def linear(self, x: Any, weight: Any) -> CLArray:
        """``quantize_act`` then ``matmul_i2s``. The quantized activations of the last
        input are remembered, so q/k/v (and gate/up) of one ``h`` quantize it once."""
        last = self._last_quant
        if last is not None and isinstance(x, CLArray) and last[0]() is x:
            xq, xs = last[1], last[2]
        else:
            xq, xs = self.quantize_act(x)
            self._last_quant = (weakref.ref(x), xq, xs) if isinstance(x, CLArray) else None
        return self.matmul_i2s(xq, xs, weight)

    @cl_op
    def matmul_ternary_float(self, x: Any, weight: Any) -> CLArray:
        w = self._check_weight(weight, "matmul_ternary_float")
        x = self._dev(x, "matmul_ternary_float")
        t, n = x.shape[0], w.rows
        out = self._alloc((t, n))
        if t and n:
            self._rows(
                "gemv_ternary_f32", n, t, w.blocks_per_row * 4, 4, w.packed,
                _i32(w.blocks_per_row), x.buffer, w.scales, out.buffer, _i32(n), _i32(w.cols),
            )  # fmt: skip
        return out

    @cl_op
    def matmul_dense(self, x: Any, table: Any) -> CLArray:
        x = self._dev(x, "matmul_dense")
        if not isinstance(table, CLArray):
            table = self.to_device(np.asarray(table))
        if table.dtype not in (np.float32, np.float16):
            raise UnsupportedOperationError(f"opencl matmul_dense: table dtype {table.dtype}")
        t, (n, k) = x.shape[0], table.shape
        out = self._alloc((t, n))
        if t and n:
            name = "dense_f16" if table.dtype == np.float16 else "dense_f32"
            self._rows(
                name, n, -(-t // 4), max(1, k // 4), 4, x.buffer, table.buffer, out.buffer,
                _i32(n), _i32(k), _i32(t),
            )  # fmt: skip
        return out

    @cl_op
    def rope(
        self, x: Any, positions: np.ndarray, theta: float, style: RopeStyle, rot_dim: int
    ) -> CLArray:
        x = self._dev(x, "rope")
        t, h, d = x.shape
        if isinstance(positions, CLArray):
            positions = self.to_host(positions)
        positions = np.asarray(positions).reshape(-1)
        out = self._alloc(x.shape)
        if x.size:
            cs, pos0 = self._rope_table(positions, theta, max(rot_dim, 2))
            self._run(
                "rope", (d, h, t), None, x.buffer, cs.buffer, out.buffer, _i32(h), _i32(d),
                _i32(rot_dim), _i32(1 if style == "neox" else 0), _i32(pos0),
            )  # fmt: skip
        return out

    @cl_op
    def kv_store(self, cache: Any, x: Any, start: int) -> None:
        """Rows ``start..`` of ``cache`` = ``x``; float32 rows into a float16 cache are
        rounded to nearest even on the device."""
        if not isinstance(cache, CLArray):
            raise UnsupportedOperationError("opencl kv_store: the cache must come from empty()")
        same = isinstance(x, CLArray) and x.dtype == cache.dtype
        x = self._dev(x, "kv_store", cache.dtype if same else np.float32)
        t = x.shape[0] if x.ndim else 0
        if start < 0 or start + t > (cache.shape[0] if cache.ndim else 0):
            raise ShapeError(
                f"opencl kv_store: rows {start}..{start + t} outside the cache's {cache.shape}"
            )
        self._last_quant = None  # the only op that writes into an existing array
        if not x.size:
            return
        if x.dtype != cache.dtype:  # float32 into float16
            if cache.dtype != np.float16:
                raise UnsupportedOperationError(f"opencl kv_store: a {cache.dtype} cache")
            row = x.size // t
            self._run("store_f16", (x.size,), None, x.buffer, cache.buffer, _i32(start * row))
            return
        row = x.nbytes // t
        rt = self.runtime
        rt.cl.enqueue_copy(
            rt.queue, cache.buffer, x.buffer, byte_count=x.nbytes, dst_offset=start * row
        )
        self.trace.submit()

    @cl_op
    def attention(self, q: Any, k_cache: Any, v_cache: Any, start: int) -> CLArray:
        q = self._dev(q, "attention")
        kv_dtype = k_cache.dtype if isinstance(k_cache, CLArray) else np.float32
        if kv_dtype not in (np.float32, np.float16):
            raise UnsupportedOperationError(f"opencl attention: a {kv_dtype} cache")
        kc, vc = (self._dev(a, "attention", kv_dtype) for a in (k_cache, v_cache))
        f16 = "_f16" if kv_dtype == np.float16 else ""
        geo = AttentionShape.of(q, kc, start)
        out = self._alloc(q.shape)
        if not q.size:
            return out
        t, hq, hkv, d = geo.tokens, geo.heads, geo.kv_heads, geo.dim
        scale, n_max = np.float32(geo.scale), geo.keys
        splits = -(-n_max // ATTN_SPAN)
        if splits > 1 and hq * t < ATTN_SPLIT_BELOW_GROUPS:
            # few (head, query) work-groups over many keys: split the keys
            lsz = self.runtime.reduce_group("attention_part", _WG, ATTN_SPAN)
            po = self._alloc((t, hq, splits, d))
            pml = self._alloc((t, hq, splits, 2))
            self._run(
                "attention_part" + f16, (lsz * hq, t, splits), (lsz, 1, 1), q.buffer, kc.buffer,
                vc.buffer, po.buffer, pml.buffer, _i32(hq), _i32(hkv), _i32(d), _i32(start),
                scale, _i32(ATTN_SPAN), self._local(d * 4), self._local(d * 4),
                self._local(lsz * 4), self._local(lsz * 4),
            )  # fmt: skip
            mlsz = self.runtime.reduce_group("attention_merge", _WG, d)
            self._run(
                "attention_merge", (mlsz * hq, t), (mlsz, 1), po.buffer, pml.buffer, out.buffer,
                _i32(hq), _i32(d), _i32(splits),
            )  # fmt: skip
            return out
        lsz = self.runtime.reduce_group("attention", _WG, n_max)
        self._run(
            "attention" + f16, (lsz * hq, t), (lsz, 1), q.buffer, kc.buffer, vc.buffer, out.buffer,
            _i32(hq), _i32(hkv), _i32(d), _i32(start), scale, self._local(d * 4),
            self._local(d * 4), self._local(lsz * 4), self._local(lsz * 4),
        )  # fmt: skip
        return out

    def _unary(self, name: str, x: Any) -> CLArray:
        x = self._dev(x, name)
        out = self._alloc(x.shape)
        if x.size:
            self._run(name, (x.size,), None, x.buffer, out.buffer)
        return out

    def _binary(self, name: str, a: Any, b: Any, broadcast: bool) -> CLArray:
        a = self._dev(a, name)
        b = self._dev(b, name)
        if a.shape != b.shape and a.shape[a.ndim - b.ndim :] != b.shape:
            raise UnsupportedOperationError(
                f"opencl {name}: {b.shape} must broadcast over {a.shape}"
            )
        out = self._alloc(a.shape)
        if a.size:
            extra = (_i32(b.size),) if broadcast else ()
            self._run(name, (a.size,), None, a.buffer, b.buffer, out.buffer, *extra)
        return out

    @cl_op
    def silu(self, x: Any) -> CLArray:
        return self._unary("silu", x)

    @cl_op
    def relu2(self, x: Any) -> CLArray:
        return self._unary("relu2", x)

    @cl_op
    def silu_mul(self, gate: Any, up: Any) -> CLArray:
        return self._binary("silu_mul", gate, up, broadcast=False)

    @cl_op
    def relu2_mul(self, gate: Any, up: Any) -> CLArray:
        return self._binary("relu2_mul", gate, up, broadcast=False)

    @cl_op
    def add(self, a: Any, b: Any) -> CLArray:
        """``a + b``; ``b`` may broadcast over ``a``'s leading dimensions."""
        return self._binary("add", a, b, broadcast=True)

    @cl_op
    def mul(self, a: Any, b: Any) -> CLArray:
        """``a * b``; ``b`` may broadcast over ``a``'s leading dimensions."""
        return self._binary("mul", a, b, broadcast=True)
