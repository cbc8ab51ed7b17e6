"""Shared KV pages (``sdk/shared_pages.py``): cached blocks mapped into sequences' arrays.

A mapped row must read the block's bits, a write to it must stay the
sequence's own (copy-on-write), and unmapping must leave fresh zero pages;
a write to the arena's slot shows through a mapping, which is why a slot a
sequence maps is never reused (the prefix cache's test of that is in
test_prefix_cache.py).
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.sdk import shared_pages
from bitnet_core.sdk.host_memory import page_zeros
from bitnet_core.sdk.shared_pages import PAGE, BlockArena

pytestmark = pytest.mark.skipif(not shared_pages.supported(), reason="Linux memfd only")

SLAB = (16, 2, 64)  # 16 rows of 128 float16 values: one 4 KiB page


def _arena(slots: int = 5) -> BlockArena:
    return BlockArena(arrays=3, slots=slots, slab_shape=SLAB, dtype=np.float16)


def _fill(arena: BlockArena, array: int, slot: int, seed: int) -> np.ndarray:
    data = np.random.default_rng(seed).standard_normal(SLAB).astype(np.float16)
    arena.view(array, slot)[:] = data
    return data


def test_mapped_rows_read_the_blocks_and_writes_stay_private():
    arena = _arena()
    blocks = {s: _fill(arena, 1, s, seed=s) for s in (1, 2, 3)}
    dst = page_zeros((7 * 16, 2, 64), np.float16)  # 7 blocks: an odd size, past the run
    dst[:] = 5
    arena.map_rows(dst, 2, 1, 1, 3)  # slots 1..3 of array 1 over blocks 2..4
    assert arena.refs == [0, 1, 1, 1, 0] and arena.mapped_runs == 1
    for i, s in enumerate((1, 2, 3)):
        np.testing.assert_array_equal(dst[(2 + i) * 16 : (3 + i) * 16], blocks[s])
    assert (dst[:32] == 5).all() and (dst[80:] == 5).all()  # the rest untouched
    dst[40] = 9  # copy-on-write: the sequence's own page
    np.testing.assert_array_equal(arena.view(1, 2), blocks[2])
    arena.view(1, 3)[0] = 7  # an unwritten page shows the file: why mapped slots are kept
    assert (dst[64] == 7).all()
    arena.unmap_rows(dst, 2, 1, 3)
    assert arena.refs == [0] * 5 and arena.mapped_runs == 0
    assert (dst[32:80] == 0).all() and (dst[:32] == 5).all()  # fresh pages where mapped
    arena.close()


def test_a_slot_given_back_while_mapped_is_freed_at_its_last_unmap():
    arena = _arena(slots=2)
    assert [arena.take(), arena.take(), arena.take()] == [0, 1, None]
    a, b = (page_zeros((32, 2, 64), np.float16) for _ in range(2))
    arena.map_rows(a, 0, 0, 0, 1)
    arena.map_rows(b, 1, 0, 0, 1)
    arena.give(0)  # the cache dropped it; two sequences still read it
    arena.give(1)
    assert arena.take() == 1  # not 0
    arena.unmap_rows(a, 0, 0, 1)
    assert arena.take() is None
    arena.unmap_rows(b, 1, 0, 1)
    assert arena.take() == 0
    arena.close()


def test_only_whole_pages_and_own_mappings_are_mapped():
    with pytest.raises(ValueError, match="whole pages"):
        BlockArena(arrays=1, slots=2, slab_shape=(16, 1, 8), dtype=np.float16)
    arena = _arena()
    assert arena.can_map(page_zeros((64, 2, 64), np.float16))
    assert not arena.can_map(np.zeros((64, 2, 64), np.float16))  # the heap: not ours to remap
    assert not arena.can_map(page_zeros((64, 2, 64), np.float32))  # another dtype
    assert not arena.can_map(page_zeros((64, 4, 64), np.float16))  # another row shape
    assert not arena.can_map(page_zeros((64, 2, 64), np.float16)[16:])  # not the mapping's start
    with pytest.raises(ValueError, match="past the end"):
        arena.map_rows(page_zeros((40, 2, 64), np.float16), 2, 0, 0, 1)
    assert not arena.can_map(arena.view(0, 0))  # the arena's own file: never remapped
    assert PAGE % 4096 == 0
    arena.close()


def _mappings(arr: np.ndarray) -> int:
    """How many of the process's mappings cover ``arr``'s bytes."""
    lo, hi = arr.ctypes.data, arr.ctypes.data + arr.nbytes
    n = 0
    with open("/proc/self/maps") as f:
        for line in f:
            start, end = (int(x, 16) for x in line.split()[0].split("-"))
            n += start < hi and end > lo
    return n


def test_unmapping_leaves_one_mapping_again():
    arena = _arena()
    dst = page_zeros((6 * 16, 2, 64), np.float16)
    assert _mappings(dst) == 1
    arena.map_rows(dst, 2, 0, 0, 2)  # the middle of the array: three mappings
    assert _mappings(dst) == 3
    arena.unmap_rows(dst, 2, 0, 2)
    assert _mappings(dst) == 1  # the fresh pages merged with their neighbours
    arena.close()
