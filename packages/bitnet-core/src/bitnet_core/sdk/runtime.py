"""One way for a backend to import its device SDK and report that it is missing.

``import_runtime`` imports the SDK module or raises ``RuntimeUnavailable``
with the step that failed: ``"import"`` (the Python package is not installed)
or ``"loader"`` (it is, but its native library, a driver's loader, does not
load). A probe turns it into its answer with ``exc.availability()``; an op
that needs the device lets it propagate (a ``DeviceUnavailableError``).
"""

from __future__ import annotations

import functools
import importlib
import logging
import os
from collections.abc import Callable
from types import ModuleType
from typing import Any

from ..errors import BitnetError, DeviceUnavailableError
from ..hal.provider import Availability

log = logging.getLogger("bitnet")


class RuntimeUnavailable(DeviceUnavailableError):
    """A backend's runtime cannot be used; ``step`` says where it stopped (``Availability.step``)."""

    def __init__(self, reason: str, step: str = "device") -> None:
        super().__init__(reason)
        self.step = step

    def availability(self) -> Availability:
        """The probe's answer for this failure."""
        return Availability.no(str(self), self.step)


def import_runtime(module: str, install: str, package: str = "") -> ModuleType:
    """``import module`` or ``RuntimeUnavailable`` naming the step and how to install it.

    ``install``: the hint (``"pip install pyopencl"``); ``package``: the name
    the user knows it by (default ``module``). An ``ImportError`` of the module
    itself is step ``"import"``; any other failure while importing (a missing
    shared library: ``OSError``, or an ``ImportError`` raised from inside the
    package) is step ``"loader"``.
    """
    package = package or module
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as exc:
        if exc.name is not None and module.split(".")[0] != exc.name.split(".")[0]:
            raise RuntimeUnavailable(
                f"{package} failed to load: {type(exc).__name__}: {exc}", "loader"
            ) from exc
        raise RuntimeUnavailable(f"{package} is not installed ({install})", "import") from exc
    except Exception as exc:  # a broken binary wheel, a missing driver library
        raise RuntimeUnavailable(
            f"{package} failed to load: {type(exc).__name__}: {exc}", "loader"
        ) from exc


def never_raises(probe: Callable[..., Availability]) -> Callable[..., Availability]:
    """Wrap a provider's ``probe`` so that it answers instead of raising.

    ``RuntimeUnavailable`` becomes its own answer; another ``BitnetError`` an
    unavailable answer at its ``step`` (default ``"device"``); anything else
    ``"<family> probe failed: <error>"``.
    """

    @functools.wraps(probe)
    def guarded(self: Any, explicit: bool = False) -> Availability:
        try:
            return probe(self, explicit)
        except RuntimeUnavailable as exc:
            return exc.availability()
        except BitnetError as exc:
            return Availability.no(str(exc), getattr(exc, "step", "device"))
        except Exception as exc:  # a probe must never raise
            family = getattr(self, "family", "device")
            return Availability.no(f"{family} probe failed: {type(exc).__name__}: {exc}")

    return guarded


def device_variable(family: str) -> str:
    """The one name every backend's device choice goes by: ``BITNET_<FAMILY>_DEVICE``."""
    return f"BITNET_{family.upper().replace('-', '_')}_DEVICE"


def device_choice(family: str, deprecated: tuple[str, ...] = ()) -> str:
    """The value of ``device_variable(family)`` ("" when unset).

    A ``deprecated`` older name still works when the new one is unset, with a
    warning that names the new one.
    """
    name = device_variable(family)
    value = os.environ.get(name, "").strip()
    if value:
        return value
    for old in deprecated:
        value = os.environ.get(old, "").strip()
        if value:
            log.warning("%s is deprecated; set %s=%s instead", old, name, value)
            return value
    return ""
