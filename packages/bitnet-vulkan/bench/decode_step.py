"""Host ms, wall ms and queue submissions per decode step: fused backend vs generic engine.

Both paths are loaded in one process (``BITNET_VULKAN_FUSED=1`` and ``=0`` at load
time) and their decode steps interleaved, so the machine's load hits both alike.
Host ms is the main thread's CPU time (``time.thread_time()``) around
``Session.step``; the emulated device's own work (lavapipe's threads) is not in it.

    uv run --no-sync python packages/bitnet-vulkan/bench/decode_step.py            # issue-27 model
    uv run --no-sync python packages/bitnet-vulkan/bench/decode_step.py -m F.gguf --steps 4
"""

from __future__ import annotations

import argparse
import json
import os
import tempfile
import time
from pathlib import Path

import numpy as np

from bitnet_core.config import BitNetConfig
from bitnet_core.model.api import load
from bitnet_core.model.random import random_model_file
from bitnet_core.sdk.kv_cache import KVCacheConfig

#: the 30-layer model of issue 27 (hidden 256, 4/1 heads, ffn 512, vocab 1024, TQ2_0)
ISSUE27 = BitNetConfig(
    vocab_size=1024,
    hidden_size=256,
    num_layers=30,
    num_heads=4,
    num_kv_heads=1,
    intermediate_size=512,
    context_length=512,
)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", help="GGUF file (default: the issue-27 30-layer model)")
    ap.add_argument("--steps", type=int, default=20, help="decode steps measured per path")
    ap.add_argument("--prompt", type=int, default=8, help="prompt tokens before the steps")
    ap.add_argument("--kv-type", choices=["f32", "f16"], default=None)
    ap.add_argument("--json", help="also write the figures to this file")
    args = ap.parse_args()
    path = Path(args.model) if args.model else None
    if path is None:
        path = Path(tempfile.gettempdir()) / f"bitnet-vulkan-issue27-{os.getuid()}.gguf"
        if not path.exists():
            random_model_file(path, ISSUE27, seed=27, overwrite=True)
    kv = KVCacheConfig(dtype=args.kv_type) if args.kv_type else None
    runs = {}
    for name, env in (("fused", "1"), ("generic", "0")):
        os.environ["BITNET_VULKAN_FUSED"] = env
        model = load(path, "vulkan", progress=False, kv_cache=kv)
        session = model.session()
        logits, _ = session.prefill(list(range(1, args.prompt + 1)))
        tok = int(np.argmax(logits))
        for _ in range(2):  # the first steps record the program / settle the buffer pool
            tok = int(np.argmax(session.step(tok)))
        runs[name] = {"model": model, "session": session, "tok": tok, "host": [], "wall": []}
    os.environ.pop("BITNET_VULKAN_FUSED", None)
    subs = {name: 0 for name in runs}
    for _ in range(args.steps):
        for name, r in runs.items():
            trace = r["model"].provider.trace
            s0, h0, w0 = trace.submissions, time.thread_time(), time.perf_counter()
            out = r["session"].step(r["tok"])
            r["wall"].append(time.perf_counter() - w0)
            r["host"].append(time.thread_time() - h0)
            subs[name] += trace.submissions - s0
            r["tok"] = int(np.argmax(out))
    report = {}
    for name, r in runs.items():
        report[name] = {
            "host_ms": 1e3 * float(np.mean(r["host"])),
            "wall_ms": 1e3 * float(np.median(r["wall"])),
            "tok_s": 1.0 / float(np.median(r["wall"])),
            "submissions_per_step": subs[name] / args.steps,
        }
    same = runs["fused"]["tok"] == runs["generic"]["tok"]
    print(f"model {path.name}, {args.steps} steps each, interleaved; same last token: {same}")
    for name, f in report.items():
        print(
            f"  {name:8s} host {f['host_ms']:7.2f} ms/step  wall {f['wall_ms']:8.1f} ms/step "
            f"({f['tok_s']:.2f} tok/s)  submissions/step {f['submissions_per_step']:.1f}"
        )
    g, f = report["generic"], report["fused"]
    print(
        f"  fused/generic: host x{f['host_ms'] / g['host_ms']:.3f}, "
        f"decode tok/s x{f['tok_s'] / g['tok_s']:.2f}"
    )
    if args.json:
        Path(args.json).write_text(json.dumps({"model": str(path), **report}, indent=1))


if __name__ == "__main__":
    main()
