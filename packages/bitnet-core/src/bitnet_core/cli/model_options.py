"""Options shared by ``bitnet run``, ``chat`` and ``bench``: the model, the device, sampling."""

from __future__ import annotations

import argparse
import sys
from typing import Any

from ..sdk.load_stages import stage_line


def add_model_args(p: argparse.ArgumentParser) -> None:
    p.add_argument(
        "--model",
        "-m",
        default=None,
        help="GGUF file, or a hub model ORG/NAME[@REV][:FILE] or hf://ORG/NAME/FILE.gguf "
        "(default: the bundled demo model)",
    )
    p.add_argument(
        "--device",
        default=None,
        help="auto, cpu, gpu, a device family or a provider name (see bitnet devices)",
    )
    p.add_argument("--threads", "-t", type=int, default=None, help="CPU threads for the kernels")
    p.add_argument(
        "--no-act-quant",
        action="store_true",
        help="debug: keep activations in float (no per-token int8 quantization)",
    )
    p.add_argument("--ctx-size", "-c", type=int, default=None, help="context length (tokens)")
    p.add_argument(
        "--kv-type",
        choices=["f16", "f32"],
        default=None,
        help="KV cache element type (default: the device's choice; f16 on the native CPU providers)",
    )
    p.add_argument(
        "--kv-budget",
        type=int,
        default=None,
        metavar="MIB",
        help="KV cache memory for all sequences together, MiB (default 1024)",
    )
    p.add_argument(
        "--no-progress", action="store_true", help="no progress bar while the model loads"
    )


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
    from ..model.load_options import apply_threads, kv_cache_config

    apply_threads(args.threads)
    kv = kv_cache_config(
        args.ctx_size, getattr(args, "kv_type", None), getattr(args, "kv_budget", None)
    )
    model = load(
        args.model,
        args.device,
        quantize_activations=not args.no_act_quant,
        kv_cache=kv,
        progress=False if args.no_progress else None,
    )
    set_threads = getattr(model.provider, "set_threads", None)
    if args.threads and callable(set_threads):
        set_threads(args.threads)
    print(
        f"bitnet: {model.selection} model={model.path} "
        f"layers={model.config.num_layers} hidden={model.config.hidden_size} "
        f"act_quant={'on' if model.quantize_activations else 'off'} load={model.load_s:.2f}s"
        + (f" ({stage_line(model.load_stages)})" if model.load_stages else ""),
        file=sys.stderr,
    )
    return model
