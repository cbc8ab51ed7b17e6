"""Embedding models (Qwen3/Gemma3 BitNet graphs): pooling, ``Model.embed``, bitnet.cpp's
files, and (marker ``crossval``) transformers' embeddings of the same checkpoints."""

from __future__ import annotations

import zlib

import numpy as np
import pytest
from embedding_files import config_of, latent, write_bitnet_cpp_file, write_ours

import bitnet_core
from bitnet_core.errors import BitnetError, ConfigError, ContextLengthError, ShapeError
from bitnet_core.model import embeddings

DEVICES = ["cpu-reference", "cpu"]


def assert_fused_ran(model) -> None:
    """On ``cpu`` the run's receipt names the fused C++ pass, its kernels only, and no
    fallback to the generic engine (which would name the per-op kernels)."""
    prov = model.receipt()["provider"]
    assert prov["runner"] == "FusedCpuRunner" and prov["fallbacks"] == [], prov
    assert "CpuModel.ternary" in prov["kernels"], prov["kernels"]
    assert all(k.startswith("CpuModel.") for k in prov["kernels"]), prov["kernels"]


def _ids(seed: int, *lengths: int) -> list[list[int]]:
    rng = np.random.default_rng(seed)
    return [rng.integers(3, 300, n).tolist() for n in lengths]


@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_bitnet_cpp_file_gives_our_embeddings(tmp_path, arch):
    """bitnet.cpp's names, keys and I2_S packing read as the same model as our conversion."""
    cfg = config_of(arch)
    floats = latent(cfg, zlib.crc32(arch.encode()))
    write_bitnet_cpp_file(tmp_path / "theirs.gguf", cfg, floats)
    write_ours(tmp_path / "ours.gguf", cfg, floats)
    ids = _ids(1, 9, 3)
    for quantize in (False, True):
        opts = dict(quantize_activations=quantize, progress=False)
        theirs = bitnet_core.load(tmp_path / "theirs.gguf", "cpu-reference", **opts)
        ours = bitnet_core.load(tmp_path / "ours.gguf", "cpu-reference", **opts)
        assert theirs.config == ours.config, (theirs.config, ours.config)
        got, want = theirs.embed(ids), ours.embed(ids)
        assert got.shape == (2, cfg.hidden_size)
        if not quantize:  # their scale is float32 absmean, ours the float64 one rounded
            np.testing.assert_allclose(got, want, atol=1e-5)
        assert np.sum(got * want, axis=1).min() >= 0.9999


@pytest.fixture(scope="module", params=["qwen3", "gemma3"])
def small_model_file(request, tmp_path_factory):
    """A small embedding model file of each graph (Gemma3: window 4, every 2nd layer global)."""
    arch = request.param
    kw = {} if arch == "qwen3" else dict(num_layers=4, sliding_window=4, sliding_window_pattern=2)
    cfg = config_of(arch, **kw)
    path = tmp_path_factory.mktemp("emb") / f"{arch}.gguf"
    write_ours(path, cfg, latent(cfg, zlib.crc32(f"small-{arch}".encode())))
    return path


@pytest.mark.parametrize("device", DEVICES)
def test_embed_batched_equals_one_at_a_time(small_model_file, device):
    model = bitnet_core.load(small_model_file, device, progress=False)
    ids = _ids(2, 11, 2, 7)  # 11 > the Gemma3 window
    together = model.embed(ids)
    alone = np.concatenate([model.embed([x]) for x in ids])
    np.testing.assert_allclose(together, alone, atol=1e-5)
    assert np.allclose(np.linalg.norm(together, axis=1), 1.0, atol=1e-5)
    short = model.embed(ids, dimensions=16)
    np.testing.assert_allclose(short, embeddings.normalize(together[:, :16]), atol=1e-6)
    if device == "cpu":
        assert_fused_ran(model)


def test_fused_embeddings_equal_the_generic_engines(small_model_file, monkeypatch):
    """On ``cpu`` the fused C++ pass gives the embeddings of the op-by-op engine on the
    same kernels (``BITNET_CPU_FUSED=0``) exactly: inputs past the Gemma3 window of 4."""
    ids = _ids(5, 11, 1, 6, 9)
    fused = bitnet_core.load(small_model_file, "cpu", progress=False)
    got = fused.embed(ids)
    assert_fused_ran(fused)
    monkeypatch.setenv("BITNET_CPU_FUSED", "0")
    generic = bitnet_core.load(small_model_file, "cpu", progress=False)
    assert generic.receipt()["provider"]["runner"] == "GenericRunner"
    np.testing.assert_array_equal(got, generic.embed(ids))


def test_embed_refuses_bad_input_clearly(small_model_file):
    model = bitnet_core.load(small_model_file, "cpu-reference", progress=False)
    with pytest.raises(ShapeError, match="empty"):
        model.embed([[]])
    with pytest.raises(ContextLengthError, match="context"):
        model.embed([[5] * 65])
    with pytest.raises(ConfigError, match="dimensions"):
        model.embed([[5, 6]], dimensions=0)
    with pytest.raises(BitnetError, match="embedding model"):
        model.logits([5, 6])


def test_pooling_modes():
    h = np.arange(12, dtype=np.float32).reshape(3, 4)
    assert embeddings.pool(h, "last").tolist() == [8, 9, 10, 11]
    assert embeddings.pool(h, "cls").tolist() == [0, 1, 2, 3]
    assert embeddings.pool(h, "mean").tolist() == [4, 5, 6, 7]
    v = embeddings.normalize(np.array([[3.0, 4.0, 12.0]]), dimensions=2)
    np.testing.assert_allclose(v, [[0.6, 0.8]], atol=1e-7)
    with pytest.raises(ConfigError):
        embeddings.normalize(np.ones((1, 3)), dimensions=4)


# --- against transformers ---------------------------------------------------------------


@pytest.mark.crossval
@pytest.mark.parametrize("arch", ["qwen3", "gemma3"])
def test_embeddings_match_transformers(tmp_path, arch):
    """Converted (F16, TQ2_0, TQ1_0, I2_S), run on the reference and native CPU providers:
    cosine with transformers' pooled, normalized output >= 0.9999 without activation
    quantization, >= 0.99 with it; inputs longer than Gemma3's window of 5."""
    from embedding_models import hf_embedding_checkpoint, transformers_embeddings

    from bitnet_core.convert.checkpoint import convert_checkpoint

    src = hf_embedding_checkpoint(tmp_path / "hf", arch, seed=zlib.crc32(arch.encode()))
    warned = []
    ids = _ids(3, 12, 4, 7)
    files = {
        t: convert_checkpoint(src, tmp_path / f"{t}.gguf", ternary_type=t, report=warned.append)
        for t in ("f16", "tq2_0", "tq1_0", "i2_s")
    }
    assert not warned, warned  # every layer in its type, none falling back to F16
    for quantize, floor in ((False, 0.9999), (True, 0.99)):
        want = transformers_embeddings(src, ids, quantize)
        for ttype, out in files.items():
            for device in DEVICES:
                model = bitnet_core.load(out, device, quantize_activations=quantize, progress=False)
                got = model.embed(ids)
                cos = np.sum(got * want, axis=1)
                assert cos.min() >= floor, (arch, quantize, ttype, device, cos)
                if device == "cpu" and quantize:  # (float matmuls: the generic engine's)
                    assert_fused_ran(model)


def test_cli_embed_json_npy_and_stdin(small_model_file, tmp_path, capsys, monkeypatch):
    import io
    import json

    from bitnet_core.cli.main import main

    args = ["embed", "-m", str(small_model_file), "--device", "cpu-reference"]
    assert main([*args, "hello", "world"]) == 0
    got = np.array(json.loads(capsys.readouterr().out))
    want = bitnet_core.load(small_model_file, "cpu-reference", progress=False).embed(
        ["hello", "world"]
    )
    np.testing.assert_allclose(got, want, atol=1e-6)
    monkeypatch.setattr("sys.stdin", io.StringIO("hello\nworld\n"))
    assert main([*args, "--dimensions", "8", "-o", str(tmp_path / "v.npy")]) == 0
    np.testing.assert_allclose(
        np.load(tmp_path / "v.npy"), embeddings.normalize(want[:, :8]), atol=1e-6
    )
    assert main([*args, "x", "-o", str(tmp_path / "v.txt")]) != 0
    assert ".npy" in capsys.readouterr().err
    assert main([*args, "x", "--dimensions", "9999"]) != 0
    assert "dimensions" in capsys.readouterr().err


def test_qwen3_files_append_endoftext_to_pool(tmp_path):
    """Converted Qwen3 embedding files end each encoded text with ``<|endoftext|>``."""
    from bitnet_core.convert.hf_qwen3_gemma3 import extra_metadata
    from bitnet_core.model.random import byte_tokenizer_metadata

    cfg = config_of("qwen3")
    meta = byte_tokenizer_metadata(cfg.vocab_size)
    meta["tokenizer.ggml.tokens"] = list(meta["tokenizer.ggml.tokens"])
    meta["tokenizer.ggml.tokens"][-1] = "<|endoftext|>"
    meta["tokenizer.ggml.token_type"] = list(meta["tokenizer.ggml.token_type"])
    meta["tokenizer.ggml.token_type"][-1] = 3  # control
    extra = extra_metadata(cfg, meta)
    assert extra == {"tokenizer.ggml.eos_token_id": 299, "tokenizer.ggml.add_eos_token": True}
    write_ours(tmp_path / "q.gguf", cfg, latent(cfg, 5), tokenizer={**meta, **extra})
    model = bitnet_core.load(tmp_path / "q.gguf", "cpu-reference", progress=False)
    ids = model.encode("ab")
    assert ids[-1] == 299 and 299 not in ids[:-1]
    np.testing.assert_allclose(model.embed("ab"), model.embed([ids]), atol=0)


@pytest.mark.parametrize(
    ("flags", "want"),
    [
        ({"pooling_mode_lasttoken": True}, "last"),
        ({"pooling_mode_mean_tokens": True}, "mean"),
        ({"pooling_mode_cls_token": True, "pooling_mode_mean_tokens": False}, "cls"),
        ({"pooling_mode_max_tokens": True}, None),
        (None, None),
    ],
)
def test_sentence_transformers_pooling_config(tmp_path, flags, want):
    import json

    from bitnet_core.convert.hf_qwen3_gemma3 import read_pooling
    from bitnet_core.errors import UnsupportedModelError

    if flags is not None:
        (tmp_path / "modules.json").write_text(
            json.dumps([{"path": "1_Pooling", "type": "sentence_transformers.models.Pooling"}])
        )
        (tmp_path / "1_Pooling").mkdir()
        (tmp_path / "1_Pooling" / "config.json").write_text(json.dumps(flags))
    if flags is not None and want is None:
        with pytest.raises(UnsupportedModelError, match="pooling"):
            read_pooling(tmp_path)
    else:
        assert read_pooling(tmp_path) == want


@pytest.mark.crossval
def test_released_norm_names_convert_the_same(tmp_path):
    """``*_proj.norm.weight`` (released checkpoints) reads as ``*_proj.rms_norm.weight``."""
    from embedding_models import hf_embedding_checkpoint

    from bitnet_core.convert.checkpoint import convert_checkpoint

    out = {}
    for name in ("rms_norm", "norm"):
        src = hf_embedding_checkpoint(tmp_path / name, "qwen3", seed=9, norm_name=name)
        out[name] = convert_checkpoint(src, tmp_path / f"{name}.gguf", ternary_type="i2_s")
    ids = _ids(4, 6, 2)
    a, b = (bitnet_core.load(out[n], "cpu-reference", progress=False).embed(ids) for n in out)
    np.testing.assert_array_equal(a, b)


def test_an_extra_op_on_the_host_is_in_the_receipt(small_model_file):
    """A provider without ``gelu_mul``/``attention_window`` runs them on the host, and the
    run's receipt lists that fallback."""
    from bitnet_core.providers.reference import ReferenceProvider

    class Plain(ReferenceProvider):
        gelu_mul = None
        attention_window = None

    from bitnet_core.gguf import open_model_file
    from bitnet_core.model import GenericRunner, ModelWeights
    from bitnet_core.model.embeddings import embed_ids

    weights = ModelWeights.from_model_file(open_model_file(small_model_file))
    if weights.config.arch != "gemma3":
        pytest.skip("Qwen3 needs neither op")
    ids = _ids(2, 11)  # past the window of 4
    want = embed_ids(GenericRunner(ReferenceProvider(), weights, progress=False), ids)
    plain = Plain()
    got = embed_ids(GenericRunner(plain, weights, progress=False), ids)
    np.testing.assert_allclose(got, want, atol=1e-6)
    reasons = " ".join(plain.trace.fallbacks)
    assert "no gelu_mul" in reasons and "no attention_window" in reasons, reasons
