"""Greedy parity of the CPU engine's byte-saving options against its exact path.

For each model, greedy-decodes ``--steps`` tokens after a random prompt on the
native CPU provider's exact path (the default layout, TQ2_0 in place or
``i2_128``, and the float head: equal to the reference bit for bit) and again with each
option (``int8_head``: the output head on an int8 copy; ``int8_checked``: the
same, with the rows that could hold the maximum recomputed exactly;
``tq1_160``: the 1.6-bit layout), and reports per option: how many greedy
tokens equal the exact path's (and the first step that differs), the largest
logit difference relative to the largest logit over the steps both paths
shared, whether the exact path's 8 largest logits came out bit for bit, and
the exact path's top-2 margin at the first differing step.

Models: the conformance kit's random configs (``bitnet_core.testing.model``:
``MODEL_CONFIGS`` and the GGUF-sized ``FILE_CONFIG``), the bundled trained
demo model, and any ``--model`` GGUF.

    uv run --no-sync python tools/bench/layout_parity.py --steps 32 --model /tmp/large-tq2_0.gguf
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import numpy as np

OPTIONS = {
    "int8_head": dict(int8_head=True),
    "int8_checked": dict(int8_head="checked"),
    "tq1_160": dict(layout="tq1_160", int8_head=False),
}


def provider_class() -> Any:
    """The best native CPU provider class this machine runs."""
    from bitnet_core.providers import cpu_native

    for cls in (
        cpu_native.CpuAvx512Provider,
        cpu_native.CpuAvx2Provider,
        cpu_native.CpuNeonProvider,
    ):
        if cls().probe().available:
            return cls
    return cpu_native.CpuScalarProvider


def models(extra: list[Path]) -> list[tuple[str, Any]]:
    """``(name, ModelWeights)`` of every model compared."""
    from bitnet_core.config import BitNetConfig
    from bitnet_core.gguf import open_model_file
    from bitnet_core.model import random_weights
    from bitnet_core.model.api import demo_model_path
    from bitnet_core.sdk.weights import ModelWeights
    from bitnet_core.testing.model import FILE_CONFIG, MODEL_CONFIGS

    out = [
        (name, random_weights(BitNetConfig(**cfg), seed=7)) for name, cfg in MODEL_CONFIGS.items()
    ]
    out.append(("file-config", random_weights(BitNetConfig(**FILE_CONFIG), seed=7)))
    for path in [p for p in [demo_model_path()] if p] + extra:
        out.append((path.name, ModelWeights.from_model_file(open_model_file(path))))
    return out


def greedy(provider: Any, weights: Any, prompt: np.ndarray, steps: int) -> tuple[list[int], list]:
    """Greedy tokens and each step's logits (float64)."""
    from bitnet_core.model import GenericRunner, KVCacheConfig

    opts = dict(progress=False, kv_cache=KVCacheConfig(dtype="float16"))
    # a model the fused pass does not run (BitLinear input norms): the generic engine
    runner = provider.make_runner(weights, **opts) or GenericRunner(provider, weights, **opts)
    tokens, logits = [], []
    with runner.new_cache(prompt.size + steps + 1) as seq:
        out = runner.forward(prompt, seq)
        for _ in range(steps):
            logits.append(np.asarray(out, dtype=np.float64))
            tokens.append(int(np.argmax(out)))
            out = runner.forward(np.array([tokens[-1]]), seq)
    return tokens, logits


def compare(name: str, weights: Any, cls: Any, steps: int, prompt_len: int) -> dict:
    vocab = weights.config.vocab_size
    prompt = np.random.default_rng(3).integers(
        0, vocab, size=min(prompt_len, 8 if vocab < 1000 else prompt_len)
    )
    want, want_logits = greedy(cls(threads=2, int8_head=False), weights, prompt, steps)
    report: dict = {"model": name, "vocab": vocab, "steps": steps, "exact_tokens": want}
    for option, kwargs in OPTIONS.items():
        got, got_logits = greedy(cls(threads=2, **kwargs), weights, prompt, steps)
        diverge = next((i for i, (a, b) in enumerate(zip(want, got, strict=True)) if a != b), None)
        shared = (
            steps if diverge is None else diverge + 1
        )  # the logits of step i come before token i
        rel = max(
            float(np.abs(g - w).max() / np.abs(w).max())
            for g, w in zip(got_logits[:shared], want_logits[:shared], strict=True)
        )
        # the exact path's 8 largest logits, bit for bit, at every shared step
        top_equal = all(
            np.array_equal(g[np.argsort(w)[-8:]], w[np.argsort(w)[-8:]])
            for g, w in zip(got_logits[:shared], want_logits[:shared], strict=True)
        )
        entry = {
            "equal_tokens": diverge is None,
            "first_difference": diverge,
            "max_rel_logit_diff": rel,
            "top8_logits_equal": top_equal,
        }
        if diverge is not None:
            top2 = np.sort(want_logits[diverge])[-2:]
            entry["exact_top2_margin_rel"] = float(
                (top2[1] - top2[0]) / np.abs(want_logits[diverge]).max()
            )
        report[option] = entry
    return report


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=32)
    ap.add_argument("--prompt", type=int, default=16, help="prompt tokens (8 on tiny vocabularies)")
    ap.add_argument("--model", type=Path, action="append", default=[], help="also this GGUF")
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    if args.steps < 1 or args.prompt < 1:
        ap.error("--steps and --prompt must be positive")
    cls = provider_class()
    print(f"provider {cls.name}; exact path: layout auto, float16 head", file=sys.stderr)
    reports = []
    for name, weights in models(args.model):
        r = compare(name, weights, cls, args.steps, args.prompt)
        reports.append(r)
        for option in OPTIONS:
            e = r[option]
            verdict = (
                f"all {args.steps} greedy tokens equal"
                if e["equal_tokens"]
                else f"first differs at step {e['first_difference']} "
                f"(exact top-2 margin {100 * e['exact_top2_margin_rel']:.2f}% of max logit)"
            )
            print(
                f"{name:32s} {option:12s} {verdict}; max logit diff "
                f"{100 * e['max_rel_logit_diff']:.3f}% of max logit; top 8 logits "
                f"{'equal' if e['top8_logits_equal'] else 'differ'}"
            )
    if args.out:
        args.out.write_text(json.dumps({"provider": cls.name, "models": reports}, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
