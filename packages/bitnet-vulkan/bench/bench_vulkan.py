"""Benchmark the Vulkan provider against our best CPU provider, in one run.

Two measurements, each printed for both providers with the ratio:

- GEMV: ``matmul_i2s`` with one token (decode) on BitNet layer shapes;
  effective bandwidth = the weight bytes a call must read (2 bits a weight
  plus the row scales, plus the activations) / time a call. On the device,
  ``--repeat`` calls are recorded into one command buffer and submitted once.
- decode: tokens/s of a whole-model decode step made of provider ops (the
  ``bitnet_core.model`` GenericBackend graph: rmsnorm, q/k/v/o/gate/up/down
  ternary linears, rope, kv_store, attention, silu_mul, add; the tied head
  ``matmul_dense``), random weights of the given shape, only logits read back.
  With ``--model file.gguf`` and ``bitnet_core.model`` installed, the real
  engine runs that file instead.

    uv run --no-sync python packages/bitnet-vulkan/bench/bench_vulkan.py --preset small
    python bench_vulkan.py --preset 2b --json out.json      # on a real GPU
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.hal.weights import TernaryWeight


@dataclass(frozen=True)
class Shape:
    hidden: int
    inner: int
    layers: int
    heads: int
    kv_heads: int
    vocab: int

    @property
    def head_dim(self) -> int:
        return self.hidden // self.heads


PRESETS = {
    # what lavapipe on 2 shared cores runs in seconds
    "small": Shape(hidden=512, inner=1408, layers=4, heads=8, kv_heads=2, vocab=4096),
    # 1bitLLM bitnet_b1_58-large's layer shapes, fewer layers and a smaller vocabulary
    "large": Shape(hidden=1536, inner=4096, layers=4, heads=16, kv_heads=16, vocab=8192),
    # bitnet-b1.58-2B-4T (a GPU's job)
    "2b": Shape(hidden=2560, inner=6912, layers=30, heads=20, kv_heads=5, vocab=128256),
}


def providers(cpu_name: str | None) -> tuple[Any, Any]:
    from bitnet_core.hal.selection import select
    from bitnet_vulkan.provider import VulkanProvider

    vk = VulkanProvider()
    avail = vk.probe(explicit=True)
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


def bench_gemv(p: Any, rows: int, cols: int, repeat: int, rng: np.random.Generator) -> float:
    """Seconds per ``matmul_i2s`` call with one token."""
    w = p.load_ternary(
        TernaryWeight.from_codes(rng.integers(-1, 2, (rows, cols)).astype(np.int8), 0.01)
    )
    xq, xs = p.quantize_act(p.to_device(rng.standard_normal((1, cols)).astype(np.float32)))
    sync(p, p.matmul_i2s(xq, xs, w))  # warm: pipelines, pools
    best = math.inf
    for _ in range(3):
        t0 = time.perf_counter()
        outs = [p.matmul_i2s(xq, xs, w) for _ in range(repeat)]
        sync(p, outs[-1])
        best = min(best, (time.perf_counter() - t0) / repeat)
        del outs
    return best


class OpModel:
    """A random BitNet model as provider arrays, decoded with the engine's op sequence."""

    def __init__(self, p: Any, s: Shape, context: int, rng: np.random.Generator) -> None:
        self.p, self.s = p, s

        def tern(r: int, c: int) -> Any:
            codes = rng.integers(-1, 2, (r, c)).astype(np.int8)
            return p.load_ternary(TernaryWeight.from_codes(codes, 1.0 / math.sqrt(c)))

        def norm(n: int) -> Any:
            return p.to_device(np.ones(n, np.float32))

        d, hkv = s.head_dim, s.kv_heads
        self.embed = p.to_device(
            (rng.standard_normal((s.vocab, s.hidden)) * 0.5).astype(np.float16)
        )
        self.layers = []
        for _ in range(s.layers):
            self.layers.append(
                dict(
                    attn_norm=norm(s.hidden),
                    q=tern(s.hidden, s.hidden),
                    k=tern(hkv * d, s.hidden),
                    v=tern(hkv * d, s.hidden),
                    o=tern(s.hidden, s.hidden),
                    attn_sub=norm(s.hidden),
                    ffn_norm=norm(s.hidden),
                    gate=tern(s.inner, s.hidden),
                    up=tern(s.inner, s.hidden),
                    down=tern(s.hidden, s.inner),
                    ffn_sub=norm(s.inner),
                    k_cache=p.empty((context, hkv, d)),
                    v_cache=p.empty((context, hkv, d)),
                )
            )
        self.out_norm = norm(s.hidden)

    def step(self, token: int, pos: int) -> np.ndarray:
        p, s = self.p, self.s
        view = getattr(p, "reshape", None) or (lambda x, shape: x.reshape(shape))
        d, hq, hkv = s.head_dim, s.heads, s.kv_heads
        positions = np.array([pos])
        x = p.embedding(self.embed, np.array([token]))
        for lw in self.layers:
            h = p.rmsnorm(x, lw["attn_norm"], 1e-5)
            q = p.rope(view(p.linear(h, lw["q"]), (1, hq, d)), positions, 1e4, "neox", d)
            k = p.rope(view(p.linear(h, lw["k"]), (1, hkv, d)), positions, 1e4, "neox", d)
            v = view(p.linear(h, lw["v"]), (1, hkv, d))
            p.kv_store(lw["k_cache"], k, pos)
            p.kv_store(lw["v_cache"], v, pos)
            a = view(p.attention(q, lw["k_cache"], lw["v_cache"], pos), (1, hq * d))
            x = p.add(x, p.linear(p.rmsnorm(a, lw["attn_sub"], 1e-5), lw["o"]))
            h = p.rmsnorm(x, lw["ffn_norm"], 1e-5)
            f = p.silu_mul(p.linear(h, lw["gate"]), p.linear(h, lw["up"]))
            x = p.add(x, p.linear(p.rmsnorm(f, lw["ffn_sub"], 1e-5), lw["down"]))
        x = p.rmsnorm(x, self.out_norm, 1e-5)
        return np.asarray(p.to_host(p.matmul_dense(x, self.embed)))[0]


def bench_decode(
    p: Any, s: Shape, tokens: int, rng: np.random.Generator
) -> tuple[float, np.ndarray]:
    model = OpModel(p, s, context=tokens + 8, rng=rng)
    tok = 1
    model.step(tok, 0)  # warm
    t0 = time.perf_counter()
    logits = None
    for pos in range(1, tokens + 1):
        logits = model.step(tok, pos)
        tok = int(np.argmax(logits))
    return tokens / (time.perf_counter() - t0), logits


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="small")
    ap.add_argument("--tokens", type=int, default=16, help="decode steps timed")
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
        "shape": s.__dict__,
        "vulkan_device": vk.probe(explicit=True).device,
        "integer_dot_product": vk.context.use_int_dot,
        "cpu_provider": None if args.no_cpu else cpu.name,
        "gemv": [],
    }
    print(f"vulkan: {report['vulkan_device']} (int dot: {report['integer_dot_product']})")
    print(f"cpu:    {report['cpu_provider']}")
    rng = np.random.default_rng(0)
    for rows, cols in [(s.hidden, s.hidden), (s.inner, s.hidden), (s.hidden, s.inner)]:
        nbytes = rows * (-(-cols // 4)) + 4 * rows + cols
        t_vk = bench_gemv(vk, rows, cols, args.repeat, rng)
        t_cpu = None if args.no_cpu else bench_gemv(cpu, rows, cols, max(2, args.repeat // 4), rng)
        row = {
            "rows": rows,
            "cols": cols,
            "vulkan_us": t_vk * 1e6,
            "vulkan_GBps": nbytes / t_vk / 1e9,
            "cpu_us": None if t_cpu is None else t_cpu * 1e6,
            "speedup": None if t_cpu is None else t_cpu / t_vk,
        }
        report["gemv"].append(row)
        cpu_txt = "" if t_cpu is None else f"  cpu {t_cpu * 1e6:9.1f} us  x{t_cpu / t_vk:.2f}"
        print(
            f"gemv {rows:5d}x{cols:<5d} vulkan {t_vk * 1e6:9.1f} us "
            f"{nbytes / t_vk / 1e9:7.2f} GB/s{cpu_txt}"
        )
    stats0 = dict(vk.stream.stats)
    tps_vk, logits_vk = bench_decode(vk, s, args.tokens, np.random.default_rng(1))
    steps = args.tokens + 1
    per_step = {k: (vk.stream.stats[k] - stats0[k]) / steps for k in ("submits", "dispatches")}
    report["decode"] = {"vulkan_tok_s": tps_vk, "per_token": per_step}
    line = f"decode {args.preset}: vulkan {tps_vk:8.2f} tok/s ({per_step['dispatches']:.0f} dispatches, {per_step['submits']:.1f} submits a token)"
    if not args.no_cpu:
        tps_cpu, logits_cpu = bench_decode(cpu, s, args.tokens, np.random.default_rng(1))
        report["decode"].update(
            cpu_tok_s=tps_cpu,
            speedup=tps_vk / tps_cpu,
            same_last_argmax=bool(np.argmax(logits_vk) == np.argmax(logits_cpu)),
        )
        line += f"  cpu {tps_cpu:8.2f} tok/s  x{tps_vk / tps_cpu:.2f}"
    print(line)
    if args.json:
        with open(args.json + ".tmp", "w") as f:
            json.dump(report, f, indent=2)
        os.replace(args.json + ".tmp", args.json)
    return 0


if __name__ == "__main__":
    sys.exit(main())
