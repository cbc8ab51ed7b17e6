"""``WebGPURunner``: the fused step against the reference engine, its plans and submissions."""

from __future__ import annotations

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.errors import StrictModeError, UnsupportedOperationError
from bitnet_core.hal import REGISTRY
from bitnet_core.model import KVCacheConfig, random_weights
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.sdk.runner import GenericRunner
from bitnet_core.testing.model import LOGIT_ATOL
from bitnet_webgpu.runner import WebGPURunner

CFG = BitNetConfig(
    vocab_size=97, hidden_size=48, num_layers=2, num_heads=4, num_kv_heads=2,
    intermediate_size=80, context_length=300,
)  # fmt: skip
WEIGHTS = random_weights(CFG, seed=2)
PROMPT = [96, 5, 9, 2, 7]


def _provider():
    """A provider with its own device and trace, made after the test set the environment."""
    rec = REGISTRY.get("webgpu")
    if rec is None or not rec.probe(explicit=True).available:
        pytest.skip("no WebGPU adapter")
    return type(rec.provider)()


def _fused(kv: str = "float32", block: int = 64, weights=WEIGHTS) -> WebGPURunner:
    p = _provider()
    backend = p.make_runner(weights, kv_cache=KVCacheConfig(dtype=kv, block_size=block))
    assert isinstance(backend, WebGPURunner) and backend.fused
    return backend


def _reference(kv: str = "float32") -> GenericRunner:
    return GenericRunner(ReferenceProvider(), WEIGHTS, kv_cache=KVCacheConfig(dtype=kv))


def _greedy(backend, steps: int) -> tuple[list[int], list[np.ndarray]]:
    tokens, logits = [], []
    with backend.new_cache() as seq:
        out = backend.forward(PROMPT, seq)
        for _ in range(steps):
            logits.append(out)
            tokens.append(int(np.argmax(out)))
            out = backend.forward([tokens[-1]], seq)
    return tokens, logits


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_greedy_tokens_and_logits_equal_the_reference(kv):
    """Past two KV-capacity crossings (blocks of 16): three plans, the same tokens."""
    ref_tokens, ref_logits = _greedy(_reference(kv), 40)
    backend = _fused(kv, block=16)
    tokens, logits = _greedy(backend, 40)
    for step, (got, want) in enumerate(zip(logits, ref_logits, strict=True)):
        np.testing.assert_allclose(got, want, rtol=0, atol=LOGIT_ATOL, err_msg=f"step {step}")
    assert tokens == ref_tokens
    # capacity 16, 32, 64: re-planned at each crossing, the outgrown plans dropped
    assert backend.plans_built == 3 and len(backend._plans) == 1


def test_prefill_logits_of_every_position():
    """70 tokens: one pass a token, in two submissions (64 tokens a submission)."""
    prompt = np.random.default_rng(3).integers(0, CFG.vocab_size, 70)
    want = _reference().logits(prompt)
    backend = _fused()
    subs = backend.provider.trace.submissions
    got = backend.logits(prompt)
    assert backend.provider.trace.submissions - subs == 2
    np.testing.assert_allclose(got, want, rtol=0, atol=LOGIT_ATOL)


def test_a_decode_step_is_one_submission_and_records_nothing_new(monkeypatch):
    backend = _fused()
    trace, device = backend.provider.trace, backend.dev.device
    made: list[str] = []
    for name in ("create_buffer", "create_bind_group", "create_compute_pipeline"):
        real = getattr(device, name)
        monkeypatch.setattr(
            device, name, lambda *a, _r=real, _n=name, **k: made.append(_n) or _r(*a, **k)
        )
    with backend.new_cache() as seq:
        subs = trace.submissions
        backend.forward(PROMPT, seq)  # a prompt: one pass a token, one submission
        assert trace.submissions - subs == 1
        backend.forward([3], seq)
        kernels, made[:] = dict(trace.kernels), []
        for tok in range(6):
            subs = trace.submissions
            backend.forward([tok], seq)
            assert trace.submissions - subs == 1
        assert made == []  # no buffer, bind group or pipeline made by a decode step
        assert dict(trace.kernels) == kernels  # the plan was recorded once, not per step
    # one token's layer in four dispatches (the prompt's passes run the same plan)
    assert set(trace.kernels) == {
        "embedding", "qkv_attend", "norm_gemv", "rmsnorm", "matmul_dense",
    }  # fmt: skip
    assert trace.kernels["norm_gemv"] == 3 * CFG.num_layers  # o, gate|up, down
    assert trace.kernels["qkv_attend"] == CFG.num_layers


@pytest.mark.parametrize("layout", ["rows", "groups"])
@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_four_dispatches_a_layer_give_the_tens_logits_bit_for_bit(monkeypatch, kv, layout):
    """BITNET_WEBGPU_LAYER=0 runs one token's layer in the ten dispatches batched steps
    run: every prompt position's and every greedy step's logits the same bits, past three
    KV-capacity crossings, with up to nine key splits (7 keys a split), in both matmul
    layouts (an invocation a row, CPU adapters; 16 a row, GPUs)."""
    monkeypatch.setenv("BITNET_WEBGPU_LAYOUT", layout)
    runs = []
    for layer, per_layer in (("1", 4), ("0", 10)):
        monkeypatch.setenv("BITNET_WEBGPU_LAYER", layer)
        backend = _fused(kv, block=16)
        assert backend.layer == (layer == "1")
        backend.keys_per_split = 7
        prompt = np.random.default_rng(4).integers(0, CFG.vocab_size, 20)
        prefill = backend.logits(prompt)
        tokens, logits = _greedy(backend, 40)
        trace = backend.provider.trace
        with backend.new_cache() as seq:
            backend.forward(PROMPT, seq)
            launches = trace.launches
            backend.forward([3], seq)
            assert trace.launches - launches == 1 + per_layer * CFG.num_layers + 2
        runs.append((tokens, np.concatenate([prefill, np.stack(logits)])))
    (four_tokens, four), (ten_tokens, ten) = runs
    assert four_tokens == ten_tokens
    np.testing.assert_array_equal(four.view(np.uint32), ten.view(np.uint32))


def test_a_row_too_long_for_a_workgroup_is_a_visible_fallback_to_the_ten(monkeypatch):
    cfg = BitNetConfig(
        vocab_size=31, hidden_size=16, num_layers=1, num_heads=2, num_kv_heads=1,
        intermediate_size=8200, context_length=32,
    )  # fmt: skip
    weights = random_weights(cfg, seed=1)
    monkeypatch.delenv("BITNET_STRICT_MODE", raising=False)
    p = _provider()
    backend = p.make_runner(weights, kv_cache=KVCacheConfig(dtype="float32"))
    assert backend.fused and not backend.layer
    assert "intermediate size 8200" in p.trace.fallbacks[0]
    ref = GenericRunner(ReferenceProvider(), weights, kv_cache=KVCacheConfig(dtype="float32"))
    np.testing.assert_allclose(backend.logits([1, 2]), ref.logits([1, 2]), atol=LOGIT_ATOL)


def test_each_sequence_of_a_batch_gets_its_own_plan_and_stays_correct():
    ref, backend = _reference(), _fused()
    seqs = [backend.new_cache() for _ in range(2)]
    refs = [ref.new_cache() for _ in range(2)]
    # (tokens clear of int8 quantizer ties, where any two engines may differ by a code)
    steps = (((0, [96, 4, 5]), (1, [12])), ((0, [6]), (1, [8, 9])), ((1, [10]), (0, [11])))
    for step in steps:
        got = backend.forward_batch([(ids, seqs[j]) for j, ids in step])
        for row, (j, ids) in enumerate(step):
            want = ref.forward(ids, refs[j])
            np.testing.assert_allclose(got[row], want, rtol=0, atol=LOGIT_ATOL)
    # a plan per sequence (its prefill), one for the step that decodes both
    assert backend.plans_built == len(backend._plans) == 3
    assert {len(key) for key in backend._plans} == {1, 2}
    for s in (*seqs, *refs):
        s.close()


@pytest.mark.parametrize("switch", ["BITNET_WEBGPU_NATIVE_ENCODE", "BITNET_WEBGPU_FUSED"])
def test_switches_change_no_tokens(monkeypatch, switch):
    """wgpu-py's own encoding calls, or the generic engine: the same greedy tokens."""
    want, want_logits = _greedy(_fused(), 8)
    monkeypatch.setenv(switch, "0")
    p = _provider()
    backend = p.make_runner(WEIGHTS, kv_cache=KVCacheConfig(dtype="float32"))
    if switch == "BITNET_WEBGPU_FUSED":
        assert backend is None
        backend = GenericRunner(p, WEIGHTS, kv_cache=KVCacheConfig(dtype="float32"))
    else:
        assert backend.native is None
    got, got_logits = _greedy(backend, 8)
    assert got == want
    np.testing.assert_allclose(got_logits, want_logits, rtol=0, atol=LOGIT_ATOL)


def test_an_unsupported_head_dim_is_a_visible_fallback(monkeypatch):
    cfg = BitNetConfig(
        vocab_size=31, hidden_size=258, num_layers=1, num_heads=1, num_kv_heads=1,
        intermediate_size=40, context_length=32,
    )  # fmt: skip
    weights = random_weights(cfg, seed=1)
    monkeypatch.delenv("BITNET_STRICT_MODE", raising=False)
    p = _provider()
    backend = p.make_runner(weights, kv_cache=KVCacheConfig(dtype="float32"))
    assert not backend.fused and "head_dim 258" in p.trace.fallbacks[0]
    ref = GenericRunner(ReferenceProvider(), weights, kv_cache=KVCacheConfig(dtype="float32"))
    np.testing.assert_allclose(backend.logits([1, 2]), ref.logits([1, 2]), atol=LOGIT_ATOL)
    monkeypatch.setenv("BITNET_STRICT_MODE", "1")
    with pytest.raises(StrictModeError):
        _provider().make_runner(weights)


@pytest.mark.parametrize("fused", [True, False])
def test_a_table_larger_than_one_binding_is_bound_in_ranges(fused):
    """The tied f16 table (200 rows of 128 bytes) on a device allowing 16 KiB a binding:
    embedding and head run a 128-row range and a 72-row range; the same logits."""
    cfg = BitNetConfig(
        vocab_size=200, hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=2,
        intermediate_size=96, context_length=64,
    )  # fmt: skip
    weights = random_weights(cfg, seed=5)
    p = _provider()
    p.dev.max_binding = 16384  # as an adapter with a small max-storage-buffer-binding-size
    kv = KVCacheConfig(dtype="float32")
    backend = (
        p.make_runner(weights, kv_cache=kv) if fused else GenericRunner(p, weights, kv_cache=kv)
    )
    ranges = p.table_ranges(backend.weights.embedding)
    assert [(r0, n) for r0, n, _ in ranges] == [(0, 128), (128, 72)]
    ref = GenericRunner(ReferenceProvider(), weights, kv_cache=kv)
    prompt = [199, 3, 128, 127, 64]  # rows at both ends of both ranges
    np.testing.assert_allclose(backend.logits(prompt), ref.logits(prompt), atol=LOGIT_ATOL)
    big = p.to_device(np.ones((200, 64), np.float32))  # 51200 bytes: ranges of 64 rows
    assert big.chunk_rows == 64
    with pytest.raises(UnsupportedOperationError, match="exceeds one storage binding"):
        p.rmsnorm(big, np.ones(64, np.float32), 1e-5)  # an op that binds it whole
