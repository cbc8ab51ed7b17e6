"""The WebGPU device layer over ``wgpu``: adapter choice, limits, pipelines, recording.

Ops do not submit one by one: each dispatch is recorded into the current
command encoder and everything recorded is submitted in one go when the host
needs data (``read``) or when ``flush`` is called, so a decode step is one
submission. Uniform parameters of all recorded dispatches go to one ring
buffer written just before that submission.
"""

from __future__ import annotations

import os
import tempfile
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.errors import DeviceUnavailableError, ProviderError

from .shaders import preprocess, shader_source

PARAM_SLOT = 256  # bytes per dispatch's uniform parameters (>= any minUniformBufferOffsetAlignment)
PARAM_SLOTS = 2048


def _quiet_headless_wsi() -> None:
    """Give Mesa/EGL a private XDG_RUNTIME_DIR when none is set (headless servers, CI).

    wgpu-native probes its OpenGL backend too, and Mesa then prints
    "XDG_RUNTIME_DIR is invalid or not set" on every start; compute needs no
    display, so a private empty directory is all it wants.
    """
    if not os.environ.get("XDG_RUNTIME_DIR"):
        os.environ["XDG_RUNTIME_DIR"] = tempfile.mkdtemp(prefix="bitnet-xdg-")


def import_wgpu() -> Any:
    _quiet_headless_wsi()
    try:
        import wgpu
    except Exception as exc:  # ImportError, or wgpu-native failing to load
        raise DeviceUnavailableError(f"the wgpu package cannot be imported: {exc}") from exc
    return wgpu


@dataclass(frozen=True)
class AdapterChoice:
    adapter: Any
    description: str
    is_cpu: bool


def choose_adapter(explicit: bool) -> AdapterChoice:
    """High-performance adapter first; a CPU adapter (lavapipe) only when asked explicitly.

    ``BITNET_WEBGPU_ADAPTER=N`` picks the N-th of ``wgpu.gpu.enumerate_adapters_sync()``.
    """
    wgpu = import_wgpu()
    wanted = os.environ.get("BITNET_WEBGPU_ADAPTER", "").strip()
    try:
        if wanted:
            adapters = wgpu.gpu.enumerate_adapters_sync()
            if not wanted.isdigit() or int(wanted) >= len(adapters):
                raise DeviceUnavailableError(
                    f"BITNET_WEBGPU_ADAPTER={wanted!r}: {len(adapters)} adapter(s) present"
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


class Device:
    """One wgpu device with its pipelines, parameter ring and pending command encoder."""

    def __init__(self, choice: AdapterChoice) -> None:
        self.wgpu = import_wgpu()
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
        self.submissions = 0

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

    # --- buffers -----------------------------------------------------------
    def check_size(self, nbytes: int, what: str) -> None:
        if nbytes > self.max_binding:
            raise ProviderError(
                f"{what} needs {nbytes} bytes in one storage buffer; this WebGPU adapter allows "
                f"{self.max_binding} (max-storage-buffer-binding-size): the model is too large for it"
            )

    def buffer(self, nbytes: int, what: str = "buffer") -> Any:
        nbytes = max(16, (nbytes + 15) // 16 * 16)
        self.check_size(nbytes, what)
        BU = self.wgpu.BufferUsage
        return self.device.create_buffer(size=nbytes, usage=BU.STORAGE | BU.COPY_SRC | BU.COPY_DST)

    def upload(self, data: np.ndarray, what: str = "array") -> Any:
        raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
        if raw.size % 16:
            raw = np.concatenate([raw, np.zeros(16 - raw.size % 16, np.uint8)])
        buf = self.buffer(raw.size, what)
        self.device.queue.write_buffer(buf, 0, raw)
        return buf

    def read(self, buf: Any, nbytes: int) -> np.ndarray:
        self.flush()
        try:
            data = self.device.queue.read_buffer(buf, 0, (nbytes + 3) // 4 * 4)
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
        entries = [
            {
                "binding": 0,
                "resource": {"buffer": self._params, "offset": off, "size": max(16, raw.size)},
            }
        ]
        entries += [{"binding": i + 1, "resource": {"buffer": b}} for i, b in enumerate(buffers)]
        bind = self.device.create_bind_group(layout=pipe.get_bind_group_layout(0), entries=entries)
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        cpass = self._encoder.begin_compute_pass()
        cpass.set_pipeline(pipe)
        cpass.set_bind_group(0, bind)
        cpass.dispatch_workgroups(*groups)
        cpass.end()

    def copy(self, src: Any, src_off: int, dst: Any, dst_off: int, nbytes: int) -> None:
        """Record a buffer-to-buffer copy (offsets and size multiples of 4)."""
        if self._encoder is None:
            self._encoder = self.device.create_command_encoder()
        self._encoder.copy_buffer_to_buffer(src, src_off, dst, dst_off, nbytes)

    def flush(self) -> None:
        """Submit everything recorded since the last flush."""
        if self._encoder is None:
            return
        try:
            if self._used_slots:
                n = self._used_slots * PARAM_SLOT
                self.device.queue.write_buffer(self._params, 0, self._param_host[:n])
            self.device.queue.submit([self._encoder.finish()])
        except Exception as exc:
            raise ProviderError(f"wgpu queue.submit failed: {exc}") from exc
        finally:
            self._encoder = None
            self._used_slots = 0
        self.submissions += 1
