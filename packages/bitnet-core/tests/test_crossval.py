"""Our logits against transformers' BitNetForCausalLM and llama-cpp-python (issue 11).

A random 4-layer SiLU-gated, tied-embedding model is built with transformers,
converted with ``bitnet convert``, and run by all three engines on the same
token ids (tools/crossval/crossval.py holds the shared code and prints the
figures). Int8 activation rounding is discontinuous: the band two correct
implementations differ by is measured here (transformers in float32 vs float64,
per-token vs per-256-block activation scales) and our error must sit inside it.

Every check is a relative-L2 bound on the logits. Argmax agreement is not
checked: on these random tied-embedding models the argmax at every position is
the input token itself (``test_argmax_is_the_input_token`` shows it), so any
engine that adds the embedding to the residual agrees by construction.
"""

from __future__ import annotations

import importlib.util
import sys
from pathlib import Path

import numpy as np
import pytest

pytestmark = pytest.mark.crossval

pytest.importorskip("torch", reason="torch is not installed (bash ci/python-extras.sh)")
pytest.importorskip("transformers", reason="transformers is not installed")

_SCRIPT = Path(__file__).resolve().parents[3] / "tools" / "crossval" / "crossval.py"
_spec = importlib.util.spec_from_file_location("bitnet_crossval", _SCRIPT)
cv = importlib.util.module_from_spec(_spec)
sys.modules[_spec.name] = cv  # dataclasses look their module up
_spec.loader.exec_module(cv)

N_TOKENS = 48


@pytest.fixture(scope="module")
def silu(tmp_path_factory):
    s = cv.build(
        tmp_path_factory.mktemp("crossval"), layers=4, types=("f32", "i2_s", "tq2_0"), seed=0
    )
    ids = np.random.default_rng(1).integers(2, s.vocab_size, N_TOKENS).tolist()
    hf = {
        "plain": cv.hf_logits(s.model, ids, quant=False),
        "q": cv.hf_logits(s.model, ids, quant=True),
        "q64": cv.hf_logits(s.model, ids, quant=True, double=True),
        "block": cv.hf_logits(s.model, ids, quant=True, block=256),
    }
    band = max(cv.rel_l2(hf["q"], hf["q64"]), cv.rel_l2(hf["block"], hf["q"]))
    return s, ids, hf, band


@pytest.mark.parametrize("ternary_type", ["f32", "i2_s", "tq2_0"])
def test_transformers_exact_without_activation_quantization(silu, ternary_type):
    s, ids, hf, _ = silu
    ours = cv.our_logits(s.files[ternary_type], ids, quant=False)
    assert ours.shape == hf["plain"].shape
    assert cv.rel_l2(ours, hf["plain"]) < 1e-4


def test_argmax_is_the_input_token(silu):
    """Why no argmax check here: it would agree by construction (see the module docstring)."""
    _, ids, hf, _ = silu
    assert np.mean(np.argmax(hf["q"], axis=-1) == np.array(ids)) >= 0.9


@pytest.mark.parametrize("ternary_type", ["f32", "i2_s"])
def test_transformers_with_int8_activations_inside_band(silu, ternary_type):
    s, ids, hf, band = silu
    ours = cv.our_logits(s.files[ternary_type], ids, quant=True)
    err = cv.rel_l2(ours, hf["q"])
    assert 0 < band < 0.2  # the band is real and not absurd
    assert err <= band
    assert cv.rel_l2(ours, hf["q"]) < cv.rel_l2(ours, hf["plain"])  # quantization is on


def test_llama_cpp_tq2_0(silu):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    s, ids, hf, band = silu
    ref = cv.llama_cpp_logits(s.files["tq2_0"], ids)
    ours = cv.our_logits(s.files["tq2_0"], ids, quant=True)
    err = cv.rel_l2(ours, ref)
    # llama.cpp quantizes activations per 256 values (q8_K), we per token: judged against
    # the measured band, and against how far transformers itself is from llama.cpp.
    assert err <= 2 * band
    assert err <= 1.1 * cv.rel_l2(hf["q"], ref) + 1e-3


def test_relu2_model_against_transformers(tmp_path):
    s = cv.build(tmp_path, layers=2, act="relu2", types=("f32",), seed=3)
    ids = np.random.default_rng(4).integers(2, s.vocab_size, 24).tolist()
    ours = cv.our_logits(s.files["f32"], ids, quant=False)
    assert cv.rel_l2(ours, cv.hf_logits(s.model, ids, quant=False)) < 1e-4
    ours_q = cv.our_logits(s.files["f32"], ids, quant=True)
    hf_q = cv.hf_logits(s.model, ids, quant=True)
    # int8: within the band two correct implementations differ by (float32 vs float64,
    # per-token vs per-256-block scales; 0.016 here, ours 4e-7; 3-bit activations: 0.61)
    band = max(
        cv.rel_l2(hf_q, cv.hf_logits(s.model, ids, quant=True, double=True)),
        cv.rel_l2(cv.hf_logits(s.model, ids, quant=True, block=256), hf_q),
    )
    assert 0 < band < 0.2
    assert cv.rel_l2(ours_q, hf_q) <= band
