"""The CUDA emulator's seeds: launches numbered from 0 in each test, the seed on failure."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from cuda_emulator.cupy_emulator import SEEDS


@pytest.fixture(autouse=True)
def emulator_seeds() -> Iterator[None]:
    SEEDS.restart()
    yield


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    report = outcome.get_result()
    if report.failed:
        report.sections.append(("CUDA emulator", f"reproduce with {SEEDS.note()}"))
