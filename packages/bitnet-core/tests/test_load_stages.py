"""Load time by stage: the accounting (on a fake clock) and a real load's stages."""

from __future__ import annotations

import dataclasses
import itertools

import pytest
from formats_testlib import TINY

from bitnet_core.model.api import load
from bitnet_core.model.random import random_model_file
from bitnet_core.sdk import load_stages
from bitnet_core.sdk.load_stages import measuring, stage, stage_line

CFG = dataclasses.replace(TINY, context_length=64)


def test_nested_stages_are_taken_out_of_the_outer_one(monkeypatch):
    ticks = itertools.count()  # each perf_counter() call is one second later
    monkeypatch.setattr(load_stages.time, "perf_counter", lambda: float(next(ticks)))
    with measuring() as times, stage("outer"):  # t=0; it ends at t=5: 0..1, 2..3, 4..5
        with stage("inner"):  # t=1 .. 2
            pass
        with stage("inner"):  # t=3 .. 4
            pass
    assert times == {"outer": 3.0, "inner": 2.0}
    assert stage_line(times) == "outer 3.00 inner 2.00"
    with stage("alone"):  # outside measuring(): nothing counted, nothing raised
        pass
    assert times == {"outer": 3.0, "inner": 2.0}


@pytest.mark.parametrize("ternary", ["i2_s", "tq2_0"])
def test_load_reports_its_stages(tmp_path, ternary):
    path = random_model_file(tmp_path / "m.gguf", CFG, seed=1, ternary_type=ternary)
    model = load(path, "cpu-scalar")
    stages = model.load_stages
    assert {"read", "device", "repack"} <= set(stages)
    assert "upload" not in stages  # a host provider repacks
    assert sum(stages.values()) <= model.load_s
    model.generate("hi", max_tokens=1, temperature=0)
    assert model.receipt()["throughput"]["load_stages"] == stages
