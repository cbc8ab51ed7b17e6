"""The CI fuzz lane: every target ``fuzz_<name>.py`` for its seconds, checked against its floors.

``python tools/fuzz/lane.py [OUTDIR] [--only NAME ...] [--scale X]`` runs each
target listed in ``floors.toml`` (a target without an entry fails the lane) for
``seconds * scale``, keeps its log, corpus and any crashing input under
``OUTDIR/<name>/``, and fails when a target crashes, when its final coverage
(libFuzzer's ``cov:``) is below ``min_cov``, or its corpus below
``min_corpus`` inputs. A summary goes to ``OUTDIR/summary.json``.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

import tomllib

HERE = Path(__file__).resolve().parent
ROOT = HERE.parents[1]
FLOORS = HERE / "floors.toml"
_STATUS = re.compile(r"^#(\d+)\s+\w+\s+cov: (\d+) ft: (\d+) corp: (\d+)/\S+.*?rss: (\d+)Mb", re.M)


@dataclass
class Outcome:
    """One target's run: what libFuzzer reported last and the verdict."""

    name: str
    seconds: float
    returncode: int
    execs: int = 0
    cov: int = 0
    features: int = 0
    corpus: int = 0
    rss_mb: int = 0
    problems: list[str] | None = None


def parse_status(log: str) -> tuple[int, int, int, int, int] | None:
    """``(execs, cov, ft, corpus, rss_mb)`` of libFuzzer's last status line, or None."""
    hits = _STATUS.findall(log)
    return tuple(int(x) for x in hits[-1]) if hits else None  # type: ignore[return-value]


def judge(name: str, floor: dict, returncode: int, log: str, seconds: float) -> Outcome:
    """An ``Outcome`` with the floors of ``floors.toml`` applied."""
    out = Outcome(name, seconds, returncode, problems=[])
    status = parse_status(log)
    if status is None:
        out.problems.append("libFuzzer printed no status line (did the target start?)")
    else:
        out.execs, out.cov, out.features, out.corpus, out.rss_mb = status
    if returncode != 0:
        out.problems.append(f"exit status {returncode} (a crash, leak or timeout: see the log)")
    if out.cov < int(floor["min_cov"]):
        out.problems.append(f"coverage {out.cov} is below the floor {floor['min_cov']}")
    if out.corpus < int(floor["min_corpus"]):
        out.problems.append(f"corpus of {out.corpus} is below the floor {floor['min_corpus']}")
    return out


def run_target(name: str, floor: dict, outdir: Path, scale: float, env: dict) -> Outcome:
    target = HERE / f"fuzz_{name}.py"
    work = outdir / name
    (work / "corpus").mkdir(parents=True, exist_ok=True)
    seconds = max(1, round(float(floor["seconds"]) * scale))
    cmd = [
        sys.executable,
        str(target),
        f"-max_total_time={seconds}",
        f"-rss_limit_mb={int(floor.get('rss_limit_mb', 2048))}",
        "-timeout=20",
        "-print_final_stats=1",
        f"-artifact_prefix={work}/",
        str(work / "corpus"),
    ]
    start = time.monotonic()
    log_path = outdir / f"{name}.log"
    with open(log_path, "w") as log:
        proc = subprocess.run(
            cmd, stdout=log, stderr=subprocess.STDOUT, cwd=ROOT, env=env, timeout=seconds + 300
        )
    return judge(name, floor, proc.returncode, log_path.read_text(), time.monotonic() - start)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("outdir", nargs="?", default=str(ROOT / "out/ci/fuzz"))
    ap.add_argument("--only", nargs="*", help="targets to run (default: all)")
    ap.add_argument("--scale", type=float, default=float(os.environ.get("BITNET_FUZZ_SCALE", 1)))
    args = ap.parse_args(argv)
    floors = tomllib.loads(FLOORS.read_text())["targets"]
    outdir = Path(args.outdir)
    outdir.mkdir(parents=True, exist_ok=True)
    names = sorted(p.stem.removeprefix("fuzz_") for p in HERE.glob("fuzz_*.py"))
    if args.only:
        names = [n for n in names if n in args.only]
    env = {**os.environ}
    env.pop("BITNET_FUZZ_PLANT", None)  # the planted bug is the test's, never the lane's
    outcomes = []
    for name in names:
        if name not in floors:
            outcomes.append(Outcome(name, 0, 0, problems=[f"no floor for {name} in {FLOORS}"]))
            continue
        o = run_target(name, floors[name], outdir, args.scale, env)
        outcomes.append(o)
        verdict = "ok" if not o.problems else "FAILED: " + "; ".join(o.problems)
        print(
            f"fuzz: {name}: {o.execs} runs in {o.seconds:.0f} s, cov {o.cov} "
            f"(floor {floors[name]['min_cov']}), corpus {o.corpus} "
            f"(floor {floors[name]['min_corpus']}), rss {o.rss_mb} MB: {verdict}",
            flush=True,
        )
        if o.problems:
            print("".join((outdir / f"{name}.log").read_text().splitlines(True)[-30:]))
    (outdir / "summary.json").write_text(json.dumps([asdict(o) for o in outcomes], indent=1))
    return 1 if any(o.problems for o in outcomes) else 0


if __name__ == "__main__":
    sys.exit(main())
