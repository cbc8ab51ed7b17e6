"""sdk.step_profile: the per-kernel table the GPU backends' step profilers print."""

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


def test_run_options_and_the_runs_json(tmp_path):
    import argparse
    import json

    from bitnet_core.sdk.step_profile import add_run_options, run_record, write_runs

    ap = argparse.ArgumentParser()
    add_run_options(ap, "keys")
    args = ap.parse_args(["--prompt", "64", "1000", "--keys-per-split", "32", "16"])
    assert (args.steps, args.prompt, args.keys_per_split, args.json) == (
        16,
        [64, 1000],
        [32, 16],
        None,
    )
    assert ap.parse_args([]).prompt == [64] and ap.parse_args([]).keys_per_split is None
    rows = kernel_rows({"a": (2, 0.002)}, steps=2)
    runs = [run_record(64, 16, 8, 128, 0.0025, rows), run_record(1000, 16, 64, 2048, 0.003, [])]
    write_runs(None, {}, runs)  # no path: nothing written
    out = tmp_path / "p.json"
    write_runs(str(out), {"device": "d", "steps": 2}, runs)
    got = json.loads(out.read_text())
    assert got["device"] == "d" and [r["splits"] for r in got["runs"]] == [8, 64]
    assert got["runs"][1] == {"prompt": 1000, "keys_per_split": 16, "splits": 64,
                              "capacity": 2048, "step_wall_us": 3000.0, "kernels": []}  # fmt: skip
    assert got["step_wall_us"] == 2500.0 and got["kernels"] == rows  # the first run's
