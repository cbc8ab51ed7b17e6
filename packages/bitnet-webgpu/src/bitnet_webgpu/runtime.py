"""The runtime role of the ``webgpu`` backend over ``wgpu``: adapter choice, limits,
pipelines, recording, launch grids; ``WebGPURuntime``, the provider's part of it (the
probe, the device made on first use).

Ops do not submit one by one: each dispatch is recorded into the current
command encoder (one compute pass, until a copy or the submission ends it)
and everything recorded is submitted in one go when the host needs data
(``read``) or when ``flush`` is called, so a decode step is one submission.
Uniform parameters of all recorded dispatches go to one ring buffer written
just before that submission.

What a decode step would otherwise create again at every step is reused:
op outputs come from a ``BufferPool`` (freed arrays give their buffers back,
by size), and bind groups are cached by (pipeline, parameter slot, buffers).
A step's ops run in the same order every step, so from the second step on
they get the same buffers and slots, and every bind group is a cache hit.
``BITNET_WEBGPU_REUSE=0`` turns both off (fresh buffers and bind groups, as
a check that reuse changes nothing).
"""

from __future__ import annotations

import os
import tempfile
import weakref
from collections import OrderedDict
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.errors import DeviceUnavailableError, ProviderError
from bitnet_core.hal.provider import Availability
from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.pool import FreeLists
from bitnet_core.sdk.runtime import device_choice, device_variable, import_runtime, never_raises
from bitnet_core.sdk.trace import LaunchTrace

from .kernels import preprocess, shader_source

ENV_DEVICE = device_variable("webgpu")

PARAM_SLOT = 256  # bytes per dispatch's uniform parameters (>= any minUniformBufferOffsetAlignment)
PARAM_SLOTS = 2048
POOL_MAX_CACHED_BYTES = 256 << 20  # freed buffers kept for reuse, in all
POOL_MAX_BUFFER_BYTES = 32 << 20  # a larger freed buffer (an old KV cache) is released
STAGE_BYTES = 1 << 20  # host data of one submission (token ids, positions), copied in order
TT = 4  # tokens per workgroup in the matmul shaders
STAGE_MAX_UPLOAD = 64 << 10  # larger uploads (weights) get a fresh buffer written directly
BIND_GROUP_CACHE = 8192  # bind groups kept (LRU); a decode step of a 30-layer model uses ~600


def _quiet_headless_wsi() -> None:
    """Give Mesa/EGL a private XDG_RUNTIME_DIR when none is set (headless servers, CI).

    wgpu-native probes its OpenGL backend too, and Mesa then prints
    "XDG_RUNTIME_DIR is invalid or not set" on every start; compute needs no
    display, so a private empty directory is all it wants.
    """
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="bitnet-xdg-")


def import_wgpu() -> Any:
    """The wgpu module; ``RuntimeUnavailable`` (step import/loader) when it cannot load."""
    _quiet_headless_wsi()
    return import_runtime("wgpu", "pip install wgpu")


@dataclass(frozen=True)
class AdapterChoice:
    adapter: Any
    description: str
    is_cpu: bool


def choose_adapter(explicit: bool) -> AdapterChoice:
    """High-performance adapter first; a CPU adapter (lavapipe) only when asked explicitly.

    ``BITNET_WEBGPU_DEVICE=N`` picks the N-th of ``wgpu.gpu.enumerate_adapters_sync()``
    (``BITNET_WEBGPU_ADAPTER``, its old name, still works).
    """
    wgpu = import_wgpu()
    wanted = device_choice("webgpu", deprecated=("BITNET_WEBGPU_ADAPTER",))
    try:
        if wanted:
            adapters = wgpu.gpu.enumerate_adapters_sync()
            if not wanted.isdigit() or int(wanted) >= len(adapters):
                raise DeviceUnavailableError(
                    f"{ENV_DEVICE}={wanted!r}: {len(adapters)} adapter(s) present"
                )
            adapter = adapters[int(wanted)]
            explicit = True
        else:
            adapter = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    except DeviceUnavailableError:
        raise
    except Exception as exc:
        raise DeviceUnavailableError(f"no WebGPU adapter: {exc}") from exc
    if adapter is None:
        raise DeviceUnavailableError("no WebGPU adapter found (no Vulkan/Metal/D3D12 device)")
    info = adapter.info
    is_cpu = str(info.get("adapter_type", "")).lower() == "cpu"
    desc = f"{info.get('device', '?')} ({info.get('backend_type', '?')})"
    if is_cpu and not explicit:
        raise DeviceUnavailableError(
            f"only a CPU WebGPU adapter is present ({desc}); ask for it with --device webgpu"
        )
    return AdapterChoice(adapter, desc, is_cpu)


class PooledBuffer:
    """A storage buffer from a ``BufferPool``: given back when the last array holding it goes."""

    __slots__ = ("raw", "nbytes", "_pool", "__weakref__")

    def __init__(self, raw: Any, nbytes: int, pool: BufferPool) -> None:
        self.raw = raw
        self.nbytes = nbytes
        self._pool = weakref.ref(pool)

    def __del__(self) -> None:
        pool = self._pool()
        if pool is not None:
            pool.release(self.raw, self.nbytes)


class BufferPool(FreeLists):
    """Storage buffers reused by size once no array holds them (as CuPy's memory pool).

    Every write into a pooled buffer is a recorded command (a dispatch, or a copy
    from the staging buffer for small uploads): a buffer whose last reader is still
    recorded in the pending encoder may be handed out again, and its next writer is
    recorded after that reader, so WebGPU orders them. Large uploads
    (``queue.write_buffer`` lands ahead of recorded commands) get fresh buffers,
    which join the pool when freed.
    """

    def __init__(self, create: Any, forget: Any) -> None:
        super().__init__(POOL_MAX_CACHED_BYTES, POOL_MAX_BUFFER_BYTES)  # keyed by exact size
        self._create = create
        self._forget = forget
        self._busy = False  # inside acquire or a settle: a finalizer only queues

    def acquire(self, nbytes: int) -> PooledBuffer:
        self._busy = True
        try:
            self._settle()
            raw = self.take(nbytes)
            while raw is not None and not _alive(raw):
                raw = self.take(nbytes)
        finally:
            self._busy = False
        return PooledBuffer(self._create(nbytes) if raw is None else raw, nbytes, self)

    def release(self, raw: Any, nbytes: int) -> None:
        """Give ``raw`` back from a finalizer: queued (see ``FreeLists``), and kept at once
        unless the collector ran this inside ``acquire`` (then the next one keeps it)."""
        if not _alive(raw):
            return
        self.give_later(nbytes, raw, nbytes)
        if not self._busy:
            self._busy = True
            try:
                self._settle()
            finally:
                self._busy = False

    def _settle(self) -> None:
        for dropped in self.settle():
            self._forget(dropped)  # its bind groups go; the buffer is released with them


def _alive(raw: Any) -> bool:
    """Whether wgpu-py still holds ``raw``'s native buffer.

    A buffer and the ``PooledBuffer`` holding it that are garbage in one cycle
    (a backend, its KV cache and the bind groups naming it) are finalized in
    any order: the buffer may be released by wgpu-py before, or after, the
    ``PooledBuffer`` gave it back to the pool. Such a buffer is never reused.
    """
    return getattr(raw, "_internal", None) is not None


@dataclass(frozen=True)
class BufferRange:
    """Bytes ``[offset, offset + size)`` of a buffer, bound as one storage binding."""

    buffer: Any
    offset: int
    size: int


def _raw(buf: Any) -> Any:
    if isinstance(buf, BufferRange):
        buf = buf.buffer
    return buf.raw if isinstance(buf, PooledBuffer) else buf


def _entry(binding: int, buf: Any) -> dict[str, Any]:
    """A bind group entry for a buffer, or for a ``BufferRange`` of one."""
    if isinstance(buf, BufferRange):
        resource = {"buffer": _raw(buf), "offset": buf.offset, "size": buf.size}
    else:
        resource = {"buffer": _raw(buf)}
    return {"binding": binding, "resource": resource}


class Device:
    """One wgpu device with its pipelines, parameter ring and pending command encoder."""

    def __init__(self, choice: AdapterChoice, trace: LaunchTrace | None = None) -> None:
        self.wgpu = import_wgpu()
        self.trace = trace if trace is not None else LaunchTrace()
        adapter = choice.adapter
        self.description = choice.description
        self.is_cpu = choice.is_cpu
        lim = adapter.limits
        limits = {
            "max-storage-buffer-binding-size": lim["max-storage-buffer-binding-size"],
            "max-buffer-size": lim["max-buffer-size"],
            "max-storage-buffers-per-shader-stage": min(
                8, lim["max-storage-buffers-per-shader-stage"]
            ),
        }
        try:
            self.device = adapter.request_device_sync(required_limits=limits)
        except Exception as exc:
            raise ProviderError(f"wgpu request_device failed: {exc}") from exc
        self.max_binding = int(limits["max-storage-buffer-binding-size"])
        self.max_buffer = int(limits["max-buffer-size"])
        self.max_workgroups = int(lim["max-compute-workgroups-per-dimension"])
        self._pipelines: dict[tuple[str, frozenset[str]], Any] = {}
        self.dot4 = self._supports_dot4()
        layout = os.environ.get("BITNET_WEBGPU_LAYOUT", "").strip().lower()
        #: matmuls with one invocation per output row (CPU adapters) instead of a workgroup per row
        self.rows_layout = layout == "rows" or (layout != "groups" and self.is_cpu)
        BU = self.wgpu.BufferUsage
        self._params = self.device.create_buffer(
            size=PARAM_SLOT * PARAM_SLOTS, usage=BU.UNIFORM | BU.COPY_DST
        )
        self._param_host = np.zeros(PARAM_SLOT * PARAM_SLOTS, dtype=np.uint8)
        self._used_slots = 0
        self._encoder: Any = None
        self._pass: Any = None
        self.submissions = 0
        self.reuse = env_enabled("BITNET_WEBGPU_REUSE")
        self.pool = BufferPool(self._create_buffer, self._forget)
        self._stage = self.device.create_buffer(size=STAGE_BYTES, usage=BU.COPY_SRC | BU.COPY_DST)
        self._stage_host = np.zeros(STAGE_BYTES, dtype=np.uint8)
        self._staged = 0
        self._binds: OrderedDict[tuple, tuple[Any, tuple[Any, ...]]] = OrderedDict()
        self._binds_of: dict[int, set[tuple]] = {}  # id(raw buffer) -> cache keys naming it
        self.bind_hits = self.bind_misses = 0

    # --- capabilities -----------------------------------------------------
    def _supports_dot4(self) -> bool:
        """``dot4I8Packed`` is a WGSL language extension: use it only where it compiles."""
        if os.environ.get("BITNET_WEBGPU_NO_DOT4"):
            return False
        src = "@compute @workgroup_size(1) fn main() { _ = dot4I8Packed(1u, 1u); }\n"
        try:
            self.device.create_shader_module(code=src)
        except Exception:
            return False
        return True

    # --- launch grids -----------------------------------------------------
    def grid(self, n: int) -> tuple[int, int]:
        """``n`` workgroups as (x, z) within the per-dimension limit."""
        gx = min(n, self.max_workgroups)
        return gx, -(-n // gx)

    def matmul_grid(self, n: int, t: int) -> tuple[tuple[int, int, int], frozenset[str]]:
        """Grid of a matmul over ``n`` output rows: a row per invocation or per workgroup."""
        if self.rows_layout:
            gx, gz = self.grid(-(-n // 64))
            return (gx, 1, gz), frozenset({"ROWS"})
        gx, gz = self.grid(n)
        return (gx, -(-t // TT), gz), frozenset()

    # --- buffers -----------------------------------------------------------
    def check_size(self, nbytes: int, what: str, bound_whole: bool = True) -> None:
        """A buffer bound whole must fit one binding; one bound in ranges, one buffer."""
        limit = self.max_binding if bound_whole else self.max_buffer
        if nbytes > limit:
            name = "storage-buffer-binding" if bound_whole else "buffer"
            raise ProviderError(
                f"{what} needs {nbytes} bytes in one storage buffer; this WebGPU adapter allows "
                f"{limit} (max-{name}-size): the model is too large for it"
            )

    def _create_buffer(self, nbytes: int) -> Any:
        BU = self.wgpu.BufferUsage
        return self.device.create_buffer(size=nbytes, usage=BU.STORAGE | BU.COPY_SRC | BU.COPY_DST)

    def buffer(self, nbytes: int, what: str = "buffer") -> Any:
        """A storage buffer for GPU commands to write (from the pool when reuse is on)."""
        nbytes = max(16, (nbytes + 15) // 16 * 16)
        self.check_size(nbytes, what)
        return self.pool.acquire(nbytes) if self.reuse else self._create_buffer(nbytes)

    def upload(self, data: np.ndarray, what: str = "array", bound_whole: bool = True) -> Any:
        """A buffer holding ``data`` (``bound_whole=False``: bound in ranges, a large table)."""
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        if raw.size % 16:
            raw = np.concatenate([raw, np.zeros(16 - raw.size % 16, np.uint8)])
        self.check_size(raw.size, what, bound_whole)
        if self.reuse and raw.size <= STAGE_MAX_UPLOAD:
            if self._staged + raw.size > STAGE_BYTES:
                self.flush()
            off, self._staged = self._staged, self._staged + raw.size
            self._stage_host[off : off + raw.size] = raw
            buf = self.pool.acquire(raw.size)
            self.copy(self._stage, off, buf, 0, raw.size)  # written in order with the ops
            return buf
        buf = self._create_buffer(raw.size)  # fresh: the write lands before pending commands
        self.device.queue.write_buffer(buf, 0, raw)
        return PooledBuffer(buf, raw.size, self.pool) if self.reuse else buf  # freed: pooled

    def read(self, buf: Any, nbytes: int) -> np.ndarray:
        self.flush()
        try:
            data = self.device.queue.read_buffer(_raw(buf), 0, (nbytes + 3) // 4 * 4)
        except Exception as exc:
            raise ProviderError(f"wgpu queue.read_buffer failed: {exc}") from exc
        return np.frombuffer(data, dtype=np.uint8)[:nbytes]

    # --- pipelines and dispatch -------------------------------------------------
    def pipeline(self, name: str, defines: frozenset[str] = frozenset()) -> Any:
        key = (name, defines)
        if key not in self._pipelines:
            code = preprocess(shader_source(name), defines)
            try:
                module = self.device.create_shader_module(code=code, label=name)
                self._pipelines[key] = self.device.create_compute_pipeline(
                    layout="auto", compute={"module": module, "entry_point": "main"}, label=name
                )
            except Exception as exc:
                raise ProviderError(f"wgpu: compiling shader {name} failed: {exc}") from exc
        return self._pipelines[key]

    def dispatch(
        self,
        name: str,
        params: np.ndarray,
        buffers: list[Any],
        groups: tuple[int, int, int],
        defines: frozenset[str] = frozenset(),
    ) -> None:
        """Record one dispatch: binding 0 = params (uniform), bindings 1.. = ``buffers``."""
        if self._used_slots >= PARAM_SLOTS:
            self.flush()
        pipe = self.pipeline(name, defines)
        slot = self._used_slots
        self._used_slots += 1
        raw = np.ascontiguousarray(params).view(np.uint8).reshape(-1)
        off = slot * PARAM_SLOT
        self._param_host[off : off + raw.size] = raw
        bind = self._bind_group(pipe, (name, defines), off, max(16, raw.size), buffers)
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        if self._pass is None:
            self._pass = self._encoder.begin_compute_pass()
        self._pass.set_pipeline(pipe)
        self._pass.set_bind_group(0, bind)
        self._pass.dispatch_workgroups(*groups)
        self.trace.kernel(name)
        self.trace.launched()

    def _bind_group(self, pipe: Any, key: tuple, off: int, size: int, buffers: list[Any]) -> Any:
        raws = tuple(_raw(b) for b in buffers)
        ranges = tuple((b.offset, b.size) if isinstance(b, BufferRange) else () for b in buffers)
        key = (*key, off, size, tuple(id(r) for r in raws), ranges)
        hit = self._binds.get(key) if self.reuse else None
        if hit is not None:
            self.bind_hits += 1
            self._binds.move_to_end(key)
            return hit[0]
        self.bind_misses += 1
        entries = [
            {"binding": 0, "resource": {"buffer": self._params, "offset": off, "size": size}}
        ]
        entries += [_entry(i + 1, b) for i, b in enumerate(buffers)]
        bind = self.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
        if self.reuse:  # the entry holds its buffers, so their ids stay theirs while it lives
            self._binds[key] = (bind, raws)
            for r in raws:
                self._binds_of.setdefault(id(r), set()).add(key)
            if len(self._binds) > BIND_GROUP_CACHE:
                old, (_, old_raws) = self._binds.popitem(last=False)
                for r in old_raws:
                    self._binds_of.get(id(r), set()).discard(old)
        return bind

    def _forget(self, raw: Any) -> None:
        """Drop the cached bind groups that name ``raw`` (the pool is letting it go)."""
        for key in self._binds_of.pop(id(raw), ()):
            self._binds.pop(key, None)

    def _end_pass(self) -> None:
        if self._pass is not None:
            self._pass.end()
            self._pass = None

    def copy(self, src: Any, src_off: int, dst: Any, dst_off: int, nbytes: int) -> None:
        """Record a buffer-to-buffer copy (offsets and size multiples of 4)."""
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        self._end_pass()
        self._encoder.copy_buffer_to_buffer(_raw(src), src_off, _raw(dst), dst_off, nbytes)

    def flush(self) -> None:
        """Submit everything recorded since the last flush."""
        if self._encoder is None:
            return
        try:
            self._end_pass()
            if self._used_slots:
                n = self._used_slots * PARAM_SLOT
                self.device.queue.write_buffer(self._params, 0, self._param_host[:n])
            if self._staged:
                self.device.queue.write_buffer(self._stage, 0, self._stage_host[: self._staged])
            self.device.queue.submit([self._encoder.finish()])
        except Exception as exc:
            raise ProviderError(f"wgpu queue.submit failed: {exc}") from exc
        finally:
            self._encoder = None
            self._pass = None
            self._used_slots = 0
            self._staged = 0
        self.submissions += 1
        self.trace.submit()


class WebGPURuntime:
    """The provider's device: its adapter found by ``probe``, opened by ``dev`` on first use."""

    def __init__(self) -> None:
        self._dev: Device | None = None
        self._explicit = False

    @never_raises
    def probe(self, explicit: bool = False) -> Availability:
        wgpu = import_wgpu()
        choice = choose_adapter(explicit)
        self._explicit = self._explicit or explicit
        lim = choice.adapter.limits
        return Availability.yes(
            choice.description,
            device_kind="cpu" if choice.is_cpu else "gpu",
            wgpu=wgpu.__version__,
            cpu_adapter=choice.is_cpu,
            max_storage_buffer_binding_size=lim["max-storage-buffer-binding-size"],
            max_compute_invocations_per_workgroup=lim["max-compute-invocations-per-workgroup"],
        )

    @property
    def dev(self) -> Device:
        if self._dev is None:
            self._dev = Device(choose_adapter(explicit=True), self.trace)  # type: ignore[attr-defined]
        return self._dev
