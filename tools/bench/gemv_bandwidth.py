"""Kernel-level benchmark: ternary GEMV effective bandwidth vs this machine's read bandwidth.

For each weight shape of bitnet_b1_58-large and BitNet-b1.58-2B-4T, times
``Kernels.linear`` on one token (decode) and reports the weight bytes read per
second. Enough copies of each matrix are cycled through that their total
exceeds the last-level cache several times, so the weights come from DRAM as
in a real decode step. The floor a memory-bound kernel is judged against is
the machine's *read* bandwidth, measured by ``Kernels.sum_bytes`` (every
thread streaming a 256 MB buffer, the same threads as the GEMV) interleaved
with the GEMV repetitions, so both see the same machine state; the ratio is
of the medians. numpy's copy bandwidth is printed for reference.

Layouts: ``tq2_0`` (llama.cpp's bytes used in place, what a TQ2_0 GGUF runs
on), ``i2_128`` (our repacked 2-bit layout), ``tq1_160`` (1.6 bits). Also
times the dense output head (float16 and the int8 variant).

    uv run --no-sync python tools/bench/gemv_bandwidth.py --threads 2 1 --out gemv.json --png gemv.png

``--tokens 8`` times the ternary matrices on 8 tokens (a batched decode step's
shape, issue 28) and adds their int8 multiply-accumulates a second
(``gmacs``) to each line. ``--shapes 2560x6912 ...`` times only those shapes,
``--no-head`` skips the head, ``--working-set-mb`` sets the bytes cycled through (and streamed by the
read probe): below the last-level cache the figures are cache bandwidth, as in
the tools' smoke test, not the machine's memory.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bitnet_core import _native
from bitnet_core.formats import get_codec
from bitnet_core.model.presets import matrix_shapes, preset
from bitnet_core.native import cpu_features

sys.path.insert(0, str(Path(__file__).parent))
from plotting import pyplot  # noqa: E402

SHAPES = {
    "bitnet_b1_58-large": matrix_shapes(preset("large")),
    "BitNet-b1.58-2B-4T": matrix_shapes(preset("2b4t")),
}
HEADS = {"bitnet_b1_58-large head": (32000, 1536)}
WORKING_SET_MB = 256  # MiB of weights cycled through per measurement, and read by the probe


def default_isa() -> str:
    feats = cpu_features()
    if all(feats.get(f) for f in ("avx512f", "avx512bw", "avx512vl", "avx512vnni")):
        return "avx512"
    return "avx2" if feats.get("avx2") else "scalar"


def copy_bandwidth(nbytes: int = 512 << 20, reps: int = 7) -> dict:
    """numpy copy of a large buffer: bytes copied / s (each read once, written once)."""
    src = np.ones(nbytes // 8, dtype=np.float64)
    dst = np.empty_like(src)
    times = []
    for _ in range(reps):
        t0 = time.perf_counter()
        np.copyto(dst, src)
        times.append(time.perf_counter() - t0)
    return {"bytes": src.nbytes, "median_gbps": src.nbytes / statistics.median(times) / 1e9}


def machine_report() -> dict:
    """What a report records of the machine it ran on."""
    return {
        "cpu": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "affinity": len(os.sched_getaffinity(0)),
        "load_avg": os.getloadavg(),
        "features": {k: v for k, v in cpu_features().items() if v},
    }


def write_report(out: Path, isa: str, results: list, **fields) -> dict:
    """Write the JSON the kernel benches write (the machine, the ISA, ``fields``, the
    results) to ``out`` and say so; the report."""
    report = {"machine": machine_report(), "isa": isa, **fields, "results": results}
    out.write_text(json.dumps(report, indent=2))
    print(f"wrote {out}")
    return report


class ReadProbe:
    """Streams ``nbytes`` with every thread of ``kernels``: the read bandwidth."""

    def __init__(self, nbytes: int) -> None:
        self.buf = np.random.default_rng(0).integers(0, 256, nbytes, dtype=np.uint8)

    def seconds(self, kernels) -> float:
        t0 = time.perf_counter()
        kernels.sum_bytes(self.buf)
        return time.perf_counter() - t0


def make_matrix(codes: np.ndarray, layout: str):
    scales = np.ones(codes.shape[0], np.float32)
    if layout == "tq2_0":
        raw = get_codec("tq2_0").pack(codes, scales)
        return _native.TernaryMatrix.from_tq2_0(raw, codes.shape[0], codes.shape[1])
    return _native.TernaryMatrix.from_codes(codes, scales, layout)


def measure(fn, items, probe: ReadProbe, kernels, reps: int) -> tuple[list[float], list[float]]:
    """Seconds per call of fn(item) (one pass over all items per rep), interleaved with the
    read probe: (call seconds, read bandwidth GB/s) per rep."""
    for it in items[:2]:
        fn(it)
    calls, reads = [], []
    for _ in range(reps):
        reads.append(probe.buf.nbytes / probe.seconds(kernels) / 1e9)
        t0 = time.perf_counter()
        for it in items:
            fn(it)
        calls.append((time.perf_counter() - t0) / len(items))
    return calls, reads


def summary(nbytes: int, calls: list[float], reads: list[float]) -> dict:
    med = statistics.median(calls)
    read = statistics.median(reads)
    return {
        "weight_bytes": nbytes,
        "median_us": med * 1e6,
        "gbps_median": nbytes / med / 1e9,
        "gbps_best": nbytes / min(calls) / 1e9,
        "read_gbps_median": read,
        "frac_of_read": nbytes / med / 1e9 / read,
    }


def bench_ternary(
    kernels, probe, rows: int, cols: int, layout: str, reps: int, working_set: int, tokens: int = 1
) -> dict:
    rng = np.random.default_rng(rows * cols)
    codes = rng.integers(-1, 2, size=(rows, cols), dtype=np.int8)
    first = make_matrix(codes, layout)
    copies = max(2, working_set // first.nbytes)
    mats = [first] + [make_matrix(codes, layout) for _ in range(copies - 1)]
    x = rng.standard_normal((tokens, cols)).astype(np.float32)
    calls, reads = measure(lambda m: kernels.linear(x, m), mats, probe, kernels, reps)
    out = {"rows": rows, "cols": cols, "layout": layout, "copies": copies, "tokens": tokens}
    out.update(summary(first.nbytes, calls, reads))
    out["gmacs"] = rows * cols * tokens / statistics.median(calls) / 1e9
    return out


def bench_head(kernels, probe, rows: int, cols: int, kind: str, reps: int) -> dict:
    rng = np.random.default_rng(1)
    table = rng.standard_normal((rows, cols)).astype(np.float16)
    x = rng.standard_normal((1, cols)).astype(np.float32)
    if kind == "int8":
        obj = _native.DenseI8(table)
        nbytes = obj.nbytes + 4 * rows

        def fn(_):
            return kernels.matmul_dense_i8(x, obj)
    else:
        nbytes = table.nbytes

        def fn(_):
            return kernels.matmul_dense(x, table)

    # one table (98 MB for the f16 head) is already far beyond the LLC
    calls, reads = measure(fn, [None] * 3, probe, kernels, reps)
    out = {"rows": rows, "cols": cols, "kind": kind}
    out.update(summary(nbytes, calls, reads))
    return out


def chosen_shapes(wanted: list[str] | None) -> list[tuple[str, tuple[int, int]]]:
    """``(model, (rows, cols))`` to time: every model shape, or ``wanted`` (ValueError if bad)."""
    known = [(model, shape) for model, shapes in SHAPES.items() for shape in shapes]
    if not wanted:
        return known
    out = []
    for text in wanted:
        try:
            rows, cols = (int(v) for v in text.lower().split("x"))
        except ValueError:
            raise ValueError(f"{text!r} is not ROWSxCOLS, e.g. 2560x6912") from None
        if rows < 1 or cols < 256 or cols % 256:
            raise ValueError(f"{text}: rows >= 1 and columns a multiple of 256 (TQ2_0 blocks)")
        model = next((m for m, shape in known if shape == (rows, cols)), "custom")
        out.append((model, (rows, cols)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", default=default_isa())
    ap.add_argument("--threads", type=int, nargs="+", default=[len(os.sched_getaffinity(0))])
    ap.add_argument(
        "--layouts",
        nargs="+",
        default=["tq2_0", "i2_128", "tq1_160"],
        choices=["tq2_0", "i2_128", "tq1_160"],
    )
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--shapes", nargs="+", metavar="ROWSxCOLS", help="only these shapes")
    ap.add_argument("--no-head", action="store_true", help="skip the output head")
    ap.add_argument("--working-set-mb", type=int, default=WORKING_SET_MB)
    ap.add_argument("--tokens", type=int, default=1, help="tokens a ternary call (1: decode)")
    ap.add_argument("--out", type=Path, default=Path("gemv_bandwidth.json"))
    ap.add_argument("--png", type=Path, default=None)
    args = ap.parse_args(argv)
    try:
        shapes = chosen_shapes(args.shapes)
    except ValueError as exc:
        ap.error(f"--shapes: {exc}")
    if args.working_set_mb < 1:
        ap.error("--working-set-mb must be at least 1")
    if args.tokens < 1:
        ap.error("--tokens must be at least 1")
    working_set = args.working_set_mb << 20

    copy = copy_bandwidth(2 * working_set)
    print(f"numpy copy: {copy['median_gbps']:.1f} GB/s copied (median)")
    probe = ReadProbe(working_set)
    results = []
    for threads in args.threads:
        kernels = _native.Kernels(args.isa, threads)
        rows_out = []
        for model, (rows, cols) in shapes:
            for layout in args.layouts:
                r = bench_ternary(
                    kernels, probe, rows, cols, layout, args.reps, working_set, args.tokens
                )
                r.update(model=model, threads=threads)
                rows_out.append((f"{rows}x{cols}", layout, r))
        for name, (rows, cols) in {} if args.no_head else HEADS.items():
            for kind in ("f16", "int8"):
                r = bench_head(kernels, probe, rows, cols, kind, args.reps)
                r.update(model=name, threads=threads)
                rows_out.append((f"{rows}x{cols}", kind, r))
        for shape, kind, r in rows_out:
            results.append(r)
            print(
                f"t={threads} {r['model']:24s} {shape:10s} {kind:8s} {r['median_us']:8.0f} us "
                f"{r['gbps_median']:5.1f} GB/s  read {r['read_gbps_median']:5.1f} GB/s  "
                f"{100 * r['frac_of_read']:5.1f}% of read"
                + (f"  {r['gmacs']:6.1f} G MAC/s ({args.tokens} tokens)" if "gmacs" in r else "")
            )
    report = write_report(args.out, args.isa, results, copy=copy, probe_bytes=probe.buf.nbytes)
    if args.png:
        plot(report, args.png)
    return 0


def plot(report: dict, path: Path) -> None:
    if (plt := pyplot()) is None:
        return
    rows = report["results"]
    labels = [
        f"{r['rows']}x{r['cols']}\n{r.get('layout', r.get('kind'))} t{r['threads']}" for r in rows
    ]
    fig, ax = plt.subplots(figsize=(max(8, len(rows) * 0.45), 4.5))
    ax.bar(range(len(rows)), [100 * r["frac_of_read"] for r in rows])
    ax.axhline(85, color="r", ls=":", label="85% of read bandwidth")
    ax.axhline(100, color="k", ls="--", label="read bandwidth (same threads, same run)")
    ax.set_xticks(range(len(rows)), labels, rotation=90, fontsize=6)
    ax.set_ylabel("weight bytes/s, % of read bandwidth")
    ax.set_title(f"decode GEMV effective bandwidth ({report['isa']})")
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}")


if __name__ == "__main__":
    raise SystemExit(main())
