"""The fused runner (``runner.py``): the reference engine's tokens, alone and batched."""

from __future__ import annotations

from bitnet_core.config import BitNetConfig
from bitnet_core.model import Model, random_weights
from bitnet_core.testing.batching import check_batched_greedy, check_scheduler_streams

CONFIG = BitNetConfig(
    vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=48, context_length=32,
)  # fmt: skip


def test_the_fused_runner_runs_and_matches_the_reference():
    model = Model.from_weights(random_weights(CONFIG, seed=2), "template")
    assert type(model.runner).__name__ == "TemplateRunner"
    want = Model.from_weights(random_weights(CONFIG, seed=2), "cpu-reference")
    for prompt in ([1, 2, 3], [7] * 9):
        assert model.generate_ids(prompt, max_tokens=6, temperature=0) == want.generate_ids(
            prompt, max_tokens=6, temperature=0
        )


def test_batched_decode_gives_each_sequence_its_own_tokens():
    check_batched_greedy("template", random_weights(CONFIG, seed=3))


def test_the_server_scheduler_streams_on_it(tmp_path):
    check_scheduler_streams("template", tmp_path)
