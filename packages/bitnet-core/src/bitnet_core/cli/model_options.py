"""Options shared by the commands: the model, the device, sampling (``bitnet run``, ``chat``,
``bench``, ``embed``, ``serve``), and a conversion's (``bitnet convert``, ``pull``)."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..convert.types import CONVERT_TYPES
from ..model.load_options import ModelOptions, apply_threads
from ..option_fields import add_flags, from_namespace
from ..sdk.load_stages import stage_line


def add_model_args(p: argparse.ArgumentParser) -> None:
    """Every ``ModelOptions`` field as a flag: --model --device --threads --no-act-quant
    --ctx-size --kv-type --kv-budget --no-progress (``model/load_options.py``)."""
    add_flags(p, ModelOptions)


def add_conversion_args(p: argparse.ArgumentParser, type_help: str) -> None:
    """``--type`` (the ternary layout a conversion writes, ``type_help``) and ``--no-progress``."""
    p.add_argument(
        "--type",
        dest="ternary_type",
        choices=CONVERT_TYPES,
        default="tq2_0",
        help=f"{type_help} (default: tq2_0)",
    )
    p.add_argument("--no-progress", action="store_true", help="no progress bar")


def add_sampling_args(p: argparse.ArgumentParser, max_tokens: int = 128) -> None:
    g = p.add_argument_group("sampling")
    g.add_argument("-n", "--max-tokens", type=int, default=max_tokens, help="tokens to generate")
    g.add_argument("--temperature", "--temp", type=float, default=None, help="0: greedy (0.8)")
    g.add_argument("--top-k", type=int, default=None, help="0: off (40)")
    g.add_argument("--top-p", type=float, default=None, help="1.0: off (0.95)")
    g.add_argument("--min-p", type=float, default=None, help="0.0: off (0.05)")
    g.add_argument("--repeat-penalty", type=float, default=None, help="1.0: off (1.0)")
    g.add_argument("--repeat-last-n", type=int, default=None, help="tokens the penalty sees (64)")
    g.add_argument("--seed", type=int, default=None, help="same seed, same tokens")
    g.add_argument(
        "--stop", action="append", default=None, help="stop string (repeatable)", metavar="TEXT"
    )


def sampling_kwargs(args: argparse.Namespace) -> dict[str, Any]:
    keys = (
        "temperature",
        "top_k",
        "top_p",
        "min_p",
        "repeat_penalty",
        "repeat_last_n",
        "seed",
        "stop",
    )
    out = {k: getattr(args, k) for k in keys if getattr(args, k, None) is not None}
    out["max_tokens"] = args.max_tokens
    return out


def load_model(args: argparse.Namespace):
    """Load the model the arguments name; print the startup summary on stderr."""
    from ..model import load

    opts = from_namespace(ModelOptions, args)
    apply_threads(opts.threads)
    model = load(
        opts.model,
        opts.device,
        quantize_activations=opts.act_quant,
        kv_cache=opts.kv_cache(),
        progress=None if opts.progress else False,
    )
    set_threads = getattr(model.provider, "set_threads", None)
    if opts.threads and callable(set_threads):
        set_threads(opts.threads)
    print(
        f"bitnet: {model.selection} model={model.path} "
        f"layers={model.config.num_layers} hidden={model.config.hidden_size} "
        f"act_quant={'on' if model.quantize_activations else 'off'} load={model.load_s:.2f}s"
        + (f" ({stage_line(model.load_stages)})" if model.load_stages else ""),
        file=sys.stderr,
    )
    return model
