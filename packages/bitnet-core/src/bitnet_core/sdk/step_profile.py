"""A decode step's device time kernel by kernel, as ``tools/bench/step_profile.py --kernels``
prints it for any provider with a kernel timer: each kernel's launches and microseconds a
step, its share of their sum, and that sum against the step's wall time."""

from __future__ import annotations

from collections.abc import Mapping


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
