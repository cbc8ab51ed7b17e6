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
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import time
from pathlib import Path

import numpy as np
from bench_vulkan import PRESETS, random_model  # beside this script


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--preset", choices=sorted(PRESETS), default="2b")
    ap.add_argument("--layers", type=int, default=None, help="default: the preset's")
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens before the steps")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from bitnet_core.sdk.step_profile import kernel_rows, report
    from bitnet_vulkan.provider import VulkanProvider
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
    runner = provider.make_runner(random_model(shape, args.prompt + args.steps + 16),
                                  progress=False)  # fmt: skip
    if runner is None:
        raise SystemExit("the fused Vulkan runner is off (BITNET_VULKAN_FUSED=0)")
    with runner.new_cache() as seq:
        tok = int(runner.forward(np.arange(1, args.prompt + 1), seq).argmax())
        for _ in range(3):  # the step is recorded, then replayed
            tok = int(runner.forward([tok], seq).argmax())
        timer.times.clear()
        t0 = time.perf_counter()
        for _ in range(args.steps):
            tok = int(runner.forward([tok], seq).argmax())
        wall = (time.perf_counter() - t0) / args.steps
    rows = kernel_rows(timer.times, args.steps)
    title = (f"{avail.device}: {args.preset} shapes, {shape.layers} layers, {args.steps} decode "
             f"steps after a {args.prompt}-token prompt, one recorded step replayed")  # fmt: skip
    print(report(title, rows, wall, "host, submission, wait"))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"device": avail.device, "preset": args.preset, "layers": shape.layers,
             "steps": args.steps, "step_wall_us": wall * 1e6, "kernels": rows}, indent=1))  # fmt: skip
    provider.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
