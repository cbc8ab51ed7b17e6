"""``bitnet convert SRC_DIR OUT.gguf``: a Hugging Face BitNet checkpoint to GGUF."""

from __future__ import annotations

import argparse

from ..model_options import add_conversion_args


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "convert",
        help="convert a Hugging Face BitNet checkpoint (safetensors) to GGUF",
        description="Convert a checkpoint saved by transformers' BitNetForCausalLM, a "
        "llama checkpoint with BitNet quantization, or a BitNet embedding model (Qwen3 or "
        "Gemma3 with BitNet quantization, sentence-transformers pooling files) "
        "(config.json, safetensors, tokenizer files) to a GGUF file.",
    )
    p.add_argument("src", help="checkpoint directory")
    p.add_argument("out", help="GGUF file to write")
    add_conversion_args(p, "format of the ternary layer weights")
    p.add_argument("--force", action="store_true", help="replace OUT if it exists")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from ...convert import convert_checkpoint

    path = convert_checkpoint(  # BitnetErrors become one line and their exit code in main()
        args.src,
        args.out,
        ternary_type=args.ternary_type,
        overwrite=args.force,
        progress=False if args.no_progress else None,
        report=lambda line: print(f"fallback: {line}"),
    )
    print(f"wrote {path} ({path.stat().st_size / 1e6:.1f} MB, ternary {args.ternary_type})")
    return 0
