"""The kernels of the ``webgpu`` backend: the WGSL shaders beside this module, and their
tiny preprocessor.

Importable without bitnet-core, so the build-time shader check can use it.

WGSL has no preprocessor; our shaders use ``#ifdef NAME`` / ``#else`` /
``#endif`` lines for the choices that matter (``DOT4``: use ``dot4I8Packed``,
else plain integer math; ``ROWS``: one invocation per output row, for
CPU-like adapters, else one workgroup per row; ``ADD``: add into the output;
``F16``: a float16 KV cache; ``ACT``: ``norm_gemv``'s gate|up form), resolved
before compiling, and ``#include NAME`` lines, replaced by ``NAME.wgsl`` from
here before the conditionals are resolved (shared helpers: ``row_norm``,
``row_quant``, ``layer_gemv``, ``int8_dot``, ``rope_math``, ``attn_merge``,
``kv_cache``: the ten-launch and four-launch layers share their sums).
"""

from __future__ import annotations

import itertools
import re
from functools import cache
from pathlib import Path

SHADER_DIR = Path(__file__).parent

SHADER_NAMES = (
    "quantize_act",
    "matmul_i2s",
    "rmsnorm",
    "rope",
    "attention",
    "elementwise",
    "embedding",
    "matmul_dense",
    "rmsnorm_quant",
    "act_norm_quant",
    "rope_store",
    "attn_split",
    "attn_combine_norm_quant",
    "kv_store_f16",
    "qkv_attend",
    "norm_gemv",
)


@cache
def shader_source(name: str) -> str:
    """The raw text of ``<name>.wgsl``."""
    try:
        return (SHADER_DIR / f"{name}.wgsl").read_text()
    except FileNotFoundError as exc:
        from bitnet_core.errors import ProviderError

        raise ProviderError(
            f"bitnet-webgpu: shader {name}.wgsl is missing from the install"
        ) from exc


def expand_includes(source: str) -> str:
    """``source`` with each ``#include NAME`` line replaced by ``NAME.wgsl`` (one level)."""
    return "\n".join(
        shader_source(line.split()[1]).rstrip("\n")
        if line.strip().startswith("#include ")
        else line
        for line in source.splitlines()
    )


def preprocess(source: str, defines: frozenset[str] = frozenset()) -> str:
    """Resolve ``#include``, then ``#ifdef``/``#else``/``#endif`` lines (no nesting allowed)."""
    out: list[str] = []
    active: bool | None = None  # None: outside a conditional
    for line in expand_includes(source).splitlines():
        stripped = line.strip()
        if stripped.startswith("#ifdef "):
            if active is not None:
                raise ValueError("nested #ifdef in a WGSL shader")
            active = stripped.split()[1] in defines
        elif stripped == "#else":
            active = not active
        elif stripped == "#endif":
            active = None
        elif active is None or active:
            out.append(line)
    return "\n".join(out) + "\n"


def variants(name: str) -> list[frozenset[str]]:
    """Every define set a shader can be compiled with (for the build-time check)."""
    source = expand_includes(shader_source(name))
    names = sorted(set(re.findall(r"^\s*#ifdef\s+(\w+)", source, re.M)))
    return [
        frozenset(combo)
        for r in range(len(names) + 1)
        for combo in itertools.combinations(names, r)
    ]
