"""Where the time of concurrent requests sharing a system prompt goes, step by step.

Runs the shared-system-prompt part of ``prefix_cache.py`` (one request, then
``--concurrent`` sharing another system prompt) on a loopback server with the
prefix cache, timing every scheduler step (``Scheduler._step``: sequences,
decoding ones, tokens so far) and every prefix hit (``PrefixCache.load``:
tokens reused) and store, and the process's peak resident memory (Linux:
anonymous and shared pages, sampled every 10 ms). Prints one line a step,
per round. ``BITNET_SHARED_KV_PAGES=0`` copies hits instead of mapping them.

    uv run --no-sync python tools/loadtest/prefix_cache_steps.py --gguf M.gguf --threads 2
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).parent))
import prefix_cache as scenario  # noqa: E402  (the same prompts)


def instrument(log: list[tuple]) -> None:
    from bitnet_core.model.prefix_cache import PrefixCache
    from bitnet_core.server.scheduler import Scheduler

    step, load, store = Scheduler._step, PrefixCache.load, PrefixCache.store

    def timed_step(self, jobs):
        decoding = sum(1 for j in jobs if j.seq is not None and not j.prefilling)
        t = time.perf_counter()
        out = step(self, jobs)
        log.append(("step", time.perf_counter() - t, f"{len(jobs)} seqs, {decoding} decoding, "
                    f"{self.stats.step_tokens_total} tokens so far"))  # fmt: skip
        return out

    def timed(fn, name):
        def wrapped(self, *a):
            t = time.perf_counter()
            out = fn(self, *a)
            log.append((name, time.perf_counter() - t, f"{out} tokens/blocks"))
            return out

        return wrapped

    Scheduler._step = timed_step
    PrefixCache.load, PrefixCache.store = timed(load, "hit"), timed(store, "store")


class PeakMemory:
    """The most memory this process held while it ran (MiB; Linux): its private pages
    (``RssAnon``) plus the pages of the prefix cache's memory file. Not ``VmRSS``: that
    counts a page once for every address it is mapped at, so eight sequences mapping one
    block's pages would count them eight times."""

    def __init__(self) -> None:
        self.peak, self._stop = 0.0, threading.Event()
        self._thread = threading.Thread(target=self._sample, daemon=True)

    @staticmethod
    def now() -> float:
        try:
            lines = Path("/proc/self/status").read_text().splitlines()
        except OSError:
            return 0.0
        kib = {k: int(v.split()[0]) for k, v in (ln.split(":", 1) for ln in lines) if "Rss" in k}
        return (kib.get("RssAnon", 0) * 1024 + PeakMemory.memory_files()) / 2**20

    @staticmethod
    def memory_files() -> int:
        """Bytes the prefix cache's memory files hold (their allocated blocks)."""
        total = 0
        for fd in Path("/proc/self/fd").iterdir():
            try:
                if os.readlink(fd).startswith("/memfd:bitnet-kv-blocks"):
                    total += os.stat(fd).st_blocks * 512
            except OSError:
                continue
        return total

    def _sample(self) -> None:
        while not self._stop.wait(0.01):
            self.peak = max(self.peak, self.now())

    def __enter__(self) -> PeakMemory:
        self.peak = self.now()
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._stop.set()
        self._thread.join()


async def shared_prompt(url: str, n: int, system_tokens: int, salt: int, log: list) -> tuple:
    async with httpx.AsyncClient(base_url=url, timeout=600) as c:

        def ask(system: str, i: int) -> list[dict]:
            question = scenario.words(20, salt + 100 + i)
            return [{"role": "system", "content": system}, {"role": "user", "content": question}]

        _, t_one = await scenario.post(c, ask(scenario.words(system_tokens, salt + 3), 0), 8)
        log.append(("--- concurrent", 0.0, ""))
        shared = scenario.words(system_tokens, salt + 4)
        t0 = time.perf_counter()
        await asyncio.gather(*(scenario.post(c, ask(shared, i + 1), 8) for i in range(n)))
        return t_one, time.perf_counter() - t0


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    scenario.add_model_arguments(ap, rounds=2)
    args = ap.parse_args(argv)

    from bitnet_core.server.app import create_app
    from bitnet_core.server.live import LiveServer

    log: list[tuple] = []
    instrument(log)
    model = scenario.load_model(args)
    for r in range(args.rounds):
        log.clear()
        app = create_app(model, "m", max_active=args.concurrent, prefix_cache=True)
        with LiveServer(app) as live, PeakMemory() as memory:
            before = memory.now()
            one, many = asyncio.run(
                shared_prompt(live.url, args.concurrent, args.system_tokens, 10 * r, log)
            )
        print(f"round {r}: one {one:.2f} s, {args.concurrent} concurrent {many:.2f} s "
              f"({many / one:.2f} x); resident {before:.0f} MiB before, "
              f"{memory.peak:.0f} MiB at the peak")  # fmt: skip
        for name, seconds, what in log:
            print(f"  {name:<6} {seconds * 1e3:8.1f} ms  {what}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
