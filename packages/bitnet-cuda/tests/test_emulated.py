"""The CUDA provider and kernels run on a CPU emulator of the device.

No CI machine has an NVIDIA GPU. Here the real provider (``CudaProvider``:
uploads, packing, launch geometry, the host-side ops) runs with CuPy replaced
by ``cuda_emulator.EmulatedCuPy``, which compiles ``bitnet_kernels.cu`` as C++
and runs each launch with every CUDA thread a fiber, blocks and warps
synchronized as on the GPU (``cuda_emulator/cuda_emu.h``). So the kernels'
logic is checked against the numpy reference (the conformance kit, its
small cases) and a whole model against the CPU engine, with blocks, warps and
lanes in a seeded random order (``test_emulator_races.py``); what only a GPU
shows (speed, the compiled PTX, the memory model) is left to
``test_conformance.py`` on a machine that has one.

Whole models run through both engines: the generic one (provider ops) and
``CudaRunner`` (fused kernels, decode steps captured as CUDA graphs, which
the emulator records and replays), with float32 and float16 KV caches.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest
from cuda_emulator import EmulatedCudaProvider, missing

from bitnet_core.hal.bf16 import BF16Array
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.model import KVCacheConfig, Model, random_weights
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.sdk.runner import GenericRunner
from bitnet_core.testing import conformance
from bitnet_core.testing.strict import (
    assert_logits_close,
    check_decode_steps,
    parity_suite,
    strict_config,
)
from bitnet_cuda.runner import CudaRunner

if missing():
    pytest.skip(missing(), allow_module_level=True)


def _emulated() -> EmulatedCudaProvider:
    return EmulatedCudaProvider()


TestEmulatedConformance = conformance.suite(_emulated, large=False)


def test_probe_sees_the_emulated_device_and_loads_its_kernels(monkeypatch) -> None:
    monkeypatch.delenv("BITNET_CUDA_DEVICE", raising=False)
    avail = _emulated().probe(explicit=True)
    assert avail.available and avail.details["compute_capability"] == "9.0"
    assert avail.details["kernels"] == "nvrtc" and avail.device_kind == "gpu"
    assert avail.device.startswith("CUDA emulator (CPU) #0")


def test_probe_reports_kernels_that_fail_to_build(monkeypatch, tmp_path) -> None:
    """A device whose kernel module does not build is unavailable at step "kernels"
    (so auto never picks it), not at the first op."""
    from bitnet_cuda import kernels as module

    broken = tmp_path / "bitnet_kernels.cu"
    broken.write_text(module.SOURCE.read_text() + "\nthis is not C++;\n")
    monkeypatch.setattr(module, "SOURCE", broken)
    avail = _emulated().probe(explicit=True)
    assert not avail.available and avail.step == "kernels"
    assert "CUDA kernels failed to load" in avail.reason


def test_cuda_device_variable_chooses_the_device(monkeypatch) -> None:
    from cuda_emulator.cupy_emulator import _Device

    monkeypatch.setenv("BITNET_CUDA_DEVICE", "1")
    p = _emulated()
    avail = p.probe(explicit=True)
    assert avail.available and avail.device.startswith("CUDA emulator (CPU) #1")
    assert avail.details["device_index"] == 1
    assert p.device_id == 1 and _Device.current() == 1  # the probe loaded the kernels there
    _Device(0).use()
    fresh = _emulated()
    _ = fresh.cp
    assert fresh.device_id == 1 and _Device.current() == 1
    _Device(0).use()
    for value, words in (("2", "no such CUDA device"), ("gpu0", "must be a device index")):
        monkeypatch.setenv("BITNET_CUDA_DEVICE", value)
        avail = _emulated().probe(explicit=True)
        assert not avail.available and avail.step == "device"
        assert "BITNET_CUDA_DEVICE" in avail.reason and words in avail.reason


def test_kernels_take_the_nvrtc_path() -> None:
    p = _emulated()
    _ = p.cp
    assert p.kernel_source == "nvrtc"  # the fatbin is GPU code: refused, the .cu is built


def reference_runner(weights, kv: str, block: int = 64) -> GenericRunner:
    cache = KVCacheConfig(dtype=kv, block_size=block)
    return GenericRunner(ReferenceProvider(), weights, kv_cache=cache)


def cuda_runner(weights, kv: str, engine: str, block: int = 64) -> GenericRunner:
    opts = dict(kv_cache=KVCacheConfig(dtype=kv, block_size=block))
    if engine == "generic":
        return GenericRunner(_emulated(), weights, **opts)
    backend = CudaRunner(_emulated(), weights, **opts)
    backend.use_graphs = engine == "graphs"
    return backend


# (engine, KV dtype): the generic engine as before; the fused one replaying graphs
# (test_graphs_replay_as_the_kernels_run checks graphs against eager launches)
ENGINES = [("generic", "float32"), ("graphs", "float32"), ("graphs", "float16")]


@pytest.fixture(
    scope="module",
    params=[(a, e, kv) for a in ("silu", "relu2") for e, kv in ENGINES],
    ids=lambda p: "-".join(p),
)
def models(request):
    activation, engine, kv = request.param
    weights = random_weights(strict_config(activation), seed=7)
    return Model(reference_runner(weights, kv)), Model(cuda_runner(weights, kv, engine))


# prefill of 12 (> MAXT: dp4a tiles) and 40 tokens (>= 16: tensor cores), decode steps, greedy
TestStrictParity = parity_suite([12, 40])


def test_bfloat16_tables_stay_bfloat16_on_the_device() -> None:
    """A BF16 file's embedding and head are uploaded as bfloat16 (two bytes a value, rows
    padded to 8 for 16-byte loads), gathered and multiplied as such, fused and graphed."""
    cfg = dataclasses.replace(strict_config("silu"), tied_embeddings=False)
    weights = random_weights(cfg, seed=3)
    for name in ("token_embd.weight", "output.weight"):
        weights.dense[name] = BF16Array.from_float(weights.dense[name])
    cb = cuda_runner(weights, "float16", "graphs")
    for table in (cb.weights.embedding, cb.weights.head):
        assert table.kind == "bf16" and table.data.dtype == np.uint16
        assert table.data.shape == (300, 120) and table.cols == 120
    check_decode_steps(
        reference_runner(weights, "float16"), cb, prompt=(4, 8, 15, 299), tokens=(16, 23, 42, 0)
    )


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_graphs_replay_as_the_kernels_run(kv: str) -> None:
    """Decode steps replayed from CUDA graphs give the logits of the same kernels run
    one by one, bit for bit, as the position moves and the cache grows (a new graph
    per cache layout); the split attention has 4 to 18 splits, some of them empty.

    Against the generic engine on the same emulated device (its attention unsplit)
    at every step, against the reference for the first 25: at step 29 an int8 code at
    a quantizer tie goes the other way on every CUDA engine alike (measured).
    """
    weights = random_weights(strict_config("relu2", context=70), seed=3)
    ref, generic = reference_runner(weights, kv, 16), cuda_runner(weights, kv, "generic", 16)
    graphs, eager = cuda_runner(weights, kv, "graphs", 16), cuda_runner(weights, kv, "fused", 16)
    for b in (graphs, eager):
        b.keys_per_split = 4
    engines = (ref, generic, graphs, eager)
    seqs = [b.new_cache() for b in engines]
    for b, s in zip(engines, seqs, strict=True):
        b.forward([7, 7, 2], s)
    for step in range(67):
        tok = (step * 37) % 300
        want, unsplit, got, launched = (
            b.forward([tok], s) for b, s in zip(engines, seqs, strict=True)
        )
        np.testing.assert_array_equal(got, launched)
        assert_logits_close(got, unsplit)
        if step < 25:
            assert_logits_close(got, want)
    assert seqs[2].length == 70
    layouts = {key[-3][0] for key in graphs._graphs}  # (..., shape, dtype, splits)
    assert layouts == {16, 32, 64, 80}  # capacities: blocks of 16 tokens, doubling


def test_failed_capture_falls_back_to_launches(caplog) -> None:
    weights = random_weights(strict_config("silu"), seed=5)
    ref, cuda = reference_runner(weights, "float32"), cuda_runner(weights, "float32", "graphs")

    def refuse() -> None:
        raise RuntimeError("capture not supported")

    cuda.stream.begin_capture = refuse
    with ref.new_cache() as rs, cuda.new_cache() as cs:
        for tok in ([1, 2], [3], [4], [5]):
            assert_logits_close(cuda.forward(tok, cs), ref.forward(tok, rs))
    assert not cuda.use_graphs and not cuda._graphs
    assert "decoding without graphs" in caplog.text
    fallbacks = cuda.provider.trace.fallbacks
    assert len(fallbacks) == 1 and "capture not supported" in fallbacks[0]


def test_failed_capture_is_an_error_in_strict_mode(monkeypatch) -> None:
    from bitnet_core.errors import StrictModeError

    weights = random_weights(strict_config("silu"), seed=5)
    cuda = cuda_runner(weights, "float32", "graphs")

    def refuse() -> None:
        raise RuntimeError("capture not supported")

    cuda.stream.begin_capture = refuse
    monkeypatch.setenv("BITNET_STRICT_MODE", "1")
    with cuda.new_cache() as cs:
        cuda.forward([1, 2], cs)
        cuda.forward([3], cs)  # the first step on a layout runs uncaptured
        with pytest.raises(StrictModeError, match="CUDA graph capture failed"):
            cuda.forward([4], cs)


def test_trace_names_the_fused_kernels_and_one_submission_a_graph_step() -> None:
    weights = random_weights(strict_config("relu2"), seed=4)
    cuda = cuda_runner(weights, "float16", "graphs")
    trace = cuda.provider.trace
    per_step = []
    with cuda.new_cache() as cs:
        cuda.forward([1, 2, 3], cs)
        for tok in (4, 5, 6, 7):
            before = trace.submissions
            cuda.forward([tok], cs)
            per_step.append(trace.submissions - before)
    assert cuda._graphs  # steps 2.. replay the captured graph
    layers = len(cuda.layers)
    assert per_step[0] == 4 * layers + 3 and per_step[1:] == [1, 1, 1]
    for name in ("qkv_attend_f16", "norm_gemv_add", "norm_gemv_act"):  # a decode step's
        assert name in trace.kernels
    for name in ("rmsnorm_quant", "rope_store_f16", "attention_f16", "act_norm_quant"):
        assert name in trace.kernels  # the prefill's ten a layer


def test_emulated_capture_refuses_work_outside_kernels() -> None:
    """The graph test above can fail: during a capture the emulator records kernels only."""
    cp = _emulated().cp
    x = cp.zeros((4,), dtype=np.float32)
    stream = cp.cuda.Stream(non_blocking=True)
    with stream:
        stream.begin_capture()
        for work in (lambda: cp.zeros((2,)), lambda: x + 1, lambda: x.set(np.ones(4, np.float32))):
            with pytest.raises(RuntimeError, match="during a CUDA graph capture"):
                work()
        stream.end_capture()


@pytest.mark.parametrize("t,k,n", [(16, 1, 1), (17, 64, 17), (33, 200, 100), (70, 129, 33)])
@pytest.mark.parametrize("add", [False, True])
def test_tensor_core_matmul_equals_dp4a(t: int, k: int, n: int, add: bool) -> None:
    """matmul_i2s_mma (mma.sync, emulated lane by lane with the PTX fragment layouts)
    computes the same int32 dots as the dp4a kernel: equal results, bit for bit."""
    from bitnet_core.testing.ops import random_weight

    rng = np.random.default_rng(t * 1000 + k + n)
    p = _emulated()
    assert p.tensor_cores
    weight = p.load_ternary(random_weight(rng, n, k))
    xq, xs = p.quantize_act(p.to_device(rng.standard_normal((t, k)).astype(np.float32) * 3))
    start = rng.standard_normal((t, n)).astype(np.float32)
    got, want = p.to_device(start), p.to_device(start)
    p.launch_i2s(weight.words, weight.scales, xq.data, xs, xq.xsum, got, t, add=add)
    p._tensor_cores = False  # the dp4a tiles
    p.launch_i2s(weight.words, weight.scales, xq.data, xs, xq.xsum, want, t, add=add)
    np.testing.assert_array_equal(p.to_host(got), p.to_host(want))
    assert not np.array_equal(p.to_host(got), start)


@pytest.mark.parametrize("kv", ["float32", "float16"])
def test_batched_decode_step_equals_each_sequence_alone(kv: str) -> None:
    """``forward_batch`` of sequences at different positions: their decode tokens go
    through one step (the matmuls on all rows, attention per sequence over its own
    cache), equal bit for bit to each sequence decoded alone while the caches share a
    capacity (the same splits), and within tolerance from then on; a prompt chunk in the
    same call runs its own pass. Steps replay one graph a batch size (1 submission)."""
    weights = random_weights(strict_config("silu", context=70), seed=11)
    batched, alone = (cuda_runner(weights, kv, "graphs", 16) for _ in range(2))
    for b in (batched, alone):
        b.keys_per_split = 4
    prompts = [[1, 2, 3], [4, 5, 6, 7, 8, 9, 10], [11], [12, 13, 14, 15, 16]]
    bseqs, aseqs = [batched.new_cache() for _ in prompts], [alone.new_cache() for _ in prompts]
    for p, bs, as_ in zip(prompts, bseqs, aseqs, strict=True):
        batched.forward(p, bs)
        alone.forward(p, as_)
    trace = batched.provider.trace
    submissions, exact, exact_steps = [], True, 0
    for step in range(24):
        toks = [(step * 31 + 7 * j) % 300 for j in range(len(prompts))]
        before = trace.submissions
        got = batched.forward_batch([([t], s) for t, s in zip(toks, bseqs, strict=True)])
        submissions.append(trace.submissions - before)
        want = np.stack([alone.forward([t], s) for t, s in zip(toks, aseqs, strict=True)])
        # a step over caches of different capacities splits one sequence's attention
        # otherwise than alone, and the caches keep the difference from then on
        exact = exact and len({s.k[0].shape[0] for s in bseqs}) == 1
        if exact:
            np.testing.assert_array_equal(got, want)
        else:
            assert_logits_close(got, want)
        exact_steps += exact
    assert [s.length for s in bseqs] == [s.length for s in aseqs] and exact_steps >= 8
    assert submissions[0] > 1 and 1 in submissions  # launched, then replayed
    # one graph a (batch size, splits): none for the caches' own growth (addresses are data)
    assert {k for k in batched._graphs if k[0] == "seqs"} == {("seqs", 4, s, kv) for s in (4, 8)}
    for name in ("rope_store_seqs", "attn_split_seqs"):
        assert name + ("_f16" if kv == "float16" else "") in trace.kernels
    # a prompt chunk beside two decode tokens: its own pass, the decodes one step
    new_b, new_a = batched.new_cache(), alone.new_cache()
    got = batched.forward_batch([([5], bseqs[0]), ([9, 8, 7], new_b), ([6], bseqs[1])])
    want = [alone.forward([5], aseqs[0]), alone.forward([9, 8, 7], new_a)]
    want.append(alone.forward([6], aseqs[1]))
    assert_logits_close(got, np.stack(want))
    assert new_b.length == 3


# the batched decode steps' token counts: 9 and 15 take two token blocks (MAXT = 8)
ROW_TOKENS = (2, 3, 5, 7, 8, 9, 15)


@pytest.mark.parametrize("n,k", [(1, 64), (7, 100), (37, 200), (70, 1000)])
@pytest.mark.parametrize("add", [False, True])
def test_multi_row_gemv_equals_numpy_and_each_token_alone(n: int, k: int, add: bool) -> None:
    """matmul_i2s_r2 (what launch_i2s runs below MMA_MIN_TOKENS, one token too) and _r4 (rows
    not a multiple of 4 or of a block's 16, k padded to 64, tails of words a lane): the
    int32 dots then the epilogue's float32 steps equal numpy's bit for bit, as does
    one-row matmul_i2s launched a token at a time."""
    from bitnet_core.testing.ops import activations, random_weight

    rng = np.random.default_rng(n * 10 + k)
    p = _emulated()
    host = random_weight(rng, n, k)
    weight = p.load_ternary(host)
    codes, scales = host.unpack()
    xq, xs = p.quantize_act(p.to_device(activations(rng, 15, k)))
    dots = p.to_host(xq).astype(np.int64) @ codes.astype(np.int64).T
    want = dots.astype(np.float32) * scales.astype(np.float32) / p.to_host(xs)[:, None]
    start = rng.standard_normal((15, n)).astype(np.float32)
    want = start + want if add else want

    def launch(t0: int, t: int, per_warp: int | None) -> tuple[str, np.ndarray]:
        y = p.to_device(start[t0 : t0 + t])
        part = (xq.data[t0 : t0 + t], xs[t0 : t0 + t], xq.xsum[t0 : t0 + t])
        name = p.launch_i2s(weight.words, weight.scales, *part, y, t, add, per_warp)
        return name, p.to_host(y)

    alone = [launch(j, 1, 1) for j in range(15)]
    assert {name for name, _ in alone} == {"matmul_i2s_add" if add else "matmul_i2s"}
    np.testing.assert_array_equal(np.concatenate([y for _, y in alone]), want)
    for t in (1, *ROW_TOKENS):
        for per_warp, r in ((None, 2), (4, 4)):
            name, got = launch(0, t, per_warp)
            assert name == f"matmul_i2s_r{r}" + ("_add" if add else "")
            np.testing.assert_array_equal(got, want[:t], err_msg=f"{name}, {t} tokens")


@pytest.mark.parametrize("kind", ["f16", "bf16", "f32"])
@pytest.mark.parametrize("n,k", [(1, 8), (13, 72), (70, 136), (37, 100)])
def test_multi_row_head_is_each_token_alone_bit_for_bit(kind: str, n: int, k: int) -> None:
    """matmul_dense_*_r4 (what launch_dense runs, one token too): each (row, token) sums in
    the one-row kernel's order (same lanes, fmas and warp_sum), so a token's logits equal
    its own one-row launch bit for bit whatever the other tokens; both are numpy's within
    float32 rounding. A 16-bit table whose k is no multiple of 8 (no float4 x loads)
    keeps the one-row kernel."""
    from bitnet_core.testing.ops import activations

    rng = np.random.default_rng(n * 1000 + k)
    p = _emulated()
    values = rng.standard_normal((n, k)).astype(np.float32)
    if kind == "f16":
        table = p.to_device(values.astype(np.float16))
    elif kind == "bf16":
        table = p.to_device(BF16Array.from_float(values))
    else:
        table = p.to_device(values)
    x = activations(rng, 15, k)
    dx = p.to_device(x)

    def launch(t0: int, t: int, per_warp: int | None = None) -> tuple[str, np.ndarray]:
        y = p.cp.zeros((t, n), np.float32)
        return p.launch_dense(table, dx[t0 : t0 + t], y, t, per_warp), p.to_host(y)

    alone = np.concatenate([launch(j, 1, 1)[1] for j in range(15)])
    host = p.to_host(table).astype(np.float32)
    bound = 1e-5 * (np.abs(x) @ np.abs(host).T)  # float32 rounding of k terms, k <= 136
    assert np.all(np.abs(alone - ReferenceProvider().matmul_dense(x, host)) <= bound)
    multi = kind == "f32" or k % 8 == 0
    for t in (1, *ROW_TOKENS):
        name, got = launch(0, t)
        assert name == f"matmul_dense_{kind}" + ("_r4" if multi else "")
        np.testing.assert_array_equal(got, alone[:t], err_msg=f"{name}, {t} tokens")
    if kind != "f32" and multi:  # an x that float4 loads cannot read: the one-row kernel
        y = p.cp.zeros((2, n), np.float32)
        unaligned = p.to_device(np.zeros(2 * k + 1, np.float32))[1:].reshape(2, k)
        unaligned[...] = x[:2]
        assert p.launch_dense(table, unaligned, y, 2) == f"matmul_dense_{kind}"
        np.testing.assert_array_equal(p.to_host(y), alone[:2])


def _bench_cuda():
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[1] / "bench" / "bench_cuda.py"
    spec = importlib.util.spec_from_file_location("bench_cuda", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_bench_times_the_kernels_from_a_graph_and_computes_their_products() -> None:
    """``bench_cuda.py``'s kernel timing (for the lent GPU) on small shapes: each kernel
    replayed from a captured graph, the outputs those replays leave are the products."""
    bench = _bench_cuda()
    p = _emulated()
    rows = bench.kernel_times(
        p, p.cp, repeat=2, shapes={"o": (40, 96)}, tokens=(1, 3, 16), head=(50, 72), launches=2
    )
    assert [(r["kernel"], r["name"], r["tokens"]) for r in rows] == [
        ("matmul_i2s_r2", "o", 1),  # what the runner launches, then the other rows a warp
        ("matmul_i2s_r4", "o", 1),
        ("matmul_i2s", "o", 1),
        ("matmul_i2s_r2", "o", 3),
        ("matmul_i2s_r4", "o", 3),
        ("matmul_i2s", "o", 3),
        ("matmul_i2s_mma", "o", 16),  # the tensor cores from MMA_MIN_TOKENS
        ("matmul_i2s_r4", "o", 16),
        ("matmul_i2s_r2", "o", 16),
        ("matmul_i2s", "o", 16),
        ("matmul_dense_f16_r4", "head", 1),
        ("matmul_dense_f16", "head", 1),
        ("matmul_dense_f16_r4", "head", 8),
        ("matmul_dense_f16", "head", 8),
    ]
    assert all(r["seconds"] > 0 and r["bandwidth"] > 0 for r in rows)
    rng = np.random.default_rng(3)
    w = rng.integers(-1, 2, (40, 96)).astype(np.int8)
    x = rng.standard_normal((3, 96)).astype(np.float32)
    dw = p.load_ternary(TernaryWeight.from_codes(w, 1.0))
    xq, xs = p.quantize_act(p.cp.asarray(x))
    y = p.cp.zeros((3, 40), np.float32)
    bench.graph_seconds(
        p.cp, lambda: p.launch_i2s(dw.words, dw.scales, xq.data, xs, xq.xsum, y, 3), 1, 2
    )
    np.testing.assert_array_equal(np.asarray(y), np.asarray(p.matmul_i2s(xq, xs, dw)))


@pytest.mark.parametrize("d", [1, 100, 2560, 8192, 8200])
def test_norm_kernels_equal_the_providers_two_ops_bit_for_bit(d: int) -> None:
    """rmsnorm_quant and act_norm_quant (the runner's 256 threads) equal rmsnorm, then
    quantize_act, bit for bit: rows a thread holds in registers (up to 8192 values) and the
    longer ones the kernels read again in each pass alike."""
    from bitnet_cuda.runner import NORM_THREADS, padded_cols

    rng = np.random.default_rng(d)
    p = _emulated()
    eps, kp = np.float32(1e-5), padded_cols(d)
    g = p.to_device(rng.uniform(0.2, 2.0, d).astype(np.float32))

    def quantized(name: str, head: tuple, tail: tuple) -> tuple[np.ndarray, ...]:
        xq = p.cp.zeros((2, kp), dtype=np.int8)
        xs, xsum = p.cp.zeros((2,), dtype=np.float32), p.cp.zeros((2,), dtype=np.int32)
        sizes = (np.int32(d), np.int32(kp))
        p._k(name)((2,), (NORM_THREADS,), (*head, g, xq, xs, xsum, *sizes, *tail))
        return p.to_host(xq), p.to_host(xs), p.to_host(xsum)

    def two_ops(v: np.ndarray) -> tuple[np.ndarray, ...]:
        q, s = p.quantize_act(p.rmsnorm(p.to_device(v), g, eps))
        return p.to_host(q.data), p.to_host(s), p.to_host(q.xsum)

    x = (rng.standard_normal((2, d)) * 7).astype(np.float32)
    for got, want in zip(
        quantized("rmsnorm_quant", (p.to_device(x),), (eps,)), two_ops(x), strict=True
    ):
        np.testing.assert_array_equal(got, want)
    gu = (rng.standard_normal((2, 2 * d)) * 3).astype(np.float32)
    ref = ReferenceProvider()
    for act, op in enumerate((ref.silu_mul, ref.relu2_mul)):
        f = p.cp.zeros((2, d), dtype=np.float32)
        head, tail = (p.to_device(gu), f), (np.int32(act), eps)
        got = quantized("act_norm_quant", head, tail)
        np.testing.assert_allclose(p.to_host(f), op(gu[:, :d], gu[:, d:]), rtol=1e-5, atol=1e-6)
        for a, b in zip(got, two_ops(p.to_host(f)), strict=True):
            np.testing.assert_array_equal(a, b)


@pytest.mark.parametrize("splits", [1, 5, 40])
def test_attention_combine_merges_each_head_then_norms_the_row(splits: int) -> None:
    """attn_combine_norm_quant: a block a head merges its splits (more than a warp's lanes
    too, and empty ones), the last block norms and quantizes the row as rmsnorm then
    quantize_act do, bit for bit; its count is back at 0, so a second launch (a graph's
    next replay) gives the same."""
    from bitnet_cuda.runner import COMBINE_THREADS, padded_cols

    rng = np.random.default_rng(splits)
    p = _emulated()
    seqs, hq, d = 2, 3, 40
    m = (rng.standard_normal((seqs, hq, splits)) * 3).astype(np.float32)
    l_ = rng.uniform(0.5, 9.0, (seqs, hq, splits)).astype(np.float32)
    acc = (rng.standard_normal((seqs, hq, splits, d)) * l_[..., None]).astype(np.float32)
    if splits > 2:  # empty splits: no keys reached them
        m[:, :, -2:], l_[:, :, -2:], acc[:, :, -2:] = -3.0e38, 0.0, 0.0
    e = np.exp(m.astype(np.float64) - m.max(-1, keepdims=True))
    want = (acc * e[..., None]).sum(2) / (l_ * e).sum(-1)[..., None]
    g = rng.uniform(0.2, 2.0, hq * d).astype(np.float32)
    kp, eps = padded_cols(hq * d), np.float32(1e-5)
    out = p.cp.zeros((seqs, hq * d), dtype=np.float32)
    xq = p.cp.zeros((seqs, kp), dtype=np.int8)
    xs, xsum = p.cp.zeros((seqs,), dtype=np.float32), p.cp.zeros((seqs,), dtype=np.int32)
    done = p.cp.zeros((seqs,), dtype=np.int32)
    parts = (p.to_device(m.ravel()), p.to_device(l_.ravel()), p.to_device(acc.ravel()))
    args = (*parts, out, p.to_device(g), xq, xs, xsum, done)
    sizes = (np.int32(hq), np.int32(d), np.int32(splits), np.int32(kp), eps)
    results = []
    for _ in range(2):
        p._k("attn_combine_norm_quant")((hq, seqs), (COMBINE_THREADS,), (*args, *sizes))
        results.append([p.to_host(a) for a in (out, xq, xs, xsum)])
        assert not p.to_host(done).any()
    for a, b in zip(*results, strict=True):
        np.testing.assert_array_equal(a, b)
    got_out = results[0][0]
    np.testing.assert_allclose(got_out, want.reshape(seqs, hq * d), rtol=1e-5, atol=1e-5)
    q, s = p.quantize_act(p.rmsnorm(p.to_device(got_out), p.to_device(g), eps))
    np.testing.assert_array_equal(results[0][1], p.to_host(q.data))
    np.testing.assert_array_equal(results[0][2], p.to_host(s))
    np.testing.assert_array_equal(results[0][3], p.to_host(q.xsum))


@pytest.mark.parametrize(("engine", "kv"), ENGINES)
def test_prefix_cache_gives_the_fresh_logits(engine, kv) -> None:
    """A prompt whose first blocks come from the prefix cache (copied on the device) gives the
    logits of a fresh prefill, bit for bit, on both engines: 32 of 40 tokens reused, the 8
    left run the small-tile path where the fresh 40 ran the tensor-core one; then 38, six
    rows of a cached partial block copied on the device."""
    from bitnet_core.model.prefix_cache import PrefixCache

    runner = cuda_runner(random_weights(strict_config("silu"), seed=7), kv, engine)
    ids = np.arange(40) * 7 % (runner.config.vocab_size - 3) + 1
    cache = PrefixCache(runner)
    try:
        with runner.new_cache() as fresh_seq:
            fresh = runner.forward(ids, fresh_seq)
            fresh_next = runner.forward(np.array([3]), fresh_seq)
            cache.store(fresh_seq, ids[:32].tolist())  # the whole blocks only, first
            with runner.new_cache() as seq:
                assert cache.start(seq, ids.tolist()) == 32
                np.testing.assert_array_equal(runner.forward(ids[32:], seq), fresh)
                np.testing.assert_array_equal(runner.forward(np.array([3]), seq), fresh_next)
            cache.store(fresh_seq, ids.tolist())  # and the partial last block: 6 of its rows
        with runner.new_cache() as seq:
            assert cache.start(seq, ids.tolist()) == 38
            np.testing.assert_array_equal(runner.forward(ids[38:], seq), fresh)
            np.testing.assert_array_equal(runner.forward(np.array([3]), seq), fresh_next)
    finally:
        cache.close()
