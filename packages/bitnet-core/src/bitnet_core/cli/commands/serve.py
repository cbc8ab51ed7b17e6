"""``bitnet serve``: the OpenAI-compatible HTTP server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ...errors import ConfigError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "serve", help="OpenAI-compatible HTTP server (/v1/completions, /v1/chat/completions)"
    )
    p.add_argument(
        "--model", "-m", default=None, help="GGUF model (default: the bundled demo model)"
    )
    p.add_argument(
        "--device",
        default=None,
        help="auto, cpu, gpu, a device family or a provider name (see bitnet devices)",
    )
    p.add_argument(
        "--host", default="127.0.0.1", help="address to listen on (default: loopback only)"
    )
    p.add_argument("--port", type=int, default=8080)
    p.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' (default: BITNET_API_KEY)",
    )
    p.add_argument("--model-name", default=None, help="name clients use (default: the file's stem)")
    p.add_argument("--max-active", type=int, default=8, help="sequences decoding together")
    p.add_argument(
        "--max-queue", type=int, default=256, help="queued + running requests before 429"
    )
    p.add_argument("--max-tokens", type=int, default=256, help="default max_tokens of a request")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ...server.app import create_app
    except ImportError as exc:
        raise ConfigError(
            f"bitnet serve needs the server extra: pip install 'bitnet-core[server]' ({exc})"
        ) from exc
    from ...model.api import load

    for name in ("port", "max_active", "max_queue", "max_tokens"):
        if getattr(args, name) <= 0 or (name == "port" and args.port > 65535):
            raise ConfigError(f"--{name.replace('_', '-')} out of range: {getattr(args, name)}")
    model = load(args.model, device=args.device)
    name = args.model_name or (Path(model.path).stem if model.path else "bitnet")
    print(str(model.selection), file=sys.stderr)
    app = create_app(
        model,
        name,
        api_key=args.api_key or os.environ.get("BITNET_API_KEY") or None,
        max_active=args.max_active,
        max_queue=args.max_queue,
        default_max_tokens=args.max_tokens,
    )
    print(f"serving {name} on http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
