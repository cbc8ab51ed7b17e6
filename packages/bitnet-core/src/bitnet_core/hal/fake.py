"""Fake GPU providers from ``BITNET_GPU_FAKE``, for tests of the selection logic only.

``BITNET_GPU_FAKE=cuda,vulkan`` adds providers named ``fake-cuda`` and
``fake-vulkan`` that report an available device of that family with
``fake=True``. They compute with the numpy reference, so a run on one is
slow but correct. ``BITNET_GPU_FAKE=none`` (or empty) adds nothing.
``BITNET_STRICT_MODE=1`` makes selection ignore them (``selection.py``).
"""

from __future__ import annotations

from ..errors import ConfigError
from ..providers.reference import ReferenceProvider
from .provider import PRIORITIES, Availability

FAKEABLE = ("cuda", "opencl", "vulkan", "webgpu", "metal", "rocm")


class FakeGpuProvider(ReferenceProvider):
    """A provider that claims a GPU of ``family`` and computes with numpy."""

    device_kind = "gpu"

    def __init__(self, family: str) -> None:
        self.family = family
        self.name = f"fake-{family}"
        # Just ahead of the real provider of that family, so a fake ranks like the real thing.
        self.priority = PRIORITIES.get(family, 20) - 1

    def probe(self, explicit: bool = False) -> Availability:
        return Availability(True, "", f"fake {self.family} device (BITNET_GPU_FAKE)", fake=True)


def fake_providers(spec: str) -> list[FakeGpuProvider]:
    """Parse ``BITNET_GPU_FAKE`` (comma separated families, or ``none``)."""
    names = [s.strip().lower() for s in spec.split(",") if s.strip()]
    if not names or names == ["none"]:
        return []
    unknown = [n for n in names if n not in FAKEABLE]
    if unknown:
        raise ConfigError(
            f"BITNET_GPU_FAKE: unknown device {', '.join(unknown)} (known: {', '.join(FAKEABLE)}, none)"
        )
    return [FakeGpuProvider(n) for n in dict.fromkeys(names)]
