"""Where a Vulkan decode step's time goes, dispatch by dispatch (timestamp queries).

A random model of one of ``bench_vulkan.py``'s preset shapes (``2b`` by
default, its 30 layers or ``--layers``; ``--preset small`` for a quick look
on lavapipe) decodes on ``VulkanRunner`` (one recorded step resubmitted, as
``bitnet run`` does) with ``BITNET_VULKAN_TIMESTAMPS=1``: every command's GPU
time is read back after each step. The script prints each shader's launches
and microseconds per step, its share of the commands' sum, and that sum
against the step's wall time (the rest: the host, the submission and the
wait).

    python packages/bitnet-vulkan/bench/step_profile.py [--preset 2b] [--steps 16] [--json F]
        [--prompt 64 1000] [--keys-per-split 64 16]

With several ``--prompt`` or ``--keys-per-split`` values, every pair runs on the
same weights, one table each (the decode attention's split size against the
context: the splits a cache gets are its capacity / keys-per-split, at most
``MAX_SPLITS``).
"""

from __future__ import annotations

import argparse
import dataclasses
import os
import time

import numpy as np
from bench_vulkan import PRESETS, random_model  # beside this script


def main(argv: list[str] | None = None) -> int:
    from bitnet_core.sdk.step_profile import (
        add_run_options,
        kernel_rows,
        report,
        run_record,
        write_runs,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="2b")
    ap.add_argument("--layers", type=int, default=None, help="default: the preset's")
    add_run_options(ap, "cache rows")
    ap.add_argument("--warmup", type=int, default=64, help="untimed decode steps first")
    args = ap.parse_args(argv)
    from bitnet_vulkan.provider import VulkanProvider
    from bitnet_vulkan.runner import split_count
    from bitnet_vulkan.timestamps import ENV_TIMESTAMPS

    os.environ[ENV_TIMESTAMPS] = "1"  # read when the device is set up

    provider = VulkanProvider()
    avail = provider.probe(explicit=True)
    if not avail.available:
        raise SystemExit(f"vulkan unavailable: {avail.reason}")
    timer = provider.stream.timer
    if timer is None:
        raise SystemExit(f"{avail.device}: the compute queue writes no timestamps")
    shape = PRESETS[args.preset]
    if args.layers is not None:
        shape = dataclasses.replace(shape, layers=args.layers)
    model = random_model(shape, max(args.prompt) + args.steps + 16)
    runner = provider.make_runner(model, progress=False)
    if runner is None:
        raise SystemExit("the fused Vulkan runner is off (BITNET_VULKAN_FUSED=0)")
    with runner.new_cache() as seq:  # untimed: the first steps ran ~2x slower on an H100
        tok = int(runner.forward([1, 2, 3], seq).argmax())  # (its clocks ramping up)
        for _ in range(args.warmup):
            tok = int(runner.forward([tok], seq).argmax())
    runs = []
    for keys in args.keys_per_split or [runner.keys_per_split]:
        runner.keys_per_split = keys
        for prompt in args.prompt:
            with runner.new_cache() as seq:
                tok = int(runner.forward(np.arange(1, prompt + 1) % 1000 + 1, seq).argmax())
                for _ in range(3):  # the step is recorded, then replayed
                    tok = int(runner.forward([tok], seq).argmax())
                timer.times.clear()
                t0 = time.perf_counter()
                for _ in range(args.steps):
                    tok = int(runner.forward([tok], seq).argmax())
                wall = (time.perf_counter() - t0) / args.steps
                capacity = int(seq.k[0].shape[0])
            rows = kernel_rows(timer.times, args.steps)
            splits = split_count(capacity, keys)
            title = (f"{avail.device}: {args.preset} shapes, {shape.layers} layers, {args.steps} "
                     f"decode steps after a {prompt}-token prompt, one recorded step replayed; "
                     f"attention: {splits} splits of a {capacity}-row cache "
                     f"({keys} rows a split)")  # fmt: skip
            print(report(title, rows, wall, "host, submission, wait"))
            runs.append(run_record(prompt, keys, splits, capacity, wall, rows))
    header = {"device": avail.device, "preset": args.preset, "layers": shape.layers,
              "steps": args.steps}  # fmt: skip
    write_runs(args.json, header, runs)
    provider.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
