"""Arrays that are views of a read-only file mapping (a GGUF): their file, and dropping their pages."""

from __future__ import annotations

import mmap
from typing import Any

import numpy as np


def _mapping_of(arr: np.ndarray) -> tuple[Any, Any, int] | None:
    """(the ``mmap.mmap`` under ``arr``, the first ``numpy.memmap`` with a file name on
    the way down or None, ``arr``'s byte offset in the mapping), or None if ``arr`` is
    not a view of a mapping."""
    base: Any = arr
    memmap = None
    while base is not None and not isinstance(base, mmap.mmap):
        if memmap is None and isinstance(base, np.memmap) and getattr(base, "filename", None):
            memmap = base
        base = getattr(base, "base", None)
    if base is None:
        return None
    return base, memmap, arr.ctypes.data - np.frombuffer(base, dtype=np.uint8).ctypes.data


def release_file_pages(arr: np.ndarray) -> bool:
    """Drop the resident pages of ``arr`` if it is a read-only view of a file mapping.

    Only for a ``numpy.memmap`` opened read-only (a GGUF): ``MADV_DONTNEED``
    unmaps the pages, and any later read faults them back from the page
    cache, so nothing is lost; it just stops counting in the RSS. Any other
    array (writable, anonymous memory): nothing is done. True if released.
    """
    found = _mapping_of(arr)
    if found is None or arr.flags.writeable or not hasattr(found[0], "madvise"):
        return False
    base, _, offset = found
    page = mmap.PAGESIZE
    start = -(-offset // page) * page
    end = (offset + arr.nbytes) // page * page
    if not 0 <= start < end <= len(base):
        return False
    try:
        base.madvise(mmap.MADV_DONTNEED, start, end - start)
    except (OSError, ValueError):
        return False
    return True


def file_extent(arr: np.ndarray) -> tuple[str, int] | None:
    """(file path, byte offset) of ``arr`` if it is a C-contiguous view of a
    ``numpy.memmap`` of a file, else None."""
    found = _mapping_of(arr) if arr.flags.c_contiguous else None
    if found is None or found[1] is None:
        return None
    base, memmap, offset = found
    if not 0 <= offset <= len(base) - arr.nbytes:
        return None
    start = memmap.offset - memmap.offset % mmap.ALLOCATIONGRANULARITY  # the map's first byte
    return str(memmap.filename), start + offset
