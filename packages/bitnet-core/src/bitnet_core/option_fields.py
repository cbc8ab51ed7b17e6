"""Dataclass fields that carry their command-line flag, so an option is declared once.

``option(default, *flags, help=...)`` declares a field with its flags, help and
bounds; ``add_flags`` turns a dataclass's fields into ``argparse`` flags and
``from_namespace`` reads them back. ``ModelOptions`` (``model/load_options.py``)
and ``ServerOptions`` (``server/options.py``) are declared this way, and the Ray
Serve config (``server/ray_config.py``) builds its fields from the same ones.
Standard library only.
"""

from __future__ import annotations

import argparse
import dataclasses
import types
import typing
from collections.abc import Iterable
from dataclasses import field
from typing import Any, Literal

T = typing.TypeVar("T")


def option(
    default: Any,
    *flags: str,
    help: str,  # noqa: A002 - argparse's name
    minimum: float | None = None,
    above: float | None = None,
    metavar: str | None = None,
    replica: bool = True,
) -> Any:
    """A dataclass field with its flags (the first one names it in errors), help and
    lowest value (``minimum``, or ``above`` for a bound it must exceed); ``replica=False``:
    an option of the command line only, that a Ray Serve replica does not take. A ``bool``
    field's flag sets it to ``not default``."""
    meta = {"flags": flags, "help": help, "minimum": minimum, "above": above, "metavar": metavar}
    return field(default=default, metadata={**meta, "replica": replica})


def _base_type(hint: Any) -> Any:
    """``int`` of ``int | None``; a ``Literal`` stays itself."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = [a for a in typing.get_args(hint) if a is not type(None)]
    return hint


def add_flags(
    p: argparse.ArgumentParser, cls: type, fields: Iterable[dataclasses.Field] | None = None
) -> None:
    """Each field of the dataclass ``cls`` (``fields``, default all) as a flag; an unset
    flag stays None (the field's default, see ``from_namespace``)."""
    hints = typing.get_type_hints(cls)
    for f in dataclasses.fields(cls) if fields is None else fields:
        meta, kind = f.metadata, _base_type(hints[f.name])
        if kind is bool:
            p.add_argument(
                *meta["flags"], dest=f.name, action="store_const", const=not f.default,
                default=None, help=meta["help"],
            )  # fmt: skip
            continue
        extra: dict[str, Any] = {"metavar": meta["metavar"]} if meta["metavar"] else {}
        if typing.get_origin(kind) is Literal:
            extra["choices"] = list(typing.get_args(kind))
            kind = str
        p.add_argument(
            *meta["flags"], dest=f.name, type=kind, default=None, help=meta["help"], **extra
        )


def from_namespace(cls: type[T], args: argparse.Namespace) -> T:
    """The dataclass ``cls`` from the flags ``add_flags`` parsed (a flag left out, or a
    field the parser has no flag for, keeps its default)."""
    got = {f.name: getattr(args, f.name, None) for f in dataclasses.fields(cls)}  # type: ignore[arg-type]
    return cls(**{k: v for k, v in got.items() if v is not None})


def flag_of(cls: type, name: str) -> str:
    """The first flag of the field ``name`` of ``cls``."""
    return {f.name: f.metadata for f in dataclasses.fields(cls)}[name]["flags"][0]
