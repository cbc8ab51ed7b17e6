"""Per-sequence token processors in ``generate_tokens``: llguidance JSON masks, logprobs."""

from __future__ import annotations

import json

import numpy as np
import pytest

import bitnet_core
from bitnet_core.errors import ConfigError
from bitnet_core.model.generation import GenerationStats, generate_tokens
from bitnet_core.model.processors import LogprobRecorder, log_softmax
from bitnet_core.model.sampling import SamplingParams

llguidance = pytest.importorskip("llguidance", reason="the structured extra is not installed")
jsonschema = pytest.importorskip("jsonschema")

from bitnet_core.model.structured import (  # noqa: E402
    JsonConstraint,
    guidance_tokenizer,
    json_grammar,
)

SCHEMA = {
    "type": "object",
    "properties": {
        "line": {"type": "string", "maxLength": 20},
        "act": {"type": "integer", "minimum": 1, "maximum": 5},
        "speakers": {"type": "array", "items": {"enum": ["ROMEO", "JULIET"]}, "maxItems": 3},
    },
    "required": ["line", "act", "speakers"],
    "additionalProperties": False,
}


@pytest.fixture(scope="module")
def demo():
    return bitnet_core.load(None, "cpu", progress=False)


@pytest.fixture(scope="module")
def lltok(demo):
    return guidance_tokenizer(demo.tokenizer, demo.config.vocab_size, demo.eos_ids)


@pytest.mark.parametrize(("temperature", "seed"), [(0.0, None), (0.9, 1), (1.2, 2)])
def test_schema_constrained_generation_validates(demo, lltok, temperature, seed):
    params = SamplingParams(temperature=temperature, seed=seed, max_tokens=120)
    stats = GenerationStats()
    constraint = JsonConstraint(lltok, json_grammar(SCHEMA))
    ids = list(
        generate_tokens(
            demo.runner,
            demo.encode("JULIET:"),
            params,
            eos_ids=demo.eos_ids,
            stats=stats,
            processors=(constraint,),
        )
    )
    assert stats.finish_reason == "stop" and constraint.done
    jsonschema.validate(json.loads(demo.decode(ids)), SCHEMA)


def test_json_object_mask_allows_only_an_object_start(demo, lltok):
    constraint = JsonConstraint(lltok, json_grammar(None))
    logits = np.zeros(demo.config.vocab_size, dtype=np.float32)
    allowed = np.flatnonzero(np.isfinite(constraint.process(logits)))
    assert allowed.size > 0
    assert all(demo.decode([int(i)]).lstrip().startswith("{") for i in allowed)
    assert np.all(logits == 0)  # the input is not modified


def test_bad_schema_is_a_config_error(lltok):
    with pytest.raises(ConfigError):
        JsonConstraint(lltok, json_grammar({"type": "nonsense"}))
    with pytest.raises(ConfigError):
        json_grammar(["not", "a", "schema"])  # type: ignore[arg-type]


def test_logprob_recorder_gives_the_models_log_probabilities(demo):
    prompt = demo.encode("ROMEO:")
    recorder = LogprobRecorder(top_n=4)
    params = SamplingParams(temperature=0, max_tokens=5)
    ids = list(generate_tokens(demo.runner, prompt, params, processors=(recorder,)))
    assert [e.token for e in recorder.entries] == ids
    all_logits = demo.logits(prompt + ids[:-1])
    for k, e in enumerate(recorder.entries):
        lp = log_softmax(all_logits[len(prompt) - 1 + k])
        assert e.logprob == pytest.approx(lp[e.token], abs=1e-4)
        assert [t for t, _ in e.top] == list(np.argsort(-lp, kind="stable")[:4])
        assert e.top[0][0] == e.token  # greedy


def test_a_processor_that_bans_a_token(demo):
    """The loop samples from what ``process`` returns: a banned token never comes."""
    prompt = demo.encode("ROMEO:")
    params = SamplingParams(temperature=0, max_tokens=8)
    free = list(generate_tokens(demo.runner, prompt, params))

    class Ban:
        done = False

        def process(self, logits):
            out = np.array(logits, copy=True)
            out[..., free[0]] = -np.inf
            return out

        def accept(self, token, logits):
            pass

    banned = list(generate_tokens(demo.runner, prompt, params, processors=(Ban(),)))
    assert free[0] not in banned and len(banned) == 8
