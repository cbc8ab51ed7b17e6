"""``/metrics``: the server's counters in the Prometheus text exposition format."""

from __future__ import annotations

import time
from typing import Any

from .scheduler import Scheduler


def render_metrics(model: Any, scheduler: Scheduler, started: float) -> str:
    s = scheduler.stats
    kv = model.backend.kv.stats() if hasattr(getattr(model, "backend", None), "kv") else {}
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
            "bitnet_uptime_seconds",
            "gauge",
            "Seconds since the server started",
            time.time() - started,
        ),
    ]
    out = []
    for name, kind, help_, value in rows:
        out += [f"# HELP {name} {help_}", f"# TYPE {name} {kind}", f"{name} {float(value):.6g}"]
    return "\n".join(out) + "\n"
