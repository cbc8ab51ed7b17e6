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


def lazy_zeros(shape: tuple[int, ...], dtype: Any = np.float32) -> np.ndarray:
    """A zeroed array whose pages are committed on first write, never as huge pages."""
    dt = np.dtype(dtype)
    nbytes = math.prod(shape) * dt.itemsize
    if nbytes < HUGEPAGE_ADVICE_BYTES:
        return np.zeros(shape, dtype=dt)
    if hasattr(mmap, "MAP_ANONYMOUS"):  # POSIX: private, not the default shared mapping
        buf = mmap.mmap(-1, nbytes, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    else:
        buf = mmap.mmap(-1, nbytes)
    if hasattr(mmap, "MADV_NOHUGEPAGE"):  # Linux; elsewhere there is no such advice to undo
        buf.madvise(mmap.MADV_NOHUGEPAGE)
    return np.frombuffer(buf, dtype=dt).reshape(shape)
