"""Level 2 of the HAL: a ``ModelRunner`` runs whole models on one provider's device.

A backend loads a model's weights onto its provider once, owns the KV cache
and the device memory pool, and turns token ids into logits. One generic
implementation built on the Level 1 ops (``bitnet_core.model``) serves every
provider; a backend package may return its own, fused one from
``KernelProvider.make_runner`` when it has one.
"""

from __future__ import annotations

from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ModelRunner(Protocol):
    """Runs ``forward(token_ids, cache) -> logits`` for one model on one device."""

    @property
    def provider(self) -> Any: ...

    def new_cache(self, max_tokens: int | None = None) -> Any:
        """A KV cache for one sequence on the backend's device."""
        ...

    def forward(self, token_ids: np.ndarray, cache: Any, all_logits: bool = False) -> np.ndarray:
        """Append ``token_ids`` to ``cache`` and return float32 logits on the host:
        ``[T, vocab]`` when ``all_logits`` else ``[vocab]`` for the last token."""
        ...
