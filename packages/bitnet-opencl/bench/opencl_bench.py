"""Benchmark of the OpenCL provider: GEMV effective bandwidth and decode tokens/s,
side by side with the best CPU provider in the same run.

    uv run --no-sync python packages/bitnet-opencl/bench/opencl_bench.py            # small shapes
    uv run --no-sync python packages/bitnet-opencl/bench/opencl_bench.py --shapes 2b --model 2b

- ``copy``: device-to-device buffer copy, the bandwidth the GEMV is judged against
  (bytes read + written per second);
- ``gemv``: ``matmul_i2s`` with one token over the layer shapes of the chosen
  model size; effective bandwidth = bytes the kernel must read (2-bit weights,
  scales, activations) / time;
- ``decode``: tokens/s of the generic engine (``bitnet_core.model``) on a
  random model, one token per forward after a short prefill.

``--device`` names the OpenCL device as ``P:D`` (``BITNET_OPENCL_DEVICE``);
``--cpu`` the CPU provider compared against (default: ``select("cpu")``).
``--json FILE`` writes every figure.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from typing import Any

import numpy as np

from bitnet_core.config import BitNetConfig
from bitnet_core.hal.selection import select
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.model import Model, random_weights
from bitnet_core.model.presets import layer_matrices, preset
from bitnet_opencl import OpenCLProvider

MODELS = {
    "tiny": BitNetConfig(
        vocab_size=4096, hidden_size=512, num_layers=4, num_heads=8, num_kv_heads=2,
        intermediate_size=1408, context_length=512, ffn_activation="relu2",
    ),
    "small": BitNetConfig(
        vocab_size=8192, hidden_size=1024, num_layers=8, num_heads=16, num_kv_heads=4,
        intermediate_size=2816, context_length=512, ffn_activation="relu2",
    ),
    "2b": preset("2b4t"),
}  # fmt: skip


def layer_shapes(size: str) -> list[tuple[str, int, int]]:
    return layer_matrices(MODELS[size])


def timeit(fn, sync, min_time: float = 0.5, min_reps: int = 3) -> float:
    """Median seconds per call over batches lasting at least ``min_time`` in all."""
    fn()
    sync()
    times: list[float] = []
    t_end = time.perf_counter() + min_time
    while len(times) < min_reps or time.perf_counter() < t_end:
        t0 = time.perf_counter()
        fn()
        sync()
        times.append(time.perf_counter() - t0)
        if len(times) >= 200:
            break
    return statistics.median(times)


def copy_bandwidth(ocl: OpenCLProvider, nbytes: int) -> float:
    """Bytes read + written per second by a device-to-device buffer copy."""
    rt = ocl.runtime
    cl = rt.cl
    src = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, nbytes)
    dst = cl.Buffer(rt.context, cl.mem_flags.READ_WRITE, nbytes)
    cl.enqueue_fill_buffer(rt.queue, src, np.uint8(1), 0, nbytes)
    sec = timeit(lambda: cl.enqueue_copy(rt.queue, dst, src, byte_count=nbytes), rt.finish)
    return 2 * nbytes / sec


def gemv_bench(p: Any, sync, shapes, rng) -> list[dict]:
    rows = []
    for label, n, k in shapes:
        codes = rng.integers(-1, 2, size=(n, k), dtype=np.int8)
        w = p.load_ternary(TernaryWeight.from_codes(codes, 0.5, name=label))
        x = rng.standard_normal((1, k)).astype(np.float32)
        xq, xs = p.quantize_act(p.to_device(x))
        sec = timeit(lambda w=w, xq=xq, xs=xs: p.matmul_i2s(xq, xs, w), sync)
        nbytes = n * k / 4 + n * 4 + k + 4 + n * 4  # 2-bit weights, scales, x, y
        rows.append({"shape": label, "n": n, "k": k, "us": sec * 1e6, "gbps": nbytes / sec / 1e9})
    return rows


def sweep_gemv(ocl: OpenCLProvider, shapes, copy_bw: float) -> list[dict]:
    """GEMV GB/s under every ``BITNET_OPENCL_GEMV=LANES:WG`` plan the device allows."""
    limit = ocl.runtime.kernel_max_work_group("gemv_i2s")
    plans = [(lanes, wg) for wg in (32, 64, 128, 256) for lanes in (1, 2, 4, 8, 16, 32)]
    plans = [(lanes, wg) for lanes, wg in plans if lanes <= wg <= limit]
    rows = []
    print("\nGEMV plan sweep (GB/s; % of copy bandwidth)")
    saved = os.environ.get("BITNET_OPENCL_GEMV")
    try:
        for lanes, wg in plans:
            os.environ["BITNET_OPENCL_GEMV"] = f"{lanes}:{wg}"
            res = gemv_bench(ocl, ocl.synchronize, shapes, np.random.default_rng(0))
            cells = "  ".join(
                f"{r['shape']} {r['gbps']:.1f} ({100 * r['gbps'] * 1e9 / copy_bw:.0f}%)"
                for r in res
            )
            print(f"  {lanes:>2}:{wg:<4} {cells}")
            rows.append({"lanes": lanes, "wg": wg, "gemv": res})
    finally:
        if saved is None:
            os.environ.pop("BITNET_OPENCL_GEMV", None)
        else:
            os.environ["BITNET_OPENCL_GEMV"] = saved
    return rows


def decode_bench(device: str, cfg: BitNetConfig, tokens: int, prompt: int) -> dict:
    weights = random_weights(cfg, seed=1)
    t0 = time.perf_counter()
    model = Model.from_weights(weights, device=device)
    load_s = time.perf_counter() - t0
    backend = model.runner
    with backend.new_cache() as seq:
        backend.forward(np.arange(1, prompt + 1) % cfg.vocab_size, seq)
        backend.forward([1], seq)  # warm the decode kernels
        t0 = time.perf_counter()
        for i in range(tokens):
            backend.forward([(7 * i) % cfg.vocab_size], seq)
        sec = time.perf_counter() - t0
    return {
        "provider": model.provider.name,
        "tokens": tokens,
        "tokens_per_s": tokens / sec,
        "ms_per_token": sec / tokens * 1e3,
        "load_s": load_s,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--device", help="OpenCL device P:D (default: BITNET_OPENCL_DEVICE or best)")
    ap.add_argument("--cpu", default="cpu", help="CPU provider to compare with (default: best)")
    ap.add_argument("--shapes", choices=("small", "2b"), default="small")
    ap.add_argument("--model", choices=sorted(MODELS), default="tiny")
    ap.add_argument("--tokens", type=int, default=16, help="decode tokens timed")
    ap.add_argument(
        "--cpu-tokens", type=int, help="decode tokens timed on the CPU (default --tokens)"
    )
    ap.add_argument("--prompt", type=int, default=8, help="prefill tokens before decoding")
    ap.add_argument("--copy-mb", type=int, default=256, help="buffer size of the copy test")
    ap.add_argument(
        "--sweep-gemv", action="store_true", help="also time every LANES:WG plan of the GEMV"
    )
    ap.add_argument("--skip-decode", action="store_true")
    ap.add_argument("--json", help="write the results to this file")
    args = ap.parse_args(argv)

    if args.device:
        os.environ["BITNET_OPENCL_DEVICE"] = args.device
    ocl = OpenCLProvider()
    avail = ocl.probe(explicit=True)
    if not avail.available:
        print(f"error: no OpenCL device: {avail.reason}", file=sys.stderr)
        return 2
    cpu = select(args.cpu).provider
    rt = ocl.runtime
    print(f"opencl: {avail.device}  features={rt.features.as_dict()}")
    print(f"cpu:    {cpu.name}  ({platform.processor() or platform.machine()})")
    result: dict[str, Any] = {
        "opencl_device": avail.device,
        "features": rt.features.as_dict(),
        "cpu_provider": cpu.name,
        "command": " ".join(sys.argv),
    }

    bw = copy_bandwidth(ocl, args.copy_mb << 20)
    result["copy_gbps"] = bw / 1e9
    print(f"\ndevice copy bandwidth (read+write): {bw / 1e9:.1f} GB/s")

    rng = np.random.default_rng(0)
    shapes = layer_shapes(args.shapes)
    g_ocl = gemv_bench(ocl, ocl.synchronize, shapes, rng)
    g_cpu = gemv_bench(cpu, lambda: None, shapes, rng)
    print(f"\nGEMV (matmul_i2s, 1 token), {args.shapes} shapes")
    print(f"{'shape':>8} {'N x K':>12} {'opencl us':>10} {'GB/s':>7} {'% copy':>7} "
          f"{cpu.name + ' us':>16} {'speedup':>8}")  # fmt: skip
    for a, b in zip(g_ocl, g_cpu, strict=True):
        a["pct_of_copy"] = 100 * a["gbps"] * 1e9 / bw
        a["cpu_us"] = b["us"]
        a["speedup_vs_cpu"] = b["us"] / a["us"]
        print(
            f"{a['shape']:>8} {a['n']:>5} x {a['k']:<5} {a['us']:>10.1f} {a['gbps']:>7.2f} "
            f"{a['pct_of_copy']:>6.1f}% {b['us']:>16.1f} {a['speedup_vs_cpu']:>7.2f}x"
        )
    result["gemv"] = g_ocl

    if args.sweep_gemv:
        result["gemv_sweep"] = sweep_gemv(ocl, shapes, bw)

    if not args.skip_decode:
        cfg = MODELS[args.model]
        d_ocl = decode_bench("opencl", cfg, args.tokens, args.prompt)
        d_cpu = decode_bench(cpu.name, cfg, args.cpu_tokens or args.tokens, args.prompt)
        ratio = d_ocl["tokens_per_s"] / d_cpu["tokens_per_s"]
        print(f"\ndecode, {args.model} random model ({cfg.num_layers} layers, hidden "
              f"{cfg.hidden_size}), timed tokens after a {args.prompt}-token prompt")  # fmt: skip
        for d in (d_ocl, d_cpu):
            print(
                f"{d['provider']:>16}: {d['tokens_per_s']:8.2f} tok/s  ({d['ms_per_token']:.2f} ms)"
            )
        print(f"{'opencl / cpu':>16}: {ratio:8.2f}x")
        result["decode"] = {"opencl": d_ocl, "cpu": d_cpu, "ratio": ratio, "model": args.model}

    if args.json:
        tmp = args.json + ".tmp"
        with open(tmp, "w") as f:
            json.dump(result, f, indent=2)
        os.replace(tmp, args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
