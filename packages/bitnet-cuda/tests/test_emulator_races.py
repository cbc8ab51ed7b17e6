"""What only a GPU used to show, shown by the emulator: each kind of bug planted, and caught.

The emulator runs a grid's blocks concurrently in a seeded random order, a
block's warps and lanes in a seeded random order between barriers, and checks
every access against the streams' order (``cuda_emulator/cuda_emu.h``,
``cuda_emulator/streams.py``). Each test here plants one bug in the real kernel
source or the real runner (a missing ``__syncthreads()``, a block that assumes
it runs last, a stream that does not wait for the weights' upload) and sees
it fail, next to the unplanted code passing. Then the review's findings on
the fused decode step, each with its check.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pytest
from cuda_emulator import SEEDS, EmulatedCudaProvider, StreamRace, missing
from cuda_emulator.cupy_emulator import EmulatedCuPy

from bitnet_core.model import KVCacheConfig, random_weights
from bitnet_core.testing.strict import assert_logits_close, strict_config
from bitnet_cuda import kernels
from bitnet_cuda.runner import CudaRunner

if missing():
    pytest.skip(missing(), allow_module_level=True)

SEEDS_TRIED = (1, 2, 3)


def _source() -> str:
    return kernels.SOURCE.read_text()


def _block_sum_without_barrier(which: int) -> str:
    """The kernels with block_sum's ``which``-th ``__syncthreads()`` removed (0: the one
    before its warps' sums are written, bitnet_kernels.cu:57 at b036071; 2: the one after
    thread 0 writes the block's sum, :63)."""
    src = _source()
    start = src.index("__device__ float block_sum(")
    end = src.index("__device__ float block_max(")
    body = src[start:end]
    spots = [m.start() for m in re.finditer(r"__syncthreads\(\);", body)]
    assert len(spots) == 3
    cut = spots[which]
    body = body[:cut] + body[cut + len("__syncthreads();") :]
    return src[:start] + body + src[end:]


def _reduce(code: str, kernel: str, x: np.ndarray, seed: int) -> tuple[np.ndarray, ...]:
    """quantize_act (block_max then block_sum) or rmsnorm (every thread scales by the
    block's sum) of x's rows, 256 threads a row."""
    cp = EmulatedCuPy()
    fn = cp.RawModule(code=code).get_function(kernel)
    t, k = x.shape
    SEEDS.restart(seed)
    if kernel == "rmsnorm":
        y, g = cp.zeros((t, k), dtype=np.float32), cp.asarray(np.ones(k, np.float32))
        fn((t,), (256,), (cp.asarray(x), g, y, np.int32(k), np.float32(1e-5)))
        return (y.get(),)
    kp = -(-k // 64) * 64
    xq = cp.zeros((t, kp), dtype=np.int8)
    scale, xsum = cp.zeros((t,), dtype=np.float32), cp.zeros((t,), dtype=np.int32)
    fn((t,), (256,), (cp.asarray(x), xq, scale, xsum, np.int32(k), np.int32(kp)))
    return xq.get(), scale.get(), xsum.get()


@pytest.mark.parametrize(
    "which,kernel", [(0, "quantize_act"), (2, "rmsnorm")], ids=["syncthreads-57", "syncthreads-63"]
)
def test_a_missing_syncthreads_gives_wrong_results(which: int, kernel: str) -> None:
    """Either barrier of block_sum removed: a thread reads the shared sum before thread 0
    wrote it (:63, seen where every thread uses the sum), or a warp overwrites the
    block's max before every warp read it (:57). In index order, one block at a time,
    both used to pass."""
    x = np.random.default_rng(57 + which).standard_normal((48, 700)).astype(np.float32)
    planted = _block_sum_without_barrier(which)
    first = _reduce(_source(), kernel, x, SEEDS_TRIED[0])
    for seed in SEEDS_TRIED:
        good = _reduce(_source(), kernel, x, seed)
        for a, b in zip(first, good, strict=True):  # the same bits whatever the order
            np.testing.assert_array_equal(a, b)
        bad = _reduce(planted, kernel, x, seed)
        assert not all(np.array_equal(a, b) for a, b in zip(good, bad, strict=True)), seed


def _combine(code: str, seed: int, hq: int = 32, d: int = 16, splits: int = 3) -> np.ndarray:
    """attn_combine_norm_quant of random parts: its int8 row (the last block's work)."""
    cp = EmulatedCuPy()
    fn = cp.RawModule(code=code).get_function("attn_combine_norm_quant")
    rng = np.random.default_rng(7)
    parts = hq * splits
    part_m = cp.asarray(rng.standard_normal(parts).astype(np.float32))
    part_l = cp.asarray(rng.uniform(1, 2, parts).astype(np.float32))
    part_acc = cp.asarray(rng.standard_normal(parts * d).astype(np.float32))
    out = cp.zeros((hq * d,), dtype=np.float32)
    g = cp.asarray(rng.uniform(0.5, 1.5, hq * d).astype(np.float32))
    kp = -(-(hq * d) // 64) * 64
    xq, scale = cp.zeros((kp,), dtype=np.int8), cp.zeros((1,), dtype=np.float32)
    xsum, done = cp.zeros((1,), dtype=np.int32), cp.zeros((1,), dtype=np.int32)
    i32 = np.int32
    args = (part_m, part_l, part_acc, out, g, xq, scale, xsum, done)
    SEEDS.restart(seed)
    fn((hq, 1), (256,), (*args, i32(hq), i32(d), i32(splits), i32(kp), np.float32(1e-5)))
    return np.concatenate([xq.get().view(np.uint8), done.get().view(np.uint8)])


def test_a_block_that_assumes_it_runs_last_is_caught() -> None:
    """An inter-block race: the combine's norm done by the block of the last head
    instead of the last block to finish. Blocks in index order, one at a time, hid it."""
    src = _source()
    counted = "last = atomicAdd(done + j, 1) == hq - 1;"
    assert counted in src
    planted = src.replace(counted, "last = (atomicAdd(done + j, 1), h == hq - 1);")
    good = [_combine(src, seed) for seed in SEEDS_TRIED]
    assert all(np.array_equal(good[0], g) for g in good)
    assert not good[0][-4:].any()  # the count set back to 0 for the next step
    caught = [seed for seed in SEEDS_TRIED if not np.array_equal(_combine(planted, seed), good[0])]
    assert caught == list(SEEDS_TRIED)


def test_a_stream_that_does_not_wait_is_a_race() -> None:
    """Work on one stream read on another: a StreamRace unless an event (or a host
    synchronization) orders the two."""
    cp = EmulatedCuPy()
    a, b = cp.cuda.Stream(non_blocking=True), cp.cuda.Stream(non_blocking=True)
    with a:
        x = cp.zeros((8,), dtype=np.float32)
        x.set(np.ones(8, np.float32))
    with b, pytest.raises(StreamRace, match="with nothing ordering the two"):
        x.get()
    with a:
        e = cp.cuda.Event()
        e.record()
        x.set(np.full(8, 2, np.float32))  # after the event: still unordered for b
    b.wait_event(e)
    with b, pytest.raises(StreamRace):
        x.get()
    a.synchronize()
    with b:
        assert x.get()[0] == 2
    # the legacy stream and a blocking stream order each other; non_blocking ones do not
    y = cp.zeros((4,), dtype=np.float32)  # legacy stream
    with cp.cuda.Stream():
        y.set(np.ones(4, np.float32))
    with b, pytest.raises(StreamRace):
        y.get()


def _runner(kv: str = "float32", block: int = 64) -> CudaRunner:
    weights = random_weights(strict_config("relu2"), seed=48)
    cache = KVCacheConfig(dtype=kv, block_size=block)
    runner = CudaRunner(EmulatedCudaProvider(), weights, kv_cache=cache)
    runner.use_graphs = True
    return runner


def test_start_up_race_caught_and_fixed(monkeypatch) -> None:
    """Review finding 1: the weights are uploaded and stacked (q|k|v, gate|up) on the legacy
    stream; the runner's non_blocking stream read them unordered. Planted back (the wait at
    start-up and each step's wait for the legacy stream's work, ``_after_host_ops``, both
    removed), the first forward is a StreamRace; with them, the runner decodes. (The prefix
    cache's copies need ``_after_host_ops`` alone: test_emulated's prefix-cache test.)"""
    monkeypatch.setattr(CudaRunner, "_wait_for_uploads", lambda self: None)
    monkeypatch.setattr(CudaRunner, "_after_host_ops", lambda self: None)
    runner = _runner()
    with runner.new_cache() as cs, pytest.raises(StreamRace, match="legacy default stream"):
        runner.forward([1, 2, 3], cs)
    monkeypatch.undo()
    runner = _runner()
    with runner.new_cache() as cs:
        assert np.isfinite(runner.forward([1, 2, 3], cs)).all()


def test_a_step_cut_short_does_not_skip_later_norms() -> None:
    """Review finding 2: attn_combine_norm_quant's per-sequence count left part way (as a
    launch cut short leaves it) is set back by the next step's first kernel, so that step
    still norms and quantizes the attention output. (The ten kernels a layer: the
    four-launch layer has no count.)"""
    clean, cut = _runner(), _runner()
    clean.layer_kernels = cut.layer_kernels = False
    with clean.new_cache() as a, cut.new_cache() as b:
        for r, c in ((clean, a), (cut, b)):
            r.forward([1, 2, 3], c), r.forward([4], c)
        for tok in (5, 6, 7):  # the graph captured from the second decode step
            want = clean.forward([tok], a)
            cut._decode_bufs.done.set(np.array([5], np.int32), stream=cut.stream)
            assert_logits_close(cut.forward([tok], b), want)


def test_attention_split_refuses_more_threads_than_it_holds() -> None:
    """Review finding 3: attn_split keeps 4 warps' partial results in shared memory;
    its __launch_bounds__ make a launch of more threads fail (as the driver does), and
    fewer warps compute the same attention."""
    cp = EmulatedCuPy()
    fn = cp.RawModule(code=_source()).get_function("attn_split")
    rng = np.random.default_rng(3)
    hq, hkv, d, n, splits = 4, 2, 64, 37, 2
    q = cp.asarray(rng.standard_normal((hq, d)).astype(np.float32))
    kc = cp.asarray(rng.standard_normal((n, hkv, d)).astype(np.float32))
    vc = cp.asarray(rng.standard_normal((n, hkv, d)).astype(np.float32))
    pos = cp.asarray(np.array([n - 1], np.int32))

    def run(threads: int) -> tuple[np.ndarray, ...]:
        parts = [cp.zeros((hq * splits * s,), dtype=np.float32) for s in (1, 1, d)]
        geometry = (np.int32(hq), np.int32(hkv), np.int32(d), np.int32(splits))
        fn((hq, splits), (threads,), (q, kc, vc, pos, *parts, *geometry, np.float32(0.125)))
        return tuple(p.get() for p in parts)

    with pytest.raises(RuntimeError, match="__launch_bounds__"):
        run(256)
    four, two = run(128), run(64)
    for a, b in zip(four, two, strict=True):
        np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6)


def test_embedding_of_an_id_out_of_range_is_zeros() -> None:
    """Review finding 4: embed_* bound-checks its ids (they may come from the device):
    an id outside the table gives zeros, not a read past it."""
    cp = EmulatedCuPy()
    fn = cp.RawModule(code=_source()).get_function("embed_f32")
    table = np.arange(5 * 8, dtype=np.float32).reshape(5, 8)
    ids = cp.asarray(np.array([-1, 5, 3, 1 << 30], np.int32))
    x = cp.zeros((4, 8), dtype=np.float32)
    done = cp.asarray(np.array([9, 9], np.int32))
    i32 = np.int32
    fn((4,), (64,), (cp.asarray(table), ids, x, i32(8), i32(8), i32(5), done, i32(2)))
    want = np.zeros((4, 8), np.float32)
    want[2] = table[3]
    np.testing.assert_array_equal(x.get(), want)
    np.testing.assert_array_equal(done.get(), [0, 0])  # and re-arms the combine's counts


def test_decode_step_host_work(monkeypatch) -> None:
    """Review finding 5: a decode step on a cache it decoded before reads no array address
    (its graph key is kept), copies ids and position in one copy from a page-locked buffer,
    and downloads the logits into a kept page-locked buffer (the caller gets a copy)."""
    from bitnet_cuda import runner as module

    calls = []
    real = module.device_address
    monkeypatch.setattr(module, "device_address", lambda a: calls.append(1) or real(a))
    runner = _runner(block=16)
    with runner.new_cache() as cs:
        runner.forward([1, 2, 3], cs)
        first = runner.forward([4], cs)
        calls.clear()
        for tok in (5, 6, 7):
            logits = runner.forward([tok], cs)
        b = runner._decode_bufs
        assert calls == []
        for host in (b.host_io, b.host_logits):  # from alloc_pinned_memory
            while isinstance(host, np.ndarray):
                host = host.base
            assert isinstance(getattr(host, "obj", host), bytearray)
        assert not np.shares_memory(logits, b.host_logits) and np.isfinite(first).all()
        arrays = cs.k
        while cs.k is arrays:  # the cache grows: new arrays, a new key
            runner.forward([8] * 16, cs)
        calls.clear()
        runner.forward([9], cs)
        assert len(calls) == 2 * len(runner.layers)


def test_launches_counted_for_every_kernel_of_a_replayed_graph() -> None:
    """``trace.launches`` (``bitnet bench --profile``'s launches_per_step) counts each kernel
    of a replayed graph, the same as the kernels launched one by one."""
    counts = {}
    for graphs in (False, True):
        runner = _runner()
        runner.use_graphs = graphs
        trace = runner.provider.trace
        with runner.new_cache() as cs:
            runner.forward([1, 2, 3], cs)
            runner.forward([4], cs), runner.forward([5], cs)  # (the graph captured)
            before, submitted = trace.launches, trace.submissions
            runner.forward([6], cs)
            counts[graphs] = (trace.launches - before, trace.submissions - submitted)
    layers = len(runner.layers)
    assert counts[True][0] == counts[False][0] == 4 * layers + 3  # (test_layer_kernels)
    assert counts[True][1] == 1 and counts[False][1] == counts[False][0]


@pytest.mark.parametrize("graphs", [False, True], ids=["launches", "graphs"])
def test_greedy_tokens_on_the_device_equal_the_host_loop(graphs: bool) -> None:
    """decode_greedy: k steps in one graph launch, each step's argmax on the device feeding
    the next; the same tokens and cache as forward + numpy's argmax token by token; with
    eos, the tokens after it are dropped and the cache forgets their rows."""
    host, dev = _runner(), _runner()
    dev.use_graphs = host.use_graphs = graphs
    with host.new_cache() as a, dev.new_cache() as b:
        token = int(np.argmax(host.forward([1, 2, 3], a)))
        assert int(np.argmax(dev.forward([1, 2, 3], b))) == token
        want, t = [], token
        for _ in range(9):
            t = int(np.argmax(host.forward([t], a)))
            want.append(t)
        got = dev.decode_greedy(token, b, 3) + dev.decode_greedy(want[2], b, 3)
        got += dev.decode_greedy(want[5], b, 3)  # the graph for k = 3 replayed
        assert got == want and b.length == a.length
        logits = host.forward([want[-1]], a)
        assert_logits_close(dev.forward([want[-1]], b), logits)  # the caches agree
        t, before = int(np.argmax(logits)), a.length
        w2, u = [], t
        for _ in range(4):
            u = int(np.argmax(host.forward([u], a)))
            w2.append(u)
        eos = w2[1]
        stop = dev.decode_greedy(t, b, 4, eos={eos})
        assert stop == w2[: w2.index(eos) + 1] and b.length == before + len(stop)
        a.truncate(b.length)  # the rows after eos forgotten on both: the next step agrees
        assert_logits_close(dev.forward([stop[-1]], b), host.forward([stop[-1]], a))


def test_generation_takes_the_device_path_for_greedy_and_says_so() -> None:
    """generate_tokens: greedy decoding without processors or penalties goes through
    decode_greedy (DEVICE_TOKENS a launch) with the same tokens as the host path, and
    the stats (the receipt's ``token_path``) say which path ran; a repeat penalty keeps
    the host path."""
    from bitnet_core.model.generation import GenerationStats, generate_tokens
    from bitnet_core.model.sampling import SamplingParams

    runner = _runner()
    greedy = SamplingParams(temperature=0, max_tokens=20)
    penalized = SamplingParams(temperature=0, max_tokens=20, repeat_penalty=1.3)
    got = {}
    for name, params, r in (
        ("device", greedy, runner),
        ("host", greedy, _runner()),
        ("penalty", penalized, runner),
    ):
        if name == "host":
            r.decode_greedy = None  # as a runner without it
        stats = GenerationStats()
        got[name] = list(generate_tokens(r, [1, 2, 3], params, stats=stats))
        got[name + "-path"] = stats.token_path
    assert got["device"] == got["host"] and len(got["device"]) == 20
    assert got["device-path"] == "device" and got["host-path"] == "host"
    assert got["penalty-path"] == "host"


def test_generation_draws_sampled_tokens_on_the_device() -> None:
    """generate_tokens at a temperature, without processors or penalties: every token after
    the first is drawn on the device (``device_sampling`` -> ``decode_greedy(sampling=...)``
    with the request's settings and seed; the receipt's ``token_path`` says so), the same
    for the same seed, within the vocabulary; top_k = 1 draws the argmax; a repeat penalty
    keeps the host path."""
    from bitnet_core.model.generation import GenerationStats, generate_tokens
    from bitnet_core.model.sampling import SamplingParams
    from bitnet_cuda.runner import DeviceSampling

    def run(params: SamplingParams) -> tuple[list[int], str, list]:
        runner, calls = _runner(), []
        launch = runner.decode_greedy

        def recorded(token, cache, k, eos=(), sampling=None):
            calls.append(sampling)
            return launch(token, cache, k, eos=eos, sampling=sampling)

        runner.decode_greedy = recorded
        stats = GenerationStats()
        toks = list(generate_tokens(runner, [1, 2, 3], params, stats=stats))
        return toks, stats.token_path, calls

    hot = SamplingParams(temperature=1.5, top_k=7, top_p=0.9, min_p=0.01, seed=11, max_tokens=20)
    a, path, calls = run(hot)
    assert path == "device" and len(a) == 20 and len(calls) == 3  # 19 tokens, 8 a launch
    assert set(calls) == {DeviceSampling(1.5, 7, 0.9, 0.01, seed=11)}
    assert run(hot)[0] == a and all(0 <= t < _runner().config.vocab_size for t in a)
    unseeded = run(SamplingParams(**{**vars(hot), "seed": None}))[2]
    assert unseeded and all(c is not None and c.temperature == 1.5 for c in unseeded)
    one = SamplingParams(temperature=0.8, top_k=1, seed=3, max_tokens=12)
    assert run(one)[0] == run(SamplingParams(temperature=0, max_tokens=12))[0]
    penalized = run(SamplingParams(**{**vars(hot), "repeat_penalty": 1.2}))
    assert penalized[1] == "host" and not penalized[2]


def _sample(logits: np.ndarray, s: Any, position: int) -> int:
    cp = EmulatedCuPy()
    fn = cp.RawModule(code=_source()).get_function("sample_next")
    ids, pos = cp.zeros((1,), dtype=np.int32), cp.asarray(np.array([position], np.int32))
    ring = cp.zeros((1,), dtype=np.int32)
    args = (cp.asarray(logits), np.int32(logits.size), *s.args(), ids, pos, ring, np.int32(0))
    fn((1,), (256,), args)
    assert pos.get()[0] == position + 1 and ring.get()[0] == ids.get()[0]
    return int(ids.get()[0])


def test_sampling_on_the_device_draws_only_what_the_host_filters_keep() -> None:
    """sample_next: every draw is a token the host's token_probabilities gives mass to
    (top-k, temperature, top-p, min-p), the same for the same seed and position, and
    top_k = 1 is the argmax; over positions the draws follow the probabilities."""
    from bitnet_core.model.sampling import SamplingParams, token_probabilities
    from bitnet_cuda.runner import DeviceSampling

    rng = np.random.default_rng(52)
    logits = (rng.standard_normal(700) * 3).astype(np.float32)
    for t, k, p, m in ((0.7, 40, 0.9, 0.05), (1.0, 0, 0.5, 0.0), (1.3, 5, 1.0, 0.2)):
        host = token_probabilities(logits, SamplingParams(temperature=t, top_k=k, top_p=p, min_p=m))
        s = DeviceSampling(t, k, p, m, seed=7)
        draws = [_sample(logits, s, position) for position in range(40)]
        assert all(host[d] > 0 for d in draws), (t, k, p, m)
        assert len(set(draws)) > 1 and _sample(logits, s, 3) == draws[3]
    assert _sample(logits, DeviceSampling(1.0, top_k=1), 0) == int(np.argmax(logits))
    # the draws follow the distribution: two tokens, 0.8 / 0.2
    two = np.full(64, -np.inf, np.float32)
    two[[3, 9]] = [np.log(0.8), np.log(0.2)]
    draws = [_sample(two, DeviceSampling(1.0, seed=1), position) for position in range(200)]
    assert set(draws) == {3, 9} and 0.7 < draws.count(3) / 200 < 0.9


def test_sampled_tokens_on_the_device_repeat_for_a_seed() -> None:
    """decode_greedy with ``sampling``: k drawn tokens a graph launch, the same for the
    same seed from the same cache state, in the vocabulary."""
    from bitnet_cuda.runner import DeviceSampling

    runs = []
    for seed in (5, 5):
        runner = _runner()
        with runner.new_cache() as cs:
            runner.forward([1, 2, 3], cs)
            s = DeviceSampling(0.9, top_k=20, top_p=0.9, seed=seed)
            runs.append(runner.decode_greedy(4, cs, 4, sampling=s))
            assert cs.length == 3 + 4
    assert runs[0] == runs[1] and all(0 <= t < runner.config.vocab_size for t in runs[0])
