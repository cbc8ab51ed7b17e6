#!/usr/bin/env python3
"""The CI matrix (ci/lanes.toml): list lanes, their system packages, and run them.

    python ci/matrix.py list [--ci]                 the lanes (and which CI runs)
    python ci/matrix.py system-packages [--ci]      Debian packages the lanes need
    python ci/matrix.py needs-extras [--ci] [LANE]  exit 0 if a lane needs ci/python-extras.sh
    python ci/matrix.py run [--ci] [LANE ...]       run lanes, print a summary, exit 1 on a failure

``run`` runs each lane in its own process group with the lane's timeout,
cut short by ``BITNET_CI_DEADLINE`` (seconds since the epoch; ci/test.sh sets
it so the whole of CI stays within its hour): a lane that would start past
it is reported "no time" and fails.
A lane that runs nothing fails ("no tests"): a test path that does not
exist, pytest's exit code 5 (no tests collected: a marker typo, a moved
folder), or, for ``each_package``, no package's run collecting a test (one
package's run collecting nothing is fine there). Only a lane without
``tests`` (``run`` commands only) runs no pytest. Results are
written to ``$BITNET_CI_OUT/lanes.json`` (default ``out/ci``).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

try:
    import tomllib
except ModuleNotFoundError:  # Python 3.10
    import tomli as tomllib  # type: ignore[no-redef]

ROOT = Path(__file__).resolve().parent.parent
LANES_FILE = ROOT / "ci" / "lanes.toml"
NO_TESTS = 5  # pytest: no tests were collected
MIN_LANE_SECONDS = 30  # a lane is not started with less time than this before the deadline


@dataclass
class Lane:
    name: str
    tests: list[str] = field(default_factory=list)
    markers: str = ""
    run: list[str] = field(default_factory=list)
    each_package: bool = False
    system: list[str] = field(default_factory=list)
    extras: bool = False
    env: dict[str, str] = field(default_factory=dict)
    ci: bool = True
    timeout: float = 8
    auto: bool = False


@dataclass
class Result:
    lane: str
    status: str  # passed, failed, no tests (a failure), timeout, no time
    seconds: float
    detail: str = ""


def load(path: Path | None = None) -> list[Lane]:
    """The lanes of lanes.toml, plus an automatic lane for every package without one."""
    data = tomllib.loads((path or LANES_FILE).read_text())
    defaults = data.get("defaults", {})
    lanes = []
    for name, spec in data.get("lanes", {}).items():
        merged = {"markers": defaults.get("markers", ""), "timeout": defaults.get("timeout", 8)}
        merged.update(spec)
        if "run" in spec and "markers" not in spec:
            merged["markers"] = ""
        lanes.append(Lane(name=name, **merged))
    covered = {
        Path(t).parts[1]
        for lane in lanes
        for t in lane.tests
        if len(Path(t).parts) > 1 and Path(t).parts[0] == "packages"
    }
    for pkg in sorted((ROOT / "packages").iterdir()):
        if pkg.is_dir() and (pkg / "pyproject.toml").exists() and pkg.name not in covered:
            lanes.append(
                Lane(
                    name=pkg.name.removeprefix("bitnet-"),
                    tests=[f"packages/{pkg.name}/tests"],
                    markers=defaults.get("markers", ""),
                    timeout=defaults.get("timeout", 8),
                    auto=True,
                )
            )
    return lanes


def pick(lanes: list[Lane], names: list[str], ci: bool) -> list[Lane]:
    if names:
        known = {lane.name: lane for lane in lanes}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise SystemExit(f"error: unknown lane {', '.join(unknown)}; known: {', '.join(known)}")
        return [known[n] for n in names]
    return [lane for lane in lanes if lane.ci] if ci else lanes


def pytest_targets(lane: Lane) -> list[list[str]]:
    """The path lists of the lane's pytest runs (one per package for ``each_package``)."""
    if lane.each_package:
        runs = []
        for base in lane.tests:
            for tests in sorted((ROOT / base).glob("*/tests")):
                runs.append([str(tests.relative_to(ROOT))])
        return runs
    return [list(lane.tests)] if lane.tests else []


def missing_paths(lane: Lane) -> list[str]:
    """The lane's test paths that do not exist."""
    return [t for t in lane.tests if not (ROOT / t).exists()]


def _run(cmd: list[str] | str, env: dict[str, str], deadline: float) -> int:
    """Run in a new process group; on timeout the whole group is stopped and 124 returned."""
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, shell=isinstance(cmd, str),
                            executable="/bin/bash" if isinstance(cmd, str) else None,
                            start_new_session=True)  # fmt: skip
    try:
        return proc.wait(timeout=max(1.0, deadline - time.monotonic()))
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGTERM)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        return 124


def ci_deadline() -> float | None:
    """``BITNET_CI_DEADLINE`` as a ``time.monotonic()`` value, or None."""
    value = os.environ.get("BITNET_CI_DEADLINE", "").strip()
    if not value:
        return None
    return time.monotonic() + (float(value) - time.time())


def run_lane(lane: Lane) -> Result:
    start = time.monotonic()
    deadline = start + lane.timeout * 60
    overall = ci_deadline()
    if overall is not None:
        if overall - start < MIN_LANE_SECONDS:
            return Result(lane.name, "no time", 0.0, "BITNET_CI_DEADLINE reached before it started")
        deadline = min(deadline, overall)
    env = dict(os.environ)
    env.setdefault("BITNET_CACHE", "0")  # lanes probe devices for real (hal/probe_cache.py)
    env["PATH"] = f"{Path(sys.executable).parent}:{env.get('PATH', '')}"
    env.update({k: str(v) for k, v in lane.env.items()})
    print(f"\n===== lane {lane.name}", flush=True)
    for command in lane.run:
        print(f"$ {command}", flush=True)
        code = _run(command, env, deadline)
        if code:
            status = "timeout" if code == 124 else "failed"
            return Result(lane.name, status, time.monotonic() - start, f"{command}: exit {code}")
    missing = missing_paths(lane)
    if missing:
        detail = f"test paths that do not exist: {', '.join(missing)}"
        return Result(lane.name, "no tests", time.monotonic() - start, detail)
    if not lane.tests and not lane.run:
        return Result(lane.name, "no tests", time.monotonic() - start, "nothing to run")
    targets = pytest_targets(lane)
    collected = not lane.tests  # a lane of `run` commands only collects no tests
    for paths in targets:
        # One package per pytest run, so test files never collide across packages and
        # "prepend" lets a package's tests import their helper modules (tests/*.py).
        cmd = [sys.executable, "-m", "pytest", *paths, "-q", "-p", "no:cacheprovider",
               "--import-mode=prepend", "--durations=10"]  # fmt: skip
        if lane.markers:
            cmd += ["-m", lane.markers]
        print("$ python " + " ".join(cmd[1:]), flush=True)
        code = _run(cmd, env, deadline)
        if code == NO_TESTS and lane.each_package:
            continue  # this package has none of the lane's tests; another must
        if code == NO_TESTS:
            return Result(
                lane.name, "no tests", time.monotonic() - start, f"{paths}: collected no tests"
            )
        collected = True
        if code:
            status = "timeout" if code == 124 else "failed"
            return Result(lane.name, status, time.monotonic() - start, f"{paths}: exit {code}")
    if not collected:
        return Result(lane.name, "no tests", time.monotonic() - start, "collected no tests")
    return Result(lane.name, "passed", time.monotonic() - start)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ci/matrix.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("command", choices=["list", "system-packages", "needs-extras", "run"])
    ap.add_argument("lanes", nargs="*")
    ap.add_argument("--ci", action="store_true", help="only the lanes ci/test.sh runs")
    args = ap.parse_args(argv)
    lanes = pick(load(), args.lanes, args.ci)

    if args.command == "list":
        for lane in lanes:
            what = " ".join(lane.run) if lane.run else ""
            what += (" pytest " + " ".join(lane.tests)) if lane.tests else ""
            flags = ("ci " if lane.ci else "   ") + ("extras " if lane.extras else "")
            auto = " (automatic)" if lane.auto else ""
            print(f"{lane.name:10} {flags:11} {lane.timeout:>4g} min  {what.strip()}{auto}")
        return 0
    if args.command == "system-packages":
        print(" ".join(dict.fromkeys(p for lane in lanes for p in lane.system)))
        return 0
    if args.command == "needs-extras":
        return 0 if any(lane.extras for lane in lanes) else 1

    results = [run_lane(lane) for lane in lanes]
    print("\n===== lanes")
    for r in results:
        print(f"{r.lane:10} {r.status:9} {r.seconds:7.1f} s  {r.detail}")
    total = sum(r.seconds for r in results)
    print(f"{'total':10} {'':9} {total:7.1f} s")
    out = Path(os.environ.get("BITNET_CI_OUT", ROOT / "out" / "ci"))
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "lanes.json.tmp"
    tmp.write_text(json.dumps([r.__dict__ for r in results], indent=1))
    tmp.replace(out / "lanes.json")
    return 1 if any(r.status != "passed" for r in results) else 0


if __name__ == "__main__":
    if shutil.which("bash") is None:
        sys.exit("error: ci/matrix.py needs bash")
    sys.exit(main())
