"""``bitnet pull ORG/NAME[@REV][:FILE]``: fetch a hub model into the local cache, print its path."""

from __future__ import annotations

import argparse

from ..model_options import add_conversion_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "pull",
        help="download a model from the Hugging Face Hub into the local cache",
        description="Download a model by name into huggingface_hub's cache and print the "
        "local GGUF path. A repo with several GGUF files gives the I2_S, else TQ2_0, else "
        "TQ1_0 one (FILE picks another); a checkpoint repo without GGUF files is converted "
        "once, into the cache. HF_TOKEN, HF_ENDPOINT and HF_HUB_OFFLINE apply.",
    )
    p.add_argument("model", help="ORG/NAME[@REV][:FILE] or hf://ORG/NAME[@REV]/FILE.gguf")
    add_conversion_args(p, "ternary type when a checkpoint repo is converted")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...errors import HubError
    from ...hub import fetch_model, parse_model_ref

    ref = parse_model_ref(args.model)
    if ref is None:
        raise HubError(f"{args.model!r} is a local path, not a hub model name (ORG/NAME)")
    path = fetch_model(
        ref, ternary_type=args.ternary_type, progress=False if args.no_progress else None
    )
    print(path)
    return 0
