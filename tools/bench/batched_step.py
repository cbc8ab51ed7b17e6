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

Against the machine (``machine_probe.py``'s int8 peak, the same threads,
after every round; ``--no-probe`` skips it): the step's ternary matmuls are
``streams`` x the model's int8 multiply-accumulates a token, so at the peak
(of the loop the provider's GEMM uses: ``pmaddubsw`` for ``cpu-avx2``) they
take at least ``gemm_floor_ms``.
``ratio_ceiling`` = ``streams`` x the decode step / that floor is the most
``batch_vs_decode`` could be with the GEMM at the peak and the head,
attention and the rest of the step free; ``batch_gemm_frac_of_peak`` is
the whole step's MAC rate as a fraction of the peak (a lower bound on the
GEMM's own).

Where the runner times its ops (the fused CPU runner: ``time_ops``), each round
also has ``decode_ops_ms`` and ``batch_ops_ms``: ms a step by op (the ternary
matmuls, attention, the head, norms and quantization, ...), so the parts of a
batched step can be set against one decode step's.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import machine_probe  # noqa: E402


def int8_macs_per_token(model) -> int:
    """Multiply-accumulates of the ternary matmuls for one token (every layer's q, k, v, o,
    gate, up, down: rows x columns)."""
    names = ("q", "k", "v", "o", "gate", "up", "down")
    return sum(
        int(getattr(layer, n).rows) * int(getattr(layer, n).cols)
        for layer in model.runner.weights.layers
        for n in names
    )


def against_peak(r: dict, streams: int, macs: int, peak_gmacs: float) -> dict:
    """The round's step against the int8 peak (see the module docstring)."""
    floor = streams * macs / (peak_gmacs * 1e9)
    decode, batch = 1 / r["decode_tok_s"], streams / r["batch_aggregate_tok_s"]
    return {
        "int8_peak_gmacs": peak_gmacs,
        "decode_step_ms": decode * 1e3,
        "batch_step_ms": batch * 1e3,
        "gemm_floor_ms": floor * 1e3,
        "ratio_ceiling": streams * decode / floor,
        "batch_gemm_frac_of_peak": floor / batch,
    }


def submissions(model) -> int:
    """The provider's API submissions so far (0 where it keeps no trace)."""
    trace = getattr(model.provider, "trace", None)
    return int(getattr(trace, "submissions", 0))


def timed_steps(
    model, steps: int, step: Callable[[], object]
) -> tuple[float, float, int, dict[str, float]]:
    """``steps`` calls of ``step``: seconds and main-thread CPU seconds a step, API
    submissions, and ms a step by op where the runner times its ops (else empty)."""
    runner = model.runner
    timing = getattr(runner, "time_ops", None) is not None and runner.time_ops(True)
    t0, h0, s0 = time.perf_counter(), time.thread_time(), submissions(model)
    for _ in range(steps):
        step()
    wall, host = (time.perf_counter() - t0) / steps, (time.thread_time() - h0) / steps
    subs = submissions(model) - s0
    ops: dict[str, float] = {}
    if timing:
        ops = {k: v * 1e3 / steps for k, v in runner.op_times().items() if k != "passes"}
        runner.time_ops(False)
    return wall, host, subs, ops


def one_round(model, streams: int, steps: int, context: int) -> dict:
    b = model.runner
    rng = np.random.default_rng(0)
    vocab = model.config.vocab_size
    seqs = [b.new_cache() for _ in range(streams)]
    try:
        for s in seqs:
            b.forward(rng.integers(0, vocab, size=context), s)
        decode, decode_host, decode_subs, decode_ops = timed_steps(
            model, steps, lambda: b.forward([int(rng.integers(vocab))], seqs[0])
        )
        batch, batch_host, batch_subs, batch_ops = timed_steps(
            model, steps, lambda: b.forward_batch([([int(rng.integers(vocab))], s) for s in seqs])
        )
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
        **({"decode_ops_ms": decode_ops, "batch_ops_ms": batch_ops} if batch_ops else {}),
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
    ap.add_argument("--no-probe", action="store_true", help="skip the int8 peak probe")
    args = ap.parse_args(argv)
    import bitnet_core

    model = bitnet_core.load(args.model, device=args.device)
    if hasattr(model.provider, "set_threads"):
        model.provider.set_threads(args.threads)
    one_round(model, args.streams, 2, args.context)  # warm up
    macs = int8_macs_per_token(model)
    rounds = []
    for _ in range(args.rounds):
        r = one_round(model, args.streams, args.steps, args.context)
        if not args.no_probe:
            try:
                loop = machine_probe.loop_for(model.provider.name)
                peak = machine_probe.int8_peak(args.threads, loop=loop)
            except machine_probe.ProbeError as exc:
                print(f"int8 peak not measured: {exc}", file=sys.stderr)
                peak = {}
            if "gmacs" in peak:
                r.update(against_peak(r, args.streams, macs, float(peak["gmacs"])))
        r["load_average"] = os.getloadavg()[0]
        rounds.append(r)
    median = {
        k: statistics.median(r[k] for r in rounds)
        for k in rounds[0]
        if k in rounds[-1] and not isinstance(rounds[0][k], dict)
    }
    for key in ("decode_ops_ms", "batch_ops_ms"):
        if key in rounds[0]:
            median[key] = {
                op: statistics.median(r[key][op] for r in rounds) for op in rounds[0][key]
            }
    out = {
        "provider": model.provider.name,
        "streams": args.streams,
        "threads": args.threads,
        "int8_macs_per_token": macs,
    }
    print(json.dumps({**out, "median": median, "rounds": rounds}, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
