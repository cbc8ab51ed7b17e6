"""The Python API (Model: generate, stream, logits, chat prompts) and receipts."""

from __future__ import annotations

import json
import os
import stat

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.errors import (
    ConfigError,
    ModelFileError,
    StrictModeError,
    TokenizerError,
    ValidationError,
)
from bitnet_core.hal import REGISTRY
from bitnet_core.model import Model, random_weights
from bitnet_core.model.api import resolve_model_path
from bitnet_core.model.receipt import read_receipt, validate, write_receipt

CFG = BitNetConfig(
    vocab_size=260,
    hidden_size=32,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=48,
    context_length=96,
)


class ByteTokenizer:
    """Bytes as ids 0-255, BOS 256, EOS 257 (stands in for the GGUF tokenizer in these tests)."""

    bos_id, eos_id, vocab_size = 256, 257, 260

    def encode(self, text: str, add_bos: bool | None = None) -> list[int]:
        return ([self.bos_id] if add_bos is not False else []) + list(text.encode("utf-8"))

    def decode(self, ids) -> str:
        return bytes(i for i in ids if i < 256).decode("utf-8", errors="replace")


@pytest.fixture(scope="module")
def model() -> Model:
    return Model.from_weights(
        random_weights(CFG, seed=3), "cpu-reference", tokenizer=ByteTokenizer()
    )


def test_generate_equals_joined_stream_and_is_seeded(model):
    text = model.generate("Hi", max_tokens=20, seed=5, temperature=1.0)
    pieces = list(model.stream("Hi", max_tokens=20, seed=5, temperature=1.0))
    assert "".join(pieces) == text
    assert model.last_stats.prompt_tokens == 3
    assert model.generate("Hi", max_tokens=20, seed=5, temperature=1.0) == text
    ids = model.generate_ids("Hi", max_tokens=20, seed=5, temperature=1.0)
    expected = ByteTokenizer().decode(ids)
    assert text == expected.replace("\ufffd", "") or text == expected


def test_stop_strings_cut_and_end_generation(model):
    ids = model.generate_ids("Hi", max_tokens=30, temperature=0)
    full = model.generate("Hi", max_tokens=30, temperature=0)
    assert ids and full
    stop = full[len(full) // 2 : len(full) // 2 + 1] or full[:1]
    cut = model.generate("Hi", max_tokens=30, temperature=0, stop=[stop])
    assert cut == full[: full.index(stop)]
    assert model.last_stats.finish_reason == "stop"


def test_logits_shape_and_prefix_consistency(model):
    a = model.logits([256, 72, 105, 33])
    b = model.logits(np.array([256, 72]))
    assert a.shape == (4, CFG.vocab_size) and a.dtype == np.float32
    np.testing.assert_allclose(a[:2], b, rtol=1e-5, atol=1e-5)


def test_no_tokenizer_is_a_clear_error():
    m = Model.from_weights(random_weights(CFG, seed=1), "cpu-reference")
    assert m.tokenizer is None
    with pytest.raises(TokenizerError, match="token ids"):
        m.generate("hello")
    assert len(m.generate_ids([1, 2], max_tokens=3, temperature=0)) == 3


def test_sampling_errors_surface(model):
    with pytest.raises(ConfigError):
        model.generate("x", top_p=0)
    with pytest.raises(ConfigError):
        model.generate("x", max_tokens=-3)


def test_missing_model_file(tmp_path):
    with pytest.raises(ModelFileError, match="no such file"):
        resolve_model_path(tmp_path / "nope.gguf")
    with pytest.raises(ModelFileError, match="not a file"):
        resolve_model_path(tmp_path)


def test_receipt_roundtrip_and_validation(model, tmp_path):
    model.generate("Hi", max_tokens=4, temperature=0)
    r = model.receipt()
    validate(r, strict=True)
    assert r["compute_path"] == "real"
    assert r["provider"]["name"] == "cpu-reference"
    assert "linear" in r["provider"]["kernels"]  # the ops that ran
    assert "matmul_ternary_float" not in r["provider"]["kernels"]
    assert r["tokens"] == {"prompt": 3, "generated": model.last_stats.generated_tokens}
    assert r["startup"]["line"].startswith("requested=cpu-reference")
    path = tmp_path / "r.json"
    write_receipt(path, r)
    umask = os.umask(0)
    os.umask(umask)
    assert stat.S_IMODE(path.stat().st_mode) == 0o666 & ~umask  # not mkstemp's 0600
    assert read_receipt(path) == json.loads(path.read_text())
    for broken in (
        {k: v for k, v in r.items() if k != "throughput"},
        {**r, "compute_path": "mock"},
        {**r, "tokens": {"prompt": -1, "generated": 0}},
        {**r, "schema": "other/1"},
        [],
    ):
        with pytest.raises(ValidationError):
            validate(broken)
    (tmp_path / "bad.json").write_text("{not json")
    with pytest.raises(ValidationError):
        read_receipt(tmp_path / "bad.json")


def test_fake_device_receipt_rejected_in_strict_mode(monkeypatch, clean_registry):
    monkeypatch.setenv("BITNET_GPU_FAKE", "cuda")
    REGISTRY.refresh()
    m = Model.from_weights(random_weights(CFG, seed=2), "cuda", tokenizer=ByteTokenizer())
    m.generate("a", max_tokens=2, temperature=0)
    r = m.receipt()
    assert r["compute_path"] == "fake"
    validate(r, strict=False)
    with pytest.raises(StrictModeError) as info:
        validate(r, strict=True)
    assert info.value.exit_code == 8


def test_session_reuses_the_cached_prefix(model):
    sess = model.session()
    first = model.generate_ids("Hello", max_tokens=5, temperature=0, session=sess)
    assert model.last_stats.cached_tokens == 0
    turn2 = model.encode("Hello") + first + list(b" more")
    again = model.generate_ids(turn2, max_tokens=5, temperature=0, session=sess)
    # everything but the last sampled token (never forwarded) came from the cache
    assert model.last_stats.cached_tokens == len(model.encode("Hello")) + len(first) - 1
    assert again == model.generate_ids(turn2, max_tokens=5, temperature=0)  # same as fresh
    diverged = model.encode("Help") + [1, 2]
    x = model.generate_ids(diverged, max_tokens=3, temperature=0, session=sess)
    assert model.last_stats.cached_tokens == 4  # <bos> H e l
    assert x == model.generate_ids(diverged, max_tokens=3, temperature=0)
    sess.close()


def test_load_reads_the_file_while_gpus_are_probed_and_still_reports_the_device_first(
    tmp_path, monkeypatch
):
    """auto/gpu probe GPU runtimes in a child process while load() reads the GGUF header
    and tokenizer: an unmet request is still the error raised, before the file's."""
    from bitnet_core.errors import DeviceUnavailableError
    from bitnet_core.hal import select
    from bitnet_core.model import load

    monkeypatch.delenv("BITNET_GPU_FAKE", raising=False)
    monkeypatch.delenv("BITNET_DEVICE", raising=False)
    REGISTRY.refresh()
    bad = tmp_path / "bad.gguf"
    bad.write_bytes(b"GGUF" + b"\0" * 7)  # truncated header
    with pytest.raises(ModelFileError):
        load(bad, "auto")
    try:
        select("gpu")
        pytest.skip("a GPU is available here: the gpu request is met")
    except DeviceUnavailableError:
        pass
    REGISTRY.refresh()
    with pytest.raises(DeviceUnavailableError):
        load(bad, "gpu")
    with pytest.raises(DeviceUnavailableError):
        load(tmp_path / "missing.gguf", "gpu")
