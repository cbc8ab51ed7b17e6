"""Where a decode step's time goes on any device, under several settings side by side.

Each setting's figures are ``bitnet bench --profile``'s (``bench_once`` and
``step_profile`` of ``bitnet_core.cli.commands.bench``: main-thread host ms,
wall ms and API submissions a decode step, and on the fused CPU engine ms a
step by op). On top of them:

- ``--variant NAME:VAR=VALUE[,VAR=VALUE]``: the model loaded once per variant
  with those environment variables set while it loads (``generic:BITNET_VULKAN_FUSED=0``,
  ``loop:BITNET_OPENCL_COMMAND_BUFFER=0``), the variants' rounds interleaved, so
  the machine's load hits them alike;
- ``--kernels``: the device's own time kernel by kernel (``sdk.step_profile``'s
  table), from the provider's timestamp queries where its stream keeps a timer
  (``BITNET_<DEVICE>_TIMESTAMPS=1`` is set while loading), else from PyTorch's
  CUDA profiler (CUPTI sees every kernel of the process, graph-launched ones too);
- ``--prompt`` and ``--keys-per-split`` (runners with a decode-attention split
  size): a table for every pair, on the same weights;
- ``--preset NAME`` (``bitnet_core.model.presets``): a random model of that
  shape, written once into the temporary directory.

    python tools/bench/step_profile.py --preset host-bound --device vulkan \\
        --variant fused:BITNET_VULKAN_FUSED=1 --variant generic:BITNET_VULKAN_FUSED=0
    python tools/bench/step_profile.py --preset 2b4t --ternary-type i2_s --device cuda \\
        --kernels --prompt 64 1000 --keys-per-split 32 16 --json cuda-step.json
    python tools/bench/step_profile.py -m model.gguf --device cpu --rounds 3
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path
from unittest import mock

import numpy as np

from bitnet_core.cli.commands.bench import bench_once, step_profile
from bitnet_core.errors import BitnetError, ConfigError
from bitnet_core.model.api import load
from bitnet_core.model.presets import PRESETS, preset
from bitnet_core.model.random import random_model_file
from bitnet_core.sdk.kv_cache import KVCacheConfig
from bitnet_core.sdk.step_profile import kernel_rows, report


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME:VAR=VALUE,VAR=VALUE`` -> (NAME, {VAR: VALUE})."""
    name, sep, rest = text.partition(":")
    env = {}
    for item in filter(None, rest.split(",")):
        var, eq, value = item.partition("=")
        if not eq or not var:
            raise ConfigError(f"--variant {text!r}: expected NAME:VAR=VALUE[,VAR=VALUE]")
        env[var] = value
    if not name or not sep:
        raise ConfigError(f"--variant {text!r}: expected NAME:VAR=VALUE[,VAR=VALUE]")
    return name, env


def preset_file(name: str, layers: int | None, ternary_type: str) -> Path:
    """A random model of preset ``name`` (seed 0), written once into the temporary directory."""
    changes = {} if layers is None else {"num_layers": layers}
    config = preset(name, **changes)
    path = Path(tempfile.gettempdir()) / (
        f"bitnet-{name}-{config.num_layers}l-{ternary_type}-{os.getuid()}.gguf"
    )
    if not path.exists():
        random_model_file(path, config, seed=0, ternary_type=ternary_type, overwrite=True)
    return path


def cupti_times(prof) -> dict[str, tuple[float, float]]:
    """Kernel name -> (launches, seconds) from a ``torch.profiler`` run (kernel entries are
    those with device time of their own; runtime calls have none)."""
    times = {}
    for evt in prof.key_averages():
        us = float(getattr(evt, "self_device_time_total", 0.0) or 0.0)
        if us > 0:
            times[evt.key] = (evt.count, us * 1e-6)
    return times


def kernel_timer(model):
    """A context manager factory whose block's device kernels end up in the dict it yields:
    the provider's timestamp queries, else PyTorch's CUDA profiler."""
    timer = getattr(getattr(model.provider, "stream", None), "timer", None)
    if timer is not None:

        @contextlib.contextmanager
        def timestamps() -> Iterator[dict]:
            out: dict = {}
            timer.times.clear()
            yield out
            out.update(timer.times)

        return timestamps
    try:
        import torch
        from torch.profiler import ProfilerActivity, profile
    except ImportError:
        torch = None
    if torch is not None and torch.cuda.is_available():

        @contextlib.contextmanager
        def cupti() -> Iterator[dict]:
            out: dict = {}
            with profile(activities=[ProfilerActivity.CUDA]) as prof:
                yield out
            out.update(cupti_times(prof))

        return cupti
    raise ConfigError(
        f"{model.provider.name}: no kernel timer (its stream keeps no timestamps, and "
        "PyTorch sees no CUDA device)"
    )


def kernel_pass(model, prompt: int, steps: int, rng: np.random.Generator) -> dict:
    """``steps`` greedy decode steps after a ``prompt``-token prefill (and 3 untimed ones:
    recordings, graph captures), timed by wall clock, then again under the kernel timer."""
    runner, timed = model.runner, kernel_timer(model)
    with runner.new_cache(prompt + 2 * steps + 8) as seq:
        logits = runner.forward(rng.integers(0, model.config.vocab_size, size=prompt), seq)
        token = int(np.argmax(logits))
        for _ in range(3):
            token = int(np.argmax(runner.forward(np.array([token]), seq)))
        t0 = time.perf_counter()
        for _ in range(steps):
            token = int(np.argmax(runner.forward(np.array([token]), seq)))
        wall = (time.perf_counter() - t0) / steps
        with timed() as times:
            for _ in range(steps):
                token = int(np.argmax(runner.forward(np.array([token]), seq)))
        capacity = int(seq.k[0].shape[0]) if hasattr(seq, "k") else None
    rows = kernel_rows(times, steps)
    return {"step_wall_us": wall * 1e6, "capacity": capacity, "kernels": rows}


def load_variants(args: argparse.Namespace, path: Path) -> dict[str, object]:
    """The model once per ``--variant`` (one ``default`` without any), loaded in its environment."""
    kv = KVCacheConfig(dtype=args.kv_type) if args.kv_type else None
    variants = dict(parse_variant(v) for v in args.variant) or {"default": {}}
    extra = {}
    if args.kernels and args.device not in ("auto", "gpu", "cpu"):
        extra[f"BITNET_{args.device.upper().replace('-', '_')}_TIMESTAMPS"] = "1"
    models = {}
    for name, env in variants.items():
        with mock.patch.dict(os.environ, {**extra, **env}):
            models[name] = load(path, args.device, kv_cache=kv, progress=False)
    return models


def measure(args: argparse.Namespace) -> dict:
    """Every (prompt, keys a split) pair for every variant, ``--rounds`` times interleaved."""
    path = (
        Path(args.model) if args.model else preset_file(args.preset, args.layers, args.ternary_type)
    )
    models = load_variants(args, path)
    rng = np.random.default_rng(args.seed)
    for model in models.values():  # untimed: clocks ramping up, first recordings
        bench_once(model, args.prompt[0], args.warmup, rng)
    splits = args.keys_per_split or [None]
    results: dict[str, list] = {name: [] for name in models}
    for prompt in args.prompt:
        for keys in splits:
            runs: dict[str, list] = {name: [] for name in models}
            for _ in range(args.rounds):
                for name, model in models.items():
                    if keys is not None:
                        if not hasattr(model.runner, "keys_per_split"):
                            raise ConfigError(
                                f"{model.provider.name}: its runner has no attention split size"
                            )
                        model.runner.keys_per_split = keys
                    runs[name].append(bench_once(model, prompt, args.steps, rng, time_ops=True))
            for name, model in models.items():
                traced = getattr(model.provider, "trace", None) is not None
                record = {"prompt": prompt, "keys_per_split": keys}
                record.update(step_profile(runs[name], traced, model, prompt))
                record["decode_tokens_per_s"] = float(
                    np.median([r.decode_tokens_per_s for r in runs[name]])
                )
                if args.kernels:
                    record.update(kernel_pass(model, prompt, args.steps, rng))
                results[name].append(record)
    return {
        "model": str(path),
        "device": args.device,
        "steps": args.steps,
        "rounds": args.rounds,
        "variants": {
            name: {"provider": models[name].provider.name, "runs": results[name]} for name in models
        },
    }


def print_report(result: dict) -> None:
    """A row a (variant, prompt, split size); below it the ops and kernels where measured."""
    print(f"{'variant (provider)':28s} {'prompt':>6s} {'split':>5s} {'host ms':>8s} "
          f"{'wall ms':>8s} {'subs':>6s} {'tok/s':>8s}")  # fmt: skip
    for name, variant in result["variants"].items():
        for r in variant["runs"]:
            subs, split = r["submissions_per_step"], r["keys_per_split"]
            print(f"{name + ' (' + variant['provider'] + ')':28s} {r['prompt']:6d} "
                  f"{'-' if split is None else split:>5} {r['host_ms_per_step']:8.3f} "
                  f"{r['wall_ms_per_step']:8.3f} {'-' if subs is None else f'{subs:.1f}':>6s} "
                  f"{r['decode_tokens_per_s']:8.2f}")  # fmt: skip
            ops = [f"{op} {t['ms']:.3f}" + (f" ({t['gb_per_s']:.1f} GB/s)" if "gb_per_s" in t else "")
                   for op, t in r.get("ops", {}).items()]  # fmt: skip
            if ops:
                print("  ms a step by op: " + ", ".join(ops))
            if "kernels" in r:
                title = f"  kernels over {result['steps']} steps (cache of {r['capacity']} rows)"
                print(report(title, r["kernels"], r["step_wall_us"] * 1e-6, "host, gaps"))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("-m", "--model", help="GGUF file")
    src.add_argument("--preset", choices=sorted(PRESETS), help="a random model of this shape")
    ap.add_argument("--layers", type=int, default=None, help="--preset: layers (its own)")
    ap.add_argument("--ternary-type", default="tq2_0", help="--preset: tq2_0, i2_s, ... (tq2_0)")
    ap.add_argument("-d", "--device", default="auto")
    ap.add_argument("--steps", type=int, default=16, help="decode steps a measurement (16)")
    ap.add_argument("--prompt", type=int, nargs="+", default=[8], help="prompt tokens (8)")
    ap.add_argument("--keys-per-split", type=int, nargs="+", default=None)
    ap.add_argument("--rounds", type=int, default=1, help="interleaved rounds (1)")
    ap.add_argument("--warmup", type=int, default=3, help="untimed decode steps first (3)")
    ap.add_argument("--variant", action="append", default=[], metavar="NAME:VAR=VALUE,...")
    ap.add_argument("--kernels", action="store_true", help="device time kernel by kernel")
    ap.add_argument("--kv-type", choices=("f32", "f16"), default=None)
    ap.add_argument("--seed", type=int, default=0, help="seed of the random prompt ids")
    ap.add_argument("--json", type=Path, default=None, help="also write the figures here")
    args = ap.parse_args(argv)
    try:
        for name in ("steps", "rounds"):
            if getattr(args, name) <= 0:
                raise ConfigError(f"--{name} must be positive")
        if min(args.prompt) <= 0 or args.warmup < 0:
            raise ConfigError("--prompt must be positive and --warmup >= 0")
        result = measure(args)
    except BitnetError as e:
        print(f"error: {e}", file=sys.stderr)
        return e.exit_code
    print_report(result)
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
