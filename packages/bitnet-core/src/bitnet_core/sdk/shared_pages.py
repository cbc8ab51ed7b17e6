"""Host pages that several KV-cache sequences share: cached rows mapped, not copied.

A sequence's cache is one contiguous ``[capacity, kv_heads, head_dim]`` array
per layer, and every provider's ``attention`` reads it so. Sequences that
start with the same cached prompt can still share those rows in memory: the
prefix cache (``model/prefix_cache.py``) keeps its blocks in a memory file
(``memfd``), and a hit maps the file's pages of each block over the first rows
of the sequence's arrays (``mmap(MAP_FIXED | MAP_PRIVATE)``), where a copy
would write them. The rows read the same bits; no page is copied or zeroed;
eight requests that share a system prompt read one physical copy of its K
and V, so a batched step finds most of it in the CPU's caches.

Private mappings are copy-on-write: a sequence that writes over a mapped row
(a session that rewinds) gets its own page, and the file's page is unchanged.
The reverse is not so: a page the sequence never wrote shows whatever the
file holds, so a block's slot is never rewritten while a sequence maps it
(``BlockArena.refs``; a block dropped from the cache meanwhile frees its
slot when the last such sequence ends).

Only where it is possible: Linux (``memfd_create``, ``mmap`` through libc),
host memory, destination arrays from ``host_memory.page_zeros`` (page-aligned private
anonymous mappings), and blocks whose K (or V) rows of one layer fill whole
pages (``block_tokens * kv_heads * head_dim * itemsize`` a multiple of the
page size: 16 tokens of 128 float16 values do). Elsewhere ``supported`` or
``BlockArena.can_map`` says no and the caller copies.
"""

from __future__ import annotations

import contextlib
import ctypes
import ctypes.util
import heapq
import math
import mmap
import os
import sys
from typing import Any

import numpy as np

from .host_memory import owns_pages

PAGE = mmap.PAGESIZE
_MAP_FIXED = getattr(mmap, "MAP_FIXED", 0x10)  # Linux's value; Python's mmap does not export it


def _libc() -> Any | None:
    if not sys.platform.startswith("linux") or not hasattr(os, "memfd_create"):
        return None
    try:
        libc = ctypes.CDLL(ctypes.util.find_library("c") or None, use_errno=True)
        fn = libc.mmap
    except (OSError, AttributeError):
        return None
    fn.restype = ctypes.c_void_p
    fn.argtypes = [
        ctypes.c_void_p,
        ctypes.c_size_t,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int,
        ctypes.c_int64,
    ]
    return libc


_LIBC = _libc()


def supported() -> bool:
    """True where blocks can be mapped into sequences (Linux with ``memfd_create``)."""
    return _LIBC is not None and os.environ.get("BITNET_SHARED_KV_PAGES", "1") != "0"


class BlockArena:
    """Slots of K/V blocks in one memory file, mapped into sequences on demand.

    ``arrays`` per-layer arrays a block has (2 per layer: K and V), each of
    ``slab_shape`` (``[block_tokens, kv_heads, head_dim]``); ``slots`` blocks at
    most. Slot ``s`` of array ``a`` lies at file offset ``(a * slots + s) *
    slab_bytes``, so consecutive slots of one array are consecutive in the
    file and a run of them maps with one call. The file is sparse: only the
    slabs written take memory.
    """

    def __init__(self, arrays: int, slots: int, slab_shape: tuple[int, ...], dtype: Any) -> None:
        if _LIBC is None:
            raise OSError("shared KV pages need Linux (memfd_create and mmap)")
        self.arrays, self.slots = arrays, slots
        self.slab_shape, self.dtype = tuple(slab_shape), np.dtype(dtype)
        self.slab_bytes = math.prod(slab_shape) * self.dtype.itemsize
        if self.slab_bytes % PAGE:
            raise ValueError(f"a slab of {self.slab_bytes} bytes is not whole pages of {PAGE}")
        size = arrays * slots * self.slab_bytes
        self._fd = os.memfd_create("bitnet-kv-blocks", getattr(os, "MFD_CLOEXEC", 0))
        try:
            os.ftruncate(self._fd, size)
            self._map = mmap.mmap(self._fd, size, flags=mmap.MAP_SHARED)
        except OSError:
            os.close(self._fd)
            raise
        self._free = list(range(slots))  # a min-heap: the lowest first keeps runs long
        self.refs = [0] * slots  # sequences mapping the slot
        self._orphans: set[int] = set()  # given back while mapped: freed at their last unmap
        self.mapped_runs = 0  # live mappings (each a VMA of the process)
        self.closed = False

    # --- slots ----------------------------------------------------------------------
    def take(self) -> int | None:
        """The lowest free slot, or None when every slot holds a block or a mapped orphan."""
        return heapq.heappop(self._free) if self._free else None

    def give(self, slot: int) -> None:
        """The slot's block left the cache: free now, or once no sequence maps it."""
        if self.refs[slot]:
            self._orphans.add(slot)
        else:
            heapq.heappush(self._free, slot)

    def view(self, array: int, slot: int) -> np.ndarray:
        """The writable slab of ``array`` in ``slot`` (a view of the shared mapping)."""
        off = (array * self.slots + slot) * self.slab_bytes
        count = math.prod(self.slab_shape)
        return np.frombuffer(self._map, self.dtype, count, off).reshape(self.slab_shape)

    # --- mapping into sequences ----------------------------------------------------------
    def can_map(self, dst: np.ndarray) -> bool:
        """``dst`` (a sequence's array) can take this arena's slabs by mapping."""
        return (
            not self.closed
            and isinstance(dst, np.ndarray)
            and dst.dtype == self.dtype
            and dst.shape[1:] == self.slab_shape[1:]
            and owns_pages(dst)
        )

    def map_rows(self, dst: np.ndarray, block: int, array: int, slot: int, n: int) -> None:
        """Map slots ``slot .. slot + n - 1`` of ``array`` over blocks ``block ..`` of ``dst``
        (copy-on-write) and count a reference on each."""
        length = n * self.slab_bytes
        addr = dst.ctypes.data + block * self.slab_bytes
        if block * self.slab_shape[0] + n * self.slab_shape[0] > dst.shape[0]:
            raise ValueError("mapping past the end of the sequence's array")
        off = (array * self.slots + slot) * self.slab_bytes
        prot = mmap.PROT_READ | mmap.PROT_WRITE
        flags = mmap.MAP_PRIVATE | _MAP_FIXED
        got = _LIBC.mmap(addr, length, prot, flags, self._fd, off)
        if got != addr:  # MAP_FIXED failed: the range may be gone; put fresh memory back
            err = ctypes.get_errno()
            self._anonymous(addr, length)
            raise OSError(err, f"mmap of KV blocks failed: {os.strerror(err)}")
        for s in range(slot, slot + n):
            self.refs[s] += 1
        self.mapped_runs += 1

    def unmap_rows(self, dst: np.ndarray, block: int, slot: int, n: int) -> None:
        """Put fresh zero pages back over what ``map_rows`` mapped; drop the references."""
        self._anonymous(dst.ctypes.data + block * self.slab_bytes, n * self.slab_bytes)
        self.mapped_runs -= 1
        for s in range(slot, slot + n):
            self.refs[s] -= 1
            if not self.refs[s] and s in self._orphans:
                self._orphans.discard(s)
                heapq.heappush(self._free, s)

    @staticmethod
    def _anonymous(addr: int, length: int) -> None:
        """Fresh zero pages at ``addr``, advised as ``page_zeros``'s are (so the range
        merges back into its neighbours: one mapping again)."""
        flags = mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS | _MAP_FIXED
        got = _LIBC.mmap(addr, length, mmap.PROT_READ | mmap.PROT_WRITE, flags, -1, 0)
        if got != addr:
            err = ctypes.get_errno()
            raise OSError(err, f"mmap of fresh KV pages failed: {os.strerror(err)}")
        if hasattr(mmap, "MADV_NOHUGEPAGE"):
            _LIBC.madvise(ctypes.c_void_p(addr), ctypes.c_size_t(length), mmap.MADV_NOHUGEPAGE)

    def close(self) -> None:
        """Drop the arena's own mapping and file; sequences that still map slots keep
        their pages (a mapping holds the file) until they are unmapped."""
        if self.closed:
            return
        self.closed = True
        with contextlib.suppress(BufferError):  # a block view still referenced: the GC frees it
            self._map.close()
        os.close(self._fd)
