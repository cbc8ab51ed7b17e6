"""``bitnet serve-ray``: ``bitnet serve`` as a Ray Serve application (docs/SCALING.md)."""

from __future__ import annotations

import argparse
import dataclasses
import sys
from typing import Any

from ...errors import ConfigError
from ...model.load_options import ModelOptions, replica_fields
from ...option_fields import add_flags
from ...server.options import RayOptions, ServerOptions, add_server_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve-ray",
        help="the OpenAI-compatible server as a Ray Serve application (replicas, autoscaling)",
        description="Serve replicas of the model behind one HTTP endpoint with Ray Serve; "
        "without --address a local Ray cluster is started here. Each replica loads the "
        "model (the same path on every node) on a device selected on its own node, with "
        "its own --threads and --kv-budget.",
    )
    add_flags(p, ModelOptions, replica_fields())  # what `bitnet serve` loads, in each replica
    add_flags(p, RayOptions)  # server/options.py: replicas or autoscaling, CPUs and GPUs of each
    p.add_argument("--host", default="127.0.0.1", help="address of Ray's HTTP proxy")
    p.add_argument("--port", type=int, default=8000)
    p.add_argument(
        "--address", default=None, help="a running Ray cluster (default: start a local one)"
    )
    add_server_args(p)  # server/options.py: what `bitnet serve` takes, for each replica
    p.add_argument(
        "--print-config",
        action="store_true",
        help="print the Ray Serve config file for `serve deploy` and exit",
    )
    p.set_defaults(func=run)


def app_args(args: argparse.Namespace) -> dict[str, Any]:
    """The application's arguments (``RayServeArgs``) the flags set."""
    fields = (
        *replica_fields(),
        *dataclasses.fields(ServerOptions),
        *dataclasses.fields(RayOptions),
    )
    return {f.name: getattr(args, f.name) for f in fields if getattr(args, f.name) is not None}


def run(args: argparse.Namespace) -> int:
    from ...server.ray_config import parse_args, serve_config

    if not 0 < args.port <= 65535:
        raise ConfigError(f"--port out of range: {args.port}")
    parsed = parse_args(app_args(args))
    if args.print_config:
        import yaml

        sys.stdout.write(
            yaml.safe_dump(serve_config(parsed, args.host, args.port), sort_keys=False)
        )
        return 0
    try:
        from ...server.ray_serve import serve_until_stopped
    except ImportError as exc:
        raise ConfigError(
            f"bitnet serve-ray needs the ray extra: pip install 'bitnet-core[ray]' ({exc})"
        ) from exc
    serve_until_stopped(parsed, args.host, args.port, args.address)
    return 0
