"""Host arrays whose memory is committed page by page, only where written.

``np.zeros`` would do on its own, but numpy advises the kernel to back
arrays of 4 MiB and more with transparent huge pages
(``madvise(MADV_HUGEPAGE)``). A KV cache made at full context length and
written a few rows per layer then commits a whole 2 MiB page per layer for
each first write, and whether it does depends on the kernel finding free
huge pages: the same run measured 358 or 448 MB of peak RSS. Large arrays
here come from a private anonymous ``mmap`` advised ``MADV_NOHUGEPAGE``: zeroed,
and resident only in the 4 KiB pages that are written.
"""

from __future__ import annotations

import math
import mmap
from typing import Any

import numpy as np

#: numpy advises huge pages from this size on (numpy/_core/src/multiarray/alloc.c)
HUGEPAGE_ADVICE_BYTES = 1 << 22


class OwnPages(mmap.mmap):
    """A private anonymous mapping ``page_zeros`` made (so its pages may be remapped:
    ``sdk/shared_pages.py``)."""


def page_zeros(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A zeroed array at the start of its own anonymous mapping (page-aligned, committed
    only where written, never as huge pages), whatever its size."""
    dt = np.dtype(dtype)
    nbytes = max(math.prod(shape) * dt.itemsize, 1)
    if hasattr(mmap, "MAP_ANONYMOUS"):  # POSIX: private, not the default shared mapping
        buf: mmap.mmap = OwnPages(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:
        buf = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux; elsewhere there is no such advice to undo
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=dt, count=math.prod(shape)).reshape(shape)


def owns_pages(arr: np.ndarray) -> bool:
    """``arr`` is a C-contiguous view from the start of a private ``page_zeros`` mapping."""
    base: Any = arr
    while isinstance(base, np.ndarray):
        base = base.base
    if isinstance(base, memoryview):
        base = base.obj
    if not isinstance(base, OwnPages) or not arr.flags.c_contiguous:
        return False
    return arr.ctypes.data == np.frombuffer(base, dtype=np.uint8).ctypes.data


def lazy_zeros(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A zeroed array whose pages are committed on first write, never as huge pages."""
    dt = np.dtype(dtype)
    if math.prod(shape) * dt.itemsize < HUGEPAGE_ADVICE_BYTES:
        return np.zeros(shape, dtype=dt)
    return page_zeros(shape, dt)
