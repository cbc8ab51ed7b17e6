"""Where a CUDA decode step's time goes, kernel by kernel (for the lent GPU).

A random model of the 2B-4T shape (``--layers`` of them) decodes on
``CudaRunner`` with CUDA graphs, as ``bitnet run`` does. PyTorch's profiler
(CUPTI, which sees every kernel of the process, graph-launched ones and
CuPy's included) records ``--steps`` decode steps; the script prints each
kernel's launches and microseconds per step, its share of the kernels' sum,
and that sum against the step's wall time measured without the profiler
(the rest is the GPU idle between kernels, or the host).

    python packages/bitnet-cuda/bench/step_profile.py [--layers 30] [--steps 16] [--json F]
        [--prompt 64 1000] [--keys-per-split 128 32]

With several ``--prompt`` or ``--keys-per-split`` values, every pair runs on the
same weights, one table each (the decode attention's split size against the
context: the splits a cache gets are its capacity / keys-per-split).
"""

from __future__ import annotations

import argparse
import time

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
    from bitnet_core.sdk.step_profile import (
        add_run_options,
        kernel_rows,
        report,
        run_record,
        write_runs,
    )

    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=30)
    add_run_options(ap, "keys")
    args = ap.parse_args(argv)

    from torch.profiler import ProfilerActivity, profile

    from bitnet_core.hal import select
    from bitnet_cuda.runner import CudaRunner, split_count

    sel = select("cuda")  # a clear error without a GPU
    provider, cp = sel.provider, sel.provider.cp
    runner = CudaRunner(provider, random_2b4t_weights(args.layers), progress=False)
    device = sel.record.probe().device
    runs = []
    for keys in args.keys_per_split or [runner.keys_per_split]:
        runner.keys_per_split = keys
        for prompt in args.prompt:
            seq = runner.new_cache()
            runner.forward(np.arange(1, prompt + 1) % 1000 + 1, seq)
            for i in range(4):  # module loads, the graph's capture
                runner.forward(np.array([i + 1]), seq)

            def steps(seq=seq) -> float:
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
            capacity = int(seq.k[0].shape[0])
            splits = split_count(capacity, runner.config.num_heads, keys)
            title = (f"{device}: {args.layers} layers, {args.steps} decode steps after a "
                     f"{prompt}-token prompt, CUDA graphs; attention: {splits} splits of a "
                     f"{capacity}-token cache ({keys} keys a split)")  # fmt: skip
            print(report(title, rows, wall, "the GPU idle between kernels, or the host"))
            runs.append(run_record(prompt, keys, splits, capacity, wall, rows))
            seq.close()
    write_runs(args.json, {"device": device, "layers": args.layers, "steps": args.steps}, runs)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
