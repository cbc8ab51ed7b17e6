"""Float tables larger than one storage buffer (the 2B-4T vocabulary on lavapipe's 128 MiB):
split into parts of whole rows; ``embedding`` and ``matmul_dense`` run a dispatch a part.

The part size is lowered (``memory.TABLE_PART_BYTES``) so small tables take the same path.
"""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.errors import UnsupportedOperationError
from bitnet_core.model.api import Model
from bitnet_core.model.random import random_weights
from bitnet_vulkan import memory
from bitnet_vulkan.arrays import SplitTable

RNG = np.random.default_rng(77)


@pytest.fixture
def small_parts(monkeypatch):
    def parts(nbytes):
        monkeypatch.setattr(memory, "TABLE_PART_BYTES", nbytes)

    return parts


@pytest.mark.parametrize("dtype", [np.float32, np.float16])
@pytest.mark.parametrize(
    "rows,cols,part_rows", [(301, 96, 7), (50, 17, 1), (64, 8, 63), (9, 40, 8)]
)
def test_split_table_ops_equal_the_reference(vk, ref, small_parts, dtype, rows, cols, part_rows):
    x = RNG.standard_normal((3, cols)).astype(np.float32)
    x_dev = vk.to_device(x)  # before the lowered limit: it would split any larger 2-D array
    small_parts(part_rows * cols * np.dtype(dtype).itemsize + 1)
    table = RNG.standard_normal((rows, cols)).astype(dtype)
    dev = vk.to_device(table)
    assert isinstance(dev, SplitTable) and len(dev.parts) == -(-rows // part_rows)
    assert np.array_equal(vk.to_host(dev), table)
    ids = np.array([0, rows - 1, rows // 2, part_rows, part_rows - 1, 0], np.int64) % rows
    assert np.array_equal(vk.to_host(vk.embedding(dev, ids)), ref.embedding(table, ids))
    want = ref.matmul_dense(x, table)
    got = vk.to_host(vk.matmul_dense(x_dev, dev))
    np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4)


def test_split_table_is_refused_by_other_ops(vk, small_parts):
    small_parts(64)
    dev = vk.to_device(np.ones((10, 8), np.float32))
    assert isinstance(dev, SplitTable)
    with pytest.raises(UnsupportedOperationError, match="split across buffers"):
        vk.rmsnorm(dev, np.ones(8, np.float32), 1e-5)


@pytest.mark.parametrize("fused", ["1", "0"])
def test_model_with_split_embedding_and_head(vk, small_parts, monkeypatch, fused):
    monkeypatch.setenv("BITNET_VULKAN_FUSED", fused)
    cfg = BitNetConfig(
        vocab_size=301,
        hidden_size=96,
        num_layers=2,
        num_heads=6,
        num_kv_heads=2,
        intermediate_size=200,
        context_length=64,
    )
    weights = random_weights(cfg, seed=5)
    small_parts(40 * 96 * 4)  # 40 rows a part (float32) or 80 (float16): 4-8 parts
    dev = Model.from_weights(weights, device="vulkan")
    assert isinstance(dev.runner.weights.head, SplitTable)
    ref = Model.from_weights(weights, device="cpu-reference")
    prompt = [1, 300, 41, 80, 81, 160, 299]
    assert dev.generate_ids(prompt, max_tokens=8, temperature=0) == ref.generate_ids(
        prompt, max_tokens=8, temperature=0
    )
