"""``bitnet bench``: prompt (prefill) and decode tokens/s of a model on a device."""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time

import numpy as np

from ...errors import ConfigError
from ..model_options import add_model_args, load_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("bench", help="measure prompt and decode tokens/s")
    add_model_args(p)
    p.add_argument("-p", "--n-prompt", type=int, default=128, help="prompt tokens (128)")
    p.add_argument("-n", "--n-gen", type=int, default=128, help="decoded tokens (128)")
    p.add_argument("-r", "--repetitions", type=int, default=1, help="runs to average (1)")
    p.add_argument("--seed", type=int, default=0, help="seed of the random prompt ids")
    p.add_argument("--json", action="store_true", help="print one JSON object")
    p.set_defaults(func=run)


def bench_once(model, n_prompt: int, n_gen: int, rng: np.random.Generator) -> tuple[float, float]:
    """One prefill of ``n_prompt`` random ids then ``n_gen`` greedy decode steps: (prompt, decode) tok/s."""
    backend = model.backend
    ids = rng.integers(0, model.config.vocab_size, size=n_prompt)
    with backend.new_cache(n_prompt + n_gen + 1) as seq:
        t0 = time.perf_counter()
        logits = backend.forward(ids, seq)
        t_prompt = time.perf_counter() - t0
        t0 = time.perf_counter()
        for _ in range(n_gen):
            logits = backend.forward(np.array([int(np.argmax(logits))]), seq)
        t_gen = time.perf_counter() - t0
    return n_prompt / t_prompt, (n_gen / t_gen if n_gen else 0.0)


def run(args: argparse.Namespace) -> int:
    for name in ("n_prompt", "repetitions"):
        if getattr(args, name) <= 0:
            raise ConfigError(f"--{name.replace('_', '-')} must be positive")
    if args.n_gen < 0:
        raise ConfigError("--n-gen must be >= 0")
    model = load_model(args)
    rng = np.random.default_rng(args.seed)
    runs = [bench_once(model, args.n_prompt, args.n_gen, rng) for _ in range(args.repetitions)]
    pp = [r[0] for r in runs]
    tg = [r[1] for r in runs]
    result = {
        "model": str(model.path),
        "provider": model.provider.name,
        "startup": str(model.selection),
        "act_quant": model.quantize_activations,
        "kv_cache_dtype": str(getattr(getattr(model.backend, "kv", None), "dtype", "unknown")),
        "n_prompt": args.n_prompt,
        "n_gen": args.n_gen,
        "repetitions": args.repetitions,
        "prompt_tokens_per_s": statistics.mean(pp),
        "decode_tokens_per_s": statistics.mean(tg),
        "prompt_tokens_per_s_stdev": statistics.stdev(pp) if len(pp) > 1 else 0.0,
        "decode_tokens_per_s_stdev": statistics.stdev(tg) if len(tg) > 1 else 0.0,
        "load_s": model.load_s,
    }
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
    return 0
