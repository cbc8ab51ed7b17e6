"""Where a CUDA decode step's time goes, kernel by kernel (for the lent GPU).

A random model of the 2B-4T shape (``--layers`` of them) decodes on
``CudaRunner`` with CUDA graphs, as ``bitnet run`` does. PyTorch's profiler
(CUPTI, which sees every kernel of the process, graph-launched ones and
CuPy's included) records ``--steps`` decode steps; the script prints each
kernel's launches and microseconds per step, its share of the kernels' sum,
and that sum against the step's wall time measured without the profiler
(the rest is the GPU idle between kernels, or the host).

    python packages/bitnet-cuda/bench/step_profile.py [--layers 30] [--steps 16] [--json F]
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import numpy as np
from bench_cuda import random_2b4t_weights  # beside this script


def kernel_times(prof) -> dict[str, tuple[float, float]]:
    """Kernel name -> (launches, seconds) from ``prof.key_averages()`` (kernel entries are
    those with device time of their own; runtime calls have none)."""
    times = {}
    for evt in prof.key_averages():
        us = float(getattr(evt, "self_device_time_total", 0.0) or 0.0)
        if us > 0:
            times[evt.key] = (evt.count, us * 1e-6)
    return times


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--steps", type=int, default=16)
    ap.add_argument("--prompt", type=int, default=64, help="prompt tokens before the steps")
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)

    from torch.profiler import ProfilerActivity, profile

    from bitnet_core.hal import select
    from bitnet_core.sdk.step_profile import kernel_rows, report
    from bitnet_cuda.runner import CudaRunner

    sel = select("cuda")  # a clear error without a GPU
    provider, cp = sel.provider, sel.provider.cp
    runner = CudaRunner(provider, random_2b4t_weights(args.layers), progress=False)
    seq = runner.new_cache()
    runner.forward(np.arange(1, args.prompt + 1), seq)
    for i in range(4):  # module loads, the graph's capture
        runner.forward(np.array([i + 1]), seq)

    def steps() -> float:
        cp.cuda.Device().synchronize()
        t0 = time.perf_counter()
        for i in range(args.steps):
            runner.forward(np.array([i % 1000 + 1]), seq)
        cp.cuda.Device().synchronize()
        return (time.perf_counter() - t0) / args.steps

    wall = steps()
    with profile(activities=[ProfilerActivity.CUDA]) as prof:
        steps()
    rows = kernel_rows(kernel_times(prof), args.steps)
    title = (f"{sel.record.probe().device}: {args.layers} layers, {args.steps} decode steps "
             f"after a {args.prompt}-token prompt, CUDA graphs")  # fmt: skip
    print(report(title, rows, wall, "the GPU idle between kernels, or the host"))
    if args.json:
        Path(args.json).write_text(json.dumps(
            {"device": sel.record.probe().device, "layers": args.layers, "steps": args.steps,
             "step_wall_us": wall * 1e6, "kernels": rows}, indent=1))  # fmt: skip
    seq.close()
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
