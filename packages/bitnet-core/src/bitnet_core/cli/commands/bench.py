"""``bitnet bench``: prompt (prefill) and decode tokens/s of a model on a device.

``--profile`` adds, per decode step: the main thread's CPU time
(``time.thread_time()`` around each step: the host's cost of driving the
device, without the device's own threads), the wall time, and the API
submissions the provider's trace counted (``sdk.trace``: queue submits,
enqueues, kernel or graph launches; for the fused CPU engine, native calls)
and the kernels the device ran (``launches_per_step``: every kernel of a
replayed graph or recorded step counts).
On the fused CPU engine it also times each op of the decode steps (ms a step,
and GB/s for the ops that read weights or the KV cache): where a decode step's
time goes; with the checked int8 head, also the rows it recomputed exactly a
decode token. It also prints the model's load time by stage (read, repack or
upload, head: ``model.load_stages``).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import dataclass

import numpy as np

from ...errors import ConfigError
from ...model.receipt import launch_trace
from ...sdk.load_stages import stage_line
from ..model_options import add_model_args, load_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure prompt and decode tokens/s")
    add_model_args(p)
    p.add_argument("-p", "--n-prompt", type=int, default=128, help="prompt tokens (128)")
    p.add_argument("-n", "--n-gen", type=int, default=128, help="decoded tokens (128)")
    p.add_argument("-r", "--repetitions", type=int, default=1, help="runs to average (1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random prompt ids")
    p.add_argument(
        "--warmup", type=int, default=0, help="untimed runs first (kernel builds, captures) (0)"
    )
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.add_argument(
        "--profile",
        action="store_true",
        help="per decode step: main-thread host ms, wall ms and API submissions",
    )
    p.set_defaults(func=run)


@dataclass(frozen=True)
class BenchRun:
    """One prefill and its decode steps: tokens/s, and each step's host and wall time."""

    prompt_tokens_per_s: float
    decode_tokens_per_s: float
    steps: int
    host_s: float  # main-thread CPU time of the decode steps (time.thread_time)
    wall_s: float  # wall time of the decode steps (without choosing the next token)
    submissions: int  # counted by the provider's trace during the decode steps
    launches: int  # kernels the device ran during the decode steps (the trace's count)
    op_seconds: dict[str, float]  # by op over the decode steps (fused CPU engine, --profile)
    head_checks: tuple[int, int] = (0, 0)  # checked int8 head: tokens, rows recomputed


def bench_once(
    model, n_prompt: int, n_gen: int, rng: np.random.Generator, time_ops: bool = False
) -> BenchRun:
    """One prefill of ``n_prompt`` random ids then ``n_gen`` greedy decode steps; with
    ``time_ops``, the decode steps' time by op where the runner times its ops."""
    runner = model.runner
    timing = time_ops and getattr(runner, "time_ops", None) is not None
    trace = launch_trace(model.provider)
    ids = rng.integers(0, model.config.vocab_size, size=n_prompt)
    host = wall = 0.0
    with runner.new_cache(n_prompt + n_gen + 1) as seq:
        t0 = time.perf_counter()
        logits = runner.forward(ids, seq)
        t_prompt = time.perf_counter() - t0
        submitted = trace.submissions if trace is not None else 0
        launched = trace.launches if trace is not None else 0
        timing = timing and runner.time_ops(True)
        checks0 = runner.head_checks() if timing else (0, 0)
        t0 = time.perf_counter()
        for _ in range(n_gen):
            token = np.array([int(np.argmax(logits))])
            h0, w0 = time.thread_time(), time.perf_counter()
            logits = runner.forward(token, seq)
            host += time.thread_time() - h0
            wall += time.perf_counter() - w0
        t_gen = time.perf_counter() - t0
        submissions = trace.submissions - submitted if trace is not None else 0
        launches = trace.launches - launched if trace is not None else 0
        op_seconds = runner.op_times() if timing else {}
        checks = (0, 0)
        if timing:
            runner.time_ops(False)
            checks1 = runner.head_checks()
            checks = (checks1[0] - checks0[0], checks1[1] - checks0[1])
    op_seconds.pop("passes", None)
    return BenchRun(
        n_prompt / t_prompt,
        n_gen / t_gen if n_gen else 0.0,
        n_gen,
        host,
        wall,
        submissions,
        launches,
        op_seconds,
        checks,
    )


def step_profile(runs: list[BenchRun], traced: bool, model=None, n_prompt: int = 0) -> dict:
    """Per decode step over ``runs``: host ms, wall ms, submissions (None: no trace), and
    where the runner timed its ops: ``ops`` (op -> ms a step, and GB/s for the ops that
    read weights, or the KV cache at the steps' mean context); with the checked int8
    head, ``head_rows_recomputed_per_token``."""
    steps = sum(r.steps for r in runs)
    per = 1e3 / steps if steps else 0.0
    out = {
        "decode_steps": steps,
        "host_ms_per_step": sum(r.host_s for r in runs) * per,
        "wall_ms_per_step": sum(r.wall_s for r in runs) * per,
        "submissions_per_step": (
            sum(r.submissions for r in runs) / steps if traced and steps else None
        ),
        "launches_per_step": sum(r.launches for r in runs) / steps if traced and steps else None,
    }
    if steps and any(r.op_seconds for r in runs):
        nbytes = dict(model.runner.op_bytes())
        kv = getattr(model.runner, "kv", None)
        if kv is not None:  # a step at position p reads K and V of p + 1 rows of every layer
            mean_rows = n_prompt + (steps / len(runs) + 1) / 2
            nbytes["attention"] = int(kv.bytes_per_token * mean_rows)
        ops = {}
        for op in runs[0].op_seconds:
            ms = sum(r.op_seconds.get(op, 0.0) for r in runs) * per
            ops[op] = {"ms": ms}
            if op in nbytes and ms > 0:
                ops[op]["gb_per_s"] = nbytes[op] / ms / 1e6
        out["ops"] = ops
    checked_tokens = sum(r.head_checks[0] for r in runs)
    if checked_tokens:
        out["head_rows_recomputed_per_token"] = sum(r.head_checks[1] for r in runs) / checked_tokens
    return out


def run(args: argparse.Namespace) -> int:
    for name in ("n_prompt", "repetitions"):
        if getattr(args, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive")
    if args.n_gen < 0:
        raise ConfigError("--n-gen must be >= 0")
    if args.warmup < 0:
        raise ConfigError("--warmup must be >= 0")
    model = load_model(args)
    rng = np.random.default_rng(args.seed)
    for _ in range(args.warmup):
        bench_once(model, args.n_prompt, args.n_gen, rng)
    runs = [
        bench_once(model, args.n_prompt, args.n_gen, rng, time_ops=args.profile)
        for _ in range(args.repetitions)
    ]
    pp = [r.prompt_tokens_per_s for r in runs]
    tg = [r.decode_tokens_per_s for r in runs]
    result = {
        "model": str(model.path),
        "provider": model.provider.name,
        "startup": str(model.selection),
        "act_quant": model.quantize_activations,
        "kv_cache_dtype": str(getattr(getattr(model.runner, "kv", None), "dtype", "unknown")),
        "n_prompt": args.n_prompt,
        "n_gen": args.n_gen,
        "repetitions": args.repetitions,
        "warmup": args.warmup,
        "prompt_tokens_per_s": statistics.mean(pp),
        "decode_tokens_per_s": statistics.mean(tg),
        "prompt_tokens_per_s_stdev": statistics.stdev(pp) if len(pp) > 1 else 0.0,
        "decode_tokens_per_s_stdev": statistics.stdev(tg) if len(tg) > 1 else 0.0,
        "load_s": model.load_s,
        "load_stages": model.load_stages,
    }
    if args.profile:
        result["profile"] = step_profile(
            runs, launch_trace(model.provider) is not None, model, args.n_prompt
        )
    if args.json:
        print(json.dumps(result, indent=2))
    else:
        print(f"provider {model.provider.name}  model {model.path}", file=sys.stderr)
        print(
            f"pp{args.n_prompt}: {result['prompt_tokens_per_s']:.2f} tok/s  "
            f"(± {result['prompt_tokens_per_s_stdev']:.2f})"
        )
        print(
            f"tg{args.n_gen}: {result['decode_tokens_per_s']:.2f} tok/s  "
            f"(± {result['decode_tokens_per_s_stdev']:.2f})"
        )
        if args.profile:
            print(f"load: {model.load_s:.2f} s ({stage_line(model.load_stages)})")
            prof = result["profile"]
            subs, kernels = prof["submissions_per_step"], prof["launches_per_step"]
            print(
                f"decode step: host {prof['host_ms_per_step']:.3f} ms  "
                f"wall {prof['wall_ms_per_step']:.3f} ms  "
                f"submissions {'n/a' if subs is None else f'{subs:.1f}'}  "
                f"launches {'n/a' if kernels is None else f'{kernels:.1f}'}  "
                f"({prof['decode_steps']} steps)"
            )
            for op, t in prof.get("ops", {}).items():
                rate = f"  {t['gb_per_s']:.1f} GB/s" if "gb_per_s" in t else ""
                print(f"  {op:16s} {t['ms']:8.3f} ms{rate}")
            if "head_rows_recomputed_per_token" in prof:
                print(
                    f"  checked head: {prof['head_rows_recomputed_per_token']:.1f} rows "
                    "recomputed exactly a token"
                )
    return 0
