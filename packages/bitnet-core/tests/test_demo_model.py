"""The bundled demo model (bitnet_core/data/demo-shakespeare.gguf, tools/train_tiny.py).

It must ship in the package, be the default of ``bitnet run``, write real
(English, Shakespearean) words, and be the same model for llama.cpp as for us.
"""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from bitnet_core.gguf import open_model_file
from bitnet_core.model import demo_model_path, load

DATA = Path(__file__).parent / "data"
HELD_OUT = DATA / "shakespeare_heldout.txt"  # from the validation split, never trained on
WORDS = DATA / "shakespeare_words.txt"  # words seen at least twice in the training split


@pytest.fixture(scope="module")
def demo_path() -> Path:
    path = demo_model_path()
    assert path is not None, "bitnet_core/data/*.gguf is missing"
    return path


@pytest.fixture(scope="module")
def demo_model(demo_path):
    return load(demo_path, "cpu-reference")


def test_demo_model_is_the_bundled_shakespeare_file(demo_path):
    assert demo_path.name == "demo-shakespeare.gguf"
    assert demo_path.stat().st_size < 8 * 2**20  # small enough for the wheel
    card = demo_path.with_name("MODEL_CARD.md").read_text()
    assert "Project Gutenberg" in card and "perplexity" in card.lower()


def test_demo_model_is_llama_cpp_bitnet_architecture(demo_path):
    mf = open_model_file(demo_path)
    cfg = mf.config
    assert cfg.arch == "bitnet" and cfg.ffn_activation == "silu" and cfg.tied_embeddings
    assert not mf.has("output.weight")
    # TQ2_0 blocks run along the input dimension of every ternary matrix.
    assert cfg.hidden_size % 256 == 0 and cfg.intermediate_size % 256 == 0
    assert mf.tensor_info("blk.0.ffn_down.weight") is not None
    assert mf.ternary("blk.0.attn_q.weight").format == "tq2_0"


def _words(text: str) -> list[str]:
    return [w.lower() for w in re.findall(r"[A-Za-z]+", text)]


def test_bitnet_run_default_model_writes_real_words():
    """``bitnet run`` with no --model: the demo model, text made of real words."""
    cmd = [sys.executable, "-m", "bitnet_core.cli.main", "run", "--prompt", "ROMEO:"]
    cmd += ["-n", "60", "--seed", "1", "--device", "cpu-reference", "--no-progress"]
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stderr
    assert "demo-shakespeare.gguf" in proc.stderr
    words = _words(proc.stdout)
    assert len(words) >= 20, proc.stdout
    known = set(WORDS.read_text().split())
    share = sum(w in known for w in words) / len(words)
    assert share >= 0.85, (share, proc.stdout)


def test_held_out_passage_is_predicted_better_than_chance(demo_model):
    """Teacher-forced perplexity on text the model never saw is far below the vocab size."""
    ids = demo_model.encode(HELD_OUT.read_text())
    logits = demo_model.logits(ids)[:-1].astype(np.float64)
    logp = logits - logits.max(-1, keepdims=True)
    logp -= np.log(np.exp(logp).sum(-1, keepdims=True))
    nll = -logp[np.arange(len(ids) - 1), ids[1:]].mean()
    assert np.exp(nll) < 0.05 * demo_model.config.vocab_size, np.exp(nll)


@pytest.mark.crossval
def test_llama_cpp_agrees_on_teacher_forced_argmax(demo_path, demo_model):
    """Same file in llama.cpp: >= 95% equal next-token argmaxes on a held-out passage.

    llama.cpp quantizes activations per 256-value block (q8_K), we per token, so
    logits are close, not equal; near-ties may flip.
    """
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    text = HELD_OUT.read_text()
    ids = demo_model.encode(text)
    llm = llama_cpp.Llama(
        str(demo_path), n_ctx=256, n_batch=256, logits_all=True, n_threads=2, verbose=False
    )
    assert llm.tokenize(text.encode(), add_bos=True, special=False) == ids
    llm.eval(ids)
    theirs = np.asarray(llm.scores[: len(ids)], dtype=np.float32)
    ours = demo_model.logits(ids)
    agree = float((ours.argmax(-1) == theirs.argmax(-1)).mean())
    assert agree >= 0.95, agree
