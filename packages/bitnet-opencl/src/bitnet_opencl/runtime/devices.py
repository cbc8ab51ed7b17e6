"""Finding the OpenCL device to run on: discovery, ranking, ``BITNET_OPENCL_DEVICE``.

``choose_device(explicit)`` walks the steps a user's setup can fail at and
returns either a ``DeviceInfo`` or the reason it stopped: PyOpenCL imports,
the ICD loader lists a platform, a usable device exists. Auto selection
(``explicit=False``) only takes GPUs; a request for OpenCL by name also takes
CPU and accelerator devices (PoCL's pthread device in CI).

``BITNET_OPENCL_DEVICE=P:D`` picks device D of platform P (indices as
``clinfo -l`` prints them); ``BITNET_OPENCL_DEVICE=P`` the best device of
platform P. Without it the ranking is: discrete GPU, integrated GPU, then
(explicit only) accelerator and CPU; ties broken by compute units and memory.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from typing import Any

from bitnet_core.sdk.runtime import RuntimeUnavailable, device_variable, import_runtime

ENV_DEVICE = device_variable("opencl")
MIN_VERSION = (1, 2)


@dataclass(frozen=True)
class DeviceInfo:
    """One OpenCL device as discovered, with what selection and the build options need."""

    platform_index: int
    device_index: int
    platform_name: str
    name: str
    kind: str  # "discrete-gpu", "integrated-gpu", "accelerator", "cpu", "other"
    version: tuple[int, int]
    version_string: str
    compute_units: int
    global_mem: int
    extensions: frozenset[str] = field(default_factory=frozenset)
    available: bool = True
    compiler: bool = True
    little_endian: bool = True

    @property
    def address(self) -> str:
        return f"{self.platform_index}:{self.device_index}"

    @property
    def is_gpu(self) -> bool:
        return self.kind.endswith("gpu")

    def describe(self) -> str:
        return f"{self.name} ({self.platform_name}, {self.kind}, OpenCL {self.address})"

    def details(self) -> dict[str, Any]:
        """What a probe reports of this device."""
        ext = self.extensions
        return {
            "address": self.address,
            "platform": self.platform_name,
            "kind": self.kind,
            "version": self.version_string,
            "compute_units": self.compute_units,
            "global_mem": self.global_mem,
            "fp64": "cl_khr_fp64" in ext,
            "subgroups": "cl_khr_subgroups" in ext or "cl_intel_subgroups" in ext,
            "dot8": "cl_khr_integer_dot_product" in ext,
        }

    def unusable_reason(self) -> str:
        """Why this device cannot run bitnet's kernels at all ("" when it can)."""
        if not self.available:
            return f"{self.describe()} reports itself unavailable"
        if not self.compiler:
            return f"{self.describe()} has no OpenCL C compiler"
        if self.version < MIN_VERSION:
            return f"{self.describe()} is {self.version_string}; bitnet needs OpenCL 1.2+"
        if not self.little_endian:
            return f"{self.describe()} is big-endian; bitnet's weight layout needs little-endian"
        return ""


class Discovery:
    """The result of walking the OpenCL stack: devices found, or the reason none were."""

    def __init__(self, devices: list[DeviceInfo], reason: str = "", step: str = "device") -> None:
        self.devices = devices
        self.reason = reason
        self.step = step


def _parse_version(text: str) -> tuple[int, int]:
    m = re.search(r"OpenCL\s+(\d+)\.(\d+)", text)
    return (int(m.group(1)), int(m.group(2))) if m else (0, 0)


def _kind(cl: Any, dev: Any) -> str:
    dtype = int(dev.type)
    if dtype & int(cl.device_type.GPU):
        try:
            unified = bool(dev.host_unified_memory)
        except Exception:  # removed in OpenCL 2.0+ headers on some drivers
            unified = False
        return "integrated-gpu" if unified else "discrete-gpu"
    if dtype & int(cl.device_type.ACCELERATOR):
        return "accelerator"
    if dtype & int(cl.device_type.CPU):
        return "cpu"
    return "other"


def _info(cl: Any, pi: int, di: int, platform: Any, dev: Any) -> DeviceInfo:
    return DeviceInfo(
        platform_index=pi,
        device_index=di,
        platform_name=str(platform.name).strip(),
        name=str(dev.name).strip(),
        kind=_kind(cl, dev),
        version=_parse_version(str(dev.version)),
        version_string=str(dev.version).strip(),
        compute_units=int(dev.max_compute_units),
        global_mem=int(dev.global_mem_size),
        extensions=frozenset(str(dev.extensions).split()),
        available=bool(dev.available),
        compiler=bool(dev.compiler_available),
        little_endian=bool(dev.endian_little),
    )


def import_pyopencl() -> Any:
    """The pyopencl module; ``RuntimeUnavailable`` (step import/loader) when it cannot load."""
    return import_runtime("pyopencl", "pip install pyopencl")


def discover() -> Discovery:
    """Every OpenCL device on every platform (never raises)."""
    try:
        cl = import_pyopencl()
    except RuntimeUnavailable as exc:
        return Discovery([], str(exc), exc.step)
    try:
        platforms = cl.get_platforms()
    except Exception as exc:
        return Discovery(
            [],
            "the OpenCL ICD loader found no platform "
            f"({exc}); install a driver (an ICD in /etc/OpenCL/vendors, e.g. pocl-opencl-icd)",
            "loader",
        )
    if not platforms:
        return Discovery(
            [], "the OpenCL ICD loader lists no platform; install an OpenCL driver", "loader"
        )
    devices: list[DeviceInfo] = []
    errors: list[str] = []
    for pi, platform in enumerate(platforms):
        try:
            devs = platform.get_devices()
        except Exception as exc:  # a platform with no devices raises DEVICE_NOT_FOUND
            errors.append(f"platform {pi} ({str(platform.name).strip()}): {exc}")
            continue
        for di, dev in enumerate(devs):
            try:
                devices.append(_info(cl, pi, di, platform, dev))
            except Exception as exc:
                errors.append(f"device {pi}:{di}: {exc}")
    if not devices:
        detail = "; ".join(errors) or "no devices"
        return Discovery([], f"OpenCL platforms found but no device ({detail})")
    return Discovery(devices)


_KIND_RANK = {"discrete-gpu": 0, "integrated-gpu": 1, "accelerator": 2, "cpu": 3, "other": 4}


def rank(devices: list[DeviceInfo]) -> list[DeviceInfo]:
    """Best first: discrete GPU, integrated GPU, accelerator, CPU; then size."""
    return sorted(
        devices,
        key=lambda d: (_KIND_RANK.get(d.kind, 9), -d.compute_units, -d.global_mem, d.address),
    )


def parse_device_env(value: str) -> tuple[int, int | None]:
    """``"P:D"`` -> ``(P, D)``, ``"P"`` -> ``(P, None)``; raises ``ValueError`` when malformed."""
    m = re.fullmatch(r"\s*(\d+)\s*(?::\s*(\d+)\s*)?", value)
    if not m:
        raise ValueError(
            f"{ENV_DEVICE}={value!r} is not 'platform:device' (two indices as clinfo -l shows)"
        )
    return int(m.group(1)), (int(m.group(2)) if m.group(2) is not None else None)


def _listing(devices: list[DeviceInfo]) -> str:
    return ", ".join(f"{d.address}={d.name} ({d.kind})" for d in devices)


def choose_device(
    explicit: bool, request: str | None = None, discovery: Discovery | None = None
) -> tuple[DeviceInfo | None, str]:
    """The device to use, or ``(None, reason)``. ``request`` overrides ``BITNET_OPENCL_DEVICE``."""
    found = discovery if discovery is not None else discover()
    if not found.devices:
        return None, found.reason
    devices = found.devices
    wanted = request if request is not None else os.environ.get(ENV_DEVICE, "")
    if wanted.strip():
        try:
            pi, di = parse_device_env(wanted)
        except ValueError as exc:
            return None, str(exc)
        pool = [d for d in devices if d.platform_index == pi]
        if di is not None:
            pool = [d for d in pool if d.device_index == di]
        if not pool:
            return (
                None,
                f"{ENV_DEVICE}={wanted.strip()} matches no device; found: {_listing(devices)}",
            )
        best = rank(pool)[0]
        if reason := best.unusable_reason():
            return None, reason
        if not explicit and not best.is_gpu:
            return None, (
                f"{ENV_DEVICE}={wanted.strip()} is {best.describe()}, not a GPU; automatic "
                "selection only uses GPUs (ask for it with --device opencl)"
            )
        return best, ""
    usable = [d for d in devices if not d.unusable_reason()]
    if not explicit:
        usable = [d for d in usable if d.is_gpu]
    if usable:
        return rank(usable)[0], ""
    unusable = [d.unusable_reason() for d in devices if d.unusable_reason()]
    if not explicit and any(not d.unusable_reason() for d in devices):
        return None, (
            f"no OpenCL GPU (found: {_listing(devices)}); "
            "a CPU device is used only when asked for with --device opencl"
        )
    return None, "no usable OpenCL device: " + "; ".join(unusable)
