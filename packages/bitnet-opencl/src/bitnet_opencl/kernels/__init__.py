"""Building the OpenCL C kernels for one device, with options from its features.

The ``.cl`` files beside this module ship as package data; ``common.clh`` is
prepended to them and the whole is built as one program per context. The
build options come from the device: ``USE_FP64`` (``cl_khr_fp64``),
``USE_SUBGROUPS`` (``cl_khr_subgroups`` or ``cl_intel_subgroups``),
``USE_DOT8`` (``cl_khr_integer_dot_product`` on an OpenCL 3.0 device),
``USE_PTX_DP4A`` (NVIDIA, compute capability 6.1+: ``dp4a`` as inline PTX),
and ``-cl-fp32-correctly-rounded-divide-sqrt`` where supported. When a build with
optional features fails (a driver that advertises more than it compiles), it
is retried with the base options and the failure is kept in ``notes``.
"""

from __future__ import annotations

import os
import warnings
from dataclasses import dataclass
from importlib import resources
from typing import TYPE_CHECKING, Any

from bitnet_core.errors import ConfigError, ProviderError

if TYPE_CHECKING:
    from ..runtime.devices import DeviceInfo

#: The kernel sources, in build order, after the shared preamble.
KERNEL_FILES = (
    "elementwise.cl",
    "norm.cl",
    "rope.cl",
    "attention.cl",
    "ternary.cl",
    "dense.cl",
    "fused.cl",
    "layer.cl",
)
PREAMBLE = "common.clh"


@dataclass(frozen=True)
class Features:
    """The device features that change how the kernels are built."""

    fp64: bool = False
    subgroups: bool = False
    dot8: bool = False
    ptx_dp4a: bool = False
    #: the 4-codes-at-a-time decode without a hardware dot product (tests only)
    packed_dot: bool = False
    fp16: bool = False
    correctly_rounded_div: bool = False
    opencl_c3: bool = False

    def options(self) -> list[str]:
        opts = [
            "-cl-std=CL3.0" if self.opencl_c3 and (self.dot8 or self.subgroups) else "-cl-std=CL1.2"
        ]
        if self.fp64:
            opts.append("-DUSE_FP64=1")
        if self.subgroups:
            opts.append("-DUSE_SUBGROUPS=1")
        if self.dot8:
            opts.append("-DUSE_DOT8=1")
        elif self.ptx_dp4a:
            opts.append("-DUSE_PTX_DP4A=1")
        if self.packed_dot:
            opts.append("-DUSE_PACKED_DOT=1")
        if self.correctly_rounded_div:
            opts.append("-cl-fp32-correctly-rounded-divide-sqrt")
        return opts

    def as_dict(self) -> dict[str, bool]:
        return {
            "fp64": self.fp64,
            "subgroups": self.subgroups,
            "dot8": self.dot8,
            "ptx_dp4a": self.ptx_dp4a,
            "fp16": self.fp16,
            "correctly_rounded_div": self.correctly_rounded_div,
        }


def _supports_opencl_c3(cl: Any, dev: Any, info: DeviceInfo) -> bool:
    if info.version < (3, 0):
        return False
    try:  # OpenCL 3.0: the list of supported OpenCL C versions
        versions = dev.opencl_c_all_versions
        return any(cl.version.major(v.version) >= 3 for v in versions)
    except Exception:
        return "OpenCL C 3." in str(getattr(dev, "opencl_c_version", ""))


ENV_DISABLE = "BITNET_OPENCL_DISABLE"
FEATURE_NAMES = ("fp64", "subgroups", "dot8", "ptx_dp4a", "fp16", "correctly_rounded_div")


def disabled_features() -> set[str]:
    """Features switched off by ``BITNET_OPENCL_DISABLE=fp64,subgroups,...`` (debugging, tests)."""
    raw = os.environ.get(ENV_DISABLE, "")
    names = {n.strip().lower() for n in raw.split(",") if n.strip()}
    unknown = names - set(FEATURE_NAMES) - {"all"}
    if unknown:
        raise ConfigError(
            f"{ENV_DISABLE}: unknown feature(s) {sorted(unknown)}; known: {', '.join(FEATURE_NAMES)}"
        )
    return set(FEATURE_NAMES) if "all" in names else names


def _nvidia_dp4a(dev: Any, info: DeviceInfo) -> bool:
    """An NVIDIA GPU of compute capability 6.1+ (``cl_nv_device_attribute_query``)."""
    if "cl_nv_device_attribute_query" not in info.extensions:
        return False
    try:
        cc = (int(dev.compute_capability_major_nv), int(dev.compute_capability_minor_nv))
    except Exception:
        return False
    return cc >= (6, 1)


def detect_features(cl: Any, dev: Any, info: DeviceInfo) -> Features:
    """What ``dev`` offers, less ``BITNET_OPENCL_DISABLE`` (a failed query means "no")."""
    ext = info.extensions
    try:
        crdiv = bool(
            int(dev.single_fp_config) & int(cl.device_fp_config.CORRECTLY_ROUNDED_DIVIDE_SQRT)
        )
    except Exception:
        crdiv = False
    c3 = _supports_opencl_c3(cl, dev, info)
    off = disabled_features()
    return Features(
        fp64="cl_khr_fp64" in ext and "fp64" not in off,
        subgroups=("cl_khr_subgroups" in ext or "cl_intel_subgroups" in ext)
        and "subgroups" not in off,
        dot8="cl_khr_integer_dot_product" in ext and c3 and "dot8" not in off,
        ptx_dp4a=_nvidia_dp4a(dev, info) and "ptx_dp4a" not in off,
        fp16="cl_khr_fp16" in ext and "fp16" not in off,
        correctly_rounded_div=crdiv and "correctly_rounded_div" not in off,
        opencl_c3=c3,
    )


def kernel_source() -> str:
    """The preamble and every kernel file, as one OpenCL C source."""
    pkg = resources.files(__name__)
    parts = [(pkg / PREAMBLE).read_text(encoding="utf-8")]
    for name in KERNEL_FILES:
        parts.append(f"/* ---- {name} ---- */\n" + (pkg / name).read_text(encoding="utf-8"))
    return "\n".join(parts)


def _build(cl: Any, ctx: Any, source: str, options: list[str]) -> Any:
    # A successful build's compiler log (PoCL's ABI notes) is kept out of the
    # user's console; a failed build's log is in the raised error.
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", cl.CompilerWarning)
        return cl.Program(ctx, source).build(options=options)


def build_program(cl: Any, ctx: Any, features: Features) -> tuple[Any, Features, list[str]]:
    """``(program, features actually used, notes)``; raises ``ProviderError`` with the log."""
    source = kernel_source()
    notes: list[str] = []
    try:
        return _build(cl, ctx, source, features.options()), features, notes
    except Exception as exc:
        if not (features.dot8 or features.subgroups or features.ptx_dp4a):
            raise ProviderError(f"opencl: building the kernels failed: {exc}") from exc
        notes.append(
            f"build with {features.options()} failed, retried without subgroups/dot8: {exc}"
        )
    base = Features(
        fp64=features.fp64,
        fp16=features.fp16,
        correctly_rounded_div=features.correctly_rounded_div,
    )
    try:
        return _build(cl, ctx, source, base.options()), base, notes
    except Exception as exc:
        raise ProviderError(f"opencl: building the kernels failed: {exc}") from exc
