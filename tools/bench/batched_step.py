"""The engine's batched step against one-sequence decode and prefill, side by side.

    uv run --no-sync python tools/bench/batched_step.py --model /tmp/large-tq2_0.gguf \\
        --threads 2 --streams 8 --steps 16 --rounds 3

Per round, on one loaded model (no server): ``--steps`` decode steps of one
sequence (``backend.forward``), the same number of ``forward_batch`` steps of
``--streams`` sequences (one token each), and a prefill of ``--streams``
tokens in one sequence (the same matmul shape as the batched step, without
per-sequence attention). Prints per-token costs and the aggregate decode
speed-up, the main thread's CPU (host) ms per decode step and per batched step,
and, on a GPU provider, its API submissions per step, as JSON (medians over
rounds, and every round). On an emulated device (lavapipe, PoCL) the host ms
and submissions are what a batched step saves; the kernels share the CPU.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np


def submissions(model) -> int:
    """The provider's API submissions so far (0 where it keeps no trace)."""
    trace = getattr(model.provider, "trace", None)
    return int(getattr(trace, "submissions", 0))


def one_round(model, streams: int, steps: int, context: int) -> dict:
    b = model.runner
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    seqs = [b.new_cache() for _ in range(streams)]
    try:
        for s in seqs:
            b.forward(rng.integers(0, vocab, size=context), s)
        t0, h0, s0 = time.perf_counter(), time.thread_time(), submissions(model)
        for _ in range(steps):
            b.forward([int(rng.integers(vocab))], seqs[0])
        decode = (time.perf_counter() - t0) / steps
        decode_host, decode_subs = (time.thread_time() - h0) / steps, submissions(model) - s0
        t0, h0, s0 = time.perf_counter(), time.thread_time(), submissions(model)
        for _ in range(steps):
            b.forward_batch([([int(rng.integers(vocab))], s) for s in seqs])
        batch = (time.perf_counter() - t0) / steps
        batch_host, batch_subs = (time.thread_time() - h0) / steps, submissions(model) - s0
        with b.new_cache() as p:
            b.forward(rng.integers(0, vocab, size=context), p)
            t0 = time.perf_counter()
            b.forward(rng.integers(0, vocab, size=streams), p)
            prefill = time.perf_counter() - t0
    finally:
        for s in seqs:
            s.close()
    return {
        "decode_tok_s": 1 / decode,
        "batch_aggregate_tok_s": streams / batch,
        "prefill_tok_s": streams / prefill,
        "batch_vs_decode": decode * streams / batch,
        "batch_step_vs_prefill": batch / prefill,
        "decode_host_ms_per_step": decode_host * 1e3,
        "batch_host_ms_per_step": batch_host * 1e3,
        "decode_submissions_per_step": decode_subs / steps,
        "batch_submissions_per_step": batch_subs / steps,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--context", type=int, default=32, help="tokens each sequence holds first")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--device", default="cpu")
    args = ap.parse_args(argv)
    import bitnet_core

    model = bitnet_core.load(args.model, device=args.device)
    if hasattr(model.provider, "set_threads"):
        model.provider.set_threads(args.threads)
    one_round(model, args.streams, 2, args.context)  # warm up
    rounds = [one_round(model, args.streams, args.steps, args.context) for _ in range(args.rounds)]
    median = {k: statistics.median(r[k] for r in rounds) for k in rounds[0]}
    out = {"provider": model.provider.name, "streams": args.streams, "threads": args.threads}
    print(json.dumps({**out, "median": median, "rounds": rounds}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
