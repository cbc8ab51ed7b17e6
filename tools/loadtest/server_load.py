"""Bounded load test of ``bitnet serve`` on loopback: N concurrent streaming requests.

    uv run --no-sync python tools/loadtest/server_load.py --concurrency 200 --max-tokens 16
    uv run --no-sync python tools/loadtest/server_load.py --url http://127.0.0.1:8080 --model demo

Without --url it starts its own server (a random model, or --gguf FILE) in
this process on a free loopback port. Every response is checked: HTTP 200,
well-formed SSE chunks, a final chunk with usage, ``[DONE]``; with
temperature 0 every stream's text must equal a solo run of the same prompt
(the requests cycle through ``--distinct`` prompts of different lengths, each
run alone once before the burst).
Prints throughput (generated tokens/s), p50/p99 latency and time to first
token, and whether /health still answers; exits non-zero on any lost or
garbled response. Only loopback addresses are accepted.
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import json
import statistics
import sys
import tempfile
import time
from pathlib import Path
from urllib.parse import urlparse

import httpx


async def one(client: httpx.AsyncClient, model: str, prompt: str, max_tokens: int) -> dict:
    t0 = time.perf_counter()
    first = None
    text, usage, done, chunks = "", None, False, 0
    body = {
        "model": model,
        "prompt": prompt,
        "max_tokens": max_tokens,
        "temperature": 0,
        "stream": True,
    }
    async with client.stream("POST", "/v1/completions", json=body) as r:
        if r.status_code != 200:
            return {"ok": False, "error": f"HTTP {r.status_code}: {(await r.aread())[:200]!r}"}
        async for line in r.aiter_lines():
            if not line:
                continue
            if not line.startswith("data: "):
                return {"ok": False, "error": f"not an SSE data line: {line[:80]!r}"}
            if line == "data: [DONE]":
                done = True
                continue
            chunk = json.loads(line[6:])
            if "error" in chunk:
                return {"ok": False, "error": chunk["error"]["message"]}
            first = first or time.perf_counter()
            chunks += 1
            text += chunk["choices"][0]["text"]
            usage = chunk.get("usage") or usage
    t1 = time.perf_counter()
    ok = done and usage is not None
    return {
        "start": t0,
        "first": first or t1,
        "end": t1,
        "ok": ok,
        "error": None if ok else "stream ended without usage/[DONE]",
        "prompt": prompt,
        "text": text,
        "tokens": (usage or {}).get("completion_tokens", 0),
        "latency": t1 - t0,
        "ttft": (first or t1) - t0,
    }


def load_prompts(concurrency: int, distinct: int) -> list[str]:
    """``concurrency`` prompts cycling through ``distinct`` ones of 1 to 40-odd words."""
    kinds = [f"request {k}:" + " more" * (k * 7 % 41) for k in range(distinct)]
    return [kinds[i % distinct] for i in range(concurrency)]


async def run_load(
    url: str, model: str, concurrency: int, max_tokens: int, headers: dict, distinct: int = 20
) -> dict:
    prompts = load_prompts(concurrency, distinct)
    limits = httpx.Limits(max_connections=concurrency + 8)
    async with httpx.AsyncClient(base_url=url, headers=headers, timeout=600, limits=limits) as c:
        solo = {p: await one(c, model, p, max_tokens) for p in dict.fromkeys(prompts)}
        bad_solo = [r["error"] for r in solo.values() if not r["ok"]]
        if bad_solo:
            raise SystemExit(f"a solo request failed: {bad_solo[0]}")
        t0 = time.perf_counter()
        results = await asyncio.gather(*(one(c, model, p, max_tokens) for p in prompts))
        wall = time.perf_counter() - t0
        health = (await c.get("/health")).json()
    bad = [r for r in results if not r["ok"]]
    garbled = [r for r in results if r["ok"] and r["text"] != solo[r["prompt"]]["text"]]
    lat = sorted(r["latency"] for r in results if r["ok"])
    ttft = sorted(r["ttft"] for r in results if r["ok"])
    tokens = sum(r["tokens"] for r in results if r["ok"])

    def pct(xs: list[float], q: float) -> float:
        return xs[min(len(xs) - 1, int(q * len(xs)))] if xs else float("nan")

    return {
        "concurrency": concurrency,
        "max_tokens": max_tokens,
        "ok": len(results) - len(bad),
        "failed": len(bad),
        "garbled": len(garbled),
        "errors": sorted({r["error"] for r in bad})[:5],
        "wall_s": wall,
        "generated_tokens": tokens,
        "tokens_per_s": tokens / wall if wall else 0.0,
        "latency_p50_s": statistics.median(lat) if lat else float("nan"),
        "latency_p99_s": pct(lat, 0.99),
        "ttft_p50_s": statistics.median(ttft) if ttft else float("nan"),
        "healthy_after": health.get("status") == "ok",
    }


def start_local_server(
    gguf: str | None,
    max_active: int,
    max_queue: int,
    *,
    threads: int | None = None,
    step_tokens: int | None = None,
):
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model.api import load
    from bitnet_core.model.random import random_model_file
    from bitnet_core.server.app import create_app
    from bitnet_core.server.live import LiveServer

    if gguf is None:
        cfg = BitNetConfig(
            vocab_size=512,
            hidden_size=256,
            num_layers=2,
            num_heads=4,
            num_kv_heads=2,
            intermediate_size=512,
            context_length=256,
        )
        gguf = str(Path(tempfile.mkdtemp()) / "load.gguf")
        random_model_file(gguf, cfg, seed=1)
    model = load(gguf, device="cpu")
    if threads is not None:
        model.provider.set_threads(threads)
    app = create_app(
        model, "load", max_active=max_active, max_queue=max_queue, step_tokens=step_tokens
    )
    live = LiveServer(app).start()
    return live, live.url, "load"


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--url", help="a running server (loopback only); default: start one here")
    ap.add_argument("--model", default=None, help="model name the server uses")
    ap.add_argument(
        "--gguf", default=None, help="model file for the local server (default: random)"
    )
    ap.add_argument("--concurrency", type=int, default=200)
    ap.add_argument("--max-tokens", type=int, default=16)
    ap.add_argument("--max-active", type=int, default=16)
    ap.add_argument(
        "--step-tokens",
        type=int,
        default=None,
        help="local server's tokens per step (prompts chunk)",
    )
    ap.add_argument(
        "--distinct", type=int, default=20, help="distinct prompts (each run solo once)"
    )
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--json", default=None, help="write the results here")
    args = ap.parse_args(argv)
    if not 1 <= args.concurrency <= 1000:
        ap.error("--concurrency must be in 1..1000")
    if not 1 <= args.distinct <= args.concurrency:
        ap.error("--distinct must be in 1..concurrency")
    server = None
    if args.url:
        host = urlparse(args.url).hostname or ""
        if host != "localhost" and not ipaddress.ip_address(host).is_loopback:
            ap.error("only loopback servers may be load-tested")
        url, model = args.url, args.model or ""
    else:
        server, url, model = start_local_server(
            args.gguf, args.max_active, args.concurrency + 8, step_tokens=args.step_tokens
        )
    headers = {"Authorization": f"Bearer {args.api_key}"} if args.api_key else {}
    result = asyncio.run(
        run_load(url, model, args.concurrency, args.max_tokens, headers, args.distinct)
    )
    if server is not None:
        server.stop()
    print(json.dumps(result, indent=2))
    if args.json:
        Path(args.json).write_text(json.dumps(result, indent=2))
    return 0 if result["failed"] == 0 and result["garbled"] == 0 and result["healthy_after"] else 1


if __name__ == "__main__":
    sys.exit(main())
