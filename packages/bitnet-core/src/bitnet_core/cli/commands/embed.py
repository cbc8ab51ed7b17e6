"""``bitnet embed``: embeddings of texts (arguments, else stdin lines) as JSON or ``.npy``."""

from __future__ import annotations

import argparse
import json
import sys

from ...errors import ConfigError
from ..model_options import add_model_args, load_model


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "embed",
        help="embed texts with an embedding model (JSON or .npy out)",
        description="Texts from the arguments, else one per line of stdin; all in one batch. "
        "Prints a JSON list of vectors (L2-normalized), or writes a float32 .npy with --out.",
    )
    add_model_args(p)
    p.add_argument("texts", nargs="*", metavar="TEXT", help="texts to embed (default: stdin lines)")
    p.add_argument(
        "--dimensions",
        type=int,
        default=None,
        help="keep the first N values of each vector, then normalize again (Matryoshka)",
    )
    p.add_argument("--out", "-o", default=None, metavar="FILE.npy", help="write a .npy here")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    texts = list(args.texts) or [line.rstrip("\n") for line in sys.stdin]
    if not texts:
        raise ConfigError("bitnet embed: no texts (give them as arguments or stdin lines)")
    if args.out is not None and not str(args.out).endswith(".npy"):
        raise ConfigError(f"--out {args.out!r}: only .npy files are written")
    model = load_model(args)
    vectors = model.embed(texts, dimensions=args.dimensions)
    if args.out is not None:
        import numpy as np

        np.save(args.out, vectors)
        print(
            f"bitnet: {vectors.shape[0]} x {vectors.shape[1]} written to {args.out}",
            file=sys.stderr,
        )
        return 0
    json.dump([[float(x) for x in v] for v in vectors], sys.stdout)
    sys.stdout.write("\n")
    return 0
