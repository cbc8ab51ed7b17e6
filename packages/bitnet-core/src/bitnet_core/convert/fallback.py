"""Per-tensor fallback of the converter, as llama.cpp's: rows a ternary type cannot hold go in F16.

TQ2_0 and TQ1_0 pack rows in blocks of 256 weights and I2_S in blocks of 128;
a BitLinear weight whose input size (its row length) is not such a multiple
is written as F16 ``codes * scale`` instead, the type llama.cpp's
``convert_hf_to_gguf.py`` falls back to, so the file stays readable by
llama.cpp (TQ types) and bitnet.cpp (I2_S). Our loader re-ternarizes F16
layer weights exactly, so the engine runs the same ternary model.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..formats import get_codec

#: The type a ternary layer falls back to (llama.cpp's converter's choice).
FALLBACK_TYPE = "f16"


@dataclass(frozen=True)
class Fallback:
    """One tensor written in ``written`` instead of ``requested``, and why."""

    tensor: str
    requested: str
    written: str
    reason: str


def _cols(value: Any) -> int:
    cols = getattr(value, "cols", None)
    return int(cols) if cols is not None else int(value.shape[-1])


def plan_fallbacks(
    ternary: Mapping[str, Any], ternary_type: str, fallback_type: str = FALLBACK_TYPE
) -> list[Fallback]:
    """The ternary tensors (GGUF name -> weight) whose rows ``ternary_type`` cannot hold."""
    multiple = get_codec(ternary_type).col_multiple
    out = []
    for name, value in ternary.items():
        cols = _cols(value)
        if cols % multiple:
            out.append(
                Fallback(
                    name,
                    ternary_type,
                    fallback_type,
                    f"rows of {cols} weights are not a multiple of {ternary_type}'s {multiple}",
                )
            )
    return out


def summarize(fallbacks: list[Fallback]) -> list[str]:
    """Summary lines: one per (reason, type), naming its tensors (shortened when many)."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for f in fallbacks:
        groups.setdefault((f.requested, f.written, f.reason), []).append(f.tensor)
    lines = []
    for (req, written, reason), names in groups.items():
        shown = ", ".join(names[:6]) + (f", ... ({len(names)} tensors)" if len(names) > 6 else "")
        lines.append(f"{len(names)} tensor(s) in {written} instead of {req}: {reason}: {shown}")
    return lines
