"""Schemathesis against a live ``bitnet serve`` (tools/fuzz/schemathesis_serve.py), briefly."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
import schemathesis_serve  # noqa: E402

pytestmark = pytest.mark.fuzz


def test_every_answer_is_documented_and_no_5xx(tmp_path):
    code, output = schemathesis_serve.run(examples=25, out=tmp_path, seed=1)
    assert code == 0, output[-4000:]
    assert "generated" in output, output[-4000:]
