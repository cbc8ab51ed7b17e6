"""``bitnet chat``: an interactive conversation (the file's chat template when it has one)."""

from __future__ import annotations

import argparse
import sys

from ..model_options import add_model_args, add_sampling_args, load_model, sampling_kwargs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("chat", help="chat interactively with a model")
    add_model_args(p)
    p.add_argument("--system", default=None, help="system prompt")
    add_sampling_args(p, max_tokens=256)
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...model.sampling import SamplingParams

    sampling = sampling_kwargs(args)
    SamplingParams.from_kwargs(**sampling)
    model = load_model(args)
    messages: list[dict] = []
    if args.system:
        messages.append({"role": "system", "content": args.system})
    session = model.session()  # the conversation's KV cache: each turn computes only new tokens
    interactive = sys.stdin.isatty()
    if interactive:
        print("bitnet chat: empty line or Ctrl-D to quit", file=sys.stderr)
    while True:
        if interactive:
            print("> ", end="", file=sys.stderr, flush=True)
        line = sys.stdin.readline()
        if not line or not line.strip():
            return 0
        messages.append({"role": "user", "content": line.rstrip("\n")})
        prompt = model.chat_ids(messages)
        reply = []
        for piece in model.stream(prompt, session=session, **sampling):
            reply.append(piece)
            sys.stdout.write(piece)
            sys.stdout.flush()
        sys.stdout.write("\n")
        sys.stdout.flush()
        messages.append({"role": "assistant", "content": "".join(reply)})
