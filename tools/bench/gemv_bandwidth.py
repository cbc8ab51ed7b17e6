"""Kernel-level benchmark: ternary GEMV effective bandwidth vs this machine's copy bandwidth.

For each weight shape of bitnet_b1_58-large and BitNet-b1.58-2B-4T, times
``Kernels.linear`` on one token (decode) and reports the weight bytes read per
second, next to the copy bandwidth numpy measures on a large buffer (bytes
read + written per second, the STREAM "copy" convention). Enough copies of
each matrix are cycled through that their total exceeds the last-level cache
several times, so the weights come from DRAM as in a real decode step.
Also times the dense output head (float16 and the int8 variant).

    uv run --no-sync python tools/bench/gemv_bandwidth.py --threads 2 --out gemv.json

Prints a table and writes JSON (and a PNG with --png when matplotlib is installed).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import time
from pathlib import Path

import numpy as np

from bitnet_core import _native
from bitnet_core.native import cpu_features

SHAPES = {
    "bitnet_b1_58-large": [(1536, 1536), (4096, 1536), (1536, 4096)],
    "BitNet-b1.58-2B-4T": [(2560, 2560), (6912, 2560), (2560, 6912), (640, 2560)],
}
HEADS = {"bitnet_b1_58-large head": (32000, 1536)}
WORKING_SET = 256 << 20  # bytes of weights cycled through per measurement


def copy_bandwidth(nbytes: int = 512 << 20, reps: int = 7) -> dict:
    """numpy copy of a large buffer: (bytes read + written) / s, best and median."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return {
        "bytes": 2 * src.nbytes,
        "best_gbps": 2 * src.nbytes / min(times) / 1e9,
        "median_gbps": 2 * src.nbytes / statistics.median(times) / 1e9,
    }


def time_cycle(fn, items, reps: int) -> list[float]:
    """Seconds per call of fn(item), each rep one pass over all items."""
    for it in items[:2]:
        fn(it)
    out = []
    for _ in range(reps):
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        out.append((time.perf_counter() - t0) / len(items))
    return out


def bench_ternary(kernels, rows: int, cols: int, layout: str, reps: int) -> dict:
    rng = np.random.default_rng(rows * cols)
    codes = rng.integers(-1, 2, size=(rows, cols), dtype=np.int8)
    scales = np.ones(rows, np.float32)
    first = _native.TernaryMatrix.from_codes(codes, scales, layout)
    copies = max(2, WORKING_SET // first.nbytes)
    mats = [first] + [
        _native.TernaryMatrix.from_codes(codes, scales, layout) for _ in range(copies - 1)
    ]
    x = rng.standard_normal((1, cols)).astype(np.float32)
    times = time_cycle(lambda m: kernels.linear(x, m), mats, reps)
    med = statistics.median(times)
    return {
        "rows": rows,
        "cols": cols,
        "layout": layout,
        "weight_bytes": first.nbytes,
        "copies": copies,
        "median_us": med * 1e6,
        "gbps_median": first.nbytes / med / 1e9,
        "gbps_best": first.nbytes / min(times) / 1e9,
    }


def bench_head(kernels, rows: int, cols: int, kind: str, reps: int) -> dict:
    rng = np.random.default_rng(1)
    table = rng.standard_normal((rows, cols)).astype(np.float16)
    x = rng.standard_normal((1, cols)).astype(np.float32)
    if kind == "int8":
        obj = _native.DenseI8(table.astype(np.float32))
        nbytes = obj.nbytes + 4 * rows
        fn = lambda _: kernels.matmul_dense_i8(x, obj)  # noqa: E731
    else:
        obj, nbytes = table, table.nbytes
        fn = lambda _: kernels.matmul_dense(x, obj)  # noqa: E731
    # one table (98 MB for the f16 head) is already far beyond the LLC
    times = time_cycle(fn, [None] * 3, reps)
    med = statistics.median(times)
    return {
        "rows": rows,
        "cols": cols,
        "kind": kind,
        "weight_bytes": nbytes,
        "median_us": med * 1e6,
        "gbps_median": nbytes / med / 1e9,
        "gbps_best": nbytes / min(times) / 1e9,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", default="avx2" if cpu_features().get("avx2") else "scalar")
    ap.add_argument("--threads", type=int, nargs="+", default=[len(os.sched_getaffinity(0))])
    ap.add_argument("--layouts", nargs="+", default=["i2_128", "tq1_160"])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("gemv_bandwidth.json"))
    ap.add_argument("--png", type=Path, default=None)
    args = ap.parse_args(argv)

    copy = copy_bandwidth()
    print(
        f"copy bandwidth: {copy['best_gbps']:.1f} GB/s best, {copy['median_gbps']:.1f} median (read+write)"
    )
    results = []
    for threads in args.threads:
        kernels = _native.Kernels(args.isa, threads)
        for model, shapes in SHAPES.items():
            for rows, cols in shapes:
                for layout in args.layouts:
                    r = bench_ternary(kernels, rows, cols, layout, args.reps)
                    r.update(
                        model=model,
                        threads=threads,
                        frac_of_copy=r["gbps_median"] / copy["median_gbps"],
                    )
                    results.append(r)
                    print(
                        f"t={threads} {model:20s} {rows:5d}x{cols:<5d} {layout:8s} "
                        f"{r['median_us']:8.0f} us  {r['gbps_median']:5.1f} GB/s  "
                        f"{100 * r['frac_of_copy']:5.1f}% of copy"
                    )
        for name, (rows, cols) in HEADS.items():
            for kind in ("f16", "int8"):
                r = bench_head(kernels, rows, cols, kind, args.reps)
                r.update(
                    model=name, threads=threads, frac_of_copy=r["gbps_median"] / copy["median_gbps"]
                )
                results.append(r)
                print(
                    f"t={threads} {name:20s} {rows:5d}x{cols:<5d} {kind:8s} "
                    f"{r['median_us']:8.0f} us  {r['gbps_median']:5.1f} GB/s  "
                    f"{100 * r['frac_of_copy']:5.1f}% of copy"
                )
    report = {
        "machine": {
            "cpu": platform.processor() or platform.machine(),
            "cpus": os.cpu_count(),
            "affinity": len(os.sched_getaffinity(0)),
            "load_avg": os.getloadavg(),
            "features": {k: v for k, v in cpu_features().items() if v},
        },
        "isa": args.isa,
        "copy": copy,
        "results": results,
    }
    args.out.write_text(json.dumps(report, indent=2))
    print(f"wrote {args.out}")
    if args.png:
        plot(report, args.png)
    return 0


def plot(report: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (uv sync --group bench)")
        return
    rows = [r for r in report["results"] if "layout" in r or "kind" in r]
    labels = [
        f"{r['rows']}x{r['cols']}\n{r.get('layout', r.get('kind'))} t{r['threads']}" for r in rows
    ]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.6), 4.5))
    ax.bar(range(len(rows)), [r["gbps_median"] for r in rows])
    ax.axhline(report["copy"]["median_gbps"], color="k", ls="--", label="numpy copy (read+write)")
    ax.axhline(0.85 * report["copy"]["median_gbps"], color="r", ls=":", label="85% of copy")
    ax.set_xticks(range(len(rows)), labels, rotation=90, fontsize=7)
    ax.set_ylabel("weight GB/s")
    ax.set_title(f"GEMV effective bandwidth ({report['isa']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
