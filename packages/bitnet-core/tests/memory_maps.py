"""The process's memory mappings as ``/proc/self/smaps`` reports them (Linux), for the
memory tests."""

from __future__ import annotations


def mapping_of(address: int) -> tuple[int, int, dict[str, str]] | None:
    """(start, end, smaps fields) of the mapping that holds ``address``, or None."""
    found: tuple[int, int, dict[str, str]] | None = None
    with open("/proc/self/smaps") as f:
        for line in f:
            head = line.split()[0]
            if "-" in head and not head.endswith(":"):  # a mapping's first line: start-end ...
                if found is not None:
                    break
                lo, hi = (int(x, 16) for x in head.split("-"))
                if lo <= address < hi:
                    found = (lo, hi, {})
            elif found is not None:
                key, _, value = line.partition(":")
                found[2][key] = value.strip()
    return found
