"""The ``cuda`` kernel provider: BitNet ops on NVIDIA GPUs through CuPy.

Arrays are CuPy arrays on the device between ops. Ternary weights are
uploaded once (2 bits a weight, 16-byte rows of 64 codes, the layout
``kernels/bitnet_kernels.cu`` describes); activations are quantized on the
device; only logits come back. CuPy loads the CUDA driver at run time, so
this package installs and reports itself unavailable where there is none.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.errors import ProviderError, ShapeError, UnsupportedOperationError
from bitnet_core.formats.dense import BF16Array, bf16_to_f32
from bitnet_core.hal.provider import Availability, RopeStyle
from bitnet_core.hal.switches import env_enabled
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.sdk.packing import pack_lanes
from bitnet_core.sdk.runtime import import_runtime, never_raises

from .module import load_module

WARPS_PER_BLOCK = 8
MAXT = 8  # tokens per GEMV block (kernels' MAXT)
MMA_WARPS, MMA_NT = 4, 4  # matmul_i2s_mma: warps a block, 8-token groups a warp (kernels')
#: from this many tokens a ternary matmul runs on int8 tensor cores (sm_80+)
MMA_MIN_TOKENS = 16
CUPY_HINT = "pip install 'bitnet-cuda[cuda12]', or [cuda13] for a CUDA 13 driver"


def import_cupy() -> Any:
    """The cupy module; ``RuntimeUnavailable`` (step import/loader) when it cannot load."""
    return import_runtime("cupy", CUPY_HINT, "CuPy")


def pack_cuda_ternary(codes: np.ndarray) -> np.ndarray:
    """The SDK's ``"i2_lanes"`` layout, rows padded to 64 columns (a multiple of 4 words)."""
    return pack_lanes(codes, 64)


@dataclass(eq=False)
class CudaTernary:
    words: Any  # cupy uint32 [rows, kw]
    scales: Any  # cupy float32 [rows]
    rows: int
    cols: int
    host: TernaryWeight
    dense: Any = None  # float32 copy, made only for the debug path


@dataclass(eq=False)
class CudaQ8:
    """Quantized activations: int8 [T, kp] (zero padded) and per-row sums."""

    data: Any
    xsum: Any
    cols: int

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.data.shape[0]), self.cols)


class CudaProvider(ReferenceProvider):
    """Runs BitNet ops with CUDA kernels (dp4a GEMV, warp-per-row head, fused norms)."""

    name = "cuda"
    family = "cuda"
    device_kind = "gpu"
    priority = 10
    distribution = "bitnet-cuda"
    fakeable = True
    #: float16 first: half the bytes attention reads per key (llama.cpp's default too)
    kv_dtypes = ("float16", "float32")
    #: a BF16 file's embedding/head stays bfloat16 (two bytes a value, not a float32 copy)
    table_dtypes = ("float32", "float16", "bfloat16")
    #: device memory is committed when allocated: KV caches grow block by block
    commits_on_touch = False

    def __init__(self) -> None:
        self._cp: Any = None
        self._mod: Any = None
        self._kernels: dict[str, Any] = {}
        self._tensor_cores: bool | None = None
        self.kernel_source = ""

    def _cupy_module(self) -> Any:
        """CuPy (the tests' CPU emulator of the device overrides this)."""
        return import_cupy()

    # --- probe (seed 002: a reason at each step that fails) -----------------------
    @never_raises
    def probe(self, explicit: bool = False) -> Availability:
        cp = self._cupy_module()
        try:
            count = cp.cuda.runtime.getDeviceCount()
        except Exception as exc:
            return Availability.no(f"CUDA driver/runtime not usable: {exc}")
        if count < 1:
            return Availability.no("no CUDA device found")
        try:
            props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
            name = (
                props["name"].decode() if isinstance(props["name"], bytes) else str(props["name"])
            )
            cc = (int(props["major"]), int(props["minor"]))
            free, total = cp.cuda.runtime.memGetInfo()
        except Exception as exc:
            return Availability.no(f"CUDA device query failed: {exc}")
        if cc < (6, 1):
            return Availability.no(
                f"{name}: compute capability {cc[0]}.{cc[1]} lacks dp4a (needs 6.1)"
            )
        return Availability.yes(
            f"{name} (sm_{cc[0]}{cc[1]})",
            devices=count,
            compute_capability=f"{cc[0]}.{cc[1]}",
            memory_total=int(total),
            memory_free=int(free),
            cupy=cp.__version__,
        )

    def make_backend(self, weights: Any, **opts: Any) -> Any:
        """The fused, graph-captured backend (``backend.py``); None with ``BITNET_CUDA_FUSED=0``."""
        from .backend import CudaBackend

        return CudaBackend(self, weights, **opts) if env_enabled("BITNET_CUDA_FUSED") else None

    @property
    def cp(self) -> Any:
        if self._cp is None:
            self._cp = self._cupy_module()
            try:
                self._mod, self.kernel_source = load_module(self._cp)
            except Exception as exc:
                raise ProviderError(f"CUDA kernels failed to load: {exc}") from exc
        return self._cp

    def _k(self, name: str) -> Any:
        fn = self._kernels.get(name)
        if fn is None:
            _ = self.cp
            fn = self._kernels[name] = self._mod.get_function(name)
        return fn

    @property
    def tensor_cores(self) -> bool:
        """Int8 mma.sync (compute capability 8.0+), unless ``BITNET_CUDA_MMA=0``."""
        if self._tensor_cores is None:
            cp = self.cp
            props = cp.cuda.runtime.getDeviceProperties(cp.cuda.Device().id)
            cc = (int(props["major"]), int(props["minor"]))
            self._tensor_cores = cc >= (8, 0) and env_enabled("BITNET_CUDA_MMA")
        return self._tensor_cores

    # --- memory ---------------------------------------------------------------------
    def to_device(self, array: np.ndarray | BF16Array) -> Any:
        if isinstance(array, BF16Array) and array.ndim == 2:
            return self._half_table(array.bits, "bf16")
        a = np.asarray(array)
        if a.dtype == np.float16 and a.ndim == 2:
            return self._half_table(a, "f16")
        if a.dtype == np.int8 and a.ndim == 2:
            return self._upload_q8(a)
        if np.issubdtype(a.dtype, np.integer):
            return self.cp.asarray(a.astype(np.int32))
        if a.dtype == np.float16:
            return self.cp.asarray(a)
        return self.cp.asarray(a, dtype=np.float32)

    def _half_table(self, a: np.ndarray, kind: str) -> HalfTable:
        rows, cols = a.shape
        padded = np.zeros((rows, max(8, -(-cols // 8) * 8)), a.dtype)
        padded[:, :cols] = a
        return HalfTable(self.cp.asarray(padded), cols, kind)

    def _upload_q8(self, xq: np.ndarray) -> CudaQ8:
        t, k = xq.shape
        kp = max(1, -(-k // 64)) * 64
        padded = np.zeros((t, kp), np.int8)
        padded[:, :k] = xq
        xsum = xq.astype(np.int32).sum(axis=1, dtype=np.int32)
        return CudaQ8(self.cp.asarray(padded), self.cp.asarray(xsum), k)

    def to_host(self, array: Any) -> np.ndarray:
        if isinstance(array, CudaQ8):
            return self.cp.asnumpy(array.data)[:, : array.cols]
        if isinstance(array, HalfTable):
            values = self.cp.asnumpy(array.data)[:, : array.cols]
            return bf16_to_f32(values).reshape(values.shape) if array.kind == "bf16" else values
        return self.cp.asnumpy(array) if hasattr(array, "device") else np.asarray(array)

    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> Any:
        return self.cp.zeros(shape, dtype=dtype)

    def reshape(self, array: Any, shape: tuple[int, ...]) -> Any:
        if math.prod(shape) != array.size:
            raise ShapeError(f"reshape: {tuple(array.shape)} cannot become {tuple(shape)}")
        return array.reshape(shape)

    def load_ternary(self, weight: TernaryWeight) -> CudaTernary:
        codes, scales = weight.unpack()
        return CudaTernary(
            self.cp.asarray(pack_cuda_ternary(codes)),
            self.cp.asarray(scales.astype(np.float32)),
            weight.rows,
            weight.cols,
            weight,
        )

    def _f32(self, x: Any) -> Any:
        if isinstance(x, (CudaQ8, HalfTable)):
            raise UnsupportedOperationError("cuda: expected a float32 array")
        if not hasattr(x, "device"):
            return self.cp.asarray(np.asarray(x, np.float32))
        return x if x.dtype == np.float32 else x.astype(np.float32)

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
    ) -> None:
        """y [t, rows] (+)= the ternary matmul: int8 tensor cores from ``MMA_MIN_TOKENS``
        tokens where the GPU has them, else the dp4a GEMV tiles."""
        rows, kw = int(words.shape[0]), int(words.shape[1])
        if t >= MMA_MIN_TOKENS and self.tensor_cores:
            name = "matmul_i2s_mma_add" if add else "matmul_i2s_mma"
            grid = (-(-rows // (16 * MMA_WARPS)), -(-t // (8 * MMA_NT)))
            block, k_words = (32 * MMA_WARPS,), kw
        else:
            name = "matmul_i2s_add" if add else "matmul_i2s"
            grid = (-(-rows // WARPS_PER_BLOCK), -(-t // MAXT))
            block, k_words = (32 * WARPS_PER_BLOCK,), kw // 4
        args = (words, scales, xq, xs, xsum, y, np.int32(rows), np.int32(k_words), np.int32(t))
        self._k(name)(grid, block, args)

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

    def launch_dense(self, table: Any, x: Any, y: Any, t: int) -> None:
        """y [t, n] = x [t, cols] @ table.T for a ``HalfTable`` (16-byte loads) or an f32 table."""
        n, cols = (int(v) for v in table.shape)
        grid = (-(-n // WARPS_PER_BLOCK), -(-t // MAXT))
        block = (32 * WARPS_PER_BLOCK,)
        if isinstance(table, HalfTable):
            loads = int(table.data.shape[1]) // 8
            args = (table.data, x, y, np.int32(n), np.int32(cols), np.int32(loads), np.int32(t))
            self._k(f"matmul_dense_{table.kind}")(grid, block, args)
        else:
            args = (self._f32(table), x, y, np.int32(n), np.int32(cols), np.int32(t))
            self._k("matmul_dense_f32")(grid, block, args)

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


@dataclass(eq=False)
class HalfTable:
    """A float16 or bfloat16 (``kind``) table [rows, cols] on the device.

    ``data`` is [rows, padded] with rows zero-padded to a multiple of 8 values,
    so the head reads 16 bytes a lane: float16, or uint16 bfloat16 bit patterns.
    """

    data: Any
    cols: int
    kind: str  # "f16" or "bf16"

    @property
    def shape(self) -> tuple[int, int]:
        return (int(self.data.shape[0]), self.cols)
