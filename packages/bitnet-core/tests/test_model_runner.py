"""The generic backend: prefill/decode consistency, the graph against an independent
numpy implementation, GQA, both FFN activations, and only-protocol-ops."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core import config as names
from bitnet_core.config import BitNetConfig
from bitnet_core.errors import ContextLengthError, ShapeError
from bitnet_core.model import GenericRunner, Model, random_weights
from bitnet_core.providers.reference import ReferenceProvider


def tiny(**kw) -> BitNetConfig:
    base = dict(
        vocab_size=97,
        hidden_size=48,
        num_layers=2,
        num_heads=4,
        num_kv_heads=2,
        intermediate_size=80,
        context_length=64,
    )
    base.update(kw)
    return BitNetConfig(**base)


CONFIGS = {
    "gqa-silu": tiny(),
    "mha-relu2": tiny(num_kv_heads=4, ffn_activation="relu2"),
    "mqa-untied": tiny(num_kv_heads=1, tied_embeddings=False, num_layers=3),
    "partial-rope-norm": tiny(rope_dim=6, rope_style="norm", rope_theta=500000.0),
}


# --- an independent float64 implementation of BitNet b1.58 (docs/FORMATS.md, "Model facts") ---------------


def _rms(x, w, eps):
    return x / np.sqrt(np.mean(x * x, axis=-1, keepdims=True) + eps) * w


def _actq(x):
    s = 127.0 / np.maximum(np.abs(x).max(axis=-1, keepdims=True), 1e-5)
    return np.clip(np.round(x * s), -128, 127) / s


def _rope(x, pos, theta, style, rot):
    half = rot // 2
    inv = theta ** (-np.arange(half) * 2.0 / rot)
    ang = pos[:, None] * inv[None, :]
    c, s = np.cos(ang)[:, None, :], np.sin(ang)[:, None, :]
    out = x.copy()
    if style == "neox":
        a, b = x[..., :half], x[..., half:rot]
        out[..., :half], out[..., half:rot] = a * c - b * s, b * c + a * s
    else:
        a, b = x[..., 0:rot:2], x[..., 1:rot:2]
        out[..., 0:rot:2], out[..., 1:rot:2] = a * c - b * s, b * c + a * s
    return out


def naive_logits(weights, ids, act_quant: bool) -> np.ndarray:
    cfg = weights.config
    d = {k: np.asarray(v, np.float64) for k, v in weights.dense.items()}
    tw = {k: v.dense().astype(np.float64) for k, v in weights.ternary.items()}
    T, hd = len(ids), cfg.head_dim
    pos = np.arange(T, dtype=np.float64)
    q_ = _actq if act_quant else (lambda x: x)

    def lin(x, name):
        return q_(x) @ tw[name].T

    x = d[names.TOKEN_EMBD][ids]
    eps = cfg.rms_norm_eps
    for i in range(cfg.num_layers):
        n = lambda key, i=i: key.format(i=i)  # noqa: E731
        h = _rms(x, d[n(names.ATTN_NORM)], eps)
        q = lin(h, n(names.ATTN_Q)).reshape(T, cfg.num_heads, hd)
        k = lin(h, n(names.ATTN_K)).reshape(T, cfg.num_kv_heads, hd)
        v = lin(h, n(names.ATTN_V)).reshape(T, cfg.num_kv_heads, hd)
        q = _rope(q, pos, cfg.rope_theta, cfg.rope_style, cfg.rot_dim)
        k = _rope(k, pos, cfg.rope_theta, cfg.rope_style, cfg.rot_dim)
        g = cfg.num_heads // cfg.num_kv_heads
        k, v = np.repeat(k, g, axis=1), np.repeat(v, g, axis=1)
        sc = np.einsum("thd,shd->hts", q, k) / np.sqrt(hd)
        sc = np.where(np.triu(np.ones((T, T), bool), 1)[None], -np.inf, sc)
        p = np.exp(sc - sc.max(-1, keepdims=True))
        p /= p.sum(-1, keepdims=True)
        a = np.einsum("hts,shd->thd", p, v).reshape(T, -1)
        x = x + lin(_rms(a, d[n(names.ATTN_SUB_NORM)], eps), n(names.ATTN_OUT))
        h = _rms(x, d[n(names.FFN_NORM)], eps)
        gate, up = lin(h, n(names.FFN_GATE)), lin(h, n(names.FFN_UP))
        act = (
            gate / (1 + np.exp(-gate)) if cfg.ffn_activation == "silu" else np.maximum(gate, 0) ** 2
        )
        f = _rms(act * up, d[n(names.FFN_SUB_NORM)], eps)
        x = x + lin(f, n(names.FFN_DOWN))
    head = d[names.OUTPUT] if not cfg.tied_embeddings else d[names.TOKEN_EMBD]
    return _rms(x, d[names.OUTPUT_NORM], eps) @ head.T


@pytest.fixture(scope="module", params=list(CONFIGS))
def weights(request):
    return random_weights(CONFIGS[request.param], seed=7)


def test_without_act_quant_matches_independent_float64_model(weights):
    ids = np.random.default_rng(1).integers(0, weights.config.vocab_size, 19)
    backend = GenericRunner(ReferenceProvider(), weights, quantize_activations=False)
    ours = backend.logits(ids)
    ref = naive_logits(weights, ids, act_quant=False)
    assert ours.shape == (19, weights.config.vocab_size)
    np.testing.assert_allclose(ours, ref, rtol=1e-4, atol=1e-4)


def test_with_act_quant_sits_in_the_rounding_band_of_an_independent_model(weights):
    ids = np.random.default_rng(2).integers(0, weights.config.vocab_size, 16)
    ours = GenericRunner(ReferenceProvider(), weights).logits(ids)
    ref = naive_logits(weights, ids, act_quant=True)
    rel = np.linalg.norm(ours - ref) / np.linalg.norm(ref)
    assert rel < 0.02, rel
    assert (ours.argmax(-1) == ref.argmax(-1)).mean() >= 0.9
    # and quantization does change the numbers (the switch is not a no-op)
    unq = naive_logits(weights, ids, act_quant=False)
    assert np.linalg.norm(ours - unq) / np.linalg.norm(unq) > 1e-4


@pytest.mark.parametrize("split", [1, 5, 12])
def test_prefill_then_decode_equals_all_at_once(weights, split):
    ids = np.random.default_rng(3).integers(0, weights.config.vocab_size, 13)
    backend = GenericRunner(ReferenceProvider(), weights)
    full = backend.logits(ids)
    with backend.new_cache() as seq:
        first = backend.forward(ids[:split], seq, all_logits=True)
        rest = [backend.forward(ids[i : i + 1], seq) for i in range(split, len(ids))]
        assert seq.length == len(ids)
    stepwise = np.vstack([first, *[r[None] for r in rest]])
    np.testing.assert_allclose(stepwise, full, rtol=1e-5, atol=1e-5)
    with backend.new_cache() as seq:  # last-token logits equal the last row
        np.testing.assert_allclose(backend.forward(ids, seq), full[-1], rtol=1e-5, atol=1e-5)


def test_chunked_prefill_equals_one_batch(weights):
    ids = np.random.default_rng(4).integers(0, weights.config.vocab_size, 23)
    one = GenericRunner(ReferenceProvider(), weights).logits(ids)
    chunked = GenericRunner(ReferenceProvider(), weights, max_batch=5)
    np.testing.assert_allclose(chunked.logits(ids), one, rtol=1e-5, atol=1e-5)
    with chunked.new_cache() as seq:
        np.testing.assert_allclose(chunked.forward(ids, seq), one[-1], rtol=1e-5, atol=1e-5)
        assert seq.length == 23


def test_activations_differ():
    a = random_weights(tiny(), seed=3)
    b = random_weights(tiny(ffn_activation="relu2"), seed=3)
    ids = [1, 2, 3, 4]
    la = GenericRunner(ReferenceProvider(), a).logits(ids)
    lb = GenericRunner(ReferenceProvider(), b).logits(ids)
    assert not np.allclose(la, lb)


class Box:
    """An opaque device array: the backend must not look inside."""

    __slots__ = ("a",)

    def __init__(self, a):
        self.a = a


class BoxProvider:
    """The reference provider behind opaque handles, counting host transfers."""

    name, family, device_kind, priority = "boxed", "cpu", "cpu", 99

    def __init__(self):
        self.ref = ReferenceProvider()
        self.to_host_calls = 0
        self.ops: set[str] = set()

    def to_device(self, arr):
        return Box(np.array(arr))

    def to_host(self, x):
        self.to_host_calls += 1
        return np.array(x.a)

    def empty(self, shape, dtype=np.float32):
        return Box(np.zeros(shape, dtype))

    def reshape(self, x, shape):
        return Box(x.a.reshape(shape))

    def load_ternary(self, w):
        return Box(self.ref.load_ternary(w))

    def kv_store(self, cache, x, start):
        self.ops.add("kv_store")
        self.ref.kv_store(cache.a, x.a, start)

    def __getattr__(self, op):
        fn = getattr(self.ref, op)

        def call(*args, **kw):
            self.ops.add(op)
            out = fn(*[a.a if isinstance(a, Box) else a for a in args], **kw)
            return Box(out)

        return call


def test_backend_uses_only_protocol_ops_and_downloads_only_logits():
    w = random_weights(tiny(), seed=5)
    prov = BoxProvider()
    backend = GenericRunner(prov, w)
    ids = np.arange(1, 12)
    with backend.new_cache() as seq:
        out = backend.forward(ids[:8], seq)
        assert prov.to_host_calls == 1
        out2 = backend.forward(ids[8:9], seq)
        assert prov.to_host_calls == 2
    ref = GenericRunner(ReferenceProvider(), w)
    with ref.new_cache() as seq:
        np.testing.assert_array_equal(out, ref.forward(ids[:8], seq))
        np.testing.assert_array_equal(out2, ref.forward(ids[8:9], seq))
    assert {"linear", "rope", "attention", "silu_mul", "matmul_dense"} <= prov.ops
    assert "matmul_ternary_float" not in prov.ops


def test_bad_token_ids_and_context_limit():
    backend = GenericRunner(ReferenceProvider(), random_weights(tiny(), seed=1))
    with backend.new_cache() as seq, pytest.raises(ShapeError, match="out of range"):
        backend.forward([1, 97], seq)
    with backend.new_cache() as seq, pytest.raises(ShapeError):
        backend.forward([], seq)
    with backend.new_cache() as seq, pytest.raises(ContextLengthError, match="64"):
        backend.forward(np.zeros(65, dtype=np.int64), seq)


def test_model_generation_is_seeded_and_stops_at_the_context():
    model = Model.from_weights(random_weights(tiny(), seed=11), "cpu-reference")
    a = model.generate_ids([1, 2, 3], max_tokens=12, seed=42, temperature=1.0)
    b = model.generate_ids([1, 2, 3], max_tokens=12, seed=42, temperature=1.0)
    c = model.generate_ids([1, 2, 3], max_tokens=12, seed=43, temperature=1.0)
    assert a == b and len(a) == 12
    assert a != c
    greedy = model.generate_ids([1, 2, 3], max_tokens=6, temperature=0)
    # greedy equals the argmax of teacher-forced logits over its own output
    logits = model.logits([1, 2, 3, *greedy[:-1]])
    assert list(logits[2:].argmax(-1)) == greedy
    long = model.generate_ids(list(range(1, 60)), max_tokens=50, temperature=0)
    assert len(long) == 64 - 59 + 1  # the last sampled token needs no cache slot
    assert model.last_stats.finish_reason == "context"
    with pytest.raises(ContextLengthError):
        model.generate_ids(list(range(1, 70)), max_tokens=1)


class NoReshapeBoxProvider(BoxProvider):
    reshape = None  # neither the provider nor its arrays can reshape


def test_provider_without_reshape_still_runs_through_the_host(caplog):
    w = random_weights(tiny(), seed=5)
    ids = np.arange(1, 9)
    got = GenericRunner(NoReshapeBoxProvider(), w).logits(ids)
    np.testing.assert_array_equal(got, GenericRunner(ReferenceProvider(), w).logits(ids))
    assert sum("implement KernelProvider.reshape" in r.message for r in caplog.records) == 1


def test_concurrent_generations_match_sequential_ones():
    from concurrent.futures import ThreadPoolExecutor

    model = Model.from_weights(random_weights(tiny(), seed=4), "cpu-reference")
    prompts = [[1, 2, 3], [4, 5], [6, 7, 8, 9], [10]]
    sequential = [model.generate_ids(p, max_tokens=8, temperature=0) for p in prompts]
    with ThreadPoolExecutor(4) as pool:
        parallel = list(
            pool.map(lambda p: model.generate_ids(p, max_tokens=8, temperature=0), prompts)
        )
    assert parallel == sequential
    assert model.runner.kv.stats()["sequences"] == 0
