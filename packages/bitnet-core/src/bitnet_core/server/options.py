"""The server's options, declared once: ``bitnet serve``, ``bitnet serve-ray`` and the Ray
Serve config (``ray_config.RayServeArgs``) all read :class:`ServerOptions`; ``serve-ray``'s
flags and the config's deployment settings both come from :class:`RayOptions`.

Each field carries its command-line flags and help (``option_fields.option``);
``add_server_args`` turns the fields into ``argparse`` flags and
``from_namespace`` reads them back. Needs nothing beyond the standard library,
so the CLI can parse and check the flags before the server extra is imported.
"""

from __future__ import annotations

import argparse
import dataclasses
from dataclasses import dataclass

from .. import option_fields
from ..errors import ConfigError
from ..option_fields import option


@dataclass(frozen=True)
class ServerOptions:
    """How one server (or one Ray Serve replica) serves its model."""

    model_name: str | None = option(
        None, "--model-name", help="name clients use (default: the file's stem)"
    )
    api_key: str | None = option(
        None, "--api-key", help="require 'Authorization: Bearer KEY' (default: BITNET_API_KEY)"
    )
    max_active: int = option(
        8, "--parallel", "-np", "--max-active",
        help="sequences decoding together (llama.cpp's --parallel)", minimum=1,
    )  # fmt: skip
    max_queue: int = option(
        256, "--max-queue", help="queued + running requests before 429", minimum=1
    )
    max_tokens: int = option(256, "--max-tokens", help="default max_tokens of a request", minimum=1)
    max_body_bytes: int = option(
        8 << 20, "--max-body-bytes",
        help="largest request body; bigger ones get 413 (default 8 MiB)", minimum=1,
    )  # fmt: skip
    step_tokens: int | None = option(
        None, "--step-tokens", "--max-num-batched-tokens",
        help="tokens one batched step may carry: one per decoding sequence, the rest feed "
        "prompts in chunks (vLLM's --max-num-batched-tokens; default max(128, --parallel + 1))",
        minimum=2,
    )  # fmt: skip
    prefix_cache: bool = option(
        True, "--no-prefix-cache",
        help="compute every prompt in full (default: reuse the KV of prefixes computed before)",
    )  # fmt: skip

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
        return option_fields.from_namespace(cls, args)


@dataclass(frozen=True)
class RayOptions:
    """How Ray Serve runs the replicas: a fixed number, or autoscaling bounds, and the
    resources of each (checked together in ``ray_config``)."""

    replicas: int | None = option(
        None, "--replicas", help="fixed number of replicas (1)", minimum=1
    )
    min_replicas: int | None = option(
        None, "--min-replicas", help="autoscaling: lower bound", minimum=0
    )
    max_replicas: int | None = option(
        None, "--max-replicas", help="autoscaling: upper bound", minimum=1
    )
    target_ongoing_requests: float | None = option(
        None, "--target-ongoing-requests", above=0,
        help="autoscaling: ongoing requests per replica to aim for (default: --max-active)",
    )  # fmt: skip
    num_cpus: float | None = option(
        None, "--num-cpus", help="CPUs per replica (--threads)", minimum=0
    )
    num_gpus: float | None = option(
        None, "--num-gpus", minimum=0,
        help="GPUs per replica (default: 1 for a GPU device request, else 0)",
    )  # fmt: skip


def flag_of(name: str) -> str:
    """The first flag of the field ``name``."""
    return option_fields.flag_of(ServerOptions, name)


def add_server_args(p: argparse.ArgumentParser) -> None:
    """Every ``ServerOptions`` field as a flag (unset flags stay None: the field's default)."""
    option_fields.add_flags(p, ServerOptions)
