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
   the provider and on ``cpu-reference``: prefill logits and 16 teacher-forced
   decode steps (max error relative to the largest logit), then the engine's
   receipt of a greedy generation with the parity figures added:
   ``receipt-<name>.json``;
5. a batched step (the server's ``forward_batch``): four sequences at
   different positions decode together for ``GREEDY_TOKENS`` steps, each
   row against the same sequence decoded alone on the same provider.

``parity-receipt.json`` sums it all up; the exit code is 0 when every
provider passed every step. A provider that runs past ``--timeout`` seconds
prints every thread's Python stack and exits
(``faulthandler.dump_traceback_later``). With more than one provider each
runs in a process of its own, so the others still run; the provider's log,
``smoke-<name>.log``, keeps the stacks and the receipt quotes its end.
"""

from __future__ import annotations

import argparse
import faulthandler
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
SMOKE_ATOL = 5e-2  # of the largest logit: see check_model


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
    """Prefill logits and ``GREEDY_TOKENS`` teacher-forced decode steps against
    ``cpu-reference`` with the same KV cache dtype.

    The bound is ``SMOKE_ATOL`` of the largest logit: on this random 4-layer model
    an int8 activation code at a quantizer tie, decided the other way by float
    rounding, moves the logits by 2-4 % (measured, prefill / decode: the CPU engine
    2.2 / 2.8 %, Vulkan on lavapipe 1.9 / 2.2 %, OpenCL on PoCL 2.5 / 2.7 %, WebGPU
    3.3 / 4.0 %), while a wrong op or cache moves them by tens of %. A step's greedy token must
    match wherever the reference's top two logits are further apart than the bound.
    """
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import GenericRunner, KVCacheConfig, Model, random_weights
    from bitnet_core.model.receipt import write_receipt
    from bitnet_core.providers.reference import ReferenceProvider

    weights = random_weights(BitNetConfig(**SMOKE_CONFIG), seed=11)
    prompt = np.random.default_rng(5).integers(0, SMOKE_CONFIG["vocab_size"], PROMPT_TOKENS)
    model = Model.from_weights(weights, device=name, progress=False)
    kv = KVCacheConfig(dtype=str(model.runner.kv.dtype))
    reference = GenericRunner(ReferenceProvider(), weights, progress=False, kv_cache=kv)

    def rel(got: np.ndarray, want: np.ndarray) -> float:
        return float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())

    prefill = rel(model.runner.logits(prompt), reference.logits(prompt))
    steps, decisive_mismatches, ref_tokens = [], 0, []
    with reference.new_cache() as rs, model.runner.new_cache() as ms:
        want, got = reference.forward(prompt, rs), model.runner.forward(prompt, ms)
        for _ in range(GREEDY_TOKENS):
            steps.append(rel(got, want))
            top2 = np.sort(want)[-2:]
            if (
                got.argmax() != want.argmax()
                and top2[1] - top2[0] > SMOKE_ATOL * np.abs(want).max()
            ):
                decisive_mismatches += 1
            ref_tokens.append(int(want.argmax()))
            want = reference.forward(ref_tokens[-1:], rs)
            got = model.runner.forward(ref_tokens[-1:], ms)
    tokens = model.generate_ids(prompt.tolist(), max_tokens=GREEDY_TOKENS, temperature=0.0)
    parity = {
        "config": SMOKE_CONFIG,
        "kv_dtype": kv.dtype,
        "prompt_tokens": PROMPT_TOKENS,
        "logits_max_rel_error": prefill,
        "decode_max_rel_error": max(steps),
        "logits_tolerance": SMOKE_ATOL,
        "decisive_greedy_mismatches": decisive_mismatches,
        "greedy_tokens": tokens,
        "reference_tokens": ref_tokens,
    }
    receipt = model.receipt(model.last_stats, parity=parity)
    write_receipt(out / f"receipt-{name}.json", receipt)
    parity["passed"] = max(prefill, *steps) <= SMOKE_ATOL and decisive_mismatches == 0
    parity["throughput"] = receipt.get("throughput")
    return parity


def check_batch(name: str) -> dict:
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import Model, random_weights

    weights = random_weights(BitNetConfig(**SMOKE_CONFIG), seed=12)
    batched = Model.from_weights(weights, device=name, progress=False).runner
    alone = Model.from_weights(weights, device=name, progress=False).runner
    rng = np.random.default_rng(6)
    vocab = SMOKE_CONFIG["vocab_size"]
    prompts = [rng.integers(0, vocab, n) for n in (5, 37, 1, 90)]
    bseqs = [batched.new_cache() for _ in prompts]
    aseqs = [alone.new_cache() for _ in prompts]
    worst = 0.0
    try:
        for p, b, a in zip(prompts, bseqs, aseqs, strict=True):
            batched.forward(p, b)
            alone.forward(p, a)
        for _ in range(GREEDY_TOKENS):
            toks = rng.integers(0, vocab, len(prompts))
            got = batched.forward_batch([([int(t)], s) for t, s in zip(toks, bseqs, strict=True)])
            for row, t, a in zip(got, toks, aseqs, strict=True):
                want = alone.forward([int(t)], a)
                worst = max(worst, float(np.abs(row - want).max() / np.abs(want).max()))
    finally:
        for s in bseqs + aseqs:
            s.close()
    return {"runner": type(batched).__name__, "sequences": len(prompts), "steps": GREEDY_TOKENS,
            "logits_max_rel_error": worst, "passed": worst <= SMOKE_ATOL}  # fmt: skip


def git_commit() -> str:
    try:
        return subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True,
                              text=True, timeout=10).stdout.strip()  # fmt: skip
    except OSError:
        return ""


def check_provider(name: str, rec: Any, args: argparse.Namespace) -> dict[str, Any]:
    """Every step on one available provider, in this process: its receipt entry."""
    entry: dict[str, Any] = {"device": rec.probe(True).device}
    steps = [("allocate", lambda p=rec.provider: check_allocate(p)),
             ("conformance", lambda n=name: check_conformance(n, args.out))]  # fmt: skip
    if not args.skip_model:
        steps.append(("model", lambda n=name: check_model(n, args.out)))
        steps.append(("batch", lambda n=name: check_batch(n)))
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
        print(f"gpu-smoke: {name}: {step}: {'ok' if result['passed'] else 'FAILED'} "
              f"({result['seconds']} s) {result.get('error', '')}", flush=True)  # fmt: skip
    entry["status"] = "passed" if all(entry[s]["passed"] for s, _ in steps) else "failed"
    return entry


def check_in_child(name: str, args: argparse.Namespace) -> dict[str, Any]:
    """``check_provider`` in a process of its own, which prints every thread's stack into
    its log and exits if it runs past ``args.timeout`` seconds (killed 30 s later if not)."""
    log = args.out / f"smoke-{name}.log"
    part = args.out / f"provider-{name}.json"
    part.unlink(missing_ok=True)
    cmd = [sys.executable, str(Path(__file__).resolve()), "--child", "--out", str(args.out),
           "--timeout", str(args.timeout), "--providers", name]  # fmt: skip
    cmd += ["--skip-model"] if args.skip_model else []
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    t0 = time.perf_counter()
    with log.open("wb") as out:
        child = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env)
        try:
            child.wait(timeout=args.timeout + 30)
        except subprocess.TimeoutExpired:  # its own watchdog did not end it
            child.kill()
            child.wait()
    text = log.read_text(errors="replace")
    print(text, end="" if text.endswith("\n") or not text else "\n", flush=True)
    seconds = round(time.perf_counter() - t0, 1)
    if part.exists():
        return json.loads(part.read_text())
    why = (f"timed out after {args.timeout} s" if seconds >= args.timeout
           else f"exited with {child.returncode} before writing its receipt")  # fmt: skip
    return {"status": "failed", "error": why, "log_tail": _log_tail(text), "seconds": seconds}


def _log_tail(text: str, limit: int = 4000) -> str:
    """The end of a child's log; after a timeout, the watchdog's dump from its header on,
    its middle cut when long (a deep stack alone can outgrow ``limit``)."""
    start = text.rfind("Timeout (")
    tail = text[start:] if start >= 0 else text[-limit:]
    if len(tail) <= limit:
        return tail
    return tail[: limit // 2] + "\n[...]\n" + tail[-limit // 2 :]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="ci/gpu_smoke.py", description=__doc__.split("\n\n")[0])
    ap.add_argument("--out", type=Path, default=ROOT / "out" / "ci" / "gpu-smoke")
    ap.add_argument("--providers", nargs="*", help="provider names (default: every GPU one)")
    ap.add_argument("--allow-unavailable", action="store_true",
                    help="an unavailable provider is reported, not failed (no GPU here)")  # fmt: skip
    ap.add_argument("--skip-model", action="store_true", help="op-level checks only")
    ap.add_argument("--timeout", type=float, default=600.0,
                    help="seconds a provider may take when several run (each in its own process)")  # fmt: skip
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    if args.child:  # from the start: a probe can hang too
        faulthandler.dump_traceback_later(args.timeout, exit=True)

    from bitnet_core._version import __version__
    from bitnet_core.hal import list_providers

    records = list_providers(explicit=True)
    if args.child:  # one provider for the parent process: its entry, no receipt
        (name,) = args.providers
        rec = next(r for r in records if r.name == name)
        entry = check_provider(name, rec, args)
        _write_json(args.out / f"provider-{name}.json", entry)
        return 0
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
        if rec is None or rec.provider is None or not rec.probe(True).available:
            reason = rec.probe(True).reason if rec else "not registered"
            receipt["providers"][name] = {"status": "unavailable", "reason": reason}
            print(f"gpu-smoke: {name}: unavailable: {reason}")
            ok = ok and args.allow_unavailable
            continue
        if len(names) == 1:  # here; a hang still prints every thread's stack and exits
            faulthandler.dump_traceback_later(args.timeout, exit=True)
            entry = check_provider(name, rec, args)
            faulthandler.cancel_dump_traceback_later()
        else:
            entry = check_in_child(name, args)
        receipt["providers"][name] = entry
        ok = ok and entry["status"] == "passed"
        if entry["status"] != "passed" and "error" in entry:
            print(f"gpu-smoke: {name}: FAILED: {entry['error']}", flush=True)
    receipt["passed"] = ok
    _write_json(args.out / "parity-receipt.json", receipt)
    print(f"gpu-smoke: {'passed' if ok else 'FAILED'}; receipt {args.out / 'parity-receipt.json'}")
    return 0 if ok else 1


if __name__ == "__main__":
    os.environ.setdefault("XDG_RUNTIME_DIR", "/tmp")
    sys.exit(main())
