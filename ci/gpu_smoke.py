#!/usr/bin/env python3
"""The GPU smoke lane's checks (run by ci/gpu-smoke.sh on a machine with a GPU).

For every GPU provider registered (``device_kind == "gpu"``, fakes excluded)
or the ones named with ``--providers``:

1. probe it (explicitly); an unavailable one fails the lane unless
   ``--allow-unavailable`` (trying the script on a machine without a GPU);
2. allocate: a 256 MiB round trip host -> device -> host, compared exactly;
3. the conformance kit (``bitnet_core.testing.run``), every case including
   the real model's sizes: ``conformance-<name>.json``;
4. a small random model (``SMOKE_CONFIG``) through ``bitnet_core.model`` on
   the provider and on ``cpu-reference``: prefill logits (max error relative
   to the largest logit) and 16 greedy tokens, then the engine's receipt of
   the generation with the parity figures added: ``receipt-<name>.json``.

``parity-receipt.json`` sums it all up; the exit code is 0 when every
provider passed every step.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import time
import traceback
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
ALLOC_MIB = 256
#: A small model with the real model's head layout (20 query / 5 KV heads of 64).
SMOKE_CONFIG = dict(
    vocab_size=4099, hidden_size=1280, num_layers=4, num_heads=20, num_kv_heads=5,
    intermediate_size=3455, context_length=256, ffn_activation="relu2",
)  # fmt: skip
PROMPT_TOKENS = 37
GREEDY_TOKENS = 16


def _write_json(path: Path, data: Any) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(json.dumps(data, indent=1, sort_keys=True, default=str) + "\n")
    tmp.replace(path)


def check_allocate(provider: Any) -> dict:
    """``ALLOC_MIB`` on the device in 64 MiB buffers (under WebGPU's default binding limit),
    all held at once, each round-tripped and compared exactly."""
    chunk = 64 * (1 << 20) // 4
    rng = np.random.default_rng(0)
    hosts = [rng.standard_normal(chunk).astype(np.float32) for _ in range(ALLOC_MIB // 64)]
    t0 = time.perf_counter()
    devs = [provider.to_device(h) for h in hosts]
    t1 = time.perf_counter()
    backs = [np.asarray(provider.to_host(d)) for d in devs]
    t2 = time.perf_counter()
    for i, (h, b) in enumerate(zip(hosts, backs, strict=True)):
        if b.shape != h.shape or not np.array_equal(b, h):
            raise AssertionError(f"buffer {i} of the {ALLOC_MIB} MiB came back different")
    nbytes = sum(h.nbytes for h in hosts)
    return {
        "mib": ALLOC_MIB,
        "upload_gb_s": round(nbytes / (t1 - t0) / 1e9, 2),
        "download_gb_s": round(nbytes / (t2 - t1) / 1e9, 2),
    }


def check_conformance(name: str, out: Path) -> dict:
    from bitnet_core.testing import run

    report = run(name, large=True)
    _write_json(out / f"conformance-{name}.json", report.as_dict())
    failed = [f"{r.id}: {r.message[:300]}" for r in report.failed]
    return {"counts": report.counts(), "passed": report.passed, "failed": failed[:20]}


def check_model(name: str, out: Path) -> dict:
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import GenericRunner, Model, random_weights
    from bitnet_core.model.receipt import write_receipt
    from bitnet_core.providers.reference import ReferenceProvider
    from bitnet_core.testing.model import LOGIT_ATOL

    weights = random_weights(BitNetConfig(**SMOKE_CONFIG), seed=11)
    prompt = np.random.default_rng(5).integers(0, SMOKE_CONFIG["vocab_size"], PROMPT_TOKENS)
    model = Model.from_weights(weights, device=name, progress=False)
    reference = GenericRunner(ReferenceProvider(), weights, progress=False)
    got = model.runner.logits(prompt)
    want = reference.logits(prompt)
    rel = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())

    tokens = model.generate_ids(prompt.tolist(), max_tokens=GREEDY_TOKENS, temperature=0.0)
    ref_tokens: list[int] = []
    with reference.new_cache() as seq:
        logits = reference.forward(prompt, seq)
        for _ in range(GREEDY_TOKENS):
            ref_tokens.append(int(np.argmax(logits)))
            logits = reference.forward(np.array(ref_tokens[-1:]), seq)
    same = next(
        (i for i, (a, b) in enumerate(zip(tokens, ref_tokens, strict=False)) if a != b), len(tokens)
    )
    parity = {
        "config": SMOKE_CONFIG,
        "prompt_tokens": PROMPT_TOKENS,
        "logits_max_rel_error": rel,
        "logits_tolerance": LOGIT_ATOL,
        "greedy_tokens": tokens,
        "reference_tokens": ref_tokens,
        "greedy_tokens_matching": same,
    }
    receipt = model.receipt(model.last_stats, parity=parity)
    write_receipt(out / f"receipt-{name}.json", receipt)
    parity["passed"] = rel <= LOGIT_ATOL and same == len(ref_tokens)
    parity["throughput"] = receipt.get("throughput")
    return parity


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()  # fmt: skip
    except OSError:
        return ""


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ci/gpu_smoke.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "ci" / "gpu-smoke")
    ap.add_argument("--providers", nargs="*", help="provider names (default: every GPU one)")
    ap.add_argument("--allow-unavailable", action="store_true",
                    help="an unavailable provider is reported, not failed (no GPU here)")  # fmt: skip
    ap.add_argument("--skip-model", action="store_true", help="op-level checks only")
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)

    from bitnet_core._version import __version__
    from bitnet_core.hal import list_providers

    records = list_providers(explicit=True)
    devices = [
        {"name": r.name, "family": r.family, "kind": r.device_kind, "origin": r.origin,
         "available": r.probe(True).available, "device": r.probe(True).device,
         "reason": r.probe(True).reason, "fake": r.probe(True).fake}
        for r in records
    ]  # fmt: skip
    names = args.providers or [d["name"] for d in devices if d["kind"] == "gpu" and not d["fake"]]
    receipt: dict[str, Any] = {
        "schema": "bitnet.gpu-smoke/1",
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "host": platform.node(),
        "commit": git_commit(),
        "bitnet_core": __version__,
        "devices": devices,
        "providers": {},
    }
    ok = bool(names)
    if not names:
        print("gpu-smoke: no GPU provider is installed", file=sys.stderr)
    for name in names:
        rec = next((r for r in records if r.name == name), None)
        entry: dict[str, Any] = {}
        receipt["providers"][name] = entry
        if rec is None or rec.provider is None or not rec.probe(True).available:
            entry["status"] = "unavailable"
            entry["reason"] = rec.probe(True).reason if rec else "not registered"
            print(f"gpu-smoke: {name}: unavailable: {entry['reason']}")
            ok = ok and args.allow_unavailable
            continue
        entry["device"] = rec.probe(True).device
        steps = [("allocate", lambda p=rec.provider: check_allocate(p)),
                 ("conformance", lambda n=name: check_conformance(n, args.out))]  # fmt: skip
        if not args.skip_model:
            steps.append(("model", lambda n=name: check_model(n, args.out)))
        for step, fn in steps:
            t0 = time.perf_counter()
            try:
                result = fn()
                result.setdefault("passed", True)
            except Exception as exc:
                result = {"passed": False, "error": f"{type(exc).__name__}: {exc}",
                          "traceback": traceback.format_exc()[-3000:]}  # fmt: skip
            result["seconds"] = round(time.perf_counter() - t0, 2)
            entry[step] = result
            ok = ok and result["passed"]
            print(f"gpu-smoke: {name}: {step}: {'ok' if result['passed'] else 'FAILED'} "
                  f"({result['seconds']} s) {result.get('error', '')}")  # fmt: skip
        entry["status"] = "passed" if all(entry[s]["passed"] for s, _ in steps) else "failed"
    receipt["passed"] = ok
    _write_json(args.out / "parity-receipt.json", receipt)
    print(f"gpu-smoke: {'passed' if ok else 'FAILED'}; receipt {args.out / 'parity-receipt.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    sys.exit(main())
