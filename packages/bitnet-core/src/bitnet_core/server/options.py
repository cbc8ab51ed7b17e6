"""The server's options, declared once: ``bitnet serve``, ``bitnet serve-ray`` and the Ray
Serve config (``ray_config.RayServeArgs``) all read :class:`ServerOptions`.

Each field carries its command-line flags and help in its metadata;
``add_server_args`` turns the fields into ``argparse`` flags and
``from_namespace`` reads them back. Needs nothing beyond the standard library,
so the CLI can parse and check the flags before the server extra is imported.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass, field
from typing import Any

from ..errors import ConfigError


def _opt(*flags: str, help: str, **kw: Any) -> dict[str, Any]:  # noqa: A002 - argparse's name
    return {"flags": flags, "help": help, **kw}


@dataclass(frozen=True)
class ServerOptions:
    """How one server (or one Ray Serve replica) serves its model."""

    model_name: str | None = field(
        default=None,
        metadata=_opt("--model-name", help="name clients use (default: the file's stem)"),
    )
    api_key: str | None = field(
        default=None,
        metadata=_opt(
            "--api-key", help="require 'Authorization: Bearer KEY' (default: BITNET_API_KEY)"
        ),
    )
    max_active: int = field(
        default=8,
        metadata=_opt(
            "--parallel", "-np", "--max-active",
            help="sequences decoding together (llama.cpp's --parallel)", minimum=1,
        ),
    )  # fmt: skip
    max_queue: int = field(
        default=256,
        metadata=_opt("--max-queue", help="queued + running requests before 429", minimum=1),
    )
    max_tokens: int = field(
        default=256,
        metadata=_opt("--max-tokens", help="default max_tokens of a request", minimum=1),
    )
    max_body_bytes: int = field(
        default=8 << 20,
        metadata=_opt(
            "--max-body-bytes",
            help="largest request body; bigger ones get 413 (default 8 MiB)",
            minimum=1,
        ),
    )
    step_tokens: int | None = field(
        default=None,
        metadata=_opt(
            "--step-tokens", "--max-num-batched-tokens",
            help="tokens one batched step may carry: one per decoding sequence, the rest feed "
            "prompts in chunks (vLLM's --max-num-batched-tokens; default max(128, --parallel + 1))",
            minimum=2,
        ),
    )  # fmt: skip
    prefix_cache: bool = field(
        default=True,
        metadata=_opt(
            "--no-prefix-cache",
            help="compute every prompt in full (default: reuse the KV of prefixes computed before)",
        ),
    )

    def __post_init__(self) -> None:
        for f in dataclasses.fields(self):
            v, low = getattr(self, f.name), f.metadata.get("minimum")
            if low is None or v is None:
                continue
            if isinstance(v, bool) or not isinstance(v, int) or v < low:
                raise ConfigError(f"{flag_of(f.name)} ({f.name}) out of range: {v!r}")
        if self.step_tokens is not None and self.step_tokens <= self.max_active:
            raise ConfigError(
                f"--step-tokens ({self.step_tokens}) must be above --parallel ({self.max_active}): "
                "every decoding sequence takes one token of a step and prompts need the rest"
            )

    @classmethod
    def from_namespace(cls, args: argparse.Namespace) -> ServerOptions:
        """The options ``add_server_args`` parsed (a flag left out keeps its default)."""
        got = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)}
        return cls(**{k: v for k, v in got.items() if v is not None})


def flag_of(name: str) -> str:
    """The first flag of the field ``name``."""
    return {f.name: f.metadata for f in dataclasses.fields(ServerOptions)}[name]["flags"][0]


def add_server_args(p: argparse.ArgumentParser) -> None:
    """Every ``ServerOptions`` field as a flag (unset flags stay None: the field's default)."""
    for f in dataclasses.fields(ServerOptions):
        meta = f.metadata
        if f.type in (bool, "bool"):
            p.add_argument(
                *meta["flags"], dest=f.name, action="store_const", const=not f.default,
                default=None, help=meta["help"],
            )  # fmt: skip
            continue
        kind = int if "int" in str(f.type) else str
        p.add_argument(*meta["flags"], dest=f.name, type=kind, default=None, help=meta["help"])
