"""Fake GPU providers from ``BITNET_GPU_FAKE``, for tests of the selection logic only.

``BITNET_GPU_FAKE=fam1,fam2`` adds providers named ``fake-fam1`` and
``fake-fam2`` that report an available device of that family with
``fake=True``. A family can be faked when an installed plugin of it says
``fakeable = True``. They compute with the numpy reference, so a run on one
is slow but correct. ``BITNET_GPU_FAKE=none`` (or empty) adds nothing.
``BITNET_STRICT_MODE=1`` makes selection ignore them (``hal/selection.py``).
"""

from __future__ import annotations

from ..errors import ConfigError
from ..hal.provider import Availability
from .reference import ReferenceProvider


class FakeGpuProvider(ReferenceProvider):
    """A provider that claims a GPU of ``family`` and computes with numpy."""

    device_kind = "gpu"
    distribution = ""

    def __init__(self, family: str, priority: int) -> None:
        self.family = family
        self.name = f"fake-{family}"
        # Just ahead of the real provider of that family, so a fake ranks like the real thing.
        self.priority = priority - 1

    def probe(self, explicit: bool = False) -> Availability:
        return Availability(True, "", f"fake {self.family} device (BITNET_GPU_FAKE)", fake=True)


def fake_providers(spec: str, fakeable: dict[str, int]) -> list[FakeGpuProvider]:
    """Parse ``BITNET_GPU_FAKE`` (comma separated families, or ``none``).

    ``fakeable``: the families installed plugins allow to fake, with their priority.
    """
    names = [s.strip().lower() for s in spec.split(",") if s.strip()]
    if not names or names == ["none"]:
        return []
    unknown = [n for n in names if n not in fakeable]
    if unknown:
        known = ", ".join([*sorted(fakeable), "none"])
        raise ConfigError(f"BITNET_GPU_FAKE: unknown device {', '.join(unknown)} (known: {known})")
    return [FakeGpuProvider(n, fakeable[n]) for n in dict.fromkeys(names)]
