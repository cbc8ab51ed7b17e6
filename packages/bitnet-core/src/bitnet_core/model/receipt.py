"""Receipts (seeds 003/004): a JSON record of one run, and its validator.

A receipt says what ran where: the startup summary, the provider, the device
the probe that chose it found (``device``; ``device_kind`` ``"cpu"`` for a
CPU that a GPU API emulates), the kernels that actually ran and the fast
paths given up (``kernels``, ``submissions`` and ``fallbacks``, from the
provider's ``sdk.trace.LaunchTrace``), the ops placed on the host
(``host_ops``, ``host_calls``), the model (path, sha256, config), token
counts and tokens/s for prompt and decode, ``compute_path`` (``"real"``, or
``"fake"`` on a ``BITNET_GPU_FAKE`` device), versions and a UTC timestamp.
``validate`` checks the structure (``ValidationError``); under
``BITNET_STRICT_MODE=1`` anything but ``compute_path: "real"``, or a
receipt with fallbacks, is a ``StrictModeError`` (exit 8).
"""

from __future__ import annotations

import hashlib
import json
import os
import platform
import sys
import tempfile
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

import numpy as np

from .._version import __version__
from ..atomic_file import ordinary_mode
from ..errors import StrictModeError, ValidationError
from ..hal.provider import KERNEL_INVENTORY
from ..hal.selection import strict_mode
from ..sdk.trace import LaunchTrace, TraceMark

SCHEMA = "bitnet.receipt/1"
COMPUTE_PATHS = ("real", "fake")
_REQUIRED = {
    "schema": str,
    "timestamp": str,
    "compute_path": str,
    "startup": dict,
    "provider": dict,
    "model": dict,
    "tokens": dict,
    "throughput": dict,
    "versions": dict,
}


def file_sha256(path: str | os.PathLike, chunk: int = 1 << 22) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(chunk):
            h.update(block)
    return h.hexdigest()


def launch_trace(provider: Any) -> LaunchTrace | None:
    """The provider's ``trace`` (what it ran), or None for a provider that keeps none."""
    trace = getattr(provider, "trace", None)
    return trace if isinstance(trace, LaunchTrace) else None


def kernel_names(provider: Any, since: TraceMark | None = None) -> list[str]:
    """The kernels the provider ran on its device (after ``since``): its trace's; for a
    provider that keeps no trace, its own ``kernel_names()``, else the protocol ops it
    has (a partial provider's host ops are ``host_ops``)."""
    trace = launch_trace(provider)
    if trace is not None:
        return trace.kernels_since(since) if since is not None else trace.kernel_names()
    own = getattr(provider, "kernel_names", None)
    if callable(own):
        return list(own())
    return [op for op in KERNEL_INVENTORY if callable(getattr(provider, op, None))]


def _since(trace: LaunchTrace | None, mark: TraceMark | None, what: str) -> Any:
    """The trace's ``submissions`` or ``fallbacks`` after ``mark`` (all without one)."""
    if trace is None:
        return None
    if mark is None:
        return trace.submissions if what == "submissions" else list(trace.fallbacks)
    return getattr(trace, f"{what}_since")(mark)


def _host_calls_since(provider: Any, mark: dict[str, int]) -> dict[str, int]:
    """The host ops a partial provider ran after ``mark`` (its ``host_calls`` then)."""
    calls = getattr(provider, "host_calls", {})
    return {op: n - mark.get(op, 0) for op, n in calls.items() if n > mark.get(op, 0)}


def build_receipt(model: Any, stats: Any, **extra: Any) -> dict:
    """The receipt of ``model``'s run described by ``stats`` (a ``GenerationStats``)."""
    provider = model.provider
    summary = model.selection
    fake = bool(summary.fake) if summary is not None else False
    avail = model.availability
    trace = launch_trace(provider)
    # what ran since the model was made (the provider may have run other models before)
    mark = getattr(model, "trace_mark", None)
    path = getattr(model, "path", None)
    receipt = {
        "schema": SCHEMA,
        "timestamp": datetime.now(timezone.utc).isoformat(timespec="seconds"),
        "compute_path": "fake" if fake else "real",
        "strict_mode": strict_mode(),
        "startup": summary.as_dict() if summary is not None else {"line": provider.name},
        "provider": {
            "name": provider.name,
            "family": getattr(provider, "family", ""),
            "device_kind": getattr(avail, "device_kind", "")
            or getattr(provider, "device_kind", ""),
            "device": getattr(avail, "device", ""),
            "runner": type(model.runner).__name__,
            "kernels": kernel_names(provider, mark),
            "submissions": _since(trace, mark, "submissions"),
            "fallbacks": _since(trace, mark, "fallbacks") or [],
            "host_ops": list(getattr(provider, "host_ops", ())),
            "host_calls": _host_calls_since(provider, getattr(model, "host_calls_mark", {})),
            "quantize_activations": model.quantize_activations,
        },
        "model": {
            "path": str(path) if path else None,
            "sha256": file_sha256(path) if path else None,
            "config": model.config.as_dict(),
        },
        "tokens": {"prompt": stats.prompt_tokens, "generated": stats.generated_tokens},
        "throughput": {
            "prompt_tokens_per_s": stats.prompt_tokens_per_s,
            "decode_tokens_per_s": stats.decode_tokens_per_s,
            "prompt_s": stats.prompt_s,
            "decode_s": stats.decode_s,
            "decode_steps": stats.decode_steps,
            "load_s": getattr(model, "load_s", 0.0),
            "load_stages": dict(getattr(model, "load_stages", {})),
        },
        "finish_reason": stats.finish_reason,
        # "device": greedy tokens chosen on the device; "host": logits to the host a step
        "token_path": getattr(stats, "token_path", "") or "host",
        "sampling": model.last_params.as_dict() if getattr(model, "last_params", None) else None,
        "versions": {
            "bitnet_core": __version__,
            "python": platform.python_version(),
            "numpy": np.__version__,
            "platform": platform.platform(),
        },
    }
    receipt.update(extra)
    return receipt


def validate(receipt: Any, strict: bool | None = None) -> None:
    """Raise ``ValidationError`` for a malformed receipt, ``StrictModeError`` for a non-real one in strict mode."""
    if not isinstance(receipt, dict):
        raise ValidationError(f"receipt must be a JSON object, got {type(receipt).__name__}")
    for key, typ in _REQUIRED.items():
        if key not in receipt:
            raise ValidationError(f"receipt: missing field {key!r}")
        if not isinstance(receipt[key], typ):
            raise ValidationError(f"receipt: {key!r} must be a {typ.__name__}")
    if receipt["schema"] != SCHEMA:
        raise ValidationError(f"receipt: unknown schema {receipt['schema']!r} (expected {SCHEMA})")
    try:
        datetime.fromisoformat(receipt["timestamp"])
    except ValueError:
        raise ValidationError(f"receipt: bad timestamp {receipt['timestamp']!r}") from None
    for section, keys in {
        "provider": ("name", "kernels"),
        "tokens": ("prompt", "generated"),
        "throughput": ("prompt_tokens_per_s", "decode_tokens_per_s"),
        "versions": ("bitnet_core", "python"),
    }.items():
        for k in keys:
            if k not in receipt[section]:
                raise ValidationError(f"receipt: missing {section}.{k}")
    for k in ("prompt", "generated"):
        v = receipt["tokens"][k]
        if not isinstance(v, int) or isinstance(v, bool) or v < 0:
            raise ValidationError(f"receipt: tokens.{k} must be an integer >= 0, got {v!r}")
    for k in ("prompt_tokens_per_s", "decode_tokens_per_s"):
        v = receipt["throughput"][k]
        if not isinstance(v, (int, float)) or isinstance(v, bool) or v < 0 or v != v:
            raise ValidationError(f"receipt: throughput.{k} must be a number >= 0, got {v!r}")
    prov = receipt["provider"]
    for k in ("kernels", "fallbacks", "host_ops"):  # fallbacks, host_ops: absent in old receipts
        v = prov.get(k, [])
        if not isinstance(v, list) or not all(isinstance(n, str) for n in v):
            raise ValidationError(f"receipt: provider.{k} must be a list of names, got {v!r}")
    if not prov["kernels"] and not prov.get("host_calls"):
        raise ValidationError("receipt: provider.kernels is empty (and nothing ran on the host)")
    path = receipt["compute_path"]
    if path not in COMPUTE_PATHS:
        raise ValidationError(f"receipt: unknown compute_path {path!r}")
    if strict_mode() if strict is None else strict:
        if path != "real":
            raise StrictModeError(
                f"BITNET_STRICT_MODE=1: receipt has compute_path {path!r}; only 'real' is accepted"
            )
        if prov.get("fallbacks"):
            raise StrictModeError(
                f"BITNET_STRICT_MODE=1: the run fell back: {'; '.join(prov['fallbacks'])}"
            )


def write_receipt(path: str | os.PathLike, receipt: dict) -> Path:
    """Write ``receipt`` as JSON through a temporary file renamed into place."""
    target = Path(path)
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=target.name + ".", suffix=".tmp", dir=target.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(receipt, f, indent=2, sort_keys=True)
            f.write("\n")
        ordinary_mode(tmp)  # mkstemp makes 0600; a receipt is an ordinary file
        os.replace(tmp, target)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return target


def read_receipt(path: str | os.PathLike, strict: bool | None = None) -> dict:
    """Load and validate a receipt file."""
    try:
        data = json.loads(Path(path).read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as exc:
        raise ValidationError(f"{path}: not a readable JSON receipt: {exc}") from None
    validate(data, strict=strict)
    return data


if __name__ == "__main__":  # python -m bitnet_core.model.receipt FILE...
    for arg in sys.argv[1:]:
        read_receipt(arg)
        print(f"{arg}: ok")
