"""The conformance suite: one line in a backend's tests runs every check on its provider.

In ``tests/test_conformance.py`` of a backend package::

    from bitnet_core.testing import conformance

    TestConformance = conformance.suite("opencl")

``suite`` returns a pytest test class (pytest collects it under the name it
is assigned to) with these tests:

- ``test_probe``, ``test_attributes``, ``test_registered``: the probe
  contract and the class attributes (``bitnet_core.testing.contract``);
- ``test_op[<case>]``: every op on random inputs of awkward shapes against
  ``ReferenceProvider`` with per-op tolerances (``ops.py``, ``tolerances.py``);
- ``test_error[<case>]``: bad shapes raise ``bitnet_core.errors`` errors;
- ``test_model[<check>]``: whole-model logits and greedy tokens against the
  CPU reference engine on a small generated model (``model.py``), once
  ``bitnet_core.model`` is available.

The provider is resolved through the registry (``REGISTRY.get(name)``, then
``select(name)`` for a family such as ``"cuda"``), so the entry point of the
installed package is what gets tested. A provider whose probe says no
device *skips* every test with the probe's reason; set
``BITNET_CONFORMANCE_REQUIRE=1`` (the GPU smoke lane does) or pass
``require=True`` to make that a failure. A plugin that fails to import or a
name nothing registers always fails. ``suite`` also accepts a provider
object or a zero-argument factory instead of a name (used to prove the kit
catches planted bugs).

Outside pytest: ``python -m bitnet_core.testing NAME [--json receipt.json]``
runs the same checks and prints a summary (``run`` is the API).
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from ..errors import DeviceError
from ..hal.provider import Availability
from .contract import ErrorCase, check_attributes, check_probe, error_cases
from .model import ModelCheck, ModelUnavailable, model_checks
from .ops import OpCase, op_cases
from .tolerances import ConformanceFailure


class ProviderUnavailable(Exception):
    """The provider is registered and loads, but its probe says it cannot run here."""


def require_device() -> bool:
    """``BITNET_CONFORMANCE_REQUIRE=1``: an unavailable device fails instead of skipping."""
    value = os.environ.get("BITNET_CONFORMANCE_REQUIRE", "").strip().lower()
    return value in ("1", "true", "yes", "on")


def resolve(spec: Any) -> tuple[Any, Availability]:
    """The provider object for a name, object or factory, and its explicit probe.

    Raises ``ConformanceFailure`` for a name nothing registers or a plugin that
    fails to load, ``ProviderUnavailable`` when the probe says no.
    """
    from ..hal.registry import REGISTRY
    from ..hal.selection import select

    if isinstance(spec, str):
        record = REGISTRY.get(spec)
        if record is None:
            try:
                record = select(spec).record
            except DeviceError as exc:
                if not any(r.family == spec for r in REGISTRY.records()):
                    raise ConformanceFailure(
                        f"no provider named {spec!r} is registered under the "
                        f"'bitnet.providers' entry points (is its package installed?): {exc}"
                    ) from exc
                raise ProviderUnavailable(str(exc)) from exc
        if record.provider is None:
            raise ConformanceFailure(f"provider {spec!r} failed to load: {record.probe().reason}")
        provider = record.provider
    else:
        provider = spec() if callable(spec) and not hasattr(spec, "probe") else spec
    try:
        availability = provider.probe(explicit=True)
    except Exception as exc:
        raise ConformanceFailure(f"probe raised {type(exc).__name__}: {exc}") from exc
    if not isinstance(availability, Availability):
        raise ConformanceFailure(f"probe returned {type(availability).__name__}")
    if not availability.available:
        raise ProviderUnavailable(f"{provider.name}: {availability.reason}")
    return provider, availability


def select_cases(
    large: bool = True, skip: Mapping[str, str] | None = None
) -> tuple[list[OpCase], list[ErrorCase], list[ModelCheck]]:
    """The op, error and model cases to run; ``skip`` maps an op or case id to a reason."""
    skip = skip or {}
    ops = [c for c in op_cases() if (large or not c.large) and c.op not in skip]
    ops = [c for c in ops if c.id not in skip]
    errors = [c for c in error_cases() if c.id not in skip and c.id.split("-")[0] not in skip]
    models = [c for c in model_checks() if c.id not in skip and "model" not in skip]
    return ops, errors, models


def suite(
    provider: Any,
    *,
    large: bool = True,
    skip: Mapping[str, str] | None = None,
    require: bool | None = None,
) -> type:
    """A pytest test class running the whole kit on ``provider`` (a name, object or factory).

    ``large=False`` drops the cases with the real model's sizes (for a slow
    emulated device); ``skip`` maps an op name or a case id to the reason it
    is skipped (shown in the report: a backend states what it does not do).
    """
    import pytest

    op_list, error_list, model_list = select_cases(large, None)
    skip = dict(skip or {})

    def skipped(*keys: str) -> None:
        for key in keys:
            if key in skip:
                pytest.skip(f"skipped by the backend: {skip[key]}")

    class ConformanceSuite:
        """Conformance of one provider against ``ReferenceProvider`` (``bitnet_core.testing``)."""

        @pytest.fixture(scope="class")
        @classmethod
        def conformance_provider(cls) -> Any:
            must = require_device() if require is None else require
            try:
                found, _ = resolve(provider)
            except ProviderUnavailable as exc:
                if must:
                    pytest.fail(f"device required (BITNET_CONFORMANCE_REQUIRE): {exc}")
                pytest.skip(str(exc))
            return found

        def test_probe(self, conformance_provider: Any) -> None:
            check_probe(conformance_provider)

        def test_attributes(self, conformance_provider: Any) -> None:
            check_attributes(conformance_provider)

        def test_registered(self, conformance_provider: Any) -> None:
            if not isinstance(provider, str):
                pytest.skip("provider given as an object, not through the registry")
            from ..hal.registry import REGISTRY

            record = REGISTRY.get(conformance_provider.name)
            if record is None or record.provider is not conformance_provider:
                raise ConformanceFailure(
                    f"{conformance_provider.name} is not the object the registry returns"
                )

        @pytest.mark.parametrize("case", op_list, ids=lambda c: c.id)
        def test_op(self, conformance_provider: Any, case: OpCase) -> None:
            skipped(case.op, case.id)
            case.run(conformance_provider)

        @pytest.mark.parametrize("case", error_list, ids=lambda c: c.id)
        def test_error(self, conformance_provider: Any, case: ErrorCase) -> None:
            skipped(case.id.split("-")[0], case.id)
            case.run(conformance_provider)

        @pytest.mark.parametrize("check", model_list, ids=lambda c: c.id)
        def test_model(self, conformance_provider: Any, check: ModelCheck) -> None:
            skipped("model", check.id)
            try:
                check.run(conformance_provider)
            except ModelUnavailable as exc:
                pytest.skip(str(exc))

    return ConformanceSuite


# --- outside pytest ------------------------------------------------------------


@dataclass
class CaseResult:
    id: str
    status: str  # "passed", "failed", "skipped"
    message: str = ""
    seconds: float = 0.0


@dataclass
class ConformanceReport:
    """What ``run`` found: one result per case, and the provider's probe."""

    provider: str
    device: str = ""
    fake: bool = False
    results: list[CaseResult] = field(default_factory=list)

    @property
    def failed(self) -> list[CaseResult]:
        return [r for r in self.results if r.status == "failed"]

    @property
    def passed(self) -> bool:
        return not self.failed and any(r.status == "passed" for r in self.results)

    def counts(self) -> dict[str, int]:
        out = {"passed": 0, "failed": 0, "skipped": 0}
        for r in self.results:
            out[r.status] += 1
        return out

    def as_dict(self) -> dict[str, Any]:
        return {
            "provider": self.provider,
            "device": self.device,
            "fake": self.fake,
            "counts": self.counts(),
            "passed": self.passed,
            "results": [r.__dict__ for r in self.results],
        }


def _run_one(case_id: str, fn: Callable[[], None]) -> CaseResult:
    start = time.perf_counter()
    try:
        fn()
    except ConformanceFailure as exc:
        return CaseResult(case_id, "failed", str(exc), time.perf_counter() - start)
    except ModelUnavailable as exc:
        return CaseResult(case_id, "skipped", str(exc), time.perf_counter() - start)
    except Exception as exc:  # an op crashing is a failure too, with its type
        msg = f"{type(exc).__name__}: {exc}"
        return CaseResult(case_id, "failed", msg, time.perf_counter() - start)
    return CaseResult(case_id, "passed", "", time.perf_counter() - start)


def run(
    provider: Any,
    *,
    large: bool = True,
    skip: Mapping[str, str] | None = None,
    only: Iterable[str] | None = None,
) -> ConformanceReport:
    """Run every check on ``provider`` outside pytest; ``only`` keeps ops/case ids given."""
    try:
        found, availability = resolve(provider)
    except ProviderUnavailable as exc:
        name = provider if isinstance(provider, str) else str(getattr(provider, "name", provider))
        return ConformanceReport(name, results=[CaseResult("probe", "skipped", str(exc))])
    report = ConformanceReport(found.name, availability.device, availability.fake)
    ops, errors, models = select_cases(large, skip)
    keep = set(only) if only else None

    def wanted(op: str, case_id: str) -> bool:
        return keep is None or op in keep or case_id in keep

    report.results.append(_run_one("probe", lambda: check_probe(found)))
    report.results.append(_run_one("attributes", lambda: check_attributes(found)))
    for case in ops:
        if wanted(case.op, case.id):
            report.results.append(_run_one(case.id, lambda c=case: c.run(found)))
    for err in errors:
        if wanted(err.id.split("-")[0], err.id):
            report.results.append(_run_one("error-" + err.id, lambda e=err: e.run(found)))
    for check in models:
        if wanted("model", check.id):
            report.results.append(_run_one("model-" + check.id, lambda m=check: m.run(found)))
    return report


__all__ = [
    "ConformanceFailure",
    "ConformanceReport",
    "ProviderUnavailable",
    "resolve",
    "run",
    "suite",
]
