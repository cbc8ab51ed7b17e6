"""Benchmark the Vulkan provider against our best CPU provider, in one run.

Two measurements, each printed for both providers with the ratio:

- GEMV: ``matmul_i2s`` with one token (decode) on BitNet layer shapes;
  effective bandwidth = the weight bytes a call must read (2 bits a weight
  plus the row scales, plus the activations) / time a call. On the device,
  ``--repeat`` calls are recorded into one command buffer and submitted once;
  a call's time is the host's (recording it from Python included), and where
  the device writes timestamps also the kernel's own (``timestamps.py``).
- decode: greedy decode tokens/s through the engine (``bitnet_core.model``,
  ``Model.from_weights``) on a random model of the preset's shape, the same
  model and prompt on both providers (the greedy tokens are compared too).

    uv run --no-sync python packages/bitnet-vulkan/bench/bench_vulkan.py --preset small
    python bench_vulkan.py --preset 2b --json out.json      # on a real GPU
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import os
import sys
import time
from typing import Any

import numpy as np

from bitnet_core.config import BitNetConfig
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.model.presets import preset

PRESETS = {
    # what lavapipe on 2 shared cores runs in seconds
    "small": BitNetConfig(vocab_size=4096, hidden_size=512, num_layers=4, num_heads=8,
                          num_kv_heads=2, intermediate_size=1408),
    # 1bitLLM bitnet_b1_58-large's layer shapes, fewer layers and a smaller vocabulary
    "large": preset("large", num_layers=4, vocab_size=8192),
    # bitnet-b1.58-2B-4T (a GPU's job)
    "2b": preset("2b4t"),
}  # fmt: skip


def providers(cpu_name: str | None) -> tuple[Any, Any]:
    from bitnet_core.hal.selection import select
    from bitnet_vulkan.provider import VulkanProvider
    from bitnet_vulkan.timestamps import ENV_TIMESTAMPS

    before = os.environ.get(ENV_TIMESTAMPS)
    os.environ[ENV_TIMESTAMPS] = "1"  # this provider's GEMVs: kernel times too
    try:
        vk = VulkanProvider()
        avail = vk.probe(explicit=True)
    finally:  # the decode benchmark's provider runs as the caller's environment says
        if before is None:
            os.environ.pop(ENV_TIMESTAMPS)
        else:
            os.environ[ENV_TIMESTAMPS] = before
    if not avail.available:
        sys.exit(f"vulkan unavailable: {avail.reason}")
    cpu = select(cpu_name or "cpu").provider
    return vk, cpu


def sync(p: Any, x: Any) -> None:
    """Wait for ``x`` (reads back one element's worth: the whole array on lazy providers)."""
    if hasattr(p, "synchronize"):
        p.synchronize()
    else:
        p.to_host(x)


def bench_gemv(
    p: Any, rows: int, cols: int, repeat: int, rng: np.random.Generator
) -> tuple[float, float | None]:
    """Seconds per ``matmul_i2s`` call with one token: the host's, and the device's (from
    timestamps; None where the provider has none)."""
    w = p.load_ternary(
        TernaryWeight.from_codes(rng.integers(-1, 2, (rows, cols)).astype(np.int8), 0.01)
    )
    xq, xs = p.quantize_act(p.to_device(rng.standard_normal((1, cols)).astype(np.float32)))
    sync(p, p.matmul_i2s(xq, xs, w))  # warm: pipelines, pools
    timer = getattr(getattr(p, "stream", None), "timer", None)
    if timer is not None:
        timer.times.clear()
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        outs = [p.matmul_i2s(xq, xs, w) for _ in range(repeat)]
        sync(p, outs[-1])
        best = min(best, (time.perf_counter() - t0) / repeat)
        del outs
    if timer is None:
        return best, None
    runs = [v for name, v in timer.times.items() if name.startswith("matmul_i2s")]
    return best, sum(s for _, s in runs) / sum(n for n, _ in runs)


def random_model(s: BitNetConfig, context: int) -> Any:
    """The random weights (seed 0) of a model of shape ``s`` and ``context`` positions."""
    from bitnet_core.model.random import random_weights

    return random_weights(dataclasses.replace(s, context_length=context), seed=0)


def bench_decode(device: str, s: BitNetConfig, prompt: int, tokens: int) -> dict[str, float]:
    """Greedy decode through the engine (``bitnet_core.model``) on a random model of shape ``s``."""
    from bitnet_core.model.api import Model

    model = Model.from_weights(random_model(s, prompt + tokens + 8), device=device)
    ids = list(range(1, prompt + 1))
    model.generate_ids(ids[:2], max_tokens=2, temperature=0)  # warm: pipelines, pools
    stats0 = dict(getattr(model.provider, "stream", None).stats) if device == "vulkan" else None
    out = model.generate_ids(ids, max_tokens=tokens, temperature=0)
    st = model.last_stats
    result = {
        "decode_tok_s": st.decode_tokens_per_s,
        "prompt_tok_s": st.prompt_tokens_per_s,
        "decode_steps": st.decode_steps,
        "tokens": out,
    }
    if stats0 is not None:
        stats = model.provider.stream.stats
        steps = st.decode_steps + 1
        result["submits_per_forward"] = (stats["submits"] - stats0["submits"]) / steps
        # dispatches recorded (a replayed step records none: the fused backend's decode)
        result["dispatches_recorded_per_forward"] = (
            stats["dispatches"] - stats0["dispatches"]
        ) / steps
    return result


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--tokens", type=int, default=16, help="decode steps timed")
    ap.add_argument("--prompt", type=int, default=8, help="prompt tokens")
    ap.add_argument("--repeat", type=int, default=20, help="GEMV calls per timing")
    ap.add_argument("--cpu", default=None, help="CPU provider to compare with (default: best)")
    ap.add_argument("--no-cpu", action="store_true", help="device only (huge shapes)")
    ap.add_argument("--json", default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    s = PRESETS[args.preset]
    vk, cpu = providers(args.cpu)
    report: dict[str, Any] = {
        "preset": args.preset,
        "shape": dataclasses.asdict(s),
        "vulkan_device": vk.probe(explicit=True).device,
        "integer_dot_product": vk.context.use_int_dot,
        "cpu_provider": None if args.no_cpu else cpu.name,
        "gemv": [],
    }
    print(f"vulkan: {report['vulkan_device']} (int dot: {report['integer_dot_product']})")
    print(f"cpu:    {report['cpu_provider']}")
    rng = np.random.default_rng(0)
    h, f = s.hidden_size, s.intermediate_size
    for rows, cols in [(h, h), (f, h), (h, f)]:
        nbytes = rows * (-(-cols // 4)) + 4 * rows + cols
        t_vk, t_kernel = bench_gemv(vk, rows, cols, args.repeat, rng)
        t_cpu = None
        if not args.no_cpu:
            t_cpu = bench_gemv(cpu, rows, cols, max(2, args.repeat // 4), rng)[0]
        row = {
            "rows": rows,
            "cols": cols,
            "vulkan_us": t_vk * 1e6,
            "vulkan_GBps": nbytes / t_vk / 1e9,
            "vulkan_kernel_us": None if t_kernel is None else t_kernel * 1e6,
            "vulkan_kernel_GBps": None if t_kernel is None else nbytes / t_kernel / 1e9,
            "cpu_us": None if t_cpu is None else t_cpu * 1e6,
            "speedup": None if t_cpu is None else t_cpu / t_vk,
        }
        report["gemv"].append(row)
        cpu_txt = "" if t_cpu is None else f"  cpu {t_cpu * 1e6:9.1f} us  x{t_cpu / t_vk:.2f}"
        kernel_txt = ""
        if t_kernel is not None:
            kernel_txt = f" (kernel {t_kernel * 1e6:9.1f} us {nbytes / t_kernel / 1e9:7.2f} GB/s)"
        print(
            f"gemv {rows:5d}x{cols:<5d} vulkan {t_vk * 1e6:9.1f} us a call "
            f"{nbytes / t_vk / 1e9:7.2f} GB/s{kernel_txt}{cpu_txt}"
        )
    d_vk = bench_decode("vulkan", s, args.prompt, args.tokens)
    report["decode"] = {"vulkan": {k: v for k, v in d_vk.items() if k != "tokens"}}
    line = (
        f"decode {args.preset}: vulkan {d_vk['decode_tok_s']:8.2f} tok/s "
        f"(prompt {d_vk['prompt_tok_s']:.1f} tok/s; {d_vk['dispatches_recorded_per_forward']:.0f} dispatches recorded, "
        f"{d_vk['submits_per_forward']:.1f} submits a forward pass)"
    )
    if not args.no_cpu:
        d_cpu = bench_decode(cpu.name, s, args.prompt, args.tokens)
        report["decode"]["cpu"] = {k: v for k, v in d_cpu.items() if k != "tokens"}
        report["decode"]["speedup"] = d_vk["decode_tok_s"] / d_cpu["decode_tok_s"]
        report["decode"]["same_greedy_tokens"] = d_vk["tokens"] == d_cpu["tokens"]
        line += (
            f"\n              cpu    {d_cpu['decode_tok_s']:8.2f} tok/s "
            f"(prompt {d_cpu['prompt_tok_s']:.1f} tok/s)  vulkan/cpu x{report['decode']['speedup']:.2f}"
            f"  same greedy tokens: {report['decode']['same_greedy_tokens']}"
        )
    print(line)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(report, f, indent=2)
        os.replace(args.json + ".tmp", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
