"""Where a model's load time goes: seconds by stage, for the receipt and ``bench --profile``.

``load`` opens a ``measuring()`` block; the code of each stage runs inside
``stage(name)``. A stage entered inside another is taken out of the outer
one's time, so the stages add up to at most the whole. Stages:

- ``read``: the GGUF header, metadata and tokenizer;
- ``device``: the device choice (waiting for the GPU probes' child process);
- ``repack``: ternary weights into a CPU provider's layout (host memory);
- ``upload``: weights into a device provider's memory (a GPU's);
- ``head``: the CPU's int8 copy of the output head.

Outside a ``measuring()`` block ``stage`` only runs its body.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

#: The open measurement: seconds by stage, and the stack of stages running now.
_open: list[tuple[dict[str, float], list[list]]] = []


@contextmanager
def measuring() -> Iterator[dict[str, float]]:
    """Collect the seconds of the stages run inside the block (the dict it yields)."""
    times: dict[str, float] = {}
    _open.append((times, []))
    try:
        yield times
    finally:
        _open.pop()


@contextmanager
def stage(name: str) -> Iterator[None]:
    """Count the body's seconds, less those of stages inside it, as stage ``name``."""
    if not _open:
        yield
        return
    times, running = _open[-1]
    now = time.perf_counter()
    if running:  # the outer stage pauses
        outer = running[-1]
        times[outer[0]] = times.get(outer[0], 0.0) + now - outer[1]
    entry = [name, now]
    running.append(entry)
    try:
        yield
    finally:
        now = time.perf_counter()
        running.pop()
        times[name] = times.get(name, 0.0) + now - entry[1]
        if running:
            running[-1][1] = now  # the outer stage resumes


def stage_line(times: dict[str, float]) -> str:
    """``read 0.31 device 0.00 repack 0.12 head 0.20`` (seconds), in the order they ran."""
    return " ".join(f"{name} {secs:.2f}" for name, secs in times.items())
