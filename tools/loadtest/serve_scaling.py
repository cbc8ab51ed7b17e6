"""How ``bitnet serve`` scales with concurrent streams, and how a long prompt delays others.

    uv run --no-sync python tools/loadtest/serve_scaling.py --gguf /tmp/large-tq2_0.gguf \\
        --threads 2 --streams 8 --max-tokens 64 --rounds 2 --long-prompt 1500

Starts its own server on loopback (``server_load.start_local_server``) and, in
one process so the figures are side by side on the same (possibly shared)
machine, alternates for ``--rounds`` rounds:

- ``bitnet bench`` decode on the same file and threads (a separate process,
  while the server idles);
- one stream of ``--max-tokens`` tokens alone: generated tokens / wall, and
  its decode rate (tokens after the first / time after the first);
- ``--streams`` concurrent streams: aggregate generated tokens / wall;

then, once: a ``--long-prompt``-token prompt and, while it is prefilling, a
short request: the short one's time to first token against the time of one
prefill chunk (the long prompt's time to first token x ``step_tokens`` / its
tokens). Prints JSON; exits non-zero if a response was lost.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import subprocess
import sys
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parent))
from server_load import one, start_local_server  # noqa: E402


def bench_decode(gguf: str, threads: int, tokens: int) -> float:
    """``bitnet bench`` decode tokens/s on the same file and threads."""
    out = subprocess.run(
        [sys.executable, "-m", "bitnet_core", "bench", "-m", gguf, "-p", "16",
         "-n", str(tokens), "--threads", str(threads), "--device", "cpu", "--json"],
        capture_output=True, text=True, check=True,
    )  # fmt: skip
    return float(json.loads(out.stdout)["decode_tokens_per_s"])


def decode_rate(r: dict) -> float:
    """Tokens after the first over the time after the first token."""
    span = r["end"] - r["first"]
    return (r["tokens"] - 1) / span if span > 0 and r["tokens"] > 1 else 0.0


async def scaling_round(c: httpx.AsyncClient, streams: int, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    solo = await one(c, "", "solo stream:", max_tokens)
    solo_wall = time.perf_counter() - t0
    t0 = time.perf_counter()
    many = await asyncio.gather(*(one(c, "", f"stream {i}:", max_tokens) for i in range(streams)))
    wall = time.perf_counter() - t0
    lost = [r for r in [solo, *many] if not r["ok"]]
    one_tps = solo["tokens"] / solo_wall
    agg_tps = sum(r["tokens"] for r in many) / wall
    return {
        "one_stream_tok_s": one_tps,
        "one_stream_decode_tok_s": decode_rate(solo),
        "streams_aggregate_tok_s": agg_tps,
        "ratio": agg_tps / one_tps if one_tps else 0.0,
        "lost": len(lost),
    }


async def long_prompt_round(c: httpx.AsyncClient, long_tokens: int, step_tokens: int) -> dict:
    long_ids = [(7 * i + 3) % 250 + 1 for i in range(long_tokens)]

    async def long_request() -> dict:
        t0 = time.perf_counter()
        r = await c.post(
            "/v1/completions",
            json={"prompt": long_ids, "max_tokens": 1, "temperature": 0},
        )
        return {"status": r.status_code, "ttft": time.perf_counter() - t0}

    task = asyncio.create_task(long_request())
    chunks = long_tokens / step_tokens  # a full chunk's share of the long prompt's prefill
    await asyncio.sleep(0.5)  # the long prompt's prefill is under way
    short = await one(c, "", "short:", 1)
    long = await task
    chunk_s = long["ttft"] / chunks
    return {
        "long_prompt_tokens": long_tokens,
        "long_prompt_ttft_s": long["ttft"],
        "prefill_chunk_s": chunk_s,
        "short_ttft_s": short["ttft"],
        "short_ttft_in_chunks": short["ttft"] / chunk_s,
        "short_finished_before_long": short["end"] < short["start"] + long["ttft"],
        "lost": int(long["status"] != 200) + int(not short["ok"]),
    }


async def run(args: argparse.Namespace, url: str, step_tokens: int) -> dict:
    rounds = []
    async with httpx.AsyncClient(base_url=url, timeout=1200) as c:
        await one(c, "", "warm up:", 4)
        for _ in range(args.rounds):
            bench = bench_decode(args.gguf, args.threads, args.max_tokens)
            r = await scaling_round(c, args.streams, args.max_tokens)
            r["bench_decode_tok_s"] = bench
            r["one_stream_vs_bench"] = r["one_stream_decode_tok_s"] / bench
            rounds.append(r)
        long = (
            await long_prompt_round(c, args.long_prompt, step_tokens) if args.long_prompt else None
        )
    return {"streams": args.streams, "max_tokens": args.max_tokens, "threads": args.threads,
            "step_tokens": step_tokens, "rounds": rounds, "long_prompt": long}  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", required=True, help="model file")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--streams", type=int, default=8)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--step-tokens", type=int, default=None, help="the scheduler's step budget")
    ap.add_argument("--long-prompt", type=int, default=1500, help="0: skip the long-prompt round")
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    server, url, _ = start_local_server(
        args.gguf, args.streams, 4 * args.streams + 8,
        threads=args.threads, step_tokens=args.step_tokens,
    )  # fmt: skip
    try:
        step_tokens = server.server.config.app.state.scheduler.step_tokens
        result = asyncio.run(run(args, url, step_tokens))
    finally:
        server.stop()
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    lost = sum(r["lost"] for r in result["rounds"]) + (result["long_prompt"] or {}).get("lost", 0)
    return 1 if lost else 0


if __name__ == "__main__":
    sys.exit(main())
