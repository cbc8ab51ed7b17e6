"""The provider registry: entry points of group ``bitnet.providers``, loaded lazily.

A backend package registers itself in its ``pyproject.toml``::

    [project.entry-points."bitnet.providers"]
    mydev = "bitnet_mydev.provider:MydevProvider"

The entry point names a class or a zero-argument factory returning a provider
(or a list of providers). The core imports nothing from any backend by name:
it reads the entry points, imports each only when asked, and isolates
failures. A plugin whose import or construction raises, or that was written
for another ``PLUGIN_API_VERSION``, becomes a ``ProviderRecord`` that is
unavailable with the reason (step ``"plugin"``); the core keeps working. What
a record says of a provider (family, priority, aliases, whether it can be
faked) comes from the provider's class attributes. Probes run in priority order and are cached per process
(``refresh()`` clears the cache).
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .placement import missing_required, place
from .provider import PLUGIN_API_VERSION, Availability, KernelProvider

ENTRY_POINT_GROUP = "bitnet.providers"
#: Always registered, even when the installed metadata is missing (a source tree).
BUILTIN = EntryPoint(
    "cpu-reference", "bitnet_core.providers.reference:ReferenceProvider", ENTRY_POINT_GROUP
)
#: ``fake_providers(spec, fakeable)``: the ``BITNET_GPU_FAKE`` stand-ins.
FAKES = EntryPoint("fakes", "bitnet_core.providers.fake:fake_providers", ENTRY_POINT_GROUP)
log = logging.getLogger("bitnet")


@dataclass
class ProviderRecord:
    """One registered provider: where it came from, and (once probed) whether it runs here.

    Everything but ``origin`` is what the plugin says of itself. A plugin that
    failed to load says nothing: its record has ``family`` ``""`` and
    ``device_kind`` ``"unknown"`` and answers requests for its entry point's name.
    """

    name: str
    family: str
    device_kind: str
    priority: int
    origin: str
    provider: KernelProvider | None
    availability: Availability | None = None
    explicit_availability: Availability | None = None
    #: registered by an installed package's entry point (another process finds it too)
    from_entry_point: bool = False
    #: the distribution that ships it ("" when unknown)
    distribution: str = ""
    #: more request names for its family (``ocl`` for ``opencl``)
    aliases: tuple[str, ...] = ()
    #: ``BITNET_GPU_FAKE`` may stand in for its family
    fakeable: bool = False

    def probe(self, explicit: bool = False) -> Availability:
        """Probe once (per mode) and remember; never raises."""
        cached = self.explicit_availability if explicit else self.availability
        if cached is not None:
            return cached
        if self.provider is None:  # a broken plugin: its availability was set at load time
            return self.availability or Availability.no("provider failed to load", "plugin")
        try:
            result = self.provider.probe(explicit=explicit)
            if not isinstance(result, Availability):
                result = Availability.no(
                    f"probe returned {type(result).__name__}, not Availability"
                )
        except Exception as exc:  # a plugin must never break the core
            result = Availability.no(f"probe raised {type(exc).__name__}: {exc}")
        if explicit:
            self.explicit_availability = result
        else:
            self.availability = result
        return result

    @property
    def fake(self) -> bool:
        return self.probe().fake


def _distribution(ep: EntryPoint) -> str:
    dist = getattr(ep, "dist", None)
    return str(dist.name) if dist is not None else ""


def _broken(ep: EntryPoint, reason: str, provider: Any = None) -> ProviderRecord:
    """An unavailable record for a plugin that failed to load or speaks another API."""
    unavailable = Availability.no(reason, "plugin")
    return ProviderRecord(
        name=str(getattr(provider, "name", ep.name)),
        family=str(getattr(provider, "family", "")),
        device_kind=str(getattr(provider, "device_kind", "unknown")),
        priority=int(getattr(provider, "priority", 1000)),
        origin=f"{ep.name} = {ep.value}",
        provider=None,
        availability=unavailable,
        explicit_availability=unavailable,
        distribution=str(getattr(provider, "distribution", "") or _distribution(ep)),
    )


def _failure(ep: EntryPoint, exc: BaseException) -> ProviderRecord:
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    log.debug("provider %s failed to load:\n%s", ep.name, "".join(traceback.format_exception(exc)))
    return _broken(ep, f"plugin {ep.name} = {ep.value} failed to load: {last}")


def _record(provider: Any, ep: EntryPoint) -> ProviderRecord:
    for attr in ("name", "family", "device_kind", "priority", "probe"):
        if not hasattr(provider, attr):
            raise TypeError(f"{type(provider).__name__} is not a KernelProvider: no {attr!r}")
    api = getattr(provider, "plugin_api", None)
    if api != PLUGIN_API_VERSION:
        return _broken(
            ep,
            f"{type(provider).__name__} was written for plugin API {api}; this bitnet-core "
            f"speaks {PLUGIN_API_VERSION} (install matching versions)",
            provider,
        )
    lacking = missing_required(provider)
    if lacking:
        return _broken(
            ep,
            f"{type(provider).__name__} lacks the memory ops {', '.join(lacking)} "
            "(only compute ops can run on the host)",
            provider,
        )
    return ProviderRecord(
        name=str(provider.name),
        family=str(provider.family),
        device_kind=str(provider.device_kind),
        priority=int(provider.priority),
        origin=f"{ep.name} = {ep.value}",
        provider=provider,
        distribution=str(getattr(provider, "distribution", "") or _distribution(ep)),
        aliases=tuple(str(a) for a in getattr(provider, "aliases", ())),
        fakeable=bool(getattr(provider, "fakeable", False)),
    )


def _load_entry_point(ep: EntryPoint) -> list[ProviderRecord]:
    try:
        obj = ep.load()
        made = obj() if callable(obj) else obj
        items = made if isinstance(made, (list, tuple)) else [made]
        return [_record(p, ep) for p in items]
    except Exception as exc:
        return [_failure(ep, exc)]


class Registry:
    """All providers this process can see, ranked by priority (lower first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[ProviderRecord] | None = None
        self._on_refresh: list[Callable[[], None]] = []

    def records(self) -> list[ProviderRecord]:
        """Load every entry point once (never raises), plus fakes from ``BITNET_GPU_FAKE``."""
        with self._lock:
            if self._records is None:
                self._records = self._discover()
            return list(self._records)

    def _discover(self) -> list[ProviderRecord]:
        found: dict[str, ProviderRecord] = {}
        for ep in entry_points(group=ENTRY_POINT_GROUP):
            for rec in _load_entry_point(ep):
                rec.from_entry_point = True
                # The first registration of a name wins; duplicates are reported once.
                if rec.name in found:
                    log.warning(
                        "provider %s registered twice (%s); keeping the first", rec.name, rec.origin
                    )
                    continue
                found[rec.name] = rec
        if BUILTIN.name not in found:
            found[BUILTIN.name] = _load_entry_point(BUILTIN)[0]
        host = found[BUILTIN.name].provider
        for rec in found.values():  # partial providers: their missing ops run on the host
            if rec.provider is not None and rec.provider is not host:
                rec.provider = place(rec.provider, host)
        fakeable = {r.family: r.priority for r in found.values() if r.fakeable}
        for fake in FAKES.load()(os.environ.get("BITNET_GPU_FAKE", ""), fakeable):
            rec = _record(fake, FAKES)
            rec.origin = "BITNET_GPU_FAKE"
            found.setdefault(fake.name, rec)
        return sorted(found.values(), key=lambda r: (r.priority, r.name))

    def get(self, name: str) -> ProviderRecord | None:
        return next((r for r in self.records() if r.name == name), None)

    def aliases(self) -> dict[str, str]:
        """Every request alias the installed plugins declare, to the family it names."""
        return {a: r.family for r in self.records() for a in r.aliases}

    def on_refresh(self, callback: Callable[[], None]) -> None:
        """Call ``callback`` whenever ``refresh`` forgets the plugins (caches built on them)."""
        self._on_refresh.append(callback)

    def refresh(self) -> None:
        """Forget loaded plugins and probe results (after installing a package, in tests)."""
        with self._lock:
            self._records = None
        for callback in self._on_refresh:
            callback()


REGISTRY = Registry()


def list_providers(explicit: bool = False) -> list[ProviderRecord]:
    """Every registered provider in priority order, each probed (never raises)."""
    records = REGISTRY.records()
    for rec in records:
        rec.probe(explicit=explicit)
    return records
