"""Planted faults for showing that the test suite catches them (never active by default).

``tools/plants/run.sh PLANT COMMAND...`` puts this folder first on
``PYTHONPATH`` and sets ``BITNET_PLANT=PLANT``; Python imports this module at
start-up (``sitecustomize``), in the test process and in every subprocess it
starts, and patches one fault into the code. Without ``BITNET_PLANT`` it does
nothing. The plants and the tests that must fail with them: docs/TESTING.md.
"""

from __future__ import annotations

import os


def _negated_logits_after_fourth() -> None:
    """Every job after the scheduler's fourth samples from negated logits."""
    from bitnet_core.server import scheduler

    start = scheduler.Scheduler._start
    count = {"jobs": 0}

    def planted_start(self, job):  # type: ignore[no-untyped-def]
        start(self, job)
        count["jobs"] += 1
        if count["jobs"] > 4:
            sample = job.sampler.sample
            job.sampler.sample = lambda logits, history=(): sample(-logits, history)

    scheduler.Scheduler._start = planted_start


def _int_dot_ignored() -> None:
    """The Vulkan provider ignores ``BITNET_VULKAN_INT_DOT``."""
    from bitnet_vulkan.runtime import context

    context._want_int_dot = lambda info: info.int_dot_accelerated


def _activation_3bit() -> None:
    """The reference provider quantizes activations to 3 bits (codes -3..3), not int8."""
    import numpy as np

    from bitnet_core.providers.reference import ReferenceProvider

    def quantize_act(self, x):  # type: ignore[no-untyped-def]
        x = np.asarray(x, dtype=np.float32)
        amax = np.maximum(np.abs(x).max(axis=1, initial=0.0), np.float32(1e-5))
        scale = (np.float32(3.0) / amax).astype(np.float32)
        return np.clip(np.round(x * scale[:, None]), -3, 3).astype(np.int8), scale

    ReferenceProvider.quantize_act = quantize_act


def _rmsnorm_weightless() -> None:
    """The reference provider's rmsnorm ignores its weight."""
    import numpy as np

    from bitnet_core.providers.reference import ReferenceProvider

    rmsnorm = ReferenceProvider.rmsnorm
    ReferenceProvider.rmsnorm = lambda self, x, weight, eps: rmsnorm(
        self, x, np.ones_like(weight), eps
    )


PLANTS = {
    "negated-logits-after-fourth": _negated_logits_after_fourth,
    "int-dot-ignored": _int_dot_ignored,
    "activation-3bit": _activation_3bit,
    "rmsnorm-weightless": _rmsnorm_weightless,
}

_name = os.environ.get("BITNET_PLANT")
if _name:
    if _name not in PLANTS:
        raise SystemExit(f"BITNET_PLANT={_name!r}: not one of {sorted(PLANTS)}")
    PLANTS[_name]()
