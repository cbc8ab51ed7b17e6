"""Entry point of the ``bitnet`` console script.

Subcommands live one per module in ``bitnet_core.cli.commands``; each module
has ``register(subparsers)`` that adds its parser and sets ``func``. Adding a
command is adding a module. Errors from the ``bitnet_core.errors`` hierarchy
become one ``error: ...`` line and the error's exit code, never a traceback.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import pkgutil
import sys
from collections.abc import Sequence

from .._version import __version__
from ..errors import BitnetError
from . import commands


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="bitnet", description="Run BitNet b1.58 (ternary) language models on any device."
    )
    parser.add_argument("--version", action="version", version=f"bitnet {__version__}")
    parser.add_argument(
        "-v", "--verbose", action="count", default=0, help="more logging (-v info, -vv debug)"
    )
    sub = parser.add_subparsers(dest="command", metavar="COMMAND")
    for info in sorted(pkgutil.iter_modules(commands.__path__), key=lambda m: m.name):
        module = importlib.import_module(f"{commands.__name__}.{info.name}")
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    level = {0: logging.WARNING, 1: logging.INFO}.get(args.verbose, logging.DEBUG)
    logging.basicConfig(
        level=level, format="%(levelname)s %(name)s: %(message)s", stream=sys.stderr
    )
    if not getattr(args, "func", None):
        parser.print_help(sys.stderr)
        return 2
    try:
        return int(args.func(args) or 0)
    except BitnetError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return exc.exit_code
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130
    except BrokenPipeError:  # `bitnet run ... | head`
        return 0


if __name__ == "__main__":
    sys.exit(main())
