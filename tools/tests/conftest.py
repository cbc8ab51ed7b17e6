"""Fixtures of the tools' tests: the new-backend script imported as a module."""

from __future__ import annotations

import importlib.machinery
import importlib.util
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="session")
def new_backend():
    path = ROOT / "tools" / "new-backend"
    loader = importlib.machinery.SourceFileLoader("new_backend", str(path))
    spec = importlib.util.spec_from_loader("new_backend", loader)
    module = importlib.util.module_from_spec(spec)
    loader.exec_module(module)
    return module
