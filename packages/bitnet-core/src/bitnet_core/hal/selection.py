"""Device selection: from a request (``--device``, ``BITNET_DEVICE``, auto) to one provider.

Requests:

- ``auto``: the best available provider (GPU first by priority, then the best CPU);
- ``cpu``: the best available CPU provider;
- ``gpu``: the best available GPU provider, an error if there is none;
- a family an installed plugin declares (or one of its ``aliases``): that
  family, an error if unavailable;
- any provider name (``cpu-avx2``, ``cpu-reference``, ``fake-<family>``...): exactly that provider;
- an extra of the ``bitnet`` meta package whose plugin is not installed: an
  error that says which distribution to install (``extras.py``).

A request that only CPU providers can meet (``cpu``, ``cpu-avx2``...) probes
and lists only the CPU providers.

A specific request that cannot be met raises ``DeviceUnavailableError`` naming
the reason, never a silent switch. ``BITNET_STRICT_MODE=1`` ignores fake
devices (a request only fakes could meet is a ``StrictModeError``) and turns
auto's fallback to the CPU, when an installed GPU provider is unavailable,
into a ``StrictModeError``. Every selection is summarised as
``requested=X detected=[...] selected=Y`` (``StartupSummary``), logged at
info level, and cached per (request, environment).
"""

from __future__ import annotations

import logging
import os
from dataclasses import asdict, dataclass, field

from ..errors import DeviceUnavailableError, StrictModeError, UnknownDeviceError
from . import probe_cache
from .extras import install_hint
from .probe_child import ChildProbe
from .provider import Availability
from .registry import REGISTRY, ProviderRecord

log = logging.getLogger("bitnet")

GENERIC_REQUESTS = ("auto", "cpu", "gpu")
#: Aliases of the generic requests; a plugin's family aliases come from the plugin.
ALIASES = {"gpu-any": "gpu"}


def strict_mode() -> bool:
    """True when ``BITNET_STRICT_MODE`` is set to a true value."""
    return os.environ.get("BITNET_STRICT_MODE", "").strip().lower() in ("1", "true", "yes", "on")


@dataclass(frozen=True)
class BackendRequest:
    """A parsed device request and where it came from (flag, environment or default)."""

    name: str
    source: str = "default"

    @classmethod
    def parse(cls, device: str | None = None) -> BackendRequest:
        """``--device`` wins, then ``BITNET_DEVICE``, then ``auto``."""
        if device is not None and device.strip():
            raw, source = device, "flag"
        elif os.environ.get("BITNET_DEVICE", "").strip():
            raw, source = os.environ["BITNET_DEVICE"], "env"
        else:
            raw, source = "auto", "default"
        name = raw.strip().lower()
        name = ALIASES.get(name, name)
        if name not in GENERIC_REQUESTS:
            name = REGISTRY.aliases().get(name, name)
        return cls(name, source)


@dataclass(frozen=True)
class StartupSummary:
    """``requested=X detected=[...] selected=Y``: what was asked, seen and chosen."""

    requested: str
    detected: list[str]
    selected: str
    strict: bool = False
    fake: bool = False
    unavailable: dict[str, str] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"requested={self.requested} detected=[{','.join(self.detected)}] selected={self.selected}"

    def as_dict(self) -> dict:
        d = asdict(self)
        d["line"] = str(self)
        return d


@dataclass(frozen=True)
class Selection:
    """The chosen provider, the summary of how it was chosen, and the probe's answer
    that chose it (explicit or not, as the request was: its ``device``)."""

    record: ProviderRecord
    summary: StartupSummary
    availability: Availability | None = None

    @property
    def provider(self):
        return self.record.provider


_CACHE: dict[tuple, Selection] = {}
#: child GPU probes started by ``prefetch``, by cache key, for ``select`` to read
_PENDING: dict[tuple, ChildProbe] = {}


def clear_cache() -> None:
    _CACHE.clear()
    while _PENDING:
        _PENDING.popitem()[1].cancel()


REGISTRY.on_refresh(clear_cache)


def _cache_key(request: BackendRequest) -> tuple:
    return (request.name, strict_mode(), os.environ.get("BITNET_GPU_FAKE", ""))


def _reasons(records: list[ProviderRecord], explicit: bool, family: str = "") -> str:
    if not records:
        hint = install_hint(family)
        return "no provider of that kind is installed" + (f" ({hint})" if hint else "")
    return "; ".join(f"{r.name}: {r.probe(explicit).reason or 'unavailable'}" for r in records)


def _is_known(name: str, records: list[ProviderRecord]) -> bool:
    return name in GENERIC_REQUESTS or any(name in (r.name, r.family) for r in records)


def _unprobed_gpus(records: list[ProviderRecord]) -> list[str]:
    """The installed GPU providers not probed yet: the child's work."""
    return [
        r.name
        for r in records
        if r.device_kind == "gpu" and r.from_entry_point and r.availability is None
    ]


def _recall(records: list[ProviderRecord]) -> None:
    """Record the GPU providers an earlier process found unavailable (``probe_cache.py``)
    as probed, so that no child asks them again."""
    unprobed = set(_unprobed_gpus(records))
    names = {r.name: r.distribution for r in records if r.name in unprobed}
    remembered = probe_cache.recall(names)
    for rec in records:
        if rec.name in remembered:
            rec.availability = remembered[rec.name]


def prefetch(device: str | None = None) -> None:
    """Start an auto/gpu request's child GPU probe now; ``select`` reads it later.

    ``load()`` reads the GGUF header and tokenizer meanwhile. Other requests: nothing.
    """
    request = BackendRequest.parse(device)
    key = _cache_key(request)
    if request.name in ("auto", "gpu") and key not in _CACHE and key not in _PENDING:
        records = REGISTRY.records()
        _recall(records)
        names = _unprobed_gpus(records)
        if names:
            _PENDING[key] = ChildProbe(names)


def _probe_gpus_in_child(
    records: list[ProviderRecord], pending: ChildProbe | None
) -> dict[str, Availability]:
    """Probe the installed GPU providers not yet probed in a child process (or read ``pending``).

    Those it finds unavailable are recorded as probed (never loaded here); the
    usable ones are returned, to be probed here only if chosen.
    """
    _recall(records)
    names = _unprobed_gpus(records)
    if pending is not None and pending.names != names:
        pending.cancel()
        pending = None
    if not names:
        return {}
    found = (pending or ChildProbe(names)).result()
    if found is None:
        return {}
    probe_cache.remember(found, {r.name: r.distribution for r in records if r.name in found})
    for rec in records:
        if rec.name in found and not found[rec.name].available:
            rec.availability = found[rec.name]
    return {name: a for name, a in found.items() if a.available}


def select(device: str | None = None) -> Selection:
    """Choose the provider for a request; raises a ``DeviceError`` when it cannot be met."""
    request = BackendRequest.parse(device)
    strict = strict_mode()
    key = _cache_key(request)
    pending = _PENDING.pop(key, None)
    if key in _CACHE:
        return _CACHE[key]

    records = REGISTRY.records()
    if not _is_known(request.name, records):
        hint = install_hint(request.name)
        if hint:
            raise DeviceUnavailableError(
                f"device {request.name!r} requested ({request.source}) but no provider of "
                f"that kind is installed ({hint})"
            )
        families = [r.family for r in records if r.family]
        aliases = [a for r in records for a in r.aliases]
        names = [r.name for r in records]
        known = ", ".join(dict.fromkeys([*GENERIC_REQUESTS, *families, *aliases, *names]))
        raise UnknownDeviceError(f"unknown device {request.name!r}; known: {known}")

    def usable(rec: ProviderRecord, explicit: bool) -> bool:
        avail = rec.probe(explicit)
        return avail.available and not (strict and avail.fake)

    if request.name == "auto":
        candidates, explicit = records, False
    elif request.name == "cpu":
        candidates, explicit = [r for r in records if r.device_kind == "cpu"], False
    elif request.name == "gpu":
        candidates, explicit = [r for r in records if r.device_kind == "gpu"], False
    else:  # a family, or one provider by name (a broken plugin answers its name only)
        candidates = [r for r in records if request.name in (r.family, r.name)]
        explicit = True

    # A request reports the providers it could choose and the CPU ones; probing
    # other GPU runtimes (PoCL, lavapipe: ~70 MB of memory and seconds of
    # start-up each) would only fill the summary. auto and gpu probe every GPU
    # provider, in a child process (probe_child.py): only the one chosen is
    # loaded here. `bitnet devices` probes them all here.
    if explicit or all(r.device_kind == "cpu" for r in candidates):
        records = [r for r in records if r.device_kind == "cpu" or any(r is c for c in candidates)]
        seen_elsewhere: dict[str, Availability] = {}
    else:
        seen_elsewhere = _probe_gpus_in_child(records, pending)
    chosen = next((r for r in candidates if usable(r, explicit)), None)
    if strict and chosen is None and any(r.fake for r in candidates):
        fakes = [r.name for r in candidates if r.fake]
        raise StrictModeError(
            f"BITNET_STRICT_MODE=1 ignores fake devices ({', '.join(fakes)}); "
            f"no real {request.name} device is available"
        )

    def seen(rec: ProviderRecord, mode: bool) -> bool:
        # a GPU provider the child found usable and that was not chosen is not loaded here
        if rec is not chosen and rec.availability is None and rec.name in seen_elsewhere:
            return True
        return usable(rec, mode)

    def reason(rec: ProviderRecord) -> str:
        return rec.probe(explicit).reason

    detected = [r.name for r in records if seen(r, False)]
    unavailable = {r.name: reason(r) for r in records if not seen(r, explicit)}

    if chosen is None:
        raise DeviceUnavailableError(
            f"device {request.name!r} requested ({request.source}) but none is available: "
            f"{_reasons([r for r in candidates if not (strict and r.fake)], explicit, request.name)}"
        )
    if strict and request.name == "auto" and chosen.device_kind == "cpu":
        # a missing GPU is an error in strict mode, not a silent move to the CPU
        skipped_gpus = [
            r for r in records if r.device_kind != "cpu" and not r.fake and not usable(r, False)
        ]
        if skipped_gpus:
            raise StrictModeError(
                "BITNET_STRICT_MODE=1 forbids falling back to "
                f"{chosen.name}: {_reasons(skipped_gpus, False)}"
            )

    summary = StartupSummary(
        requested=request.name,
        detected=detected,
        selected=chosen.name,
        strict=strict,
        fake=chosen.fake,
        unavailable=unavailable,
    )
    log.info("%s", summary)
    selection = Selection(chosen, summary, chosen.probe(explicit))
    _CACHE[key] = selection
    return selection
