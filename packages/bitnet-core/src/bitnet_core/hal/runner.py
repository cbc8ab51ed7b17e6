"""Level 2 of the HAL: a ``ModelRunner`` runs whole models on one provider's device.

A backend loads a model's weights onto its provider once, owns the KV cache
and the device memory pool, and turns token ids into logits. One generic
implementation built on the Level 1 ops (``bitnet_core.sdk.runner.GenericRunner``)
serves every provider; a backend package may return its own, fused one from
``KernelProvider.make_runner`` when it has one (usually a ``GenericRunner``
subclass). This protocol is everything the engine calls: ``Model`` and
``generate_tokens`` (``config``, ``provider``, ``new_cache``, ``forward``) and
the server's scheduler (``new_cache``, ``forward_batch``). A cache is a
sequence of the runner's KV cache (``sdk.kv_cache.Sequence``: ``length``,
``close``, a context manager); a runner that has a shared ``KVCache`` exposes
it as ``kv`` for statistics (optional). A runner that can choose greedy tokens
on its device has ``decode_greedy(token, cache, k, eos=...) -> list[int]``
(optional; ``generate_steps`` uses it for greedy requests without processors).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol, runtime_checkable

import numpy as np


@runtime_checkable
class ModelRunner(Protocol):
    """Runs ``forward(token_ids, cache) -> logits`` for one model on one device."""

    #: the model's ``BitNetConfig``
    config: Any

    @property
    def provider(self) -> Any: ...

    def new_cache(self, max_tokens: int | None = None) -> Any:
        """A new, empty sequence in the runner's KV cache on its device (at most
        ``max_tokens`` tokens; None: the model's context length). Close it when done."""
        ...

    def forward(self, token_ids: np.ndarray, cache: Any, all_logits: bool = False) -> np.ndarray:
        """Append ``token_ids`` to ``cache`` and return float32 logits on the host:
        ``[T, vocab]`` when ``all_logits`` else ``[vocab]`` for the last token."""
        ...

    def forward_batch(self, items: Sequence[tuple[np.ndarray, Any]]) -> np.ndarray:
        """One step of several sequences (the scheduler's): ``items`` are ``(token_ids,
        cache)`` pairs, each appending its ids to its own cache; float32 logits
        ``[len(items), vocab]``, each row what ``forward`` gives for that sequence's last
        token alone. Nothing is appended unless the whole step runs."""
        ...
