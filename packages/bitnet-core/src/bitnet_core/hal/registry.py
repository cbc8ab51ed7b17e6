"""The provider registry: entry points of group ``bitnet.providers``, loaded lazily.

A backend package registers itself in its ``pyproject.toml``::

    [project.entry-points."bitnet.providers"]
    opencl = "bitnet_opencl.provider:OpenCLProvider"

The entry point names a class or a zero-argument factory returning a provider
(or a list of providers). The core imports nothing from any backend by name:
it reads the entry points, imports each only when asked, and isolates
failures. A plugin whose import or construction raises becomes a
``ProviderRecord`` that is unavailable with the exception text; the core
keeps working. Probes run in priority order and are cached per process
(``refresh()`` clears the cache).
"""

from __future__ import annotations

import logging
import os
import threading
import traceback
from dataclasses import dataclass
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from .fake import fake_providers
from .provider import PRIORITIES, Availability, KernelProvider

ENTRY_POINT_GROUP = "bitnet.providers"
log = logging.getLogger("bitnet")


@dataclass
class ProviderRecord:
    """One registered provider: where it came from, and (once probed) whether it runs here."""

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

    def probe(self, explicit: bool = False) -> Availability:
        """Probe once (per mode) and remember; never raises."""
        cached = self.explicit_availability if explicit else self.availability
        if cached is not None:
            return cached
        if self.provider is None:  # a broken plugin: its availability was set at load time
            return self.availability or Availability.no("provider failed to load")
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


def _broken(name: str, origin: str, exc: BaseException) -> ProviderRecord:
    last = traceback.format_exception_only(type(exc), exc)[-1].strip()
    reason = f"plugin {origin} failed to load: {last}"
    log.debug("provider %s failed to load:\n%s", name, "".join(traceback.format_exception(exc)))
    return ProviderRecord(
        name=name,
        family=name.split("-")[0],
        device_kind="gpu" if name.split("-")[0] != "cpu" else "cpu",
        priority=PRIORITIES.get(name, 1000),
        origin=origin,
        provider=None,
        availability=Availability.no(reason),
        explicit_availability=Availability.no(reason),
    )


def _record(provider: Any, origin: str) -> ProviderRecord:
    for attr in ("name", "family", "device_kind", "priority", "probe"):
        if not hasattr(provider, attr):
            raise TypeError(f"{type(provider).__name__} is not a KernelProvider: no {attr!r}")
    return ProviderRecord(
        name=str(provider.name),
        family=str(provider.family),
        device_kind=str(provider.device_kind),
        priority=int(provider.priority),
        origin=origin,
        provider=provider,
    )


def _load_entry_point(ep: EntryPoint) -> list[ProviderRecord]:
    origin = f"{ep.name} = {ep.value}"
    try:
        obj = ep.load()
        made = obj() if callable(obj) else obj
        items = made if isinstance(made, (list, tuple)) else [made]
        records = [_record(p, origin) for p in items]
        for rec in records:
            rec.from_entry_point = True
        return records
    except Exception as exc:
        return [_broken(ep.name, origin, exc)]


class Registry:
    """All providers this process can see, ranked by priority (lower first)."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._records: list[ProviderRecord] | None = None

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
                # The first registration of a name wins; duplicates are reported once.
                if rec.name in found:
                    log.warning(
                        "provider %s registered twice (%s); keeping the first", rec.name, rec.origin
                    )
                    continue
                found[rec.name] = rec
        if "cpu-reference" not in found:  # always there, even without installed metadata
            from ..providers.reference import ReferenceProvider

            found["cpu-reference"] = _record(ReferenceProvider(), "bitnet_core (built in)")
        for fake in fake_providers(os.environ.get("BITNET_GPU_FAKE", "")):
            found.setdefault(fake.name, _record(fake, "BITNET_GPU_FAKE"))
        return sorted(found.values(), key=lambda r: (r.priority, r.name))

    def get(self, name: str) -> ProviderRecord | None:
        return next((r for r in self.records() if r.name == name), None)

    def refresh(self) -> None:
        """Forget loaded plugins and probe results (after installing a package, in tests)."""
        with self._lock:
            self._records = None
        from . import selection

        selection.clear_cache()


REGISTRY = Registry()


def list_providers(explicit: bool = False) -> list[ProviderRecord]:
    """Every registered provider in priority order, each probed (never raises)."""
    records = REGISTRY.records()
    for rec in records:
        rec.probe(explicit=explicit)
    return records
