"""``bitnet serve``: the OpenAI-compatible HTTP server."""

from __future__ import annotations

import argparse
import dataclasses
import os
import sys
from pathlib import Path

from ...errors import ConfigError
from ...server.options import ServerOptions, add_server_args
from ..model_options import add_model_args, load_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)"
    )
    add_model_args(p)  # --model --device --threads --ctx-size --kv-type --kv-budget, as bitnet run
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: loopback only)"
    )
    p.add_argument("--port", type=int, default=8080)
    add_server_args(p)  # server/options.py: the options serve-ray's replicas share
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port <= 65535:
        raise ConfigError(f"--port out of range: {args.port}")
    opts = ServerOptions.from_namespace(args)
    if opts.api_key is None and os.environ.get("BITNET_API_KEY"):
        opts = dataclasses.replace(opts, api_key=os.environ["BITNET_API_KEY"])
    try:
        import uvicorn

        from ...server.app import create_app
    except ImportError as exc:
        raise ConfigError(
            f"bitnet serve needs the server extra: pip install 'bitnet-core[server]' ({exc})"
        ) from exc

    model = load_model(args)
    name = opts.model_name or (Path(model.path).stem if model.path else "bitnet")
    app = create_app(model, name, opts)
    print(f"serving {name} on http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
