"""Model shapes by name, for random models of a real model's shape (benchmarks, tests).

``preset("2b4t")`` is bitnet-b1.58-2B-4T's configuration, ``preset("large")``
1bitLLM bitnet_b1_58-large's (the benches' "700M model"), ``preset("host-bound")``
a 30-layer model too small for its device's work to hide the host's (issue 27's
decode-step host-time model). ``preset(name, num_layers=4)`` changes fields, as
``dataclasses.replace`` does. Write a file of one with
``random_model_file(path, preset(name), seed=...)``.
"""

from __future__ import annotations

import dataclasses

from ..config import BitNetConfig
from ..errors import ConfigError

PRESETS: dict[str, BitNetConfig] = {
    # bitnet-b1.58-2B-4T: LLaMA-3 BPE vocabulary, grouped-query heads, squared ReLU
    "2b4t": BitNetConfig(vocab_size=128256, hidden_size=2560, num_layers=30, num_heads=20,
                         num_kv_heads=5, intermediate_size=6912, context_length=4096,
                         rope_theta=500000.0, ffn_activation="relu2"),
    # 1bitLLM bitnet_b1_58-large (the 700M model): LLaMA SPM vocabulary, SiLU, tied head
    "large": BitNetConfig(vocab_size=32002, hidden_size=1536, num_layers=24, num_heads=16,
                          num_kv_heads=16, intermediate_size=4096, context_length=2048),
    # issue 27's decode-step host-time model: 30 small layers, so the host's work shows
    "host-bound": BitNetConfig(vocab_size=1024, hidden_size=256, num_layers=30, num_heads=4,
                               num_kv_heads=1, intermediate_size=512, context_length=512),
}  # fmt: skip


def preset(name: str, **changes) -> BitNetConfig:
    """The configuration called ``name`` (a key of ``PRESETS``), with ``changes`` applied."""
    try:
        config = PRESETS[name]
    except KeyError:
        raise ConfigError(
            f"unknown model preset {name!r} (known: {', '.join(sorted(PRESETS))})"
        ) from None
    return dataclasses.replace(config, **changes) if changes else config


def layer_matrices(config: BitNetConfig) -> list[tuple[str, int, int]]:
    """The ternary matrices of one layer as (name, rows, columns): q and o, k and v, gate and
    up, down."""
    h, f = config.hidden_size, config.intermediate_size
    kv = h // config.num_heads * config.num_kv_heads
    return [("q/o", h, h), ("k/v", kv, h), ("gate/up", f, h), ("down", h, f)]


def matrix_shapes(config: BitNetConfig) -> list[tuple[int, int]]:
    """The distinct (rows, columns) of ``layer_matrices``, in their order."""
    return list(dict.fromkeys((rows, cols) for _, rows, cols in layer_matrices(config)))
