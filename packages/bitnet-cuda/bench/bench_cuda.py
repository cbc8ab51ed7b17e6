"""CUDA benchmarks for the lent GPU (issue 4's targets), in one run:

1. device-to-device copy bandwidth (the memory floor's denominator);
2. kernel times of the ternary matmul for the fused runner's 2B-4T shapes
   (q,k,v 3840x2560, o 2560x2560, gate,up 13824x2560, down 2560x6912) at
   1, 4, 8, 16, 32 and 64 tokens, and of the float16 head (128256x2560) at 1 and 8
   (the kernels the runner launches: ``_r2`` below 16 tokens, the head's ``_r4``,
   and beside each the other rows a warp: one-row, ``_r2``, ``_r4``): each kernel
   captured ``GRAPH_LAUNCHES`` times into a CUDA graph and replayed, so no
   host time is in them (timing the provider's op per call measures Python's
   dispatch, 30-50 us, not the GPU); weight bytes / time as a fraction of (1);
3. decode tokens/s of a random model of 2B-4T shape through ``bitnet_core``
   on the ``cuda`` provider, four engines measured in turn on the same
   weights: ``graphs`` (``CudaRunner``, decode steps replayed from CUDA
   graphs, four kernels a layer: what ``bitnet run`` uses), ``graphs-ten``
   (the same with ten kernels a layer, ``BITNET_CUDA_LAYER=0``), ``fused``
   (the four-kernel layer launched one by one) and ``generic`` (the
   provider's ops, ~25 launches a layer); ms a token of each to stderr;
   against the floor (all weight bytes a token reads / copy bandwidth) and
   against PyTorch bf16 decode of the same layer shapes (matmuls only, CUDA
   graph), when torch with CUDA is importable.

    python packages/bitnet-cuda/bench/bench_cuda.py --json out.json [--layers 30] [--tokens 64]

Timings use CUDA events after warm-up; medians of ``--repeat`` runs.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path

import numpy as np


def timed(cp, fn, repeat: int) -> float:
    """Median seconds of ``fn`` over ``repeat`` CUDA-event-timed calls (after 3 warm-ups)."""
    for _ in range(3):
        fn()
    cp.cuda.Device().synchronize()
    times = []
    for _ in range(repeat):
        start, end = cp.cuda.Event(), cp.cuda.Event()
        start.record()
        fn()
        end.record()
        end.synchronize()
        times.append(cp.cuda.get_elapsed_time(start, end) / 1000.0)
    return statistics.median(times)


def copy_bandwidth(cp, repeat: int) -> float:
    n = 1 << 28  # 1 GiB
    a = cp.empty(n, dtype=cp.uint32)
    b = cp.empty_like(a)
    s = timed(cp, lambda: cp.copyto(b, a), repeat)
    return 2 * a.nbytes / s  # read + write


#: the fused runner's matmuls of one 2B-4T layer (q,k,v and gate,up stacked)
RUNNER_SHAPES_2B = {"qkv": (3840, 2560), "o": (2560, 2560), "gate_up": (13824, 2560),
                    "down": (2560, 6912)}  # fmt: skip
#: token counts of the kernel table (32 and 64: where the tensor cores start to beat _r2)
GEMV_TOKENS = (1, 4, 8, 16, 32, 64)
GRAPH_LAUNCHES = 20


def graph_seconds(cp, launch, repeat: int, launches: int = GRAPH_LAUNCHES) -> float:
    """Median seconds of one ``launch()`` over ``repeat`` replays of a CUDA graph holding
    ``launches`` of them back to back (the first call, uncaptured, loads the module)."""
    cp.cuda.Stream.null.synchronize()  # inputs made on the legacy stream: this one skips it
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        launch()
        stream.synchronize()
        stream.begin_capture()
        for _ in range(launches):
            launch()
        graph = stream.end_capture()
        graph.launch(stream)
        stream.synchronize()
        times = []
        for _ in range(repeat):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record(stream)
            graph.launch(stream)
            end.record(stream)
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1000.0 / launches)
    return statistics.median(times)


def kernel_times(
    provider,
    cp,
    repeat: int,
    shapes: dict[str, tuple[int, int]] = RUNNER_SHAPES_2B,
    tokens: tuple[int, ...] = GEMV_TOKENS,
    head: tuple[int, int] = (128256, 2560),
    launches: int = GRAPH_LAUNCHES,
) -> list[dict]:
    """The ternary matmul kernels of ``shapes`` at ``tokens`` tokens and the float16 head
    at 1 and 8 tokens, timed from CUDA graphs (``graph_seconds``): first the kernel the
    runner launches, then the dp4a tiles of the other rows a warp (1, 2, 4) and the head's
    other kernel, so one run says which would be faster at each token count."""
    from bitnet_core.hal.weights import TernaryWeight
    from bitnet_cuda.provider import I2S_ROWS, MMA_MIN_TOKENS

    rng = np.random.default_rng(0)
    out = []

    def time_kernel(launch, n_launches: int, row: dict) -> None:
        kernel = launch()  # (uncaptured: the kernel's name)
        s = graph_seconds(cp, launch, repeat, n_launches)
        out.append({"kernel": kernel, **row, "seconds": s, "bandwidth": row["weight_bytes"] / s})

    for name, (n, k) in shapes.items():
        codes = rng.integers(-1, 2, (n, k)).astype(np.int8)
        w = provider.load_ternary(TernaryWeight.from_codes(codes, 1.0))
        nbytes = w.words.nbytes + w.scales.nbytes
        for t in tokens:
            x = cp.asarray(rng.standard_normal((t, k)).astype(np.float32))
            xq, xs = provider.quantize_act(x)
            y = cp.empty((t, n), dtype=np.float32)
            row = {"name": name, "shape": [n, k], "tokens": t, "weight_bytes": nbytes}
            mma = t >= MMA_MIN_TOKENS and provider.tensor_cores  # launch_i2s's choice
            chosen = None if mma else I2S_ROWS
            for per_warp in (None, *(r for r in (4, 2, 1) if r != chosen)):

                def launch(w=w, xq=xq, xs=xs, y=y, t=t, per_warp=per_warp):
                    args = (w.words, w.scales, xq.data, xs, xq.xsum, y, t)
                    return provider.launch_i2s(*args, per_warp=per_warp)

                time_kernel(launch, launches, row)
    table = rng.standard_normal(head, dtype=np.float32).astype(np.float16)
    head_table = provider._half_table(table, "f16")
    del table
    for t in (1, 8):
        x = cp.asarray(rng.standard_normal((t, head[1])).astype(np.float32))
        y = cp.empty((t, head[0]), dtype=np.float32)
        row = {"name": "head", "shape": list(head), "tokens": t}
        row["weight_bytes"] = head_table.data.nbytes
        for per_warp in (None, 1):  # launch_dense's choice (DENSE_ROWS), then one a warp

            def launch_head(x=x, y=y, t=t, per_warp=per_warp):
                return provider.launch_dense(head_table, x, y, t, per_warp)

            time_kernel(launch_head, max(1, launches // 4), row)
    return out


def random_2b4t_weights(layers: int):
    """``ModelWeights`` of a random I2_S model of the 2B-4T shape with ``layers`` layers
    (written to a temporary GGUF file and read back, as a real model is)."""
    from bitnet_core.gguf import open_model_file
    from bitnet_core.model import ModelWeights
    from bitnet_core.model.presets import preset
    from bitnet_core.model.random import random_model_file

    cfg = preset("2b4t", num_layers=layers)
    path = Path(tempfile.mkdtemp()) / "2b4t-random.gguf"
    random_model_file(path, cfg, seed=0, ternary_type="i2_s")
    return ModelWeights.from_model_file(open_model_file(path))


def decode_tokens_per_s(provider, layers: int, tokens: int) -> dict:
    from bitnet_core.model import GenericRunner
    from bitnet_cuda.runner import CudaRunner

    weights = random_2b4t_weights(layers)
    per_layer = (2560 * 2560 * 2 + 640 * 2560 * 2 + 6912 * 2560 * 3) // 4
    out: dict = {"weight_bytes": layers * per_layer + 128256 * 2560 * 2}
    for engine in ("graphs", "graphs-ten", "fused", "generic"):
        if engine == "generic":
            backend = GenericRunner(provider, weights, progress=False)
        else:
            backend = CudaRunner(provider, weights, progress=False)
            backend.use_graphs = engine != "fused"
            backend.layer_kernels = backend.layer_kernels and engine != "graphs-ten"
        seq = backend.new_cache()
        backend.forward(np.arange(1, 9), seq)
        for i in range(4):  # warm-up: module loads, graph capture
            backend.forward(np.array([i + 1]), seq)
        t0 = time.perf_counter()
        for i in range(tokens):
            backend.forward(np.array([i % 1000 + 1]), seq)
        s = (time.perf_counter() - t0) / tokens
        out[engine] = {"seconds_per_token": s, "tokens_per_s": 1 / s}
        print(f"decode {engine:>10}: {s * 1e3:8.3f} ms a token", file=sys.stderr)
        seq.close()
        del backend
        provider.cp.get_default_memory_pool().free_all_blocks()
    out.update(out["graphs"])  # what `bitnet run` uses
    return out


def torch_bf16_decode(layers: int, repeat: int) -> float | None:
    try:
        import torch
    except ImportError:
        return None
    if not torch.cuda.is_available():
        return None
    dev = torch.device("cuda")
    mats = []
    for _ in range(layers):
        for n, k in [
            (2560, 2560),
            (640, 2560),
            (640, 2560),
            (2560, 2560),
            (6912, 2560),
            (6912, 2560),
            (2560, 6912),
        ]:
            mats.append(torch.randn(n, k, device=dev, dtype=torch.bfloat16))
    head = torch.randn(128256, 2560, device=dev, dtype=torch.bfloat16)
    x = torch.randn(1, 2560, device=dev, dtype=torch.bfloat16)
    x2 = torch.randn(1, 6912, device=dev, dtype=torch.bfloat16)

    def step():
        for m in mats:
            (x2 if m.shape[1] == 6912 else x) @ m.T
        x @ head.T

    g = torch.cuda.CUDAGraph()
    step()
    torch.cuda.synchronize()
    with torch.cuda.graph(g):
        step()
    times = []
    for _ in range(repeat):
        s, e = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        s.record()
        g.replay()
        e.record()
        e.synchronize()
        times.append(s.elapsed_time(e) / 1000)
    return statistics.median(times)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--layers", type=int, default=30)
    ap.add_argument("--tokens", type=int, default=64)
    ap.add_argument("--repeat", type=int, default=50)
    ap.add_argument("--json", default=None)
    args = ap.parse_args(argv)
    from bitnet_core.hal import select

    sel = select("cuda")  # a clear error without a GPU
    provider = sel.provider
    cp = provider.cp
    bw = copy_bandwidth(cp, args.repeat)
    kernels = kernel_times(provider, cp, args.repeat)
    for g in kernels:
        g["fraction_of_copy"] = g["bandwidth"] / bw
        print(f"{g['name']:>8} T={g['tokens']:<3} {g['kernel']:<22} {g['seconds'] * 1e6:9.1f} us"
              f"  {g['fraction_of_copy']:6.1%} of copy", file=sys.stderr)  # fmt: skip
    dec = decode_tokens_per_s(provider, args.layers, args.tokens)
    floor = dec["weight_bytes"] / bw
    torch_s = torch_bf16_decode(args.layers, args.repeat)
    result = {
        "device": sel.record.probe().device,
        "kernels": provider.kernel_source,
        "copy_bandwidth": bw,
        "kernel_times": kernels,
        "decode": dec,
        "floor_seconds_per_token": floor,
        "decode_fraction_of_floor": floor / dec["seconds_per_token"],
        "torch_bf16_seconds_per_token": torch_s,
        "speedup_vs_torch_bf16": (torch_s / dec["seconds_per_token"]) if torch_s else None,
    }
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
