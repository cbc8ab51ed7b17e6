"""The fused CPU forward pass (``FusedCpuRunner``) against the op-by-op engine.

Both run the same C++ ops in the same order, so their logits must be equal
bit for bit: prefill, decode steps through the KV cache (float16 and
float32), chunked prefill, the three FFN activations, GQA/MQA, partial rotary dims, untied heads, the int8
head, file-backed TQ2_0 weights used in place, and 1 or 2 threads; the qwen3 and
gemma3 graphs (QK head norms, BitLinear input norms, post-norms, sliding-window
layers with their own rope base) as language models and as embedding models (hidden
states), on inputs past the window. (The conformance kit, test_cpu_conformance.py,
checks the fused runner against the numpy reference within its tolerance.)
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from native_cpu import NAME_THREADS, native_provider

from bitnet_core.config import BitNetConfig
from bitnet_core.errors import ShapeError
from bitnet_core.model import GenericRunner, KVCacheConfig, ModelWeights, random_weights
from bitnet_core.providers.cpu_runner import FusedCpuRunner
from bitnet_core.testing.model import EMBED_CONFIGS, FILE_CONFIG, MODEL_CONFIGS


@pytest.fixture(params=NAME_THREADS, ids=lambda p: f"{p[0]}-t{p[1]}")
def prov_args(request):
    return request.param


def _pair(name: str, threads: int, weights, kv_dtype: str | None = None, **kw):
    opts = dict(progress=False, kv_cache=KVCacheConfig(dtype=kv_dtype))
    fused = FusedCpuRunner(native_provider(name, threads, **kw), weights, **opts)
    generic = GenericRunner(native_provider(name, threads, **kw), weights, **opts)
    return fused, generic


#: Embedding graphs of awkward shapes besides the kit's: hidden 160 (not a multiple of
#: 128), head_dim 40 != 160 / 5, five heads over one, window 5 with every 3rd layer global
EMBED_SHAPES = {
    **{name: dict(cfg, context_length=200) for name, cfg in EMBED_CONFIGS.items()},
    "gemma3-160": dict(
        EMBED_CONFIGS["gemma3"], hidden_size=160, num_layers=3, num_heads=5, num_kv_heads=1,
        key_length=40, intermediate_size=200, sliding_window=5, sliding_window_pattern=3,
        context_length=200,
    ),
    "qwen3-160": dict(
        EMBED_CONFIGS["qwen3"], hidden_size=160, num_heads=5, num_kv_heads=5, key_length=40,
        intermediate_size=200, context_length=200,
    ),
}  # fmt: skip

CONFIGS = {  # the models the fused pass runs
    **MODEL_CONFIGS,
    # the qwen3/gemma3 graphs as language models (a head, decode steps through the window)
    **{f"{name}-lm": dict(cfg, pooling="none") for name, cfg in EMBED_CONFIGS.items()},
    # hidden 160: above one 128 block, not a multiple; 5 heads of 32 over 5 kv heads
    "mha-silu-160": dict(
        vocab_size=77, hidden_size=160, num_layers=2, num_heads=5, num_kv_heads=5,
        intermediate_size=200, context_length=48, ffn_activation="silu",
    ),
    # llama-architecture 1.58-bit (HF1BitLLM): no sub-norms, adjacent-pair rope
    "llama-gqa": dict(
        vocab_size=90, hidden_size=128, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=256, context_length=48, ffn_activation="silu", arch="llama",
        rope_style="norm",
    ),
}  # fmt: skip


@pytest.mark.parametrize("kv_dtype", ["float16", "float32"])
@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_fused_equals_generic(prov_args, config_name, kv_dtype):
    weights = random_weights(BitNetConfig(**CONFIGS[config_name]), seed=11)
    fused, generic = _pair(*prov_args, weights, kv_dtype)
    assert fused.kv.dtype == generic.kv.dtype == np.dtype(kv_dtype)
    vocab = weights.config.vocab_size
    ids = np.random.default_rng(3).integers(0, vocab, size=13)
    ids[0] = vocab - 1
    np.testing.assert_array_equal(fused.logits(ids), generic.logits(ids))
    with fused.new_cache() as fs, generic.new_cache() as gs:
        for a, b in ((0, 6), (6, 7), (7, 8), (8, 11), (11, 12), (12, 13)):
            np.testing.assert_array_equal(
                fused.forward(ids[a:b], fs), generic.forward(ids[a:b], gs)
            )
        assert fs.length == gs.length == 13


@pytest.mark.parametrize("kv_dtype", ["float16", "float32"])
@pytest.mark.parametrize("act", ["silu", "relu2"])
def test_default_cpu_device_matches_the_reference(act, kv_dtype):
    """``device="cpu"`` as a user gets it (the best ISA here, every usable CPU a thread)
    against ``cpu-reference`` with the same cache dtype, prompt row by row: within 1e-4
    (1e-7 measured on AVX2), where a float16 cache against a float32 one moves these
    logits ~2%. On a many-core AVX-512 host this is the thread count and the kernel
    table no CI machine runs (ci/host-cpu.sh runs it there)."""
    from bitnet_core.model.api import Model

    cfg = BitNetConfig(
        vocab_size=301, hidden_size=96, num_layers=3, num_heads=6, num_kv_heads=2,
        intermediate_size=200, context_length=64, ffn_activation=act,
        rope_style="neox" if act == "silu" else "norm",
    )  # fmt: skip
    weights = random_weights(cfg, seed=3)
    prompt = np.random.default_rng(4).integers(0, cfg.vocab_size, size=23)
    kv = KVCacheConfig(dtype=kv_dtype)
    ref = Model.from_weights(weights, device="cpu-reference", kv_cache=kv, progress=False)
    got = Model.from_weights(weights, device="cpu", kv_cache=kv, progress=False)
    assert isinstance(got.runner, FusedCpuRunner) and got.runner.kv.dtype == np.dtype(kv_dtype)
    a, b = ref.logits(prompt), got.logits(prompt)
    for row, (want, have) in enumerate(zip(a, b, strict=True)):
        err = np.linalg.norm(want - have) / np.linalg.norm(want)
        assert err < 1e-4, f"prompt row {row}: {err:.2e} from the reference"
    assert ref.generate_ids(prompt, max_tokens=12, temperature=0) == got.generate_ids(
        prompt, max_tokens=12, temperature=0
    )


@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_checked_head_keeps_greedy_parity(config_name):
    """The checked int8 head decodes the exact head's greedy tokens, on every kit model
    (the int8 head alone does not on gqa-relu2: a near-tie at step 9), and its receipt
    names it; its logits near the top are the exact head's."""
    weights = random_weights(BitNetConfig(**CONFIGS[config_name]), seed=7)
    prompt = np.random.default_rng(3).integers(0, weights.config.vocab_size, size=8)
    tokens, kernels = {}, {}
    for mode in (False, True, "checked"):
        prov = native_provider("cpu-avx2" if _has_avx2() else "cpu-scalar", 2, int8_head=mode)
        runner = FusedCpuRunner(prov, weights, progress=False)
        got = []
        with runner.new_cache() as seq:
            out = runner.forward(prompt, seq)
            for _ in range(16):
                got.append((int(np.argmax(out)), float(np.max(out))))
                out = runner.forward(np.array([got[-1][0]]), seq)
        tokens[mode], kernels[mode] = got, set(prov.trace.kernels)
    assert tokens["checked"] == tokens[False]  # the tokens and their logits, bit for bit
    if config_name == "gqa-relu2":  # where the int8 head alone is wrong: the test can fail
        assert [t for t, _ in tokens[True]] != [t for t, _ in tokens[False]]
    assert "CpuModel.dense_i8_checked" in kernels["checked"]
    assert "CpuModel.dense" in kernels[False]


def _has_avx2() -> bool:
    from bitnet_core.native import cpu_features

    return bool(cpu_features().get("avx2"))


def test_caches_of_an_equivalent_float16_dtype(prov_args):
    """A float16 KV cache whose dtype object is not numpy's own instance (gguf-py's reader
    makes such arrays) is float16 to the fused pass, not refused."""
    weights = random_weights(BitNetConfig(**MODEL_CONFIGS["gqa-relu2"]), seed=6)
    fused = FusedCpuRunner(native_provider(*prov_args), weights, progress=False)
    odd = np.dtype(np.float16, metadata={"from": "elsewhere"})
    assert odd is not np.dtype(np.float16) and odd == np.float16
    cfg = weights.config
    shape = (16, cfg.num_kv_heads, cfg.head_dim)
    outs = []
    for dtype in (np.float16, odd):
        ks = [np.zeros(shape, dtype) for _ in range(cfg.num_layers)]
        vs = [np.zeros(shape, dtype) for _ in range(cfg.num_layers)]
        outs.append(fused._model.forward(np.array([3, 1, 4]), ks, vs, 0, True, 1))
    np.testing.assert_array_equal(outs[0], outs[1])


def test_fused_int8_head_equals_generic(prov_args):
    weights = random_weights(BitNetConfig(**MODEL_CONFIGS["gqa-relu2"]), seed=5)
    fused, generic = _pair(*prov_args, weights, int8_head=True)
    ids = np.arange(9) * 7 % weights.config.vocab_size
    got = fused.logits(ids)
    np.testing.assert_array_equal(got, generic.logits(ids))
    # and it is the int8 head, not the float one
    exact = FusedCpuRunner(native_provider(*prov_args), weights, progress=False).logits(ids)
    assert not np.array_equal(got, exact)
    assert np.abs(got - exact).max() <= 0.05 * np.abs(exact).max()


def test_fused_long_prompt_in_sub_batches(prov_args):
    """Prompts past the fused pass's 64-token sub-batches, then decode past 2 attention chunks."""
    cfg = dict(MODEL_CONFIGS["gqa-relu2"], context_length=256)
    weights = random_weights(BitNetConfig(**cfg), seed=4)
    fused, generic = _pair(*prov_args, weights)
    ids = np.random.default_rng(5).integers(0, cfg["vocab_size"], size=150)
    np.testing.assert_array_equal(fused.logits(ids), generic.logits(ids))
    with fused.new_cache() as fs, generic.new_cache() as gs:
        np.testing.assert_array_equal(fused.forward(ids[:129], fs), generic.forward(ids[:129], gs))
        for i in range(129, 150):
            np.testing.assert_array_equal(
                fused.forward(ids[i : i + 1], fs), generic.forward(ids[i : i + 1], gs)
            )


def test_fused_chunked_prefill(prov_args):
    weights = random_weights(BitNetConfig(**MODEL_CONFIGS["gqa-relu2"]), seed=2)
    prov = native_provider(*prov_args)
    whole = FusedCpuRunner(prov, weights, progress=False)
    chunked = FusedCpuRunner(prov, weights, progress=False, max_batch=4)
    ids = np.random.default_rng(0).integers(0, weights.config.vocab_size, size=23)
    np.testing.assert_array_equal(chunked.logits(ids), whole.logits(ids))


@pytest.mark.parametrize("layout", ["auto", "i2_128", "tq1_160"])
def test_fused_on_file_weights(prov_args, layout, tmp_path):
    from bitnet_core.gguf import open_model_file
    from bitnet_core.model import ModelWeights, random_model_file

    path = random_model_file(
        str(tmp_path / "m.gguf"),
        BitNetConfig(**FILE_CONFIG),
        seed=1,
        ternary_type="tq2_0",
        tokenizer=None,
    )
    weights = ModelWeights.from_model_file(open_model_file(path))
    fused, generic = _pair(*prov_args, weights, layout=layout)
    if layout == "auto":  # TQ2_0 bytes used in place
        assert fused.weights.layers[0].q.layout == "tq2_0"
    ids = np.random.default_rng(1).integers(0, FILE_CONFIG["vocab_size"], size=7)
    np.testing.assert_array_equal(fused.logits(ids), generic.logits(ids))


def test_make_runner_and_opt_out(monkeypatch):
    prov = native_provider("cpu-scalar", 1)
    weights = random_weights(BitNetConfig(**MODEL_CONFIGS["gqa-relu2"]), seed=1)
    assert isinstance(prov.make_runner(weights, progress=False), FusedCpuRunner)
    monkeypatch.setenv("BITNET_CPU_FUSED", "0")
    assert prov.make_runner(weights, progress=False) is None


def test_llama_graph_skips_the_sub_norms_in_the_fused_pass():
    """The fused pass runs a sub-norm-free model (equal to the generic engine: above), and
    what it computes is not the bitnet graph's with unit sub-norms applied."""
    cfg = BitNetConfig(**CONFIGS["llama-gqa"])
    weights = random_weights(cfg, seed=2)
    assert not any("sub_norm" in n for n in weights.dense)
    prov = native_provider("cpu-scalar", 1)
    fused = prov.make_runner(weights, progress=False)
    assert isinstance(fused, FusedCpuRunner) and fused.weights.layers[0].attn_sub_norm is None
    ids = np.array([3, 1, 4, 1, 5, 9, 2, 6])
    mark = prov.trace.mark()
    fused.logits(ids)
    # the trace counts what ran: two norms a layer and the output norm, no sub-norms
    assert prov.trace.kernels["CpuModel.rmsnorm"] - mark.kernels["CpuModel.rmsnorm"] == (
        2 * cfg.num_layers + 1
    )
    ones = dict(weights.dense)
    for i in range(cfg.num_layers):
        ones[f"blk.{i}.attn_sub_norm.weight"] = np.ones(cfg.hidden_size, np.float32)
        ones[f"blk.{i}.ffn_sub_norm.weight"] = np.ones(cfg.intermediate_size, np.float32)
    bitnet_cfg = dataclasses.replace(cfg, arch="bitnet")
    normed = ModelWeights(bitnet_cfg, weights.ternary, ones)
    with_norms = FusedCpuRunner(prov, normed, progress=False).logits(ids)
    assert not np.allclose(fused.logits(ids), with_norms, rtol=1e-3, atol=1e-3)


def test_bitlinear_input_norms_run_in_the_fused_pass():
    """A model with BitLinear input norms (use_rms_norm) is the fused runner's, with no
    fallback, and its trace counts every norm: two a layer, seven input norms, the output's."""
    cfg = BitNetConfig(**CONFIGS["llama-gqa"], linear_norms=True, linear_norm_eps=1e-6)
    weights = random_weights(cfg, seed=4)
    assert "blk.1.ffn_down_in_norm.weight" in weights.dense
    prov = native_provider("cpu-scalar", 1)
    fused = prov.make_runner(weights, progress=False)
    assert isinstance(fused, FusedCpuRunner) and fused.fused and not prov.trace.fallbacks
    mark = prov.trace.mark()
    fused.logits([3, 1, 4, 1, 5])
    assert prov.trace.kernels["CpuModel.rmsnorm"] - mark.kernels["CpuModel.rmsnorm"] == (
        9 * cfg.num_layers + 1
    )


def _embed_inputs(cfg: BitNetConfig, seed: int) -> list[np.ndarray]:
    """Inputs of 1, 2, 5 tokens, one past the window, one past a 64-token pass and one past
    two (each split into equal parts), the last id the vocabulary's last."""
    rng = np.random.default_rng(seed)
    lengths = (1, 2, 5, cfg.sliding_window + 6, 70, min(cfg.context_length, 150))
    out = [rng.integers(0, cfg.vocab_size, n) for n in lengths]
    out[-1][-1] = cfg.vocab_size - 1
    return out


@pytest.mark.parametrize("kv_dtype", ["float16", "float32"])
@pytest.mark.parametrize("config_name", sorted(EMBED_SHAPES))
def test_fused_hidden_states_equal_generic(prov_args, config_name, kv_dtype):
    """An embedding model's final hidden states from ``CpuModel.hidden_batch`` equal the
    generic engine's bit for bit: in one batch, one input at a time, and in chunks
    (max_batch 16: a chunk's queries reach back past the window into the previous chunk)."""
    cfg = BitNetConfig(**EMBED_SHAPES[config_name])
    weights = random_weights(cfg, seed=5)
    fused, generic = _pair(*prov_args, weights, kv_dtype)
    assert fused.fused
    inputs = _embed_inputs(cfg, 7)
    want = generic.hidden_states(inputs)
    chunked = FusedCpuRunner(
        native_provider(*prov_args), weights, progress=False, max_batch=16,
        kv_cache=KVCacheConfig(dtype=kv_dtype),
    )  # fmt: skip
    for got in (
        fused.hidden_states(inputs),
        [fused.hidden_states([ids])[0] for ids in inputs],
        chunked.hidden_states(inputs),
    ):
        for ids, a, b in zip(inputs, got, want, strict=True):
            assert a.shape == (ids.size, cfg.hidden_size)
            np.testing.assert_array_equal(a, b, err_msg=f"{config_name}, {ids.size} tokens")
    with pytest.raises(ShapeError, match="embedding model"):
        fused.logits([1, 2])


def test_fused_embedding_pass_counts_its_kernels():
    """The trace of a gemma3 embedding pass: the norms of its graph (attention, FFN, QK,
    post and seven input norms a layer, the output norm), seven quantizations and ternary
    calls a layer, no head."""
    cfg = BitNetConfig(**EMBED_CONFIGS["gemma3"])
    prov = native_provider("cpu-scalar", 1)
    fused = prov.make_runner(random_weights(cfg, seed=1), progress=False)
    assert isinstance(fused, FusedCpuRunner) and not prov.trace.fallbacks
    mark = prov.trace.mark()
    fused.hidden_states([[1, 2, 3]])
    ran = {k: n - mark.kernels.get(k, 0) for k, n in prov.trace.kernels.items()}
    layers = cfg.num_layers
    assert ran["CpuModel.rmsnorm"] == 13 * layers + 1
    assert ran["CpuModel.ternary"] == ran["CpuModel.quantize"] == 7 * layers
    assert not any(k.startswith("CpuModel.dense") for k in ran if ran[k])


def test_float_matmuls_take_the_generic_path():
    prov = native_provider("cpu-scalar", 1)
    weights = random_weights(BitNetConfig(**MODEL_CONFIGS["gqa-relu2"]), seed=1)
    fused = FusedCpuRunner(prov, weights, progress=False, quantize_activations=False)
    generic = GenericRunner(prov, weights, progress=False, quantize_activations=False)
    ids = np.array([1, 2, 3])
    np.testing.assert_array_equal(fused.logits(ids), generic.logits(ids))


def test_bad_caches_are_clear_errors():
    prov = native_provider("cpu-scalar", 1)
    weights = random_weights(BitNetConfig(**MODEL_CONFIGS["gqa-relu2"]), seed=1)
    fused = FusedCpuRunner(prov, weights, progress=False)
    model = fused._model
    cfg = weights.config
    good = [
        np.zeros((8, cfg.num_kv_heads, cfg.head_dim), np.float32) for _ in range(cfg.num_layers)
    ]
    ids = np.array([1, 2], dtype=np.int64)
    with pytest.raises(ValueError, match="one K and one V cache per layer"):
        model.forward(ids, good[:1], good, 0, False, 1)
    with pytest.raises(ValueError, match="too short"):
        model.forward(ids, good, good, 7, False, 1)
    wrong = [np.zeros((8, cfg.num_kv_heads, cfg.head_dim + 1), np.float32)] * cfg.num_layers
    with pytest.raises(ValueError, match="does not match"):
        model.forward(ids, wrong, wrong, 0, False, 1)
    f64 = [a.astype(np.float64) for a in good]
    with pytest.raises(ValueError, match="contiguous float32"):
        model.forward(ids, f64, f64, 0, False, 1)
    ro = [a.copy() for a in good]
    for a in ro:
        a.flags.writeable = False
    with pytest.raises(ValueError):
        model.forward(ids, ro, ro, 0, False, 1)
    with pytest.raises(ValueError, match="out of range"):
        model.forward(np.array([cfg.vocab_size]), good, good, 0, False, 1)
    # through the runner: a bitnet_core error, the cache untouched
    with fused.new_cache() as seq, pytest.raises(ShapeError):
        fused.forward([cfg.vocab_size], seq)


# (sequence, ids) per batched step: prompt chunks and decode tokens mixed, the
# sequences at different positions, in varying order
BATCH_STEPS = (
    ((0, 7), (1, 1)),
    ((0, 1), (1, 5), (2, 3)),
    ((2, 1), (0, 1), (3, 9), (1, 1)),
    ((3, 1), (2, 4), (0, 1), (1, 2)),
)


@pytest.mark.parametrize("kv_dtype", ["float16", "float32"])
@pytest.mark.parametrize("config_name", sorted(CONFIGS))
def test_forward_batch_equals_forward(prov_args, config_name, kv_dtype):
    """One batched step of several sequences gives each sequence the logits of its own
    forward bit for bit: on the fused engine and on the op-by-op generic one."""
    weights = random_weights(BitNetConfig(**CONFIGS[config_name]), seed=12)
    fused, generic = _pair(*prov_args, weights, kv_dtype)
    solo = FusedCpuRunner(
        native_provider(*prov_args), weights, progress=False, kv_cache=KVCacheConfig(dtype=kv_dtype)
    )
    rng = np.random.default_rng(8)
    vocab = weights.config.vocab_size
    engines = {"fused": fused, "generic": generic}
    seqs = {
        name: [b.new_cache() for _ in range(4)] for name, b in {**engines, "solo": solo}.items()
    }
    for step in BATCH_STEPS:
        chunks = [(j, rng.integers(0, vocab, size=n)) for j, n in step]
        want = np.stack([solo.forward(ids, seqs["solo"][j]) for j, ids in chunks])
        for name, runner in engines.items():
            got = runner.forward_batch([(ids, seqs[name][j]) for j, ids in chunks])
            assert got.shape == (len(chunks), vocab) and got.dtype == np.float32
            np.testing.assert_array_equal(got, want, err_msg=f"{name} step {step}")
    for name in engines:
        assert [s.length for s in seqs[name]] == [s.length for s in seqs["solo"]] == [10, 9, 8, 10]


def test_forward_batch_of_nine_decode_tokens_equals_forward(prov_args):
    """A server step at --parallel 9: nine sequences at nine positions, one token each
    (the 8-token GEMM tile plus one, a 9-row head, nine decode attentions in one job),
    gives each sequence its own forward's logits bit for bit, step after step."""
    weights = random_weights(BitNetConfig(**CONFIGS["mha-silu-160"]), seed=9)
    opts = dict(progress=False, kv_cache=KVCacheConfig(dtype="float16"))
    batched = FusedCpuRunner(native_provider(*prov_args), weights, **opts)
    solo = FusedCpuRunner(native_provider(*prov_args), weights, **opts)
    rng = np.random.default_rng(21)
    vocab = weights.config.vocab_size
    seqs = [(batched.new_cache(), solo.new_cache()) for _ in range(9)]
    try:
        for j, (b, s) in enumerate(seqs):
            prompt = rng.integers(0, vocab, size=j + 1)
            batched.forward(prompt, b)
            solo.forward(prompt, s)
        for _ in range(3):
            ids = rng.integers(0, vocab, size=9)
            got = batched.forward_batch(
                [([int(i)], b) for i, (b, _) in zip(ids, seqs, strict=True)]
            )
            want = np.stack(
                [solo.forward([int(i)], s) for i, (_, s) in zip(ids, seqs, strict=True)]
            )
            np.testing.assert_array_equal(got, want)
        assert [b.length for b, _ in seqs] == [j + 4 for j in range(9)]
    finally:
        for b, s in seqs:
            b.close()
            s.close()


@pytest.mark.parametrize("int8_head", [True, "checked"])
def test_forward_batch_int8_head_equals_forward(prov_args, int8_head):
    weights = random_weights(BitNetConfig(**MODEL_CONFIGS["gqa-relu2"]), seed=6)
    fused = FusedCpuRunner(
        native_provider(*prov_args, int8_head=int8_head), weights, progress=False
    )
    with (
        fused.new_cache() as a,
        fused.new_cache() as b,
        fused.new_cache() as c,
        fused.new_cache() as d,
    ):
        fused.forward([1, 2, 3], a)
        got = fused.forward_batch([([4], a), ([5, 6, 7, 8], b)])
        fused.forward([1, 2, 3], c)
        np.testing.assert_array_equal(got[0], fused.forward([4], c))
        np.testing.assert_array_equal(got[1], fused.forward([5, 6, 7, 8], d))


def test_forward_batch_bad_input_appends_nothing(prov_args):
    weights = random_weights(BitNetConfig(**MODEL_CONFIGS["gqa-relu2"]), seed=6)
    fused, generic = _pair(*prov_args, weights)
    for runner in (fused, generic):
        with runner.new_cache() as a, runner.new_cache() as b:
            runner.forward([1, 2], a)
            with pytest.raises(ShapeError, match="twice"):
                runner.forward_batch([([3], a), ([4], a)])
            with pytest.raises(ShapeError, match="at least one"):
                runner.forward_batch([])
            with pytest.raises(ShapeError, match="at least one token"):
                runner.forward_batch([([3], a), ([], b)])
            with pytest.raises(ShapeError, match="out of range|vocabulary"):
                runner.forward_batch([([3], a), ([10**6], b)])
            assert (a.length, b.length) == (2, 0)
