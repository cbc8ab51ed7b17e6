"""Prefix caching: the KV of prompts already computed, kept in blocks keyed by their tokens.

A block holds the K and V rows of ``block_size`` consecutive tokens, every
layer, copied out of a sequence that computed them. Its key is a hash chain
(as vLLM's): ``sha256(parent key + the block's token ids)``, so a key stands
for the whole prefix up to the block's end, not just its own tokens. A new
sequence looks up its prompt's blocks in order and copies the longest run of
hits into its own cache (``load``); it then computes only the rest.

Token-granular tails: past its last whole block, a sequence also takes the
rows its next tokens share with a cached child of that block, whole or
partial. A row at position ``p`` depends only on tokens ``0..p``, so the
rows of a shared beginning are valid whatever follows them. A prompt's or
a finished sequence's last partial block is cached too (as a leaf, dropped
once a longer block holds its tokens): a repeated prompt reuses all but the
``MIN_COMPUTED`` tokens a lookup leaves, and requests that share a system prompt ending inside a block
take its last rows from the first one's block instead of computing them.

Shared pages, else copies: a sequence's cache is one contiguous
``[capacity, kv_heads, head_dim]`` array per layer (what every provider's
``attention`` reads). In host memory on Linux the blocks live in a memory
file (``sdk/shared_pages.py``) and a hit maps their pages over the
sequence's first rows: nothing is copied, and sequences that share a prompt
share its physical pages. A block stays in its slot while a sequence maps it,
even after the cache drops it. Elsewhere (a device's memory, rows that do not
fill whole pages, the partial last block) a hit is a device-side ``kv_store``
of each block per layer. Either way the rows are the bits the first sequence
computed.

Memory: the cache charges its blocks to the runner's ``KVCache`` (the same
``--kv-budget`` as the sequences), in the cache's own block units, rounded
up. When a sequence needs room, ``KVCache`` first asks ``reclaim`` to drop
cached blocks, least recently used first, leaves of the chain first, never
one being copied; only then does it evict sequences. Storing never evicts a
sequence: a block that finds no room is simply not cached.
"""

from __future__ import annotations

import collections
import concurrent.futures
import functools
import hashlib
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..sdk import shared_pages

#: tokens of one cached block (vLLM's default)
DEFAULT_BLOCK_TOKENS = 16
#: prompt tokens a lookup leaves to compute: the logits come from the last, and a chunk of
#: one token would run the decode attention, whose sums (split over threads) are not
#: bit-identical to the prompt attention's on the native CPU
MIN_COMPUTED = 2
#: mappings the shared-pages arena keeps at most (each a VMA of the process, whose count
#: Linux limits to 65,530 by default); past it hits are copied
MAX_MAPPED_RUNS = 16384


@dataclass(eq=False)
class Block:
    key: bytes
    parent: bytes
    ids: tuple[int, ...]  # the tokens whose rows it holds (fewer than block_tokens: a tail)
    k: list[Any]  # one [block_tokens, kv_heads, head_dim] array per layer
    v: list[Any]
    children: int = 0  # cached blocks whose parent this is (only leaves are evicted)
    pins: int = 0  # copies in progress (never evicted while pinned)
    slot: int | None = None  # its slot in the shared-pages arena (None: pool arrays)


@dataclass
class Match:
    """A lookup's result: whole cached blocks, then ``tail_tokens`` rows of ``tail``."""

    blocks: list[Block]
    tail: Block | None = None
    tail_tokens: int = 0

    def tokens(self, block_tokens: int) -> int:
        return len(self.blocks) * block_tokens + self.tail_tokens

    def all(self) -> list[Block]:
        return [*self.blocks, *([self.tail] if self.tail is not None else [])]


@dataclass
class PrefixStats:
    hit_tokens: int = 0  # prompt tokens reused from the cache (mapped or copied)
    shared_tokens: int = 0  # of those, tokens whose rows were mapped, not copied
    miss_tokens: int = 0  # prompt tokens computed
    evictions: int = 0  # blocks dropped for room
    stored_blocks: int = 0  # blocks ever added
    lookups: int = 0


def chain_keys(ids: Any, block_tokens: int, parent: bytes = b"") -> list[bytes]:
    """The hash-chain key of each full block of ``ids``."""
    arr = np.asarray(ids, dtype=np.int64).reshape(-1)
    keys = []
    for i in range(arr.size // block_tokens):
        chunk = arr[i * block_tokens : (i + 1) * block_tokens]
        parent = hashlib.sha256(parent + chunk.tobytes()).digest()
        keys.append(parent)
    return keys


def tail_key(parent: bytes, ids: Any) -> bytes:
    """The key of a partial last block holding ``ids`` after the block ``parent``."""
    return hashlib.sha256(b"tail" + parent + np.asarray(ids, np.int64).tobytes()).digest()


def shared_length(a: Any, b: Any) -> int:
    """How many leading tokens ``a`` and ``b`` have in common."""
    n = 0
    for x, y in zip(a, b, strict=False):
        if x != y:
            break
        n += 1
    return n


class PrefixCache:
    """Blocks of K/V rows keyed by the token prefix they hold, for one runner's ``KVCache``.

    ``runner``: a generic runner or one built on it (``kv``, ``pool``,
    ``provider``, sequences with per-layer ``k``/``v`` arrays). ``close`` gives
    every block back and detaches the cache from the runner's ``KVCache``.
    """

    def __init__(self, runner: Any, block_tokens: int = DEFAULT_BLOCK_TOKENS) -> None:
        self.runner = runner
        self.kv = runner.kv
        self.provider = runner.provider
        self.block_tokens = block_tokens
        self.blocks: collections.OrderedDict[bytes, Block] = collections.OrderedDict()  # LRU
        self.child_keys: dict[bytes, dict[bytes, None]] = {}  # parent -> its cached children
        self.stats = PrefixStats()
        self._charged = 0  # KV cache blocks charged for the cached blocks
        self.users = 0  # schedulers sharing it (attach/detach)
        self._closed = False
        self._shape = (block_tokens, self.kv.kv_heads, self.kv.head_dim)
        self._threads = max(1, int(getattr(self.provider, "threads", 1) or 1))
        self._executor: concurrent.futures.ThreadPoolExecutor | None = None
        if getattr(self.kv, "reclaim", None) is not None:
            raise RuntimeError("this runner's KV cache already has a prefix cache")
        self.arena = self._make_arena()
        #: sequences with blocks mapped in: id -> (sequence, [(first block, slot, blocks)])
        self._mapped: dict[int, tuple[Any, list[tuple[int, int, int]]]] = {}
        self.kv.reclaim = self.reclaim
        if self.arena is not None:
            self.kv.on_drop.append(self._unmap)

    def _make_arena(self) -> shared_pages.BlockArena | None:
        """The memory file of the blocks, where sequences can map them (else None: copies)."""
        kv = self.kv
        slab = self.block_tokens * kv.kv_heads * kv.head_dim * kv.dtype.itemsize
        if not (kv.lazy and shared_pages.supported() and slab % shared_pages.PAGE == 0):
            return None
        slots = math.ceil(kv.max_blocks * kv.config.block_size / self.block_tokens) + 1
        try:
            return shared_pages.BlockArena(2 * kv.num_layers, slots, self._shape, kv.dtype)
        except (OSError, ValueError):
            return None

    # --- accounting ------------------------------------------------------------------
    def _kv_blocks(self, n_blocks: int) -> int:
        return math.ceil(n_blocks * self.block_tokens / self.kv.config.block_size)

    def _recharge(self) -> None:
        want = self._kv_blocks(len(self.blocks))
        self.kv.used_blocks += want - self._charged
        self._charged = want

    def _add(self, block: Block) -> None:
        self.blocks[block.key] = block
        self.child_keys.setdefault(block.parent, {})[block.key] = None
        if block.parent in self.blocks:
            self.blocks[block.parent].children += 1
        self._recharge()

    def _remove(self, b: Block) -> None:
        """Forget the leaf ``b`` and give its arrays back (the caller recharges)."""
        del self.blocks[b.key]
        siblings = self.child_keys.get(b.parent, {})
        siblings.pop(b.key, None)
        if not siblings:
            self.child_keys.pop(b.parent, None)
        parent = self.blocks.get(b.parent)
        if parent is not None:
            parent.children -= 1
        self._free_arrays(b)

    def _free_arrays(self, b: Block) -> None:
        if b.slot is not None:
            b.k, b.v = [], []
            self.arena.give(b.slot)  # type: ignore[union-attr]
            return
        for a in (*b.k, *b.v):
            self.runner.pool.release(a)

    def _drop_one(self) -> bool:
        """Drop the least recently used unpinned leaf; False when there is none."""
        for b in self.blocks.values():
            if b.children == 0 and b.pins == 0:
                self._remove(b)
                self.stats.evictions += 1
                return True
        return False

    def reclaim(self, kv_blocks: int) -> int:
        """Drop cached blocks until ``kv_blocks`` KV-cache blocks were freed (or none is
        left to drop); the KV-cache blocks freed. ``KVCache`` calls it under its lock."""
        before = self._charged
        while before - self._charged < kv_blocks and self._drop_one():
            self._recharge()
        return before - self._charged

    @property
    def cached_tokens(self) -> int:
        return sum(len(b.ids) for b in self.blocks.values())

    def reusable(self, ids: Any) -> int:
        """Tokens of ``ids`` that ``match`` would give now (nothing is marked used)."""
        with self.kv._lock:
            return self._lookup(ids).tokens(self.block_tokens)

    def start(self, seq: Any, ids: Any) -> int:
        """Fill the empty sequence ``seq`` with the longest cached prefix of ``ids`` and count
        the hit and the miss; the tokens reused (the caller computes the rest)."""
        n = self.load(seq, self.match(ids))
        self.stats.hit_tokens += n
        self.stats.miss_tokens += len(ids) - n
        return n

    # --- lookups and copies ---------------------------------------------------------------
    def _lookup(self, ids: Any) -> Match:
        ids = list(ids)[: max(len(ids) - MIN_COMPUTED, 0)]
        found: list[Block] = []
        parent = b""
        for key in chain_keys(ids, self.block_tokens):
            b = self.blocks.get(key)
            if b is None:
                break
            found.append(b)
            parent = key
        rest = ids[len(found) * self.block_tokens :]
        best, best_n = None, 0
        for key in self.child_keys.get(parent, {}) if rest else ():
            n = shared_length(self.blocks[key].ids, rest)
            if n > best_n:
                best, best_n = self.blocks[key], n
        return Match(found, best, best_n)

    def match(self, ids: Any) -> Match:
        """The cached rows of the longest cached prefix of ``ids`` that leaves at least
        ``MIN_COMPUTED`` tokens to compute; marks the blocks used."""
        with self.kv._lock:
            self.stats.lookups += 1
            found = self._lookup(ids)
            for b in found.all():
                self.blocks.move_to_end(b.key)
            return found

    def load(self, seq: Any, found: Match) -> int:
        """Map or copy ``found``'s rows into the empty sequence ``seq``; the tokens it now holds."""
        n = found.tokens(self.block_tokens)
        if not n:
            return 0
        pinned = found.all()
        with self.kv._lock:
            for b in pinned:
                b.pins += 1
            try:
                seq.reserve(n)  # may reclaim other cached blocks, never these
                layers = range(self.kv.num_layers)
                mapped = self._map_in(seq, found)
                copy = functools.partial(self._copy_in, seq, found, mapped)
                if self.kv.lazy and self._threads > 1:  # host memory: layers side by side
                    list(self._pool().map(copy, layers))
                else:
                    for layer in layers:
                        copy(layer)
                seq.advance(n)
            finally:
                for b in pinned:
                    b.pins -= 1
        return n

    def _map_in(self, seq: Any, found: Match) -> set[int]:
        """Map ``found``'s whole blocks that have slots into ``seq``'s arrays, in runs of
        consecutive slots; the indices of the blocks mapped (the rest are copied)."""
        arena = self.arena
        if arena is None or seq.id in self._mapped or not found.blocks:
            return set()
        arrays = self._arrays(seq)
        if not all(arena.can_map(a) for a in arrays):
            return set()
        runs: list[tuple[int, int, int]] = []
        for i, b in enumerate(found.blocks):
            if b.slot is None:
                continue
            if runs and runs[-1][0] + runs[-1][2] == i and runs[-1][1] + runs[-1][2] == b.slot:
                first, slot, count = runs[-1]
                runs[-1] = (first, slot, count + 1)
            else:
                runs.append((i, b.slot, 1))
        if not runs or arena.mapped_runs + len(runs) * len(arrays) > MAX_MAPPED_RUNS:
            return set()
        done: list[tuple[int, int, int]] = []
        for first, slot, count in runs:
            placed: list[Any] = []
            try:
                for a, arr in enumerate(arrays):
                    arena.map_rows(arr, first, a, slot, count)
                    placed.append(arr)
            except OSError:  # (out of mappings) this run and the rest are copied
                for arr in placed:
                    arena.unmap_rows(arr, first, slot, count)
                break
            done.append((first, slot, count))
        if not done:
            return set()
        self._mapped[seq.id] = (seq, done)
        blocks = {i for first, _, count in done for i in range(first, first + count)}
        self.stats.shared_tokens += len(blocks) * self.block_tokens
        return blocks

    @staticmethod
    def _arrays(seq: Any) -> list[Any]:
        """``seq``'s arrays in the arena's order: layer 0's K, its V, layer 1's K, ..."""
        return [a for layer in range(len(seq.k)) for a in seq.layer(layer)]

    def _unmap(self, seq: Any) -> None:
        """``KVCache.on_drop``: give back the blocks mapped into ``seq``'s arrays."""
        entry = self._mapped.pop(seq.id, None)
        if entry is None:
            return
        arrays = self._arrays(seq)
        for first, slot, count in entry[1]:
            for arr in arrays:
                self.arena.unmap_rows(arr, first, slot, count)  # type: ignore[union-attr]
        if self._closed and not self._mapped:
            self._detach_unmap()

    def _copy_in(self, seq: Any, found: Match, mapped: set[int], layer: int) -> None:
        """One layer's rows of ``found`` into ``seq`` (but the blocks already mapped)."""
        p, bt = self.provider, self.block_tokens
        k, v = seq.layer(layer)
        for i, b in enumerate(found.blocks):
            if i in mapped:
                continue
            p.kv_store(k, b.k[layer], i * bt)
            p.kv_store(v, b.v[layer], i * bt)
        if found.tail is not None:
            t, m, at = found.tail, found.tail_tokens, len(found.blocks) * bt
            p.kv_store(k, self._rows(t.k[layer], 0, m), at)
            p.kv_store(v, self._rows(t.v[layer], 0, m), at)

    def _pool(self) -> concurrent.futures.ThreadPoolExecutor:
        """Threads for host copies: numpy lets the GIL go while it copies, so the pages a
        sequence touches for the first time fault in on every core."""
        if self._executor is None:
            self._executor = concurrent.futures.ThreadPoolExecutor(
                self._threads, thread_name_prefix="bitnet-prefix-copy"
            )
        return self._executor

    def _rows(self, arr: Any, start: int, n: int) -> Any:
        """Rows ``[start, start + n)`` of a cache array (``n`` <= a block), on its device."""
        if isinstance(arr, np.ndarray):
            return arr[start : start + n]
        p, (_, h, d) = self.provider, self._shape
        flat = p.reshape(arr, (int(arr.shape[0]), h * d))
        rows = p.embedding(flat, np.arange(start, start + n, dtype=np.int64))
        return p.reshape(rows, (n, h, d))

    def store(self, seq: Any, ids: Any) -> int:
        """Cache the blocks of ``ids``, the tokens ``seq`` holds from position 0: every whole
        block, then the partial last one (blocks already cached are marked used); the
        blocks added. Stops where the budget has no room left without evicting a sequence."""
        ids = list(ids)[: seq.length]
        bt, added = self.block_tokens, 0
        with self.kv._lock:
            if not seq.usable:
                return 0
            parent = b""
            keys = chain_keys(ids, bt)
            for i, key in enumerate(keys):
                old = self.blocks.get(key)
                if old is not None:
                    self.blocks.move_to_end(key)
                    parent = key
                    continue
                if not self._make_room(parent):
                    return added
                chunk = tuple(ids[i * bt : (i + 1) * bt])
                self._drop_covered(parent, chunk)
                self._add(self._copy_out(seq, key, parent, chunk, i * bt))
                self.stats.stored_blocks += 1
                added += 1
                parent = key
            tail = tuple(ids[len(keys) * bt :])
            if tail and not self._covered(parent, tail) and self._make_room(parent):
                self._drop_covered(parent, tail)
                key = tail_key(parent, tail)
                self._add(self._copy_out(seq, key, parent, tail, len(keys) * bt))
                self.stats.stored_blocks += 1
                added += 1
        return added

    def _covered(self, parent: bytes, ids: tuple[int, ...]) -> bool:
        """A cached child of ``parent`` holds ``ids`` (or more): marks it used."""
        for key in self.child_keys.get(parent, {}):
            b = self.blocks[key]
            if b.ids[: len(ids)] == ids:
                self.blocks.move_to_end(key)
                return True
        return False

    def _drop_covered(self, parent: bytes, ids: tuple[int, ...]) -> None:
        """Drop the partial children of ``parent`` whose tokens ``ids`` begins with: the
        block about to hold ``ids`` gives the same rows."""
        for key in list(self.child_keys.get(parent, {})):
            b = self.blocks[key]
            if len(b.ids) < len(ids) and ids[: len(b.ids)] == b.ids and b.pins == 0:
                self._remove(b)
        self._recharge()

    def _make_room(self, parent: bytes) -> bool:
        """Room for one more block within the budget, dropping other cached blocks if
        needed (but not ``parent``, which the new block extends)."""
        kv = self.kv
        need = self._kv_blocks(len(self.blocks) + 1) - self._charged
        pinned = self.blocks.get(parent)
        if pinned is not None:
            pinned.pins += 1
        try:
            while kv.used_blocks + need > kv.max_blocks:
                if not self._drop_one():
                    return False
                self._recharge()
                need = self._kv_blocks(len(self.blocks) + 1) - self._charged
            return True
        finally:
            if pinned is not None:
                pinned.pins -= 1

    def _copy_out(
        self, seq: Any, key: bytes, parent: bytes, ids: tuple[int, ...], start: int
    ) -> Block:
        p, pool, dtype, n = self.provider, self.runner.pool, self.kv.dtype, len(ids)
        slot = self.arena.take() if self.arena is not None else None
        ks, vs = [], []
        for layer in range(self.kv.num_layers):
            k, v = seq.layer(layer)
            if slot is not None:
                # (the arena's order: ``_arrays``)
                bk, bv = self.arena.view(2 * layer, slot), self.arena.view(2 * layer + 1, slot)  # type: ignore[union-attr]
            else:
                bk, bv = pool.acquire(self._shape, dtype), pool.acquire(self._shape, dtype)
            p.kv_store(bk, self._rows(k, start, n), 0)
            p.kv_store(bv, self._rows(v, start, n), 0)
            ks.append(bk)
            vs.append(bv)
        return Block(key, parent, ids, ks, vs, slot=slot)

    def close(self) -> None:
        """Give every block back; the KV cache no longer reclaims through this cache."""
        with self.kv._lock:
            for b in self.blocks.values():
                self._free_arrays(b)
            self.blocks.clear()
            self.child_keys.clear()
            self._recharge()
            if getattr(self.kv, "reclaim", None) == self.reclaim:
                self.kv.reclaim = None
            self._closed = True
            if not self._mapped:  # else the last sequence mapping blocks does it
                self._detach_unmap()
        if self._executor is not None:
            self._executor.shutdown(wait=False)
            self._executor = None

    def _detach_unmap(self) -> None:
        if self._unmap in self.kv.on_drop:
            self.kv.on_drop.remove(self._unmap)
        if self.arena is not None:
            self.arena.close()

    def as_dict(self) -> dict:
        s = self.stats
        return {
            "block_tokens": self.block_tokens,
            "cached_blocks": len(self.blocks),
            "cached_tokens": self.cached_tokens,
            "hit_tokens": s.hit_tokens,
            "shared_tokens": s.shared_tokens,
            "miss_tokens": s.miss_tokens,
            "evictions": s.evictions,
        }


def attach(runner: Any) -> PrefixCache | None:
    """The runner's prefix cache, made on first use (None where the runner keeps no
    ``KVCache`` of per-layer sequence arrays); ``detach`` once per ``attach``."""
    from ..sdk.kv_cache import KVCache

    if not isinstance(getattr(runner, "kv", None), KVCache) or not hasattr(runner, "pool"):
        return None
    cache = getattr(runner, "prefix_cache", None)
    if cache is None:
        cache = runner.prefix_cache = PrefixCache(runner)
    cache.users += 1
    return cache


def detach(runner: Any) -> None:
    """One user fewer; the last one gives the blocks back."""
    cache = getattr(runner, "prefix_cache", None)
    if cache is None:
        return
    cache.users -= 1
    if cache.users <= 0:
        cache.close()
        runner.prefix_cache = None
