"""Stream order on the emulated device: work that a GPU may run out of order, caught.

The emulator runs every launch and copy at once, in the host's order, so a
missing ``stream.wait_event``, a synchronization or a stream mix-up never
shows in its results. ``ORDER`` checks each access against a vector clock a
stream (the happens-before order CUDA promises):

- work on one stream runs in issue order;
- the legacy default stream (``Stream.null``, or no stream current) waits for
  the blocking streams' earlier work and they for its; a ``non_blocking``
  stream orders with neither;
- ``stream.wait_event(e)`` orders after what ``e`` recorded; a host
  synchronization (``synchronize``, ``get``) orders everything issued after it.

An array (its whole allocation) read or written on one stream while another
stream's write (or, for a write, read) is not ordered before it raises
``StreamRace``: on a GPU the two could run in either order.
"""

from __future__ import annotations

import threading
import weakref
from typing import Any

import numpy as np

Clock = dict[int, int]


class StreamRace(RuntimeError):
    """Two streams touch one array with nothing ordering them."""


def _merge(into: Clock, other: Clock) -> None:
    for k, v in other.items():
        if into.get(k, 0) < v:
            into[k] = v


def _root(a: np.ndarray) -> np.ndarray:
    while isinstance(a.base, np.ndarray):
        a = a.base
    return a


def device_arrays(values: Any) -> list[np.ndarray]:
    """The device arrays among ``values`` (nested lists, tuples and dict values)."""
    from .cupy_emulator import DeviceArray

    found: list[np.ndarray] = []
    todo = [values]
    while todo:
        v = todo.pop()
        if isinstance(v, DeviceArray):
            found.append(v)
        elif isinstance(v, list | tuple):
            todo.extend(v)
        elif isinstance(v, dict):
            todo.extend(v.values())
    return found


class _Access:
    """An allocation's last write ``(stream, tick)`` and the reads since, a stream each."""

    __slots__ = ("reads", "write")

    def __init__(self) -> None:
        self.write: tuple[int, int] | None = None
        self.reads: Clock = {}


class StreamOrder:
    """Vector clocks of the streams and the host; the accesses of each allocation."""

    LEGACY = 0

    def __init__(self) -> None:
        self._lock = threading.RLock()
        self.clocks: dict[int, Clock] = {}
        self.blocking: set[int] = set()
        self.host: Clock = {}
        self.arrays: dict[int, _Access] = {}
        self._ids = 0

    def new_stream(self, blocking: bool, legacy: bool = False) -> int:
        with self._lock:
            sid = self.LEGACY if legacy else self._ids + 1
            self._ids = max(self._ids, sid)
            self.clocks[sid] = {}
            if blocking and not legacy:
                self.blocking.add(sid)
            return sid

    def _sid(self, stream: Any) -> int:
        if stream is None:
            from .cupy_emulator import _current_stream

            stream = _current_stream()
        return self.LEGACY if stream is None else stream.id

    def _issue(self, sid: int) -> Clock:
        """The clock of a new operation on stream ``sid`` (what it is ordered after)."""
        clock = self.clocks[sid]
        _merge(clock, self.host)
        if sid == self.LEGACY:
            for b in self.blocking:
                _merge(clock, self.clocks[b])
        elif sid in self.blocking:
            _merge(clock, self.clocks[self.LEGACY])
        clock[sid] = clock.get(sid, 0) + 1
        return clock

    def _state(self, a: np.ndarray) -> _Access:
        root = _root(a)
        key = id(root)
        state = self.arrays.get(key)
        if state is None:
            state = self.arrays[key] = _Access()
            weakref.finalize(root, self.arrays.pop, key, None)
        return state

    def created(self, a: np.ndarray) -> None:
        """A CuPy call returned ``a``: a new allocation is written on the current stream
        (a view of a known one is not)."""
        with self._lock:
            if id(_root(a)) not in self.arrays:
                self.access("allocation", None, writes=[a])

    def access(
        self,
        what: str,
        stream: Any,
        reads: list[np.ndarray] = (),  # type: ignore[assignment]
        writes: list[np.ndarray] = (),  # type: ignore[assignment]
    ) -> None:
        """An operation on ``stream`` (None: the current one) reading and writing arrays."""
        if not reads and not writes:
            return
        with self._lock:
            sid = self._sid(stream)
            clock = self._issue(sid)
            tick = clock[sid]
            for a, writing in [(a, False) for a in reads] + [(a, True) for a in writes]:
                state = self._state(a)
                w = state.write
                if w is not None and w[0] != sid and clock.get(w[0], 0) < w[1]:
                    raise StreamRace(self._say(what, sid, writing, a, "written", w[0]))
                if writing:
                    for other, t in state.reads.items():
                        if other != sid and clock.get(other, 0) < t:
                            raise StreamRace(self._say(what, sid, True, a, "read", other))
            for a in reads:
                self._state(a).reads[sid] = tick
            for a in writes:
                state = self._state(a)
                state.write, state.reads = (sid, tick), {}

    @staticmethod
    def _say(what: str, sid: int, writing: bool, a: np.ndarray, done: str, other: int) -> str:
        def name(s: int) -> str:
            return "the legacy default stream" if s == StreamOrder.LEGACY else f"stream {s}"

        verb = "writes" if writing else "reads"
        return (
            f"stream race: {what} on {name(sid)} {verb} a {a.dtype}{tuple(a.shape)} array "
            f"{done} on {name(other)} with nothing ordering the two (no stream order, event "
            "or synchronization): on a GPU they may run in either order"
        )

    def clock_of(self, stream: Any) -> Clock:
        with self._lock:
            return dict(self.clocks[self._sid(stream)])

    def wait_event(self, stream: Any, clock: Clock) -> None:
        with self._lock:
            _merge(self.clocks[self._sid(stream)], clock)

    def host_waits(self, stream: Any) -> None:
        with self._lock:
            _merge(self.host, self.clocks[self._sid(stream)])

    def host_waits_for(self, clock: Clock) -> None:
        with self._lock:
            _merge(self.host, clock)

    def host_waits_all(self) -> None:
        with self._lock:
            for clock in self.clocks.values():
                _merge(self.host, clock)


ORDER = StreamOrder()
