"""What prefix caching saves in ``bitnet serve``: the next turn of a chat, an identical repeat,
and concurrent requests that share a long system prompt.

    uv run --no-sync python tools/loadtest/prefix_cache.py --gguf /tmp/large-tq2_0.gguf \\
        --threads 2 --kv-budget 2048

One model, loaded once; for each round, a server with the prefix cache and
one without (``--no-prefix-cache``), one after the other on loopback, each
answering, at temperature 0 with ``--max-tokens`` tokens:

- a chat of about ``--chat-tokens`` prompt tokens, then the same conversation
  plus its answer and a short user message (the next turn), then the first
  request again (an identical repeat);
- one request with a ``--system-tokens`` system prompt and a 20-token
  question, then ``--concurrent`` requests sharing another such system
  prompt, each with its own question, sent together.

Prints JSON: wall seconds of each, the ratios the issue asks for (next turn /
first, repeat / first, all concurrent / one) and whether every answer equals
the server without the cache. Exits non-zero on a lost or differing answer.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import sys
import time

import httpx


def words(n_chars: int, seed: int) -> str:
    """About ``n_chars`` characters of lowercase words (the byte tokenizer: a token each)."""
    rng = random.Random(seed)
    out: list[str] = []
    size = 0
    while size < n_chars:
        w = "".join(rng.choice("etaoinshrdlu") for _ in range(rng.randint(2, 8)))
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_chars]


async def post(c: httpx.AsyncClient, messages: list[dict], max_tokens: int) -> tuple[dict, float]:
    t0 = time.perf_counter()
    r = await c.post(
        "/v1/chat/completions",
        json={"messages": messages, "max_tokens": max_tokens, "temperature": 0},
    )
    r.raise_for_status()
    return r.json(), time.perf_counter() - t0


def answer(body: dict) -> str:
    return body["choices"][0]["message"]["content"]


def cached(body: dict) -> int:
    return body["usage"]["prompt_tokens_details"]["cached_tokens"]


async def scenario(url: str, args: argparse.Namespace, salt: int) -> dict:
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:
        half = round(args.chat_tokens * 0.51) - 2  # characters; about 0.97 tokens each
        chat = [
            {"role": "system", "content": words(half, salt + 1)},
            {"role": "user", "content": words(half, salt + 2)},
        ]
        first, t_first = await post(c, chat, args.max_tokens)
        turn = chat + [
            {"role": "assistant", "content": answer(first)},
            {"role": "user", "content": "and then?"},
        ]
        nxt, t_next = await post(c, turn, args.max_tokens)
        again, t_again = await post(c, chat, args.max_tokens)

        def ask(system: str, i: int) -> list[dict]:
            return [
                {"role": "system", "content": system},
                {"role": "user", "content": words(20, salt + 100 + i)},
            ]

        one, t_one = await post(c, ask(words(args.system_tokens, salt + 3), 0), args.max_tokens)
        shared = words(args.system_tokens, salt + 4)
        t0 = time.perf_counter()
        many = await asyncio.gather(
            *(post(c, ask(shared, i + 1), args.max_tokens) for i in range(args.concurrent))
        )
        t_many = time.perf_counter() - t0
        metrics = (await c.get("/metrics")).text
    bodies = [first, nxt, again, one, *(b for b, _ in many)]
    return {
        "prompt_tokens": [b["usage"]["prompt_tokens"] for b in bodies[:4]],
        "cached_tokens": [cached(b) for b in bodies],
        "seconds": {
            "first": t_first,
            "next_turn": t_next,
            "repeat": t_again,
            "one_shared_shape": t_one,
            "concurrent_all": t_many,
        },
        "answers": [answer(b) for b in bodies],
        "metrics": [m for m in metrics.splitlines() if m.startswith("bitnet_prefix_cache")],
    }


def add_model_arguments(ap: argparse.ArgumentParser, rounds: int) -> None:
    """The model, threads, KV budget, shared-prompt shape and rounds (also of
    ``prefix_cache_steps.py``)."""
    ap.add_argument("--gguf", required=True)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--kv-budget", type=int, default=2048, metavar="MIB")
    ap.add_argument("--system-tokens", type=int, default=1000)
    ap.add_argument("--concurrent", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=rounds)


def load_model(args: argparse.Namespace):
    """The model of ``--gguf`` on the CPU with ``--kv-budget`` and ``--threads``."""
    from bitnet_core.model.api import load
    from bitnet_core.sdk.kv_cache import KVCacheConfig

    kv = KVCacheConfig(max_bytes=args.kv_budget << 20)
    model = load(args.gguf, device="cpu", kv_cache=kv, progress=False)
    model.provider.set_threads(args.threads)
    return model


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    add_model_arguments(ap, rounds=1)
    ap.add_argument("--max-tokens", type=int, default=8)
    ap.add_argument("--chat-tokens", type=int, default=870)
    args = ap.parse_args(argv)

    from bitnet_core.server.app import create_app
    from bitnet_core.server.live import LiveServer

    model = load_model(args)
    rounds = []
    for r in range(args.rounds):
        got = {}
        for on in (True, False):  # interleaved: the same load on both
            app = create_app(model, "m", max_active=args.concurrent, prefix_cache=on)
            with LiveServer(app) as live:
                got[on] = asyncio.run(scenario(live.url, args, salt=10 * r))
        s, base = got[True]["seconds"], got[False]["seconds"]
        rounds.append(
            {
                "with_cache": {k: v for k, v in got[True].items() if k != "answers"},
                "without_cache_seconds": base,
                "next_turn_over_first": s["next_turn"] / s["first"],
                "repeat_over_first": s["repeat"] / s["first"],
                "concurrent_over_one": s["concurrent_all"] / s["one_shared_shape"],
                "without_cache_concurrent_over_one": base["concurrent_all"]
                / base["one_shared_shape"],
                "answers_equal": got[True]["answers"] == got[False]["answers"],
            }
        )
    print(json.dumps({"args": vars(args), "rounds": rounds}, indent=1))
    return 0 if all(r["answers_equal"] for r in rounds) else 1


if __name__ == "__main__":
    sys.exit(main())
