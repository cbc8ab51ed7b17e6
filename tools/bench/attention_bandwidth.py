"""Kernel-level benchmark: decode attention's cache bytes / s against this machine's read bandwidth.

Times ``Kernels.attention`` for one query token (a decode step's attention of
one layer) over a float16 K/V cache of ``--contexts`` rows, three ways,
interleaved rep by rep so all three meet the same machine state:

- ``dram``: cycling through enough caches (``--working-set-mb``, one buffer)
  that they come from memory, as in a decode step after the weights went by;
- ``hot``: one cache again and again, from the caches (the kernel's compute);
- ``read``: ``Kernels.sum_bytes`` streaming the very buffer the ``dram``
  caches live in, with the same threads (the memory's share).

A kernel whose compute hides under its memory traffic takes ``max(hot,
read)`` from memory; one that does not, ``hot + read``. ``serial`` places
the measured ``dram`` time between the two: ``(dram - max) / min``, 0 when
compute is fully hidden, 1 when it simply adds.

    uv run --no-sync python tools/bench/attention_bandwidth.py --threads 2 1 --out attention.json

The shape defaults to bitnet_b1_58-large's (16 query and KV heads of 96);
``--heads 32 8 --head-dim 128`` gives a grouped-query model's.
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

CONTEXTS = [128, 512, 2048]
WORKING_SET_MB = 256  # MiB of caches cycled through per measurement (and read by the probe)


def bench_context(
    kernels, context: int, hq: int, hkv: int, dim: int, reps: int, working_set: int
) -> dict:
    """The three timings (seconds a layer's attention, medians over ``reps``) at ``context``."""
    rng = np.random.default_rng(context)
    cache_elems = context * hkv * dim  # one of K or V
    copies = max(2, working_set // (4 * cache_elems))
    # every K and V of the run in one buffer: the read probe streams exactly these bytes
    buf = rng.standard_normal(2 * copies * cache_elems, dtype=np.float32).astype(np.float16)
    shape = (context, hkv, dim)
    ks = [
        buf[(2 * i) * cache_elems : (2 * i + 1) * cache_elems].reshape(shape) for i in range(copies)
    ]
    vs = [
        buf[(2 * i + 1) * cache_elems : (2 * i + 2) * cache_elems].reshape(shape)
        for i in range(copies)
    ]
    q = rng.standard_normal((1, hq, dim)).astype(np.float32)
    raw = buf.view(np.uint8)
    start = context - 1  # the query is the cache's last row

    def dram() -> float:
        t0 = time.perf_counter()
        for k, v in zip(ks, vs, strict=True):
            kernels.attention(q, k, v, start)
        return (time.perf_counter() - t0) / copies

    def hot() -> float:
        t0 = time.perf_counter()
        for _ in range(copies):
            kernels.attention(q, ks[0], vs[0], start)
        return (time.perf_counter() - t0) / copies

    def read() -> float:
        t0 = time.perf_counter()
        kernels.sum_bytes(raw)
        return (time.perf_counter() - t0) / copies

    kinds = {"dram": dram, "hot": hot, "read": read}
    for fn in kinds.values():  # warm-up: pages touched, threads started
        fn()
    times: dict[str, list[float]] = {name: [] for name in kinds}
    for _ in range(reps):
        for name, fn in kinds.items():
            times[name].append(fn())
    med = {name: statistics.median(t) for name, t in times.items()}
    nbytes = 2 * cache_elems * 2  # K and V, float16
    lo, hi = min(med["hot"], med["read"]), max(med["hot"], med["read"])
    return {
        "context": context,
        "heads": hq,
        "kv_heads": hkv,
        "head_dim": dim,
        "cache_bytes": nbytes,
        "copies": copies,
        "dram_us": med["dram"] * 1e6,
        "hot_us": med["hot"] * 1e6,
        "read_us": med["read"] * 1e6,
        "dram_gbps": nbytes / med["dram"] / 1e9,
        "hot_gbps": nbytes / med["hot"] / 1e9,
        "read_gbps": nbytes / med["read"] / 1e9,
        "frac_of_read": med["read"] / med["dram"],
        "serial": (med["dram"] - hi) / lo,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--isa", default=default_isa())
    ap.add_argument("--threads", type=int, nargs="+", default=[len(os.sched_getaffinity(0))])
    ap.add_argument("--contexts", type=int, nargs="+", default=CONTEXTS, help="cache rows")
    ap.add_argument("--heads", type=int, nargs=2, default=[16, 16], metavar=("HQ", "HKV"))
    ap.add_argument("--head-dim", type=int, default=96)
    ap.add_argument("--reps", type=int, default=7)
    ap.add_argument("--working-set-mb", type=int, default=WORKING_SET_MB)
    ap.add_argument("--out", type=Path, default=Path("attention_bandwidth.json"))
    args = ap.parse_args(argv)
    hq, hkv = args.heads
    if min(args.contexts) < 1:
        ap.error("--contexts must be at least 1")
    if hkv < 1 or hq < 1 or hq % hkv:
        ap.error("--heads: HQ and HKV at least 1, HQ a multiple of HKV")
    if args.head_dim < 1:
        ap.error("--head-dim must be at least 1")
    if args.reps < 1 or args.working_set_mb < 1 or min(args.threads) < 1:
        ap.error("--reps, --working-set-mb and --threads must be at least 1")
    working_set = args.working_set_mb << 20

    results = []
    for threads in args.threads:
        kernels = _native.Kernels(args.isa, threads)
        for context in args.contexts:
            r = bench_context(kernels, context, hq, hkv, args.head_dim, args.reps, working_set)
            r["threads"] = threads
            results.append(r)
            print(
                f"t={threads} context {context:6d}: from memory {r['dram_us']:8.1f} us "
                f"{r['dram_gbps']:5.1f} GB/s ({100 * r['frac_of_read']:5.1f}% of read)  "
                f"hot {r['hot_us']:8.1f} us  read {r['read_us']:8.1f} us {r['read_gbps']:5.1f} GB/s  "
                f"serial {r['serial']:5.2f}"
            )
    write_report(args.out, args.isa, results)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
