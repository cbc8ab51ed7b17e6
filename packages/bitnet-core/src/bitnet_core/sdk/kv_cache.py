"""The KV cache (seed 003): several sequences share one budget of blocks.

Each sequence owns, per layer, a K and a V device array ``[capacity, kv_heads,
head_dim]`` that the provider's ``kv_store``/``attention`` ops work on, in
float32 or float16 (``KVCacheConfig.dtype``; the backend resolves ``None`` to
its provider's preference). Capacity grows in whole blocks of ``block_size``
tokens (doubling, so a long generation copies its cache O(log n) times).
Where the device memory is committed on first write (``lazy=True``: numpy
arrays on the host, whose untouched pages cost nothing), a sequence's arrays
are made once at its full ``max_len`` and its capacity grows without copies;
only the blocks it uses are charged. The cache charges every sequence
for the blocks it holds against two limits, ``max_bytes`` and ``max_tokens``;
when a sequence needs more blocks than are free, other sequences are evicted
by the policy (LRU: least recently used, FIFO: oldest, LFU: least often used)
until it fits. A sequence that alone would exceed ``max_seq_len`` (default:
the model's context length) or the whole budget raises ``ContextLengthError``.
"""

from __future__ import annotations

import enum
import itertools
import math
import threading
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..errors import ConfigError, ContextLengthError


class EvictionPolicy(str, enum.Enum):
    LRU = "lru"
    FIFO = "fifo"
    LFU = "lfu"


@dataclass(frozen=True)
class KVCacheConfig:
    """Limits of a shared KV cache (defaults as seed 003: 1 GiB, blocks of 64, LRU)."""

    max_bytes: int = 1 << 30
    #: total tokens (block capacity) across all sequences; None: only max_bytes limits
    max_tokens: int | None = None
    #: tokens of one sequence; None: the model's context length
    max_seq_len: int | None = None
    block_size: int = 64
    policy: EvictionPolicy | str = EvictionPolicy.LRU
    #: ``"float32"`` or ``"float16"`` (``"f32"``/``"f16"`` accepted); None: the provider's choice
    dtype: str | None = None

    def __post_init__(self) -> None:
        for name in ("max_bytes", "block_size"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v <= 0:
                raise ConfigError(f"kv cache: {name} must be a positive integer, got {v!r}")
        for name in ("max_tokens", "max_seq_len"):
            v = getattr(self, name)
            if v is not None and (not isinstance(v, int) or isinstance(v, bool) or v <= 0):
                raise ConfigError(f"kv cache: {name} must be a positive integer or None, got {v!r}")
        try:
            policy = EvictionPolicy(str(getattr(self.policy, "value", self.policy)).lower())
        except ValueError:
            known = ", ".join(p.value for p in EvictionPolicy)
            raise ConfigError(
                f"kv cache: unknown eviction policy {self.policy!r} (known: {known})"
            ) from None
        object.__setattr__(self, "policy", policy)
        if self.dtype is not None:
            object.__setattr__(self, "dtype", kv_dtype_name(self.dtype))


KV_DTYPES = {"float32": "float32", "f32": "float32", "float16": "float16", "f16": "float16"}


def kv_dtype_name(name: Any) -> str:
    """``"float32"`` or ``"float16"`` for a KV cache dtype name (else ``ConfigError``)."""
    try:
        key = name.lower() if isinstance(name, str) else np.dtype(name).name
    except TypeError:
        key = ""
    if key not in KV_DTYPES:
        raise ConfigError(f"kv cache: dtype must be float32 (f32) or float16 (f16), got {name!r}")
    return KV_DTYPES[key]


#: the KV cache dtypes of a provider that lists no ``kv_dtypes`` (the one default)
DEFAULT_KV_DTYPES: tuple[str, ...] = ("float32",)


def provider_kv_dtypes(provider: Any) -> tuple[str, ...]:
    """The provider's ``kv_dtypes`` (a tuple of dtype names), or ``DEFAULT_KV_DTYPES``."""
    supported = getattr(provider, "kv_dtypes", None)
    if isinstance(supported, (tuple, list)) and supported:
        return tuple(str(s) for s in supported)
    return DEFAULT_KV_DTYPES


def resolve_kv_dtype(provider: Any, config: KVCacheConfig | None) -> np.dtype:
    """The KV cache dtype: the config's, else the provider's first ``kv_dtypes`` (default float32).

    A provider lists the cache dtypes its ``kv_store``/``attention`` accept in
    ``kv_dtypes`` (preferred first); one without the attribute takes float32 only.
    """
    supported = provider_kv_dtypes(provider)
    want = config.dtype if config is not None and config.dtype is not None else supported[0]
    if want not in supported:
        raise ConfigError(
            f"provider {getattr(provider, 'name', provider)} keeps its KV cache in "
            f"{' or '.join(supported)}, not {want}"
        )
    return np.dtype(want)


class Sequence:
    """One sequence's slice of the cache: its K/V arrays per layer and how many tokens they hold."""

    def __init__(self, cache: KVCache, seq_id: int, max_len: int) -> None:
        self.cache = cache
        self.id = seq_id
        self.max_len = max_len
        self.length = 0
        self.capacity = 0  # tokens charged to the cache
        self.allocated = 0  # tokens the arrays hold (> capacity only in a lazy cache)
        self.k: list[Any] = []
        self.v: list[Any] = []
        self.created = cache._tick()
        self.last_used = self.created
        self.uses = 0
        self.evicted = False
        self.closed = False

    @property
    def blocks(self) -> int:
        return self.capacity // self.cache.config.block_size

    def layer(self, i: int) -> tuple[Any, Any]:
        return self.k[i], self.v[i]

    def reserve(self, n_tokens: int) -> None:
        """Make room for ``n_tokens`` in total (evicting others if needed); marks a use."""
        self.cache._reserve(self, n_tokens)

    def advance(self, n: int) -> None:
        """Record that ``n`` more tokens were stored."""
        if self.length + n > self.capacity:
            raise ContextLengthError(
                f"sequence {self.id}: {self.length + n} tokens exceed its reserved "
                f"{self.capacity} (call reserve first)"
            )
        self.length += n

    def truncate(self, n: int) -> None:
        """Forget every token from position ``n`` on (keeps the memory for reuse)."""
        if not 0 <= n <= self.length:
            raise ContextLengthError(
                f"sequence {self.id}: cannot truncate {self.length} tokens to {n}"
            )
        self.length = n

    @property
    def usable(self) -> bool:
        return not (self.evicted or self.closed)

    def close(self) -> None:
        """Give the sequence's blocks back to the cache."""
        self.cache.release(self)

    def __enter__(self) -> Sequence:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def __repr__(self) -> str:
        state = "evicted" if self.evicted else "closed" if self.closed else "live"
        return f"<Sequence {self.id} {self.length}/{self.capacity} tokens {state}>"


class KVCache:
    """Blocks of K/V memory shared by sequences, within byte and token limits.

    ``allocate(shape)`` makes one device array (``dtype``, ``[tokens, kv_heads,
    head_dim]``), ``free(array)`` gives one back, ``copy(dst, src)`` copies
    ``src``'s rows into the start of ``dst`` when a sequence grows. ``lazy``:
    ``allocate`` commits memory only where it is written (see the module doc).
    """

    def __init__(
        self,
        *,
        num_layers: int,
        kv_heads: int,
        head_dim: int,
        context_length: int,
        config: KVCacheConfig | None = None,
        allocate: Callable[[tuple[int, ...]], Any],
        free: Callable[[Any], None] | None = None,
        copy: Callable[[Any, Any], None],
        dtype: Any = np.float32,
        lazy: bool = False,
    ) -> None:
        self.config = config or KVCacheConfig()
        self.lazy = lazy
        self.dtype = np.dtype(dtype)
        self.num_layers = num_layers
        self.kv_heads = kv_heads
        self.head_dim = head_dim
        self.max_seq_len = min(self.config.max_seq_len or context_length, context_length)
        self.bytes_per_token = 2 * num_layers * kv_heads * head_dim * np.dtype(dtype).itemsize
        self._allocate = allocate
        self._free = free or (lambda a: None)
        self._copy = copy
        self._clock = itertools.count()
        self._ids = itertools.count()
        self.sequences: dict[int, Sequence] = {}
        self.evictions = 0
        self.used_blocks = 0
        self._lock = threading.RLock()
        #: frees blocks held for reuse (a prefix cache, model/prefix_cache.py) before any
        #: sequence is evicted: ``reclaim(blocks) -> blocks freed``
        self.reclaim: Callable[[int], int] | None = None
        #: called with a sequence (under the lock) before its arrays are freed: a prefix
        #: cache takes back the blocks it mapped into them (sdk/shared_pages.py)
        self.on_drop: list[Callable[[Sequence], None]] = []

    # --- accounting ----------------------------------------------------------
    def _tick(self) -> int:
        return next(self._clock)

    @property
    def block_bytes(self) -> int:
        return self.config.block_size * self.bytes_per_token

    @property
    def max_blocks(self) -> int:
        """Blocks the limits allow in total."""
        by_bytes = self.config.max_bytes // self.block_bytes
        if self.config.max_tokens is None:
            return by_bytes
        return min(by_bytes, self.config.max_tokens // self.config.block_size)

    @property
    def used_bytes(self) -> int:
        return self.used_blocks * self.block_bytes

    def stats(self) -> dict:
        return {
            "sequences": len(self.sequences),
            "used_blocks": self.used_blocks,
            "max_blocks": self.max_blocks,
            "used_bytes": self.used_bytes,
            "used_tokens": sum(s.length for s in self.sequences.values()),
            "evictions": self.evictions,
            "policy": self.config.policy.value,
            "block_size": self.config.block_size,
        }

    # --- sequences -------------------------------------------------------------
    def new_sequence(self, max_tokens: int | None = None) -> Sequence:
        """A new, empty sequence (no memory until it reserves)."""
        limit = self.max_seq_len if max_tokens is None else min(max_tokens, self.max_seq_len)
        if limit <= 0:
            raise ConfigError(f"kv cache: a sequence needs max_tokens > 0, got {max_tokens}")
        with self._lock:
            seq = Sequence(self, next(self._ids), limit)
            self.sequences[seq.id] = seq
        return seq

    def release(self, seq: Sequence) -> None:
        """Free a sequence's blocks (idempotent)."""
        with self._lock:
            self._drop(seq)
            seq.closed = True

    def _drop(self, seq: Sequence) -> None:
        for hook in list(self.on_drop):
            hook(seq)
        for a in (*seq.k, *seq.v):
            self._free(a)
        seq.k, seq.v = [], []
        self.used_blocks -= seq.blocks
        seq.capacity = seq.allocated = 0
        self.sequences.pop(seq.id, None)

    def _victim_key(self, s: Sequence) -> tuple:
        policy = self.config.policy
        if policy is EvictionPolicy.FIFO:
            return (s.created,)
        if policy is EvictionPolicy.LFU:
            return (s.uses, s.last_used)
        return (s.last_used,)

    def _evict_for(self, seq: Sequence, blocks_needed: int) -> None:
        while self.used_blocks + blocks_needed > self.max_blocks:
            short = self.used_blocks + blocks_needed - self.max_blocks
            if self.reclaim is not None and self.reclaim(short) > 0:
                continue
            others = [s for s in self.sequences.values() if s is not seq and s.capacity]
            if not others:
                raise ContextLengthError(
                    f"KV cache full: sequence {seq.id} needs {blocks_needed} more blocks of "
                    f"{self.config.block_size} tokens but the cache holds at most "
                    f"{self.max_blocks} ({self.config.max_bytes} bytes"
                    + (f", {self.config.max_tokens} tokens" if self.config.max_tokens else "")
                    + ")"
                )
            victim = min(others, key=self._victim_key)
            self._drop(victim)
            victim.evicted = True
            self.evictions += 1

    def _reserve(self, seq: Sequence, n_tokens: int) -> None:
        with self._lock:
            self._reserve_locked(seq, n_tokens)

    def _reserve_locked(self, seq: Sequence, n_tokens: int) -> None:
        if seq.evicted:
            raise ContextLengthError(
                f"sequence {seq.id} was evicted from the KV cache "
                f"({self.config.policy.value} policy); start it again"
            )
        if seq.closed:
            raise ContextLengthError(f"sequence {seq.id} was closed")
        if n_tokens > seq.max_len:
            raise ContextLengthError(
                f"sequence of {n_tokens} tokens exceeds the limit of {seq.max_len} tokens "
                f"(context length {self.max_seq_len})"
            )
        seq.last_used = self._tick()
        seq.uses += 1
        if n_tokens <= seq.capacity:
            return
        bs = self.config.block_size
        need_blocks = math.ceil(n_tokens / bs)
        if need_blocks > self.max_blocks:
            raise ContextLengthError(
                f"sequence of {n_tokens} tokens needs {need_blocks * self.block_bytes} bytes of "
                f"KV cache; the limit is {self.max_blocks * self.block_bytes} bytes"
            )
        max_blocks_seq = math.ceil(seq.max_len / bs)
        # Grow geometrically when there is room, else exactly what is needed.
        want = min(max(need_blocks, 2 * seq.blocks), max_blocks_seq)
        free = self.max_blocks - self.used_blocks
        if want - seq.blocks > free and want > need_blocks:
            want = max(need_blocks, min(want, seq.blocks + free))
        self._evict_for(seq, want - seq.blocks)
        new_cap = want * bs
        if new_cap > seq.allocated:  # (a lazy cache allocates once, at max_len)
            size = max_blocks_seq * bs if self.lazy else new_cap
            shape = (size, self.kv_heads, self.head_dim)
            new_k = [self._allocate(shape) for _ in range(self.num_layers)]
            new_v = [self._allocate(shape) for _ in range(self.num_layers)]
            if seq.length:
                for old, new in zip((*seq.k, *seq.v), (*new_k, *new_v), strict=True):
                    self._copy(new, old)
            for a in (*seq.k, *seq.v):
                self._free(a)
            seq.k, seq.v, seq.allocated = new_k, new_v, size
        self.used_blocks += want - seq.blocks
        seq.capacity = new_cap
