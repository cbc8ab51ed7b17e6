"""What a provider actually ran: kernel launches, queue submissions and fallbacks.

Every ``DeviceProvider`` owns one ``LaunchTrace`` (``provider.trace``). The
backend's code calls

- ``trace.kernel(name)`` for each kernel it launches or records (a fused
  kernel under its own name; a replayed step need not repeat it),
- ``trace.submit()`` for each submission to the device's queue (one
  ``vkQueueSubmit``, one OpenCL enqueue, one WebGPU ``queue.submit``, one
  CUDA graph launch),
- ``trace.launched(n)`` for the ``n`` kernels the device runs: each eager
  launch, and every kernel of a replayed graph or recorded step each time
  (``bitnet bench --profile``: launches a decode step),
- ``trace.fallback(reason)`` when it gives up a faster path (a recorded or
  graph-captured step) for a slower one: logged, kept for the receipt, and a
  ``StrictModeError`` under ``BITNET_STRICT_MODE=1``.

A protocol op called from outside the provider that ran and named no kernel
of its own is recorded under the op's name by ``DeviceProvider``
(``sdk.provider``), so a per-op provider's
trace lists its ops without a line of its own. The receipt lists ``kernels``
and ``fallbacks``; ``bitnet bench --profile`` reads ``submissions`` before
and after each decode step.
"""

from __future__ import annotations

import logging
import threading
from collections import Counter
from dataclasses import dataclass, field

from ..errors import StrictModeError
from ..hal.selection import strict_mode

log = logging.getLogger(__name__)


@dataclass
class LaunchTrace:
    """Counts of what one provider ran since it was created."""

    kernels: Counter[str] = field(default_factory=Counter)
    submissions: int = 0
    #: kernels the device ran (each of a replayed step's kernels, each time)
    launches: int = 0
    fallbacks: list[str] = field(default_factory=list)
    #: per thread: ``records``, the ``kernel`` calls so far (an op that saw it change
    #: named its own kernels), and ``in_op``, an op of the provider is running (the
    #: ops it calls are not recorded apart)
    thread: threading.local = field(default_factory=threading.local, repr=False, compare=False)
    #: how often each fallback was taken
    fallback_counts: Counter[str] = field(default_factory=Counter)

    def __getstate__(self) -> dict:  # a thread's state does not travel (pickle, copy)
        return {k: v for k, v in self.__dict__.items() if k != "thread"}

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state, thread=threading.local())

    def kernel(self, name: str, count: int = 1) -> None:
        """``count`` launches (or recordings) of the kernel ``name``."""
        self.kernels[name] += count
        self.thread.records = getattr(self.thread, "records", 0) + 1

    def submit(self, count: int = 1) -> None:
        """``count`` submissions to the device's queue."""
        self.submissions += count

    def launched(self, count: int = 1) -> None:
        """``count`` kernels run by the device."""
        self.launches += count

    def fallback(self, reason: str) -> None:
        """A faster path was given up: an error in strict mode, else logged and kept."""
        if strict_mode():
            raise StrictModeError(f"fallback under BITNET_STRICT_MODE: {reason}")
        self.fallback_counts[reason] += 1
        if reason not in self.fallbacks:
            log.warning("%s", reason)
            self.fallbacks.append(reason)

    def kernel_names(self) -> list[str]:
        """The kernels seen so far, sorted."""
        return sorted(self.kernels)

    def mark(self) -> TraceMark:
        """Where the trace stands now (``*_since`` tell what ran after: a receipt's run)."""
        return TraceMark(Counter(self.kernels), self.submissions, Counter(self.fallback_counts))

    def kernels_since(self, mark: TraceMark) -> list[str]:
        """The kernels launched after ``mark``, sorted."""
        return sorted(k for k, n in self.kernels.items() if n > mark.kernels.get(k, 0))

    def submissions_since(self, mark: TraceMark) -> int:
        return self.submissions - mark.submissions

    def fallbacks_since(self, mark: TraceMark) -> list[str]:
        """The fallbacks taken after ``mark`` (again or for the first time)."""
        return [r for r in self.fallbacks if self.fallback_counts[r] > mark.fallbacks.get(r, 0)]


@dataclass(frozen=True)
class TraceMark:
    """A trace's kernel counts, submissions and fallback counts at one moment."""

    kernels: Counter[str]
    submissions: int
    fallbacks: Counter[str]
