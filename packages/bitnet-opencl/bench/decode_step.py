"""Host time, submissions and tokens/s of one decode step, per engine, in one run.

    uv run --no-sync python packages/bitnet-opencl/bench/decode_step.py MODEL.gguf [--steps 20]

Engines (each a fresh load of MODEL on the OpenCL device):

- ``generic``: ``BITNET_OPENCL_FUSED=0``, the generic engine op by op;
- ``loop``: the fused step replayed from the ctypes ``clEnqueueNDRangeKernel`` loop
  (``BITNET_OPENCL_COMMAND_BUFFER=0``);
- ``command-buffer``: the fused step replayed with ``cl_khr_command_buffer``.

Host ms is main-thread CPU time (``time.thread_time``) around ``Session.step``; the
emulated device's own work runs on other threads. Submissions come from
``provider.trace``. Greedy tokens of every engine are printed for comparison.
"""

from __future__ import annotations

import argparse
import os
import time

import numpy as np

from bitnet_core.model.api import load
from bitnet_core.sdk.kv_cache import KVCacheConfig

ENGINES = {
    "generic": {"BITNET_OPENCL_FUSED": "0"},
    "loop": {"BITNET_OPENCL_COMMAND_BUFFER": "0"},
    "command-buffer": {},
}
SWITCHES = ("BITNET_OPENCL_FUSED", "BITNET_OPENCL_COMMAND_BUFFER")


def measure(path: str, env: dict[str, str], steps: int, kv: str | None) -> dict:
    for name in SWITCHES:
        os.environ.pop(name, None)
    os.environ.update(env)
    model = load(path, "opencl", kv_cache=KVCacheConfig(dtype=kv))
    session = model.session()
    logits, _ = session.prefill(list(range(1, 9)))
    tok, tokens = int(np.argmax(logits)), []
    for _ in range(3):  # warm-up: builds and records the step
        tok = int(np.argmax(session.step(tok)))
    trace = model.provider.trace
    subs0, host, wall = trace.submissions, 0.0, 0.0
    for _ in range(steps):
        t0, w0 = time.thread_time(), time.perf_counter()
        out = session.step(tok)
        host += time.thread_time() - t0
        wall += time.perf_counter() - w0
        tok = int(np.argmax(out))
        tokens.append(tok)
    return {
        "host_ms": 1e3 * host / steps,
        "wall_ms": 1e3 * wall / steps,
        "submissions": (trace.submissions - subs0) / steps,
        "tok_s": steps / wall,
        "tokens": tokens,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("model")
    ap.add_argument("--steps", type=int, default=20)
    ap.add_argument("--kv-type", choices=("f32", "f16"), default=None)
    ap.add_argument("--engines", default=",".join(ENGINES))
    a = ap.parse_args()
    results = {e: measure(a.model, ENGINES[e], a.steps, a.kv_type) for e in a.engines.split(",")}
    base = results.get("generic")
    print(f"{'engine':16} {'host ms':>9} {'wall ms':>9} {'subs':>7} {'tok/s':>8}  host x")
    for name, r in results.items():
        ratio = f"{base['host_ms'] / r['host_ms']:.1f}" if base else "-"
        print(
            f"{name:16} {r['host_ms']:9.2f} {r['wall_ms']:9.2f} {r['submissions']:7.1f} "
            f"{r['tok_s']:8.2f}  {ratio}"
        )
    first = next(iter(results.values()))["tokens"]
    same = all(r["tokens"] == first for r in results.values())
    print(f"greedy tokens {'equal' if same else 'DIFFER'} across engines: {first[:12]}")


if __name__ == "__main__":
    main()
