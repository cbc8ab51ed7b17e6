"""The ``cuda`` kernel provider: BitNet ops on NVIDIA GPUs through CuPy.

Arrays are CuPy arrays on the device between ops. Ternary weights are
uploaded once (2 bits a weight, 16-byte rows of 64 codes, the layout
``kernels/bitnet_kernels.cu`` describes); activations are quantized on the
device; only logits come back. CuPy loads the CUDA driver at run time, so
this package installs and reports itself unavailable where there is none.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from bitnet_core.errors import UnsupportedOperationError
from bitnet_core.hal.provider import RopeStyle
from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.fused import fused_graph_supported
from bitnet_core.sdk.provider import GpuProvider

from .memory import CudaMemory, CudaQ8, CudaTernary, HalfTable, pack_cuda_ternary
from .runtime import CudaRuntime, import_cupy

__all__ = [
    "CudaProvider",
    "CudaQ8",
    "CudaTernary",
    "HalfTable",
    "import_cupy",
    "pack_cuda_ternary",
]

WARPS_PER_BLOCK = 8
MAXT = 8  # tokens per GEMV block (kernels' MAXT)
#: rows a warp of the GEMV (``matmul_i2s_r2``, below ``MMA_MIN_TOKENS`` tokens) and of the
#: head (``matmul_dense_*_r4``), one token included: each activation load feeds them all.
#: Measured on an H100 (2B-4T shapes, docs/GPU.md): r2 beat r4 and one row a warp at 1-8
#: tokens (gate|up at one token 6.3 us against 8.5), the head's r4 at one token 217 us
#: against 346 for one row a warp. Results are the same bits whichever runs.
I2S_ROWS, DENSE_ROWS = 2, 4
ROWS_WARPS = 4  # warps a block of the multi-row kernels
MMA_WARPS, MMA_NT = 4, 4  # matmul_i2s_mma: warps a block, 8-token groups a warp (kernels')
#: from this many tokens a ternary matmul runs on int8 tensor cores (sm_80+)
MMA_MIN_TOKENS = 16


def device_address(array: Any) -> int:
    """The device address of a CuPy array (a numpy one's host address in the emulator)."""
    iface = getattr(array, "__cuda_array_interface__", None) or array.__array_interface__
    return int(iface["data"][0])


class CudaProvider(CudaRuntime, CudaMemory, GpuProvider, family="cuda", priority=10):
    """Runs BitNet ops with CUDA kernels (dp4a GEMV, warp-per-row head, fused norms)."""

    #: float16 first: half the bytes attention reads per key (llama.cpp's default too)
    kv_dtypes = ("float16", "float32")
    #: a BF16 file's embedding/head stays bfloat16 (two bytes a value, not a float32 copy)
    table_dtypes = ("float32", "float16", "bfloat16")
    #: device memory is committed when allocated: KV caches grow block by block
    commits_on_touch = False

    def __init__(self) -> None:
        self._cp: Any = None
        self.device_id = 0  # BITNET_CUDA_DEVICE, read when CuPy is loaded
        self._mod: Any = None
        self._kernels: dict[str, Any] = {}
        self._tensor_cores: bool | None = None
        self.kernel_source = ""

    def make_runner(self, weights: Any, **opts: Any) -> Any:
        """The fused, graph-captured runner (``runner.py``); None with ``BITNET_CUDA_FUSED=0``."""
        from .runner import CudaRunner

        if not env_enabled("BITNET_CUDA_FUSED") or not fused_graph_supported(self, weights):
            return None
        return CudaRunner(self, weights, **opts)

    # --- ops --------------------------------------------------------------------------
    def embedding(self, table: Any, ids: np.ndarray) -> Any:
        ids = np.asarray(ids, dtype=np.int64).reshape(-1)
        if not isinstance(table, HalfTable):
            return self._f32(table[self.cp.asarray(ids)])
        got = table.data[self.cp.asarray(ids)][:, : table.cols]
        if table.kind == "bf16":
            return (got.astype(np.uint32) << 16).view(np.float32)
        return got.astype(np.float32)

    def rmsnorm(self, x: Any, weight: Any, eps: float) -> Any:
        x, g = self._f32(x), self._f32(weight)
        d = int(x.shape[-1])
        x = self.cp.ascontiguousarray(x)
        y = self.cp.empty_like(x)
        rows = x.size // d if d else 0
        if rows:
            self._k("rmsnorm")((rows,), (256,), (x, g, y, np.int32(d), np.float32(eps)))
        return y

    def quantize_act(self, x: Any) -> tuple[CudaQ8, Any]:
        x = self.cp.ascontiguousarray(self._f32(x))
        t, k = (int(v) for v in x.shape)
        kp = max(1, -(-k // 64)) * 64
        xq = self.cp.empty((t, kp), dtype=np.int8)
        scale = self.cp.empty((t,), dtype=np.float32)
        xsum = self.cp.empty((t,), dtype=np.int32)
        if t:
            self._k("quantize_act")((t,), (256,), (x, xq, scale, xsum, np.int32(k), np.int32(kp)))
        return CudaQ8(xq, xsum, k), scale

    def matmul_i2s(self, xq: Any, xscale: Any, weight: CudaTernary) -> Any:
        if not isinstance(xq, CudaQ8):
            xq = self._upload_q8(
                np.asarray(xq, dtype=np.int8) if not hasattr(xq, "device") else self.cp.asnumpy(xq)
            )
        xs = self._f32(xscale)
        t = xq.shape[0]
        y = self.cp.empty((t, weight.rows), dtype=np.float32)
        if t and weight.rows:
            self.launch_i2s(weight.words, weight.scales, xq.data, xs, xq.xsum, y, t)
        return y

    def launch_i2s(
        self,
        words: Any,
        scales: Any,
        xq: Any,
        xs: Any,
        xsum: Any,
        y: Any,
        t: int,
        add: bool = False,
        per_warp: int | None = None,
    ) -> str:
        """y [t, rows] (+)= the ternary matmul: int8 tensor cores from ``MMA_MIN_TOKENS``
        tokens where the GPU has them, else dp4a tiles of ``I2S_ROWS`` rows a warp.
        ``per_warp`` (1, 2 or 4) forces the dp4a tiles of that many rows (benchmarks,
        tests). Returns the kernel's name."""
        rows, kw = int(words.shape[0]), int(words.shape[1])
        if per_warp is None and t >= MMA_MIN_TOKENS and self.tensor_cores:
            name = "matmul_i2s_mma"
            grid = (-(-rows // (16 * MMA_WARPS)), -(-t // (8 * MMA_NT)))
            block, k_words = (32 * MMA_WARPS,), kw
        else:
            r = per_warp or I2S_ROWS
            if r == 1:
                name = "matmul_i2s"
                grid = (-(-rows // WARPS_PER_BLOCK), -(-t // MAXT))
                block, k_words = (32 * WARPS_PER_BLOCK,), kw // 4
            else:
                name = f"matmul_i2s_r{r}"
                grid = (-(-rows // (ROWS_WARPS * r)), -(-t // MAXT))
                block, k_words = (32 * ROWS_WARPS,), kw
        name += "_add" if add else ""
        args = (words, scales, xq, xs, xsum, y, np.int32(rows), np.int32(k_words), np.int32(t))
        self._k(name)(grid, block, args)
        return name

    def linear(self, x: Any, weight: CudaTernary) -> Any:
        xq, xs = self.quantize_act(x)
        return self.matmul_i2s(xq, xs, weight)

    def matmul_ternary_float(self, x: Any, weight: CudaTernary) -> Any:
        """Debug path (no activation quantization): float32 matmul against the expanded weight."""
        if weight.dense is None:
            weight.dense = self.cp.asarray(weight.host.dense())
        return self._f32(x) @ weight.dense.T

    def matmul_dense(self, x: Any, table: Any) -> Any:
        x = self.cp.ascontiguousarray(self._f32(x))
        n = int(table.shape[0])
        t = int(x.shape[0])
        y = self.cp.empty((t, n), dtype=np.float32)
        if t and n:
            self.launch_dense(table, x, y, t)
        return y

    def launch_dense(self, table: Any, x: Any, y: Any, t: int, per_warp: int | None = None) -> str:
        """y [t, n] = x [t, cols] @ table.T for a ``HalfTable`` (16-byte loads) or an f32 table:
        ``DENSE_ROWS`` rows a warp (a half table's x read as float4: cols a multiple of 8,
        x 16-byte aligned, else one row a warp). ``per_warp`` (1 or ``DENSE_ROWS``) forces
        one. Returns the kernel's name."""
        n, cols = (int(v) for v in table.shape)
        half = isinstance(table, HalfTable)
        wide = not half or (cols % 8 == 0 and device_address(x) % 16 == 0)
        r = per_warp or (DENSE_ROWS if wide else 1)
        if r not in (1, DENSE_ROWS) or (r > 1 and not wide):
            raise ValueError(f"launch_dense: {r} rows a warp for this table and x")
        name = f"matmul_dense_{table.kind if half else 'f32'}" + ("" if r == 1 else f"_r{r}")
        warps = WARPS_PER_BLOCK if r == 1 else ROWS_WARPS
        grid, block = (-(-n // (warps * r)), -(-t // MAXT)), (32 * warps,)
        if half:
            loads = int(table.data.shape[1]) // 8
            args = (table.data, x, y, np.int32(n), np.int32(cols), np.int32(loads), np.int32(t))
        else:
            args = (self._f32(table), x, y, np.int32(n), np.int32(cols), np.int32(t))
        self._k(name)(grid, block, args)
        return name

    def rope(
        self, x: Any, positions: np.ndarray, theta: float, style: RopeStyle, rot_dim: int
    ) -> Any:
        x = self.cp.ascontiguousarray(self._f32(x))
        t, h, d = (int(v) for v in x.shape)
        y = self.cp.empty_like(x)
        work = t * h * (rot_dim // 2 + d - rot_dim)
        if work:
            pos = self.cp.asarray(np.asarray(positions, np.int32).reshape(-1))
            self._k("rope")(
                (-(-work // 256),),
                (256,),
                (
                    x,
                    pos,
                    y,
                    np.int32(t),
                    np.int32(h),
                    np.int32(d),
                    np.int32(rot_dim),
                    np.int32(0 if style == "neox" else 1),
                    np.float32(math.log2(theta)),
                ),
            )
        return y

    def kv_store(self, cache: Any, x: Any, start: int) -> None:
        x = self._f32(x)
        cache[start : start + int(x.shape[0])] = x

    def attention(self, q: Any, k_cache: Any, v_cache: Any, start: int) -> Any:
        q = self.cp.ascontiguousarray(self._f32(q))
        t, hq, d = (int(v) for v in q.shape)
        hkv = int(k_cache.shape[1])
        if k_cache.dtype != v_cache.dtype or k_cache.dtype not in (np.float32, np.float16):
            raise UnsupportedOperationError(
                f"attention: K/V caches of {k_cache.dtype}/{v_cache.dtype} (float32 or float16)"
            )
        out = self.cp.empty_like(q)
        if t:
            n_max = start + t
            scores = self.cp.empty((t, hq, n_max), dtype=np.float32)
            self._k("attention_f16" if k_cache.dtype == np.float16 else "attention")(
                (t, hq),
                (128,),
                (
                    q,
                    k_cache,
                    v_cache,
                    scores,
                    out,
                    np.int32(hq),
                    np.int32(hkv),
                    np.int32(d),
                    np.int32(start),
                    np.int32(n_max),
                    np.float32(1.0 / math.sqrt(d)),
                ),
            )
        return out

    def silu(self, x: Any) -> Any:
        x = self._f32(x)
        return x / (1.0 + self.cp.exp(-x))

    def relu2(self, x: Any) -> Any:
        r = self.cp.maximum(self._f32(x), 0.0)
        return r * r

    def silu_mul(self, gate: Any, up: Any) -> Any:
        return self.silu(gate) * self._f32(up)

    def relu2_mul(self, gate: Any, up: Any) -> Any:
        return self.relu2(gate) * self._f32(up)

    def add(self, a: Any, b: Any) -> Any:
        return self._f32(a) + self._f32(b)

    def mul(self, a: Any, b: Any) -> Any:
        return self._f32(a) * self._f32(b)
