"""Whole-model conformance: logits and greedy tokens against the CPU reference engine.

A small BitNet model is generated (random weights, a config with awkward
sizes), written to GGUF, loaded once on ``cpu-reference`` and once on the
provider under test through the generic engine (``bitnet_core.model``), and
compared: prefill logits, decode-step logits, and a greedy token sequence.
Until the engine (``bitnet_core.model``) is installed there are no model
checks; ``test_model[engine]`` skips saying so.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class ModelUnavailable(Exception):
    """The engine or the model-file writer the model checks need is not there."""


@dataclass(frozen=True)
class ModelCheck:
    """One whole-model comparison on ``provider``."""

    id: str
    check: Callable[[Any], None] = field(repr=False)

    def run(self, provider: Any) -> None:
        self.check(provider)


def engine_available() -> bool:
    return importlib.util.find_spec("bitnet_core.model") is not None


def model_checks() -> list[ModelCheck]:
    """The whole-model checks (one that skips with the reason until the engine exists)."""
    if not engine_available():
        return [ModelCheck("engine", _engine_missing)]
    return []


def _engine_missing(provider: Any) -> None:
    raise ModelUnavailable("bitnet_core.model (the engine) is not installed: model checks skipped")
