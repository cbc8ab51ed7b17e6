"""``hal.runner.ModelRunner`` states everything the engine calls on a runner."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import bitnet_core
from bitnet_core.config import BitNetConfig
from bitnet_core.hal.runner import ModelRunner
from bitnet_core.model import Model, random_weights

CORE = Path(bitnet_core.__file__).parent
#: outside the protocol, used where a runner has them: the shared KV cache (statistics) and
#: ``decode_greedy`` (greedy tokens chosen on the device, k a launch)
OPTIONAL = {"kv", "decode_greedy"}
CONFIG = BitNetConfig(
    vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=48, context_length=32,
)  # fmt: skip


def protocol_members() -> set[str]:
    names = {n for n in vars(ModelRunner) if not n.startswith("_")}
    return names | set(ModelRunner.__annotations__)


def runner_uses(path: Path) -> set[str]:
    """The attributes ``path`` reads of a runner (``runner.x``, ``self.runner.x``, ...)."""
    used = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Attribute):
            v = node.value
            if (isinstance(v, ast.Name) and v.id == "runner") or (
                isinstance(v, ast.Attribute) and v.attr == "runner"
            ):
                used.add(node.attr)
    return used


@pytest.mark.parametrize("module", ["server/scheduler.py", "model/generation.py", "model/api.py"])
def test_what_the_engine_calls_is_in_the_protocol(module):
    assert runner_uses(CORE / module) - OPTIONAL <= protocol_members()


def test_the_scheduler_step_and_cache_creation_are_stated():
    assert {"forward_batch", "new_cache", "forward", "provider", "config"} <= protocol_members()
    assert {"forward_batch", "new_cache"} <= runner_uses(CORE / "server/scheduler.py")


@pytest.mark.parametrize("device", ["cpu-reference", "cpu"])
def test_the_core_runners_have_the_protocol(device):
    runner = Model.from_weights(random_weights(CONFIG, seed=1), device).runner
    assert isinstance(runner, ModelRunner)

    class NoBatch:  # what the protocol said before: the scheduler could not run it
        config = runner.config
        provider = runner.provider
        new_cache = runner.new_cache
        forward = runner.forward

    assert not isinstance(NoBatch(), ModelRunner)
