"""Kernel-level benchmark: prompt attention's float32 FLOP/s against this machine's FMA peak.

Times ``Kernels.attention`` for a prompt of ``--tokens`` query tokens at
``--start`` (rows already in the cache) over a float16 K/V cache, one layer,
and, between the repetitions, ``machine_probe``'s float32 FMA peak on the same
threads (256-bit ``vfmadd231ps``: the instruction the kernel computes with).
FLOPs are counted as the kernel does them: query token t against its
``start + t + 1`` visible rows, 2 FLOPs a product for the scores and 2 for the
weighted sum of V (softmax not counted), so the fraction is a lower bound.

    uv run --no-sync python tools/bench/prompt_attention.py --threads 2 1 --tokens 128 1500

The shape defaults to bitnet_b1_58-large's (16 query and KV heads of 96);
``--heads 20 5 --head-dim 128`` gives BitNet b1.58 2B-4T's.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

from bitnet_core import _native

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gemv_bandwidth import default_isa, write_report  # noqa: E402
from machine_probe import ProbeError, fma_peak  # noqa: E402

TOKENS = [128, 512, 1500]


def attention_flops(tokens: int, start: int, heads: int, dim: int) -> int:
    """Multiply-add FLOPs of a causal prompt attention: 4 per (query, visible row, head, dim)."""
    visible = tokens * start + tokens * (tokens + 1) // 2
    return 4 * visible * heads * dim


def bench_prompt(
    kernels, threads: int, tokens: int, start: int, hq: int, hkv: int, dim: int, reps: int
) -> dict:
    """Median seconds of one layer's prompt attention over ``reps``, beside the FMA peak."""
    rng = np.random.default_rng(tokens + start)
    q = rng.standard_normal((tokens, hq, dim)).astype(np.float32)
    k = rng.standard_normal((start + tokens, hkv, dim)).astype(np.float16)
    v = rng.standard_normal((start + tokens, hkv, dim)).astype(np.float16)
    kernels.attention(q, k, v, start)  # warm-up: pages touched, threads started
    times, peaks = [], []
    for _ in range(reps):
        t0 = time.perf_counter()
        kernels.attention(q, k, v, start)
        times.append(time.perf_counter() - t0)
        peak = fma_peak(threads, ms=50)
        if "gflops" in peak:
            peaks.append(peak["gflops"])
    seconds = statistics.median(times)
    flops = attention_flops(tokens, start, hq, dim)
    gflops = flops / seconds / 1e9
    peak = statistics.median(peaks) if peaks else None
    return {
        "tokens": tokens,
        "start": start,
        "heads": hq,
        "kv_heads": hkv,
        "head_dim": dim,
        "flops": flops,
        "ms": seconds * 1e3,
        "gflops": gflops,
        "fma_peak_gflops": peak,
        "frac_of_fma_peak": gflops / peak if peak else None,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", default=default_isa())
    ap.add_argument("--threads", type=int, nargs="+", default=[len(os.sched_getaffinity(0))])
    ap.add_argument("--tokens", type=int, nargs="+", default=TOKENS, help="prompt tokens")
    ap.add_argument("--start", type=int, default=0, help="cache rows before the prompt")
    ap.add_argument("--heads", type=int, nargs=2, default=[16, 16], metavar=("HQ", "HKV"))
    ap.add_argument("--head-dim", type=int, default=96)
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--out", type=Path, default=Path("prompt_attention.json"))
    args = ap.parse_args(argv)
    hq, hkv = args.heads
    if min(args.tokens) < 2:
        ap.error("--tokens must be at least 2 (one token is decode's attention)")
    if args.start < 0:
        ap.error("--start must not be negative")
    if hkv < 1 or hq < 1 or hq % hkv:
        ap.error("--heads: HQ and HKV at least 1, HQ a multiple of HKV")
    if args.head_dim < 1:
        ap.error("--head-dim must be at least 1")
    if args.reps < 1 or min(args.threads) < 1:
        ap.error("--reps and --threads must be at least 1")

    results = []
    try:
        for threads in args.threads:
            kernels = _native.Kernels(args.isa, threads)
            for tokens in args.tokens:
                r = bench_prompt(
                    kernels, threads, tokens, args.start, hq, hkv, args.head_dim, args.reps
                )
                r["threads"] = threads
                results.append(r)
                frac = (
                    f"{100 * r['frac_of_fma_peak']:5.1f}% of the {r['fma_peak_gflops']:.1f} "
                    "GFLOP/s FMA peak"
                    if r["frac_of_fma_peak"] is not None
                    else "no FMA peak on this CPU"
                )
                print(
                    f"t={threads} {tokens:5d} tokens at {args.start}: {r['ms']:9.2f} ms a layer, "
                    f"{r['gflops']:6.1f} GFLOP/s = {frac}"
                )
    except ProbeError as exc:
        print(exc, file=sys.stderr)
        return 1
    write_report(args.out, args.isa, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
