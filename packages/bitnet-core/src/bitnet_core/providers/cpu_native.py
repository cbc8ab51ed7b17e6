"""The native CPU providers: ``cpu-avx512``, ``cpu-avx2``, ``cpu-neon``, ``cpu-scalar``.

Each wraps the C++ kernels of one instruction set (``bitnet_core._native.Kernels``)
and overrides the reference provider's heavy ops with them; the cheap ops that
are one numpy pass already (``add``, ``mul``, ``embedding``, ``kv_store``) stay
inherited. Arrays stay numpy arrays on the host. Kernels release the GIL and
run on a C++ thread pool.

Settings (environment, or the constructor / ``set_threads``):

- ``BITNET_THREADS``: threads per kernel (default: the CPUs this process may
  use, from ``sched_getaffinity``);
- ``BITNET_CPU_LAYOUT``: ternary layout: ``auto`` (the default: llama.cpp
  TQ2_0 tensors keep their bytes as they are, other formats are repacked to
  ``i2_128``), ``i2_128`` (2 bits a weight) or ``tq1_160`` (1.6 bits a weight:
  20% fewer bytes, more decode work);
- ``BITNET_CPU_HUGE_PAGES``: the packed weights (TQ2_0 bytes copied from the
  file's mapping too) live in memory advised as transparent huge pages
  (Linux; read once per process): a decode step, which reads every weight,
  misses the TLB once per 2 MiB instead of per 4 KiB page; advised once the
  runner is built, off the load's path (``huge_pages.py``). ``eager``: advised
  at mapping (the load clears the huge pages). ``0``: plain
  memory, and TQ2_0 tensors used in place from the file's mapping (zero-copy:
  processes that load one file share its page cache);
- ``BITNET_CPU_INT8_HEAD``: the output head (``matmul_dense``). ``checked``:
  an int8 copy of the table with per-row scales (half the bytes of float16),
  then every row whose error bound says it could hold a token's largest logit
  is recomputed exactly on the float table: each token's argmax (greedy
  decoding) and the logits near it are the exact head's, bit for bit, the
  others the int8 approximation (within about 1% of the largest logit).
  ``0``: the float table, every logit exact. ``1``: the int8 copy alone, which
  can change a greedy token. ``auto`` (the default): ``checked`` for a head
  table of at least 16 MiB (where its bytes are a large share of a decode
  step), ``0`` below (the model head of the fused runner: the ``matmul_dense``
  op itself takes ``auto`` as ``0``);
- ``BITNET_CPU_AFFINITY``: pin the kernels' threads (Linux): ``compact`` (thread
  i on the i-th CPU this process may use: the calling thread first, then the
  pool's workers), or a CPU list such as ``0-15`` or ``0,2,4,6``; unset or
  ``none``: the OS places them (the default);
- ``BITNET_CPU_SPIN_US``: how long the pool's idle workers spin for the next
  job before they sleep (read once per process; default 200; 0 sleeps at once,
  for cores shared with other busy processes);
- ``BITNET_CPU_FUSED=0``: run models op by op through the generic engine
  instead of the fused C++ forward pass (``cpu_runner.FusedCpuRunner``).

See docs/CPU_KERNELS.md for the layouts and kernels.
"""

from __future__ import annotations

import os
import platform
import weakref
from typing import Any

import numpy as np

from ..errors import ConfigError, QuantizationError, ShapeError, UnsupportedOperationError
from ..hal.provider import Availability, RopeStyle
from ..hal.switches import env_int
from ..hal.weights import TernaryWeight
from ..native import cpu_features, load_native
from ..sdk.load_stages import stage
from .file_pages import file_extent, release_file_pages
from .huge_pages import promote_weights_later
from .reference import ReferenceProvider

LAYOUTS = ("auto", "i2_128", "tq1_160")
#: What ``BITNET_CPU_INT8_HEAD`` chooses: the float head, the int8 copy, the int8
#: copy with the exact recheck of the rows that could hold the maximum, or ``auto``
#: (``checked`` for heads of ``CHECKED_HEAD_MIN_BYTES`` and more, else ``exact``).
HEAD_MODES = ("auto", "exact", "int8", "checked")
CHECKED_HEAD_MIN_BYTES = 16 << 20
CHECKED_HEAD_MAX_COLS = 32768  # wider rows: the kernel's bound has no slack left
_I8_BLOCK_ROWS = 4096  # rows of the output head converted to int8 at a time

#: CPU features each instruction set's kernels need.
REQUIRED_FEATURES: dict[str, tuple[str, ...]] = {
    "avx512": ("avx512f", "avx512bw", "avx512vl", "avx512vnni", "avx2", "fma", "f16c"),
    "avx2": ("avx2", "fma", "f16c"),
    "neon": ("neon",),
    "scalar": (),
}


def threads_from_env() -> int:
    """``BITNET_THREADS`` if set (a positive integer), else 0 (= all usable CPUs)."""
    return env_int("BITNET_THREADS", 0, minimum=1)


def layout_from_env() -> str:
    layout = os.environ.get("BITNET_CPU_LAYOUT", "auto").strip() or "auto"
    if layout not in LAYOUTS:
        raise ConfigError(f"BITNET_CPU_LAYOUT must be one of {', '.join(LAYOUTS)}, got {layout!r}")
    return layout


def head_mode_from_env() -> str:
    """``BITNET_CPU_INT8_HEAD``: unset/``auto``, ``0`` (``exact``), ``1`` (``int8``), ``checked``."""
    text = os.environ.get("BITNET_CPU_INT8_HEAD", "").strip().lower()
    if text in ("", "auto"):
        return "auto"
    if text in ("0", "false", "no", "off"):
        return "exact"
    if text in ("1", "true", "yes", "on"):
        return "int8"
    if text == "checked":
        return "checked"
    raise ConfigError(f"BITNET_CPU_INT8_HEAD must be auto, 0, 1 or checked, got {text!r}")


def parse_cpu_list(text: str) -> list[int]:
    """``"0-3,8,10-11"`` -> ``[0, 1, 2, 3, 8, 10, 11]`` (ValueError if malformed)."""
    cpus: list[int] = []
    for part in text.split(","):
        lo, sep, hi = part.strip().partition("-")
        if not lo.isdigit() or (sep and not hi.isdigit()):
            raise ValueError(f"{part.strip()!r} is not a CPU number or range")
        first, last = int(lo), int(hi) if sep else int(lo)
        if last < first:
            raise ValueError(f"{part.strip()!r}: the range runs backwards")
        cpus.extend(range(first, last + 1))
    return cpus


def affinity_from_env() -> list[int] | None:
    """The CPUs ``BITNET_CPU_AFFINITY`` pins the kernels' threads to, in thread order;
    None when unset or ``none`` (no pinning). ConfigError for a bad value or a CPU this
    process may not use."""
    text = os.environ.get("BITNET_CPU_AFFINITY", "").strip().lower()
    if text in ("", "none"):
        return None
    allowed = sorted(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else []
    if text == "compact":
        cpus = allowed
    else:
        try:
            cpus = parse_cpu_list(text)
        except ValueError as exc:
            raise ConfigError(
                f"BITNET_CPU_AFFINITY must be 'compact', 'none' or a CPU list like 0-7,16: {exc}"
            ) from None
        outside = sorted(set(cpus) - set(allowed))
        if allowed and outside:
            raise ConfigError(
                f"BITNET_CPU_AFFINITY: CPU {outside[0]} is not one this process may use "
                f"({len(allowed)} allowed)"
            )
    return cpus or None


def _f32(x: Any) -> np.ndarray:
    return np.ascontiguousarray(x, dtype=np.float32)


class NativeCpuProvider(ReferenceProvider):
    """Base of the native CPU providers; subclasses set ``isa`` and ``name``."""

    isa = "scalar"
    name = "cpu-scalar"
    family = "cpu"
    device_kind = "cpu"
    priority = 90
    #: float16 first, as llama.cpp: half the bytes decode reads from the cache each step
    kv_dtypes = ("float16", "float32")

    def __init__(
        self,
        threads: int | None = None,
        layout: str | None = None,
        int8_head: bool | str | None = None,
    ) -> None:
        self._threads = threads
        self._layout = layout
        self._int8_head = int8_head  # True, False, "checked", "auto", or None: the environment
        self._kernels: Any = None
        # id(table) -> (a reference to the table, its int8 copy); the entry goes with the table
        self._i8_tables: dict[int, tuple[Any, Any]] = {}
        self.promotion: Any = None  # the thread moving the weights into huge pages, if any

    # --- settings -----------------------------------------------------------
    @property
    def threads(self) -> int:
        """Threads per kernel (resolved: never 0)."""
        return self.kernels.threads

    def set_threads(self, threads: int) -> None:
        if threads < 1:
            raise ConfigError(f"threads must be >= 1, got {threads}")
        self._threads = threads
        self._kernels = None

    @property
    def layout(self) -> str:
        return self._layout or layout_from_env()

    @property
    def head_mode(self) -> str:
        """How the output head runs, as configured: one of ``HEAD_MODES``."""
        choice = self._int8_head
        if choice is None:
            return head_mode_from_env()
        if choice in ("checked", "auto"):
            return str(choice)
        if isinstance(choice, bool):
            return "int8" if choice else "exact"
        raise ConfigError(f"int8_head must be True, False, 'checked' or 'auto', got {choice!r}")

    def head_mode_for(self, table: Any) -> str:
        """How a model's head on ``table`` runs: ``exact``, ``int8`` or ``checked`` (``auto``
        resolved by the table's size; the ``matmul_dense`` op takes ``auto`` as ``exact``)."""
        mode = self.head_mode
        if mode != "auto":
            return mode
        rows, cols = np.shape(table)
        big = rows * cols * np.dtype(table.dtype).itemsize >= CHECKED_HEAD_MIN_BYTES
        return "checked" if big and cols <= CHECKED_HEAD_MAX_COLS else "exact"

    @property
    def kernels(self) -> Any:
        if self._kernels is None:
            threads = self._threads if self._threads is not None else threads_from_env()
            cpus = affinity_from_env()
            try:
                self._kernels = self.native_module().Kernels(self.isa, threads)
            except ValueError as exc:
                raise UnsupportedOperationError(f"{self.name}: {exc}") from None
            if cpus is not None and not self.native_module().set_thread_affinity(cpus):
                raise ConfigError("BITNET_CPU_AFFINITY: this OS cannot pin threads")
        return self._kernels

    # --- probe --------------------------------------------------------------
    def probe(self, explicit: bool = False) -> Availability:
        mod, reason = load_native()
        if mod is None:
            return Availability.no(reason)
        if self.isa == "neon" and platform.machine().lower() not in ("aarch64", "arm64"):
            return Availability.no(f"not an arm64 CPU ({platform.machine()})")
        feats = cpu_features()
        missing = [f for f in REQUIRED_FEATURES[self.isa] if not feats.get(f, False)]
        if missing:
            return Availability.no(f"CPU lacks {', '.join(missing)}")
        if self.isa not in mod.compiled_isas():
            return Availability.no(f"bitnet_core._native was built without {self.isa} kernels")
        try:
            threads = self.threads
        except Exception as exc:  # probe never raises
            return Availability.no(str(exc))
        return Availability.yes(
            f"CPU {self.isa} ({threads} threads)", threads=threads, layout=self.layout
        )

    # --- memory -------------------------------------------------------------
    def to_device(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array)

    def load_ternary(self, weight: TernaryWeight) -> Any:
        mod = self.native_module()
        layout = self.layout
        # TQ2_0 bytes as they are hold the block scales, not llama.cpp's optional ``.scale``
        # factor: a weight with one is repacked below, the factor applied
        factor = getattr(weight.codec, "factor", None)
        if layout == "auto" and weight.format == "tq2_0" and factor is None:
            extent = file_extent(np.asarray(weight.raw)) if mod.huge_page_weights() else None
            try:  # the file's bytes as they are, no repacking: read into huge pages (pread
                # where they are in a file), or, where there are none, used in place
                if extent is not None:
                    return mod.TernaryMatrix.from_file(
                        "tq2_0",
                        *extent,
                        weight.rows,
                        weight.cols,
                        "tq2_0",
                        weight.name,
                        None,
                        self.threads,
                    )
                matrix = mod.TernaryMatrix.from_tq2_0(
                    weight.raw, weight.rows, weight.cols, weight.name
                )
                if not matrix.in_place:
                    release_file_pages(np.asarray(weight.raw))
                return matrix
            except ValueError:
                pass  # unusual data (e.g. zero-scale blocks with codes): the codec decides
        target = "i2_128" if layout == "auto" else layout
        source = weight.native_source()
        if source is not None:
            fmt, factor = source
            shape = (weight.rows, weight.cols, target, weight.name, factor, self.threads)
            extent = file_extent(np.asarray(weight.raw))
            try:  # the file's bytes straight into the kernels' layout, on every thread: read
                # with pread where they are in a file (no mapping to fault in and let go)
                if extent is not None:
                    return mod.TernaryMatrix.from_file(fmt, *extent, *shape)
                return mod.TernaryMatrix.from_raw(fmt, weight.raw, *shape)
            except ValueError:
                pass  # a row the codec reads otherwise or refuses: the codec decides
        codes, scales = weight.unpack()
        try:
            return mod.TernaryMatrix.from_codes(
                codes, np.asarray(scales, np.float32), target, weight.name
            )
        except ValueError as exc:
            raise QuantizationError(str(exc)) from None

    # --- ops ----------------------------------------------------------------
    def _run(self, op: str, *args: Any) -> Any:
        try:
            return getattr(self.kernels, op)(*args)
        except ValueError as exc:
            raise ShapeError(f"{op}: {exc}") from None
        except TypeError as exc:  # a weight of another provider, a wrong dtype
            raise ShapeError(f"{op}: unsupported arguments ({exc})") from None

    def rmsnorm(self, x: np.ndarray, weight: np.ndarray, eps: float) -> np.ndarray:
        return self._run("rmsnorm", _f32(x), _f32(weight), float(eps))

    def quantize_act(self, x: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return tuple(self._run("quantize_act", _f32(x)))  # type: ignore[return-value]

    def matmul_i2s(self, xq: np.ndarray, xscale: np.ndarray, weight: Any) -> np.ndarray:
        return self._run(
            "matmul_i2s",
            np.ascontiguousarray(xq, dtype=np.int8),
            np.ascontiguousarray(xscale, dtype=np.float32).reshape(-1),
            weight,
        )

    def linear(self, x: np.ndarray, weight: Any) -> np.ndarray:
        return self._run("linear", _f32(x), weight)

    def matmul_ternary_float(self, x: np.ndarray, weight: Any) -> np.ndarray:
        return self._run("matmul_ternary_float", _f32(x), weight)

    def matmul_dense(self, x: np.ndarray, table: Any) -> np.ndarray:
        # the op is exact unless asked otherwise: auto is for a model's head (head_mode_for)
        mode = "exact" if self.head_mode == "auto" else self.head_mode
        head = self.head_table(table, mode)
        if isinstance(head, np.ndarray):
            return self._run("matmul_dense", _f32(x), head)
        check = np.asarray(table) if mode == "checked" else None
        return self._run("matmul_dense_i8", _f32(x), head, check)

    def head_table(self, table: Any, mode: str | None = None) -> Any:
        """What a head in ``mode`` (default: ``head_mode_for(table)``) runs on: the table,
        or its int8 copy."""
        if (mode or self.head_mode_for(table)) == "exact":
            return np.asarray(table)
        key = id(table)
        hit = self._i8_tables.get(key)
        if hit is not None and hit[0]() is table:
            return hit[1]
        arr = np.asarray(table)
        with stage("head"):
            dense = self.native_module().DenseI8.empty(*arr.shape)
            extent = file_extent(arr) if arr.dtype in (np.float16, np.float32) else None
            filled = False
            if extent is not None:  # read with pread on every thread: no mapping to let go
                try:
                    dense.fill_file(*extent, arr.dtype == np.float16, self.threads)
                    filled = True
                except ValueError:
                    pass  # the file cannot be read so: through its mapping
            if not filled:
                self._fill_head_blocks(dense, arr)
        tables = self._i8_tables
        try:  # dropped with the table, so a model let go frees its int8 head
            ref: Any = weakref.ref(table, lambda _: tables.pop(key, None))
        except TypeError:  # not weakly referable: kept alive, so its id stays unique
            ref = lambda table=table: table  # noqa: E731
        tables[key] = (ref, dense)
        return dense

    @staticmethod
    def _fill_head_blocks(dense: Any, arr: np.ndarray) -> None:
        """``dense`` from ``arr`` block by block, letting each block's pages of the GGUF
        go once converted (if it is a file mapping): the head reads the int8 copy from
        now on, and of the float table only the embedding rows of the tokens seen are
        read again."""
        for start in range(0, arr.shape[0], _I8_BLOCK_ROWS):
            dense.fill_rows(start, arr[start : start + _I8_BLOCK_ROWS])
            release_file_pages(arr[: start + _I8_BLOCK_ROWS])

    # --- the fused runner --------------------------------------------------------
    def native_module(self) -> Any:
        """``bitnet_core._native`` (``UnsupportedOperationError`` with the reason if missing)."""
        mod, reason = load_native()
        if mod is None:
            raise UnsupportedOperationError(reason)
        return mod

    def make_runner(self, weights: Any, **opts: Any) -> Any:
        """The fused C++ forward pass (``cpu_runner``), or None with ``BITNET_CPU_FUSED=0``."""
        from .cpu_runner import FusedCpuRunner, fused_enabled, fused_gap

        if not fused_enabled():
            self.promotion = promote_weights_later(self.native_module())
            return None
        gap = fused_gap(weights.config)
        if gap is not None:
            from ..sdk.runner import generic_engine_fallback

            generic_engine_fallback(
                self,
                f"{self.name}: the fused forward pass has no {gap} ({weights.config.arch} "
                "graph); the generic engine runs this model",
            )
            self.promotion = promote_weights_later(self.native_module())
            return None
        runner = FusedCpuRunner(self, weights, **opts)  # builds the int8 head too
        # the weights into huge pages, off the critical path (providers/huge_pages.py)
        self.promotion = promote_weights_later(self.native_module())
        return runner

    def rope(
        self,
        x: np.ndarray,
        positions: np.ndarray,
        theta: float,
        style: RopeStyle,
        rot_dim: int,
    ) -> np.ndarray:
        pos = np.ascontiguousarray(positions, dtype=np.int64).reshape(-1)
        return self._run("rope", _f32(x), pos, float(theta), style, int(rot_dim))

    def attention(
        self, q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, start: int
    ) -> np.ndarray:
        return self._run("attention", _f32(q), k_cache, v_cache, int(start))

    def silu_mul(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        return self._run("silu_mul", _f32(gate), _f32(up))

    def relu2_mul(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        return self._run("relu2_mul", _f32(gate), _f32(up))

    def gelu_mul(self, gate: np.ndarray, up: np.ndarray) -> np.ndarray:
        """``gelu_tanh(gate) * up`` (``hal.extra_ops``), the fused pass's kernel."""
        return self._run("gelu_mul", _f32(gate), _f32(up))

    def attention_window(
        self, q: np.ndarray, k_cache: np.ndarray, v_cache: np.ndarray, start: int, window: int
    ) -> np.ndarray:
        """``attention`` over the last ``window`` positions (``hal.extra_ops``)."""
        return self._run("attention", _f32(q), k_cache, v_cache, int(start), int(window))


class CpuAvx512Provider(NativeCpuProvider):
    isa = "avx512"
    name = "cpu-avx512"
    priority = 60


class CpuAvx2Provider(NativeCpuProvider):
    isa = "avx2"
    name = "cpu-avx2"
    priority = 70


class CpuNeonProvider(NativeCpuProvider):
    isa = "neon"
    name = "cpu-neon"
    priority = 75


class CpuScalarProvider(NativeCpuProvider):
    isa = "scalar"
    name = "cpu-scalar"
    priority = 90


ALL_PROVIDERS = (CpuAvx512Provider, CpuAvx2Provider, CpuNeonProvider, CpuScalarProvider)
