"""Aggregate throughput of ``bitnet serve-ray`` layouts on one machine, side by side in one run.

    uv sync --all-packages --inexact --extra ray
    uv run --no-sync python tools/bench/model_vs_llamacpp.py --make /tmp/large-tq2_0.gguf
    uv run --no-sync python tools/loadtest/ray_scaling.py --gguf /tmp/large-tq2_0.gguf \\
        --cpus 2 --layouts 2x1,1x2 --rounds 2 --concurrency 8 --max-tokens 32

A layout ``RxT`` is R replicas of a T-thread engine (each replica asks Ray for
T CPUs). One local Ray cluster on loopback with ``--cpus`` CPUs serves each
layout in turn, ``--rounds`` times in alternation (A B A B) so slow phases of
a shared machine hit both; every round is ``tools/loadtest/server_load.py``'s
check (every stream complete, greedy text equal to a solo run) and its
generated tokens/s. Prints one JSON object; exits non-zero on a lost request.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_load import run_load  # noqa: E402


def parse_layouts(text: str) -> list[tuple[int, int]]:
    out = []
    for item in text.split(","):
        replicas, _, threads = item.strip().partition("x")
        out.append((int(replicas), int(threads)))
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", default=None, help="model file (default: the bundled demo model)")
    ap.add_argument("--cpus", type=int, default=2, help="CPUs of the local Ray cluster")
    ap.add_argument("--layouts", default="2x1,1x2", help="REPLICASxTHREADS, comma-separated")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--concurrency", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=32)
    ap.add_argument("--max-active", type=int, default=8)
    ap.add_argument("--json", default=None, help="write the results here too")
    args = ap.parse_args(argv)

    os.environ.setdefault("RAY_USAGE_STATS_ENABLED", "0")
    import ray
    from ray import serve

    from bitnet_core.server.live import free_port
    from bitnet_core.server.ray_serve import build_app, start_ray

    layouts = parse_layouts(args.layouts)
    start_ray(num_cpus=args.cpus)
    port = free_port()
    serve.start(http_options={"host": "127.0.0.1", "port": port})
    url = f"http://127.0.0.1:{port}"
    rounds: list[dict] = []
    try:
        for r in range(args.rounds):
            for replicas, threads in layouts:
                app_args = {
                    "model": args.gguf,
                    "replicas": replicas,
                    "threads": threads,
                    "max_active": args.max_active,
                    "model_name": "bench",
                }
                t0 = time.perf_counter()
                serve.run(build_app(app_args), name="bitnet", route_prefix="/")
                ready_s = time.perf_counter() - t0
                result = asyncio.run(
                    run_load(url, "bench", args.concurrency, args.max_tokens, headers={})
                )
                result.update(round=r, layout=f"{replicas}x{threads}", ready_s=ready_s)
                print(json.dumps(result), file=sys.stderr, flush=True)
                rounds.append(result)
                serve.delete("bitnet")
    finally:
        serve.shutdown()
        ray.shutdown()
    summary = {}
    for replicas, threads in layouts:
        name = f"{replicas}x{threads}"
        tps = [x["tokens_per_s"] for x in rounds if x["layout"] == name]
        summary[name] = {"tokens_per_s": tps, "median_tokens_per_s": statistics.median(tps)}
    first, *rest = layouts
    base = summary[f"{first[0]}x{first[1]}"]["median_tokens_per_s"]
    for replicas, threads in rest:
        other = summary[f"{replicas}x{threads}"]["median_tokens_per_s"]
        summary[f"{first[0]}x{first[1]}_over_{replicas}x{threads}"] = (
            base / other if other else None
        )
    out = {
        "model": args.gguf or "demo",
        "cpus": args.cpus,
        "concurrency": args.concurrency,
        "max_tokens": args.max_tokens,
        "summary": summary,
        "rounds": rounds,
    }
    print(json.dumps(out, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(out, indent=2))
    lost = sum(x["failed"] + x["garbled"] for x in rounds)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
