"""Weights into huge pages after loading, not during it.

The native CPU provider's weights live in ``csrc/weight_arena.cpp``'s
segments. Decode reads every weight byte a token, and in 2 MiB pages it runs
11-16% faster than in 4 KiB ones (fewer TLB misses, prefetchers that do not
stop every 4 KiB). But a huge page is cleared at its first write, and on a VM
whose memory was never touched that clearing took 60% of loading a 2B model
(1.5-2.5 s of system time). So segments are mapped without the advice, and
once a runner is built a background thread advises them and collapses the
written pages (``MADV_COLLAPSE``), starting ``DELAY_S`` after the runner is
built: about 2 s for the 2B-4T shape's 828 MiB, while the first tokens run on
4 KiB pages. Collapsing competes with the first tokens for the cores and, on
this VM, with the host's faulting-in of fresh memory (up to 3 s of a one-token
``bitnet run`` when it started at once), so a short run exits before it
begins, and exit stops it.

``BITNET_CPU_HUGE_PAGES``: unset (this), ``eager`` (advised at mapping, the
load pays for it), ``0`` (no huge pages, TQ2_0 used in place).
"""

from __future__ import annotations

import atexit
import contextlib
import os
import threading
from typing import Any

#: seconds after the runner is built before the collapse starts: a short run (one
#: prompt, a few tokens) ends first and never pays for it
DELAY_S = 2.0
_stop = threading.Event()


def _promote(module: Any) -> None:
    if _stop.wait(DELAY_S):
        return
    # the lowest priority: the decode threads first (Linux: a thread's own nice)
    with contextlib.suppress(AttributeError, OSError):
        os.setpriority(os.PRIO_PROCESS, threading.get_native_id(), 19)
    module.promote_weight_arena()


_threads: list[threading.Thread] = []
_modules: list[Any] = []  # each module's exit hook registered once


def _stop_all(module: Any) -> None:
    """At exit: stop promoting and wait for the threads to leave the native call (a
    daemon thread still in it when the interpreter finalizes aborts the process)."""
    _stop.set()
    module.stop_weight_promotion()
    for thread in _threads:
        thread.join(timeout=30)


def promote_weights_later(module: Any) -> threading.Thread | None:
    """Start collapsing the weights loaded so far into huge pages on a daemon thread;
    the thread, or None where there is nothing to defer."""
    if not (module.huge_page_weights() and module.deferred_huge_pages()):
        return None
    if module not in _modules:
        atexit.register(_stop_all, module)  # exit waits for one 4 MiB step at most
        _modules.append(module)
    _threads[:] = [t for t in _threads if t.is_alive()]
    thread = threading.Thread(
        target=_promote, args=(module,), name="bitnet-huge-pages", daemon=True
    )
    thread.start()
    _threads.append(thread)
    return thread
