"""A device's KV cache against ``cpu-reference``'s, layer by layer, bit for bit.

    python ci/gpu_kv_diff.py --device vulkan --kv-type float16 [--json OUT]
    python ci/gpu_kv_diff.py --make-2b4t FILE --layers 8   # (ci/gpu-bench.sh's streams model)

The open GPU question of docs/GPU.md (Vulkan's float16 cache on the H100:
prefill logits 1.19 % off, the first row exact, the error growing with the
position): where does the device's cache first differ from the reference's?
A random model with the 2B-4T head layout (``--layers`` layers) is prefilled
with the same prompt on both, then every layer's K and V rows are compared as
bits: per layer and K/V, the rows that differ, the first such row, the largest
difference in float16 units in the last place (ulp), and the largest
relative difference. A row that differs in layer 0 points at the q|k|v
matmul, rope or the store; a first difference in a later layer, at what fed
it (attention, the FFN). Exit status 0 whatever the diff (it is a
measurement); 2 on bad arguments.
"""

from __future__ import annotations

import argparse
import json
import sys

import numpy as np

from bitnet_core.config import BitNetConfig
from bitnet_core.model import KVCacheConfig, Model, random_weights


def diff_rows(a: np.ndarray, b: np.ndarray, rows: int) -> dict:
    """How ``b``'s first ``rows`` rows differ from ``a``'s (bitwise, ulp, relative)."""
    a, b = np.asarray(a)[:rows], np.asarray(b)[:rows]
    flat_a, flat_b = a.reshape(rows, -1), b.reshape(rows, -1)
    bits = flat_a.view(np.uint16 if a.dtype == np.float16 else np.uint32)
    other = flat_b.view(bits.dtype)
    differ = (bits != other).any(axis=1)
    ulp = np.abs(bits.astype(np.int64) - other.astype(np.int64))
    scale = np.maximum(np.abs(flat_a.astype(np.float32)), 1e-6)
    rel = np.abs(flat_a.astype(np.float32) - flat_b.astype(np.float32)) / scale
    return {
        "rows_differing": int(differ.sum()),
        "first_row": int(np.argmax(differ)) if differ.any() else None,
        "max_ulp": int(ulp.max()) if ulp.size else 0,
        "max_rel": float(rel.max()) if rel.size else 0.0,
    }


def kv_diff(device: str, kv_type: str, layers: int, prompt: int, seed: int) -> dict:
    cfg = BitNetConfig(
        vocab_size=512,
        hidden_size=256,
        num_layers=layers,
        num_heads=4,
        num_kv_heads=1,
        intermediate_size=512,
        context_length=max(64, prompt + 8),
    )
    weights = random_weights(cfg, seed=seed)
    ids = np.random.default_rng(seed).integers(0, cfg.vocab_size, prompt)
    kv = KVCacheConfig(dtype=kv_type)
    caches = {}
    for name in ("cpu-reference", device):
        model = Model.from_weights(weights, device=name, kv_cache=kv)
        runner = model.runner
        with runner.new_cache() as seq:
            runner.forward(ids, seq)
            to_host = runner.provider.to_host
            caches[name] = [(to_host(k), to_host(v)) for k, v in zip(seq.k, seq.v, strict=True)]
    out = []
    pairs = zip(caches["cpu-reference"], caches[device], strict=True)
    for i, ((rk, rv), (dk, dv)) in enumerate(pairs):
        out.append({"layer": i, "k": diff_rows(rk, dk, prompt), "v": diff_rows(rv, dv, prompt)})
    first = next(
        (r["layer"] for r in out if r["k"]["rows_differing"] or r["v"]["rows_differing"]), None
    )
    return {
        "device": device,
        "kv_type": kv_type,
        "prompt": prompt,
        "first_layer": first,
        "layers": out,
    }


def make_2b4t(path: str, layers: int) -> None:
    """A random I2_S GGUF of the 2B-4T shape with ``layers`` layers (kept if present)."""
    from pathlib import Path

    from bitnet_core.model.presets import preset
    from bitnet_core.model.random import random_model_file

    if Path(path).exists():
        return
    cfg = preset("2b4t", num_layers=layers)
    random_model_file(path, cfg, seed=0, ternary_type="i2_s")


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="vulkan")
    ap.add_argument("--kv-type", choices=["float16", "float32"], default="float16")
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=11, help="prompt tokens (rows compared)")
    ap.add_argument("--seed", type=int, default=48)
    ap.add_argument("--json", help="also write the result to this file")
    ap.add_argument("--make-2b4t", metavar="FILE", help="only write a 2B-4T-shaped model")
    args = ap.parse_args(argv)
    if args.layers <= 0 or args.prompt <= 0:
        ap.error("--layers and --prompt must be positive")
    if args.make_2b4t:
        make_2b4t(args.make_2b4t, args.layers)
        return 0
    result = kv_diff(args.device, args.kv_type, args.layers, args.prompt, args.seed)
    for r in result["layers"]:
        k, v = r["k"], r["v"]
        print(
            f"layer {r['layer']:2d}  K: {k['rows_differing']:3d} rows differ (first {k['first_row']}, "
            f"max {k['max_ulp']} ulp, {k['max_rel']:.2e})  V: {v['rows_differing']:3d} rows "
            f"(first {v['first_row']}, max {v['max_ulp']} ulp, {v['max_rel']:.2e})"
        )
    print(f"first layer differing: {result['first_layer']}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(result, f, indent=2)
    return 0


if __name__ == "__main__":
    sys.exit(main())
