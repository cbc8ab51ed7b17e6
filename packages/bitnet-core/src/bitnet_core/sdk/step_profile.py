"""A decode step's device time kernel by kernel, as the GPU backends' step profilers print it
(``packages/bitnet-<name>/bench/step_profile.py``): each kernel's launches and microseconds a
step, its share of their sum, and that sum against the step's wall time. A profiler runs
one table a (prompt length, attention split size) pair on the same weights
(``add_run_options``), and writes them all as JSON (``write_runs``)."""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping
from pathlib import Path


def kernel_rows(times: Mapping[str, tuple[float, float]], steps: int) -> list[dict]:
    """``times``: kernel name -> (launches, seconds) summed over ``steps`` steps. Rows a step,
    the largest first, each with its share of the sum."""
    rows = [
        {"kernel": name, "launches_per_step": n / steps, "us_per_step": s * 1e6 / steps}
        for name, (n, s) in times.items()
    ]
    rows.sort(key=lambda r: -r["us_per_step"])
    total = sum(r["us_per_step"] for r in rows) or 1.0
    for r in rows:
        r["share"] = r["us_per_step"] / total
    return rows


def report(title: str, rows: list[dict], wall_s: float, rest: str) -> str:
    """The table: ``title``, the kernels' sum against ``wall_s`` a step (``rest`` says what
    the difference is), then a line a kernel."""
    total = sum(r["us_per_step"] for r in rows)
    width = max([24] + [len(r["kernel"]) for r in rows])
    lines = [
        title,
        f"step wall {wall_s * 1e6:9.1f} us; kernels' sum {total:9.1f} us "
        f"({total / (wall_s * 1e6):.0%}); the rest: {rest}",
        f"{'kernel':{width}s} {'launches':>9s} {'us/step':>9s} {'share':>6s}",
    ]
    for r in rows:
        lines.append(f"{r['kernel']:{width}s} {r['launches_per_step']:9.1f} "
                     f"{r['us_per_step']:9.1f} {r['share']:6.1%}")  # fmt: skip
    return "\n".join(lines)


def add_run_options(ap: argparse.ArgumentParser, split_unit: str) -> None:
    """``--steps``, ``--prompt`` (several: a table each), ``--keys-per-split`` (several: a
    table each; ``split_unit`` names what a split holds) and ``--json``."""
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prompt", type=int, nargs="+", default=[64],
                    help="prompt tokens before the steps (several: one table each)")  # fmt: skip
    ap.add_argument("--keys-per-split", type=int, nargs="+", default=None,
                    help=f"the decode attention's {split_unit} a split (default: the runner's)")  # fmt: skip
    ap.add_argument("--json", default=None)


def run_record(
    prompt: int, keys: int, splits: int, capacity: int, wall_s: float, rows: list[dict]
) -> dict:
    """One table's figures: the prompt, the attention's split size and count over a cache of
    ``capacity``, the step's wall time and the kernel rows."""
    return {"prompt": prompt, "keys_per_split": keys, "splits": splits, "capacity": capacity,
            "step_wall_us": wall_s * 1e6, "kernels": rows}  # fmt: skip


def write_runs(path: str | None, header: dict, runs: list[dict]) -> None:
    """``header`` and every run's record to ``path`` (nothing when None); the first run's
    wall time and kernels also at the top level, where one-table readers look."""
    if path:
        first = {"step_wall_us": runs[0]["step_wall_us"], "kernels": runs[0]["kernels"]}
        Path(path).write_text(json.dumps({**header, "runs": runs, **first}, indent=1))
