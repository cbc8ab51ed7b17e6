"""``/metrics``: the server's counters in the Prometheus text exposition format."""

from __future__ import annotations

import bisect
import threading
import time
from typing import Any

from .scheduler import Scheduler

#: Bucket bounds (seconds) of the latency histograms: 1 ms to 2 min.
LATENCY_BUCKETS = (
    0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0
)  # fmt: skip


class Histogram:
    """A Prometheus histogram: cumulative bucket counts, sum and count."""

    def __init__(self, name: str, help_: str, buckets: tuple[float, ...] = LATENCY_BUCKETS) -> None:
        self.name, self.help, self.buckets = name, help_, buckets
        self.counts = [0] * (len(buckets) + 1)  # the last one is +Inf
        self.sum, self.count = 0.0, 0
        self._lock = threading.Lock()

    def observe(self, value: float, times: int = 1) -> None:
        with self._lock:
            self.counts[bisect.bisect_left(self.buckets, value)] += times
            self.sum += value * times
            self.count += times

    def render(self) -> list[str]:
        out = [f"# HELP {self.name} {self.help}", f"# TYPE {self.name} histogram"]
        with self._lock:
            total = 0
            for bound, n in zip((*self.buckets, float("inf")), self.counts, strict=True):
                total += n
                le = "+Inf" if bound == float("inf") else f"{bound:g}"
                out.append(f'{self.name}_bucket{{le="{le}"}} {total}')
            out += [f"{self.name}_sum {self.sum:.6g}", f"{self.name}_count {self.count}"]
        return out


class Latencies:
    """The server's latency histograms, observed as requests are answered."""

    def __init__(self) -> None:
        self.queue_wait = Histogram(
            "bitnet_queue_wait_seconds", "Seconds a request waited for a decode slot"
        )
        self.time_to_first_token = Histogram(
            "bitnet_time_to_first_token_seconds",
            "Seconds from a request's arrival to its first generated text",
        )
        self.inter_token = Histogram(
            "bitnet_inter_token_latency_seconds",
            "Seconds between consecutive generated tokens of a request",
        )

    def render(self) -> list[str]:
        return (
            self.queue_wait.render() + self.time_to_first_token.render() + self.inter_token.render()
        )


def render_metrics(
    model: Any, scheduler: Scheduler, started: float, latencies: Latencies | None = None
) -> str:
    s = scheduler.stats
    kv = model.runner.kv.stats() if hasattr(getattr(model, "runner", None), "kv") else {}
    prefix = scheduler.prefix
    pc = prefix.as_dict() if prefix is not None else {}
    tps = s.generated_tokens_total / s.decode_seconds_total if s.decode_seconds_total > 0 else 0.0
    rows: list[tuple[str, str, str, float]] = [
        ("bitnet_requests_total", "counter", "Requests accepted", s.requests_total),
        (
            "bitnet_requests_rejected_total",
            "counter",
            "Requests refused because the queue was full",
            s.requests_rejected,
        ),
        (
            "bitnet_requests_failed_total",
            "counter",
            "Requests whose generation failed",
            s.requests_failed,
        ),
        (
            "bitnet_requests_cancelled_total",
            "counter",
            "Requests whose client went away",
            s.requests_cancelled,
        ),
        ("bitnet_prompt_tokens_total", "counter", "Prompt tokens processed", s.prompt_tokens_total),
        ("bitnet_generated_tokens_total", "counter", "Tokens generated", s.generated_tokens_total),
        ("bitnet_tokens_per_second", "gauge", "Generated tokens per second of model time", tps),
        (
            "bitnet_queue_depth",
            "gauge",
            "Requests waiting for a decode slot",
            scheduler.queue_depth,
        ),
        ("bitnet_active_sequences", "gauge", "Sequences decoding now", scheduler.active),
        ("bitnet_batched_steps_total", "counter", "Batched forward steps", s.steps_total),
        (
            "bitnet_step_tokens_total",
            "counter",
            "Tokens through the batched steps",
            s.step_tokens_total,
        ),
        ("bitnet_step_tokens_max", "gauge", "The most tokens one step carried", s.step_tokens_max),
        (
            "bitnet_step_tokens_limit",
            "gauge",
            "Tokens one step may carry (--step-tokens)",
            scheduler.step_tokens,
        ),
        ("bitnet_kv_cache_used_bytes", "gauge", "KV cache bytes in use", kv.get("used_bytes", 0)),
        (
            "bitnet_kv_cache_used_blocks",
            "gauge",
            "KV cache blocks in use",
            kv.get("used_blocks", 0),
        ),
        (
            "bitnet_kv_cache_max_blocks",
            "gauge",
            "KV cache blocks available",
            kv.get("max_blocks", 0),
        ),
        (
            "bitnet_kv_cache_evictions_total",
            "counter",
            "Sequences evicted from the KV cache",
            kv.get("evictions", 0),
        ),
        (
            "bitnet_prefix_cache_hit_tokens_total",
            "counter",
            "Prompt tokens reused from the prefix cache",
            pc.get("hit_tokens", 0),
        ),
        (
            "bitnet_prefix_cache_shared_tokens_total",
            "counter",
            "Of the reused prompt tokens, those whose KV pages were mapped, not copied",
            pc.get("shared_tokens", 0),
        ),
        (
            "bitnet_prefix_cache_miss_tokens_total",
            "counter",
            "Prompt tokens computed (not in the prefix cache)",
            pc.get("miss_tokens", 0),
        ),
        (
            "bitnet_prefix_cache_evictions_total",
            "counter",
            "Prefix cache blocks dropped for room",
            pc.get("evictions", 0),
        ),
        (
            "bitnet_prefix_cache_blocks",
            "gauge",
            "Blocks in the prefix cache",
            pc.get("cached_blocks", 0),
        ),
        (
            "bitnet_uptime_seconds",
            "gauge",
            "Seconds since the server started",
            time.time() - started,
        ),
    ]
    out = []
    for name, kind, help_, value in rows:
        out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {float(value):.6g}"]
    if latencies is not None:
        out += latencies.render()
    return "\n".join(out) + "\n"
