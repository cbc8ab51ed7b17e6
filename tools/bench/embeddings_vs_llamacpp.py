"""Embedding prefill: our engine vs llama-cpp-python (``embedding=True``), same threads.

Two random files of bitnet-embedding-0.6B's shape (Qwen3: 1024 hidden, 28 layers,
16 heads of 128 (8 KV), 3072 FFN, 151,936 vocabulary): ours in I2_S with the
per-projection input norms the real model has, and llama.cpp's in TQ2_0 without
them (llama.cpp's ``qwen3`` graph has none; they are 7 RMSNorms a layer, cheap),
both last-token pooled. ``--inputs`` texts of ``--tokens`` tokens each (byte
tokenizer: the same ids in both) are embedded:

- ``ours_batch``: ``Model.embed(texts)``, one call (what one ``/v1/embeddings``
  request, or the server's batch of concurrent ones, runs);
- ``ours_single``: the same texts one call each (64 requests sent one at a time);
- ``llama``: ``Llama.embed(texts)`` (llama-cpp-python batches them itself);
- with ``--generic``, ``generic_batch`` and ``generic_single``: the same on our
  op-by-op engine (``BITNET_CPU_FUSED=0``) beside the fused C++ pass.

Each engine embeds one input first (warm-up: pages, threads); rounds alternate the
engines so load drift hits all alike; prints tokens/s per round and the medians'
ratios, and writes JSON with ``--out``.

    uv run --no-sync python tools/bench/embeddings_vs_llamacpp.py --dir /tmp/emb \\
        --threads 2 --inputs 64 --tokens 128 --rounds 2 --out emb_bench.json
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path
from unittest import mock

SHAPE = dict(
    vocab_size=151936,
    hidden_size=1024,
    num_layers=28,
    num_heads=16,
    num_kv_heads=8,
    intermediate_size=3072,
    key_length=128,
    context_length=1024,
    rope_theta=1e6,
    rms_norm_eps=1e-6,
    arch="qwen3",
    pooling="last",
)


def make_files(directory: Path) -> tuple[Path, Path]:
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import random_model_file

    directory.mkdir(parents=True, exist_ok=True)
    ours, theirs = directory / "emb-0.6b-i2_s.gguf", directory / "emb-0.6b-qwen3-tq2_0.gguf"
    for path, kw, ttype in ((ours, {"linear_norms": True}, "i2_s"), (theirs, {}, "tq2_0")):
        if not path.exists():
            t0 = time.perf_counter()
            random_model_file(path, BitNetConfig(**SHAPE, **kw), seed=0, ternary_type=ttype)
            print(f"wrote {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return ours, theirs


def texts(n: int, tokens: int) -> list[str]:
    """``n`` distinct ASCII texts of ``tokens - 1`` bytes (+ the appended end token)."""
    import numpy as np

    rng = np.random.default_rng(0)
    letters = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz     ", dtype=np.uint8)
    return [bytes(rng.choice(letters, tokens - 1)).decode() for _ in range(n)]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dir", type=Path, default=Path("/tmp/bitnet-emb-bench"))
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--inputs", type=int, default=64)
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--no-single", action="store_true", help="skip one-at-a-time")
    ap.add_argument("--no-llama", action="store_true", help="only ours (no ratio to llama.cpp)")
    ap.add_argument(
        "--generic", action="store_true", help="also our op-by-op engine (BITNET_CPU_FUSED=0)"
    )
    ap.add_argument("--out", type=Path, default=None)
    args = ap.parse_args(argv)
    os.environ.setdefault("BITNET_THREADS", str(args.threads))
    ours_path, theirs_path = make_files(args.dir)

    import bitnet_core

    model = bitnet_core.load(ours_path, device="cpu", progress=False)
    if hasattr(model.provider, "set_threads"):
        model.provider.set_threads(args.threads)
    generic = _generic(ours_path, args.threads) if args.generic else None
    llm = None if args.no_llama else _llama(theirs_path, args)
    batch = texts(args.inputs, args.tokens)
    ours_ids = model.embed_inputs(batch)
    n_ours = sum(map(len, ours_ids))
    n_theirs = 0
    if llm is not None:
        theirs_ids = [llm.tokenize(t.encode(), add_bos=True, special=False) for t in batch]
        n_theirs = sum(map(len, theirs_ids))
    print(f"tokens: ours {n_ours}, llama.cpp {n_theirs}", file=sys.stderr)
    for m in (model, generic):  # warm-up
        if m is not None:
            m.embed(ours_ids[:1])
    if llm is not None:
        llm.embed(batch[:1])

    def timed(f, n: int) -> float:
        t0 = time.perf_counter()
        f()
        return n / (time.perf_counter() - t0)

    engines = {"ours": model, "generic": generic}
    runs: dict[str, list[float]] = {"ours_batch": [], "llama": [], "ours_single": []}
    if generic is not None:
        runs.update(generic_batch=[], generic_single=[])
    for r in range(args.rounds):
        order = ["ours_batch", "llama"] if r % 2 == 0 else ["llama", "ours_batch"]
        if llm is None:
            order.remove("llama")
        if not args.no_single:
            order.append("ours_single")
        if generic is not None:
            pair = ["generic_batch"] + ([] if args.no_single else ["generic_single"])
            order = pair + order if r % 2 else order + pair
        for name in order:
            m = engines[name.split("_")[0]] if name != "llama" else None
            if name.endswith("_batch"):
                tps = timed(lambda m=m: m.embed(ours_ids), n_ours)
            elif name == "llama":
                tps = timed(lambda: llm.embed(batch), n_theirs)
            else:
                tps = timed(lambda m=m: [m.embed([x]) for x in ours_ids], n_ours)
            runs[name].append(tps)
            print(f"round {r} {name}: {tps:.1f} tok/s", file=sys.stderr, flush=True)
    med = {k: statistics.median(v) for k, v in runs.items() if v}
    report = {
        "shape": SHAPE,
        "threads": args.threads,
        "inputs": args.inputs,
        "tokens_per_input": args.tokens,
        "provider": model.provider.name,
        "runner": type(model.runner).__name__,
        "fallbacks": list(getattr(model.provider.trace, "fallbacks", [])),
        "runs_tok_s": runs,
        "median_tok_s": med,
    }
    if "llama" in med:
        report["ours_batch_over_llama"] = med["ours_batch"] / med["llama"]
    if "ours_single" in med:
        report["batch_over_single"] = med["ours_batch"] / med["ours_single"]
    if "generic_batch" in med:
        report["fused_over_generic_batch"] = med["ours_batch"] / med["generic_batch"]
    if "generic_single" in med and "ours_single" in med:
        report["fused_over_generic_single"] = med["ours_single"] / med["generic_single"]
    print(json.dumps({k: report[k] for k in report if k != "shape"}, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))
    return 0


def _generic(path: Path, threads: int):
    """The model on our op-by-op engine (``BITNET_CPU_FUSED=0`` while it loads)."""
    import bitnet_core

    with mock.patch.dict(os.environ, {"BITNET_CPU_FUSED": "0"}):
        m = bitnet_core.load(path, device="cpu", progress=False)
    if hasattr(m.provider, "set_threads"):
        m.provider.set_threads(threads)
    return m


def _llama(path: Path, args: argparse.Namespace):
    from llama_cpp import LLAMA_POOLING_TYPE_LAST, Llama

    n_ctx = args.tokens * args.inputs
    return Llama(
        model_path=str(path),
        embedding=True,
        pooling_type=LLAMA_POOLING_TYPE_LAST,
        n_ctx=n_ctx,
        n_batch=n_ctx,
        n_ubatch=512,
        n_seq_max=args.inputs,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        verbose=False,
    )


if __name__ == "__main__":
    sys.exit(main())
