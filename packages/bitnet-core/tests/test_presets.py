"""model.presets: the real models' shapes by name, and the matrices of a layer."""

from __future__ import annotations

import pytest

from bitnet_core.errors import ConfigError
from bitnet_core.model.presets import PRESETS, layer_matrices, matrix_shapes, preset


def test_a_preset_with_changes_is_a_new_config_and_the_table_is_untouched():
    two = preset("2b4t", num_layers=2, context_length=64)
    assert (two.num_layers, two.context_length, two.hidden_size) == (2, 64, 2560)
    assert PRESETS["2b4t"].num_layers == 30 and preset("2b4t") is PRESETS["2b4t"]


def test_an_unknown_preset_or_field_is_a_config_error():
    with pytest.raises(ConfigError, match="unknown model preset 'nope' .*2b4t, host-bound, large"):
        preset("nope")
    with pytest.raises(ConfigError, match="num_heads"):
        preset("large", num_heads=7)  # 1536 is not a multiple of 7: BitNetConfig's own check


def test_layer_matrices_and_their_distinct_shapes():
    assert layer_matrices(preset("2b4t")) == [
        ("q/o", 2560, 2560), ("k/v", 640, 2560), ("gate/up", 6912, 2560), ("down", 2560, 6912)
    ]  # fmt: skip
    assert matrix_shapes(preset("2b4t")) == [(2560, 2560), (640, 2560), (6912, 2560), (2560, 6912)]
    # bitnet_b1_58-large has as many KV heads as query heads: k/v is q/o's shape
    assert matrix_shapes(preset("large")) == [(1536, 1536), (4096, 1536), (1536, 4096)]
