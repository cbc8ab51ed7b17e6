"""The fuzz lane cannot pass blind: its plant is found, its floors bite, its hook does not leak.

Marked ``fuzz`` (the CI lane ``fuzz`` runs them after ``ci/fuzz.sh``).
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest
import tomllib

pytest.importorskip("atheris", reason="atheris (dev dependency) is not installed")

HERE = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(HERE))
import lane  # noqa: E402

pytestmark = pytest.mark.fuzz

STATUS = (
    "#17\tINITED cov: 341 ft: 483 corp: 15/404Kb exec/s: 0 rss: 69Mb\n"
    "#9878\tDONE   cov: 404 ft: 1068 corp: 120/3770Kb lim: 117024 exec/s: 161 rss: 70Mb\n"
)
FLOOR = {"seconds": 1, "min_cov": 400, "min_corpus": 100}


def test_judge_reads_the_last_status_line():
    out = lane.judge("gguf", FLOOR, 0, STATUS, 1.0)
    assert (out.execs, out.cov, out.features, out.corpus, out.rss_mb) == (9878, 404, 1068, 120, 70)
    assert out.problems == []


@pytest.mark.parametrize(
    ("floor", "returncode", "log", "problem"),
    [
        ({**FLOOR, "min_cov": 405}, 0, STATUS, "coverage 404 is below the floor 405"),
        ({**FLOOR, "min_corpus": 121}, 0, STATUS, "corpus of 120 is below the floor 121"),
        (FLOOR, 1, STATUS, "exit status 1"),
        (FLOOR, 0, "INFO: Seed: 1\n", "no status line"),
        # the blind run of issue 50: uninstrumented, one input of one byte
        (FLOOR, 0, "#4000000\tDONE   corp: 1/1b lim: 4096 exec/s: 33000 rss: 69Mb\n", "no status"),
    ],
)
def test_judge_fails_a_run_below_its_floors(floor, returncode, log, problem):
    out = lane.judge("gguf", floor, returncode, log, 1.0)
    assert any(problem in p for p in out.problems), out.problems


def test_every_target_has_a_floor():
    floors = tomllib.loads(lane.FLOORS.read_text())["targets"]
    targets = {p.stem.removeprefix("fuzz_") for p in HERE.glob("fuzz_*.py")}
    assert targets == set(floors)
    assert sum(float(f["seconds"]) for f in floors.values()) <= 240  # the lane's ~5 minutes
    for name, floor in floors.items():
        assert int(floor["min_corpus"]) > 1 and int(floor["min_cov"]) > 0, name


def _fuzz(target: str, tmp_path: Path, *args: str, plant: bool = False, timeout: int = 300):
    env = {k: v for k, v in os.environ.items() if k != "BITNET_FUZZ_PLANT"}
    if plant:
        env["BITNET_FUZZ_PLANT"] = "1"
    return subprocess.run(
        [sys.executable, str(HERE / f"fuzz_{target}.py"), f"-artifact_prefix={tmp_path}/", *args],
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,
        timeout=timeout,
    )


def test_the_planted_bug_is_found(tmp_path):
    """With BITNET_FUZZ_PLANT=1 the GGUF target must find a model that opens under a
    name no seed has: only a run that keeps and mutates its seeds gets there."""
    proc = _fuzz("gguf", tmp_path, "-max_total_time=120", plant=True)
    log = proc.stdout + proc.stderr
    assert proc.returncode != 0, log[-3000:]
    assert "PlantedBug" in log, log[-3000:]
    crashes = list(tmp_path.glob("crash-*"))
    assert crashes and crashes[0].read_bytes().startswith(b"GGUF")


HOOK_PROBE = """
import sys
sys.path.insert(0, {here!r})
import harness, numpy as np

def compare(data):
    q = np.zeros(1 << 20, np.uint8) + len(data)  # 1 MiB
    return bool((q == 3).any()) or len(data) == 7

harness.run("none", compare)
"""


def test_the_comparison_hook_does_not_leak_arrays(tmp_path):
    """atheris' own hook kept every compared numpy array: 500 runs of a 1 MiB array
    would hold 500 MiB. With harness._trace_cmp the peak stays near the start."""
    probe = tmp_path / "probe.py"
    probe.write_text(HOOK_PROBE.format(here=str(HERE)))
    proc = subprocess.run(
        [sys.executable, str(probe), "-runs=500", f"-artifact_prefix={tmp_path}/"],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=120,
    )
    log = proc.stdout + proc.stderr
    assert proc.returncode == 0, log[-3000:]
    status = lane.parse_status(log)
    assert status is not None, log[-3000:]
    assert status[-1] < 200, f"peak RSS {status[-1]} MB after 500 runs"


@pytest.mark.parametrize(
    "target", sorted(p.stem.removeprefix("fuzz_") for p in HERE.glob("fuzz_*.py"))
)
def test_regression_inputs_pass(target):
    """Every input that once crashed a target (``regressions/<target>/``) now passes."""
    inputs = sorted((HERE / "regressions" / target).glob("*"))
    if not inputs:
        pytest.skip(f"no regression inputs for {target} yet")
    proc = subprocess.run(
        [sys.executable, str(HERE / f"fuzz_{target}.py"), *map(str, inputs)],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, (proc.stdout + proc.stderr)[-3000:]
