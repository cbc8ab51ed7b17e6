"""The runtime: can this backend run here? Answered without raising (the registry's contract).

A real backend asks its runtime here: is the driver loadable, is there a
device, does it have what the kernels need (subgroups, fp16, int8 dot
products)? ``explicit`` is true when the user named this backend, which may
allow a device auto-selection should skip (a CPU OpenCL device, lavapipe).
"""

from __future__ import annotations

import platform

from bitnet_core.hal.provider import Availability

from . import kernels


def probe(explicit: bool = False) -> Availability:
    """``Availability.yes(device)`` when the native kernels load, else ``no(reason)``."""
    try:
        kernels.load()
    except ImportError as exc:  # a broken or missing build: say why, do not raise
        return Availability.no(f"native kernels not importable: {exc}")
    # device_kind "cpu" also for a GPU backend (--gpu) until its kernels are ported
    return Availability.yes(
        f"host CPU ({platform.machine() or 'unknown'}), C++ example kernels", device_kind="cpu"
    )
