"""``bitnet run``: generate text from a prompt, streamed to stdout (summary on stderr)."""

from __future__ import annotations

import argparse
import sys

from ..model_options import add_model_args, add_sampling_args, load_model, sampling_kwargs


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("run", help="generate text from a prompt")
    add_model_args(p)
    p.add_argument("--prompt", "-p", required=True, help="the prompt text")
    add_sampling_args(p)
    p.add_argument("--receipt", default=None, metavar="FILE", help="write a JSON receipt here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...model.receipt import validate, write_receipt
    from ...model.sampling import SamplingParams

    sampling = sampling_kwargs(args)
    SamplingParams.from_kwargs(**sampling)  # bad values fail before the model loads
    model = load_model(args)
    out = sys.stdout
    for piece in model.stream(args.prompt, **sampling):
        out.write(piece)
        out.flush()
    out.write("\n")
    out.flush()
    stats = model.last_stats
    print(
        f"bitnet: prompt {stats.prompt_tokens} tokens {stats.prompt_tokens_per_s:.1f} tok/s, "
        f"generated {stats.generated_tokens} tokens {stats.decode_tokens_per_s:.1f} tok/s "
        f"({stats.finish_reason})",
        file=sys.stderr,
    )
    if args.receipt:
        receipt = model.receipt(stats, command="run")
        validate(receipt)
        write_receipt(args.receipt, receipt)
        print(f"bitnet: receipt written to {args.receipt}", file=sys.stderr)
    return 0
