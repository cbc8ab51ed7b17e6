"""ci/matrix.py: the lanes file parses, every package has a lane, no tests fails, timeouts."""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def matrix():
    spec = importlib.util.spec_from_file_location("ci_matrix", ROOT / "ci" / "matrix.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules["ci_matrix"] = module
    spec.loader.exec_module(module)
    return module


def test_every_package_has_a_lane(matrix):
    lanes = matrix.load()
    names = [lane.name for lane in lanes]
    assert len(names) == len(set(names)), names
    tested = {t for lane in lanes for t in lane.tests}
    for pkg in (ROOT / "packages").iterdir():
        if (pkg / "pyproject.toml").exists():
            assert f"packages/{pkg.name}/tests" in tested, pkg.name
    for required in ("lint", "core", "fuzz", "crossval", "template", "gpu-smoke"):
        assert required in names
    assert not next(lane for lane in lanes if lane.name == "gpu-smoke").ci


def test_system_packages_of_the_ci_lanes(matrix, capsys):
    assert matrix.main(["system-packages", "--ci"]) == 0
    packages = capsys.readouterr().out.split()
    assert "pocl-opencl-icd" in packages and "mesa-vulkan-drivers" in packages


def test_no_tests_is_a_failure(matrix, tmp_path, monkeypatch):
    """A marker that selects nothing, a path that does not exist: the lane fails."""
    tests = tmp_path / "tests"
    tests.mkdir()
    (tests / "test_x.py").write_text("def test_x():\n    pass\n")
    monkeypatch.setattr(matrix, "ROOT", tmp_path)
    none = matrix.Lane("none", tests=["tests"], markers="crossval", timeout=2)
    assert matrix.run_lane(none).status == "no tests"
    some = matrix.Lane("some", tests=["tests"], timeout=2)
    assert matrix.run_lane(some).status == "passed"
    missing = matrix.Lane("missing", tests=["tests", "nowhere"], timeout=2)
    result = matrix.run_lane(missing)
    assert result.status == "no tests" and "nowhere" in result.detail
    assert matrix.run_lane(matrix.Lane("empty", timeout=2)).status == "no tests"
    scripts = matrix.Lane("scripts", run=["true"], timeout=2)  # declared: scripts only
    assert matrix.run_lane(scripts).status == "passed"


def test_a_lane_that_collects_nothing_fails_ci(matrix, tmp_path, monkeypatch, capsys):
    """each_package: one package without the lane's tests is fine, none with them fails CI."""
    for pkg, body in (("a", "def test_a():\n    pass\n"), ("b", "")):
        (tmp_path / "packages" / pkg / "tests").mkdir(parents=True)
        (tmp_path / "packages" / pkg / "tests" / f"test_{pkg}.py").write_text(body)
    (tmp_path / "packages" / "a" / "pyproject.toml").write_text("")
    (tmp_path / "packages" / "b" / "pyproject.toml").write_text("")
    lanes = tmp_path / "lanes.toml"
    lanes.write_text(
        '[lanes.one]\ntests = ["packages"]\neach_package = true\nmarkers = "not slow"\n'
        '[lanes.typo]\ntests = ["packages"]\neach_package = true\nmarkers = "slwo"\n'
    )
    monkeypatch.setattr(matrix, "ROOT", tmp_path)
    monkeypatch.setattr(matrix, "LANES_FILE", lanes)
    monkeypatch.setenv("BITNET_CI_OUT", str(tmp_path / "out"))
    assert matrix.main(["run", "one"]) == 0
    assert matrix.main(["run", "typo"]) == 1
    assert "typo       no tests" in capsys.readouterr().out


def test_failures_and_timeouts_fail_the_lane(matrix, tmp_path, monkeypatch):
    monkeypatch.setattr(matrix, "ROOT", tmp_path)
    assert matrix.run_lane(matrix.Lane("bad", run=["exit 3"], timeout=1)).status == "failed"
    slow = matrix.Lane("slow", run=["sleep 30"], timeout=0.02)
    result = matrix.run_lane(slow)
    assert result.status == "timeout" and result.seconds < 20


def test_ci_deadline_stops_lanes(matrix, tmp_path, monkeypatch):
    import time

    monkeypatch.setattr(matrix, "ROOT", tmp_path)
    monkeypatch.setattr(matrix, "MIN_LANE_SECONDS", 2)
    monkeypatch.setenv("BITNET_CI_DEADLINE", str(time.time() + 1))
    result = matrix.run_lane(matrix.Lane("late", run=["true"], timeout=5))
    assert result.status == "no time"
    monkeypatch.setenv("BITNET_CI_DEADLINE", str(time.time() + 4))
    result = matrix.run_lane(matrix.Lane("cut", run=["sleep 60"], timeout=5))
    assert result.status == "timeout" and result.seconds < 20
