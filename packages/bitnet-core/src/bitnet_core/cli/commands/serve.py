"""``bitnet serve``: the OpenAI-compatible HTTP server."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from ...errors import ConfigError
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
    p.add_argument(
        "--api-key",
        default=None,
        help="require 'Authorization: Bearer KEY' (default: BITNET_API_KEY)",
    )
    p.add_argument("--model-name", default=None, help="name clients use (default: the file's stem)")
    p.add_argument(
        "--parallel",
        "-np",
        "--max-active",
        dest="max_active",
        type=int,
        default=8,
        help="sequences decoding together (llama.cpp's --parallel)",
    )
    p.add_argument(
        "--max-queue", type=int, default=256, help="queued + running requests before 429"
    )
    p.add_argument("--max-tokens", type=int, default=256, help="default max_tokens of a request")
    p.add_argument(
        "--step-tokens",
        "--max-num-batched-tokens",
        dest="step_tokens",
        type=int,
        default=None,
        help="tokens one batched step may carry: one per decoding sequence, the rest feed "
        "prompts in chunks (vLLM's --max-num-batched-tokens; default max(128, --parallel + 1))",
    )
    p.add_argument(
        "--max-body-bytes",
        type=int,
        default=8 << 20,
        help="largest request body; bigger ones get 413 (default 8 MiB)",
    )
    p.add_argument(
        "--no-prefix-cache",
        dest="prefix_cache",
        action="store_false",
        help="compute every prompt in full (default: reuse the KV of prefixes computed before)",
    )
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    try:
        import uvicorn

        from ...server.app import create_app
    except ImportError as exc:
        raise ConfigError(
            f"bitnet serve needs the server extra: pip install 'bitnet-core[server]' ({exc})"
        ) from exc

    for name in ("port", "max_active", "max_queue", "max_tokens", "max_body_bytes"):
        if getattr(args, name) <= 0 or (name == "port" and args.port > 65535):
            flag = "--parallel" if name == "max_active" else f"--{name.replace('_', '-')}"
            raise ConfigError(f"{flag} out of range: {getattr(args, name)}")
    if args.step_tokens is not None and args.step_tokens <= args.max_active:
        raise ConfigError(
            f"--step-tokens ({args.step_tokens}) must be above --parallel ({args.max_active}): "
            "every decoding sequence takes one token of a step and prompts need the rest"
        )
    model = load_model(args)
    name = args.model_name or (Path(model.path).stem if model.path else "bitnet")
    app = create_app(
        model,
        name,
        api_key=args.api_key or os.environ.get("BITNET_API_KEY") or None,
        max_active=args.max_active,
        max_queue=args.max_queue,
        default_max_tokens=args.max_tokens,
        max_body_bytes=args.max_body_bytes,
        step_tokens=args.step_tokens,
        prefix_cache=args.prefix_cache,
    )
    print(f"serving {name} on http://{args.host}:{args.port}", file=sys.stderr)
    uvicorn.run(app, host=args.host, port=args.port, log_level="warning")
    return 0
