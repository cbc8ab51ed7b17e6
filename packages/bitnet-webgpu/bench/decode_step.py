"""Host ms, wall ms and queue submissions per decode step of a model file on one device.

Host ms is the main thread's CPU time (``time.thread_time()``) around
``Session.step``: what the Python side spends driving a step (an emulated
device's own work runs on other threads). Submissions come from
``provider.trace``. Run the old path with ``BITNET_WEBGPU_FUSED=0``::

    uv run --no-sync python packages/bitnet-webgpu/bench/decode_step.py -m m.gguf --steps 20
    BITNET_WEBGPU_FUSED=0 uv run --no-sync python packages/bitnet-webgpu/bench/decode_step.py ...
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from bitnet_core.model import KVCacheConfig
from bitnet_core.model.api import load


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-m", "--model", required=True, help="GGUF file")
    ap.add_argument("--device", default="webgpu")
    ap.add_argument("--steps", type=int, default=20, help="decode steps measured")
    ap.add_argument("--warmup", type=int, default=3, help="decode steps before measuring")
    ap.add_argument("--prompt", type=int, default=8, help="prompt tokens")
    ap.add_argument("--kv-type", choices=("f16", "f32"), default=None)
    args = ap.parse_args()
    kv = KVCacheConfig(dtype=args.kv_type) if args.kv_type else None
    model = load(args.model, args.device, kv_cache=kv, progress=False)
    session = model.session()
    logits, _ = session.prefill(list(range(1, args.prompt + 1)))
    token = int(np.argmax(logits))
    for _ in range(args.warmup):
        token = int(np.argmax(session.step(token)))
    trace = model.provider.trace
    submissions = trace.submissions
    host = wall = 0.0
    for _ in range(args.steps):
        t0, w0 = time.thread_time(), time.perf_counter()
        out = session.step(token)
        host += time.thread_time() - t0
        wall += time.perf_counter() - w0
        token = int(np.argmax(out))
    n = args.steps
    print(
        f"{model.provider.name}: host {1e3 * host / n:.2f} ms/step, wall {1e3 * wall / n:.1f} "
        f"ms/step, submissions/step {(trace.submissions - submissions) / n:.1f}"
    )


if __name__ == "__main__":
    main()
