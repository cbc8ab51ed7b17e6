"""sdk.step_profile: the per-kernel table ``tools/bench/step_profile.py --kernels`` prints."""

from __future__ import annotations

import pytest

from bitnet_core.sdk.step_profile import kernel_rows, report


def test_rows_are_per_step_largest_first_with_shares_of_the_sum():
    times = {"norm": (60, 0.0006), "matmul": (120, 0.0090), "head": (3, 0.0024)}
    rows = kernel_rows(times, steps=3)
    assert [r["kernel"] for r in rows] == ["matmul", "head", "norm"]
    assert rows[0]["launches_per_step"] == 40 and rows[0]["us_per_step"] == pytest.approx(3000)
    assert sum(r["share"] for r in rows) == pytest.approx(1.0)
    assert rows[1]["share"] == pytest.approx(800 / 4000)


def test_report_sets_the_sum_against_the_wall_time():
    rows = kernel_rows({"a_rather_long_kernel_name_of_a_shader": (2, 0.002)}, steps=2)
    text = report("device: 1 layer", rows, wall_s=0.002, rest="host")
    lines = text.splitlines()
    assert lines[0] == "device: 1 layer"
    assert "kernels' sum    1000.0 us (50%); the rest: host" in lines[1]
    assert lines[3].startswith("a_rather_long_kernel_name_of_a_shader ")  # never cut
    assert lines[3].split()[1:] == ["1.0", "1000.0", "100.0%"]
    assert kernel_rows({}, steps=1) == []
