"""The CUDA backend: a forward pass in ten kernels a layer, decode steps as CUDA graphs.

The generic engine (``bitnet_core.sdk.runner.GenericRunner``) calls ~25 provider
ops a layer, each a Python call and a CuPy launch, some of them CuPy
elementwise kernels and new allocations. On a GPU that decodes a 2B model's
layer in tens of microseconds, launch overhead would be most of the time.
``CudaRunner`` keeps the generic engine's weights upload, KV cache,
locking and chunked prefill, and replaces its forward pass with the fused
kernels of ``kernels/bitnet_kernels.cu`` (after "fused decode step")::

    rmsnorm_quant(x)             -> q|k|v in one ternary matmul (weights fused at load)
    rope_store                   -> q rotated, k rotated and v written into the cache
    attn_split + attn_combine_norm_quant   (decode: flash-decoding over the cache)
    attention + rmsnorm_quant              (prefill)
    matmul_i2s_add               -> x += o(...)            (the residual in the epilogue)
    rmsnorm_quant(x)             -> gate|up in one ternary matmul
    act_norm_quant               -> act(gate) * up, ffn_sub_norm, int8
    matmul_i2s_add               -> x += down(...)

A decode step of one sequence takes four kernels a layer instead
(``BITNET_CUDA_LAYER=0`` keeps the ten; the same logits, bit for bit)::

    qkv_attend     norm + int8, q|k|v rows of whole heads, rope, KV store, attention
    norm_gemv_add  norm + int8 of the attention, o, x += o
    norm_gemv_act  norm + int8 of x, gate|up, act(gate) * up
    norm_gemv_add  norm + int8 of that, down, x += down

Prefill and batched steps keep the ten.

The token ids and the position are read from device buffers, so a decode
step (one token) touches the same addresses at every position: it is
captured once in a CUDA graph per KV cache layout (the cache's arrays change
when a sequence's cache grows) and replayed, one launch a token instead of
~300. Everything runs on the backend's own stream.

``forward_batch`` (the server's step) decodes the sequences that bring one
token each in one step: the matmuls on all their rows, then ``rope_store_seqs``
and ``attn_split_seqs`` per sequence, their caches' addresses read from a device
table, so that step too is a graph (one a batch size and split count).

``BITNET_CUDA_FUSED=0`` keeps the generic engine; ``BITNET_CUDA_GRAPHS=0``
runs the fused kernels without graphs. ``quantize_activations=False``
always takes the generic path (float matmuls, for debugging).

The provider's trace (``sdk.trace``) records every kernel launched (a capture
records its kernels once) and one submission per eager launch or graph
launch; a failed capture is ``trace.fallback``: in the receipt, and a
``StrictModeError`` under ``BITNET_STRICT_MODE=1``.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Collection
from dataclasses import dataclass
from typing import Any

import numpy as np

from bitnet_core.hal.switches import env_enabled
from bitnet_core.sdk.fused import FusedLayer, decode_together, fused_layers
from bitnet_core.sdk.kv_cache import Sequence
from bitnet_core.sdk.runner import GenericRunner

from .kernels import KERNELS
from .provider import CudaProvider, CudaTernary, HalfTable, device_address

NORM_THREADS = 256  # the provider's rmsnorm/quantize_act blocks: same sums, same rounding
COMBINE_THREADS = 256  # kernels' COMBINE_BLOCK (>= MAX_D: a thread an output of a head)
ATTN_THREADS = 128  # attn_split: 4 warps (its kernels' ATTN_BLOCK, the launch bound)
ROPE_THREADS = 64
MAX_D = 256  # kernels' MAXD: head_dim limit of attn_split
MAX_PARTS = 4096  # kernels' MAX_PARTS: heads x splits
MAX_SPLITS = 64  # kernels' MAX_SPLITS: splits of a head
MAX_GRAPHS = 8  # captured decode steps kept (least recently used dropped)
LAYER_MAX_KP = 16384  # kernels' LAYER_MAX_KP: the four-launch layer's longest int8 row

#: launches one layer's rope + KV store and attention: ``attend(layer index, layer)``
Attend = Callable[[int, FusedLayer], None]
#: launches every kernel of one layer: ``layer(layer index, layer)``
LayerLaunch = Callable[[int, FusedLayer], None]


def padded_cols(k: int) -> int:
    """The int8 row length the matmul kernels read for ``k`` columns (a multiple of 64)."""
    return max(1, -(-k // 64)) * 64


def split_count(capacity: int, heads: int, keys_per_split: int) -> int:
    """Key splits of the decode attention over a cache of ``capacity`` (at most MAX_SPLITS)."""
    return max(1, min(MAX_SPLITS, capacity // keys_per_split, MAX_PARTS // heads))


@dataclass(frozen=True)
class DeviceSampling:
    """``sample_next``'s settings (the host's SamplingParams without penalties): a graph a
    setting, so the values are baked into it."""

    temperature: float
    top_k: int = 0
    top_p: float = 1.0
    min_p: float = 0.0
    seed: int = 0

    def args(self) -> tuple[Any, ...]:
        seed = self.seed & 0xFFFFFFFFFFFFFFFF
        return (
            np.float32(1.0 / self.temperature), np.int32(self.top_k), np.float32(self.top_p),
            np.float32(self.min_p), np.uint32(seed & 0xFFFFFFFF), np.uint32(seed >> 32),
        )  # fmt: skip


@dataclass(eq=False)
class FusedTernary:
    """Ternary weights of several linears stacked by rows (q|k|v or gate|up)."""

    words: Any
    scales: Any
    rows: int


def fuse_ternary(cp: Any, parts: list[CudaTernary]) -> FusedTernary:
    """One matrix of ``parts`` stacked by rows; each part becomes a view of it (no copy kept)."""
    words = cp.concatenate([p.words for p in parts])
    scales = cp.concatenate([p.scales for p in parts])
    row = 0
    for p in parts:
        p.words, p.scales = words[row : row + p.rows], scales[row : row + p.rows]
        row += p.rows
    return FusedTernary(words, scales, row)


def host_array(cp: Any, shape: tuple[int, ...], dtype: Any, pinned: bool) -> np.ndarray:
    """A host array for copies to and from the device: page-locked where ``pinned`` (the
    copy is a DMA, no staging through a bounce buffer), else an ordinary one."""
    dtype = np.dtype(dtype)
    count = int(np.prod(shape))
    if not pinned:
        return np.zeros(shape, dtype)
    mem = cp.cuda.alloc_pinned_memory(max(1, count * dtype.itemsize))
    return np.frombuffer(mem, dtype, count).reshape(shape)


class StepBuffers:
    """Every array a forward pass of ``t`` tokens writes (kept for decode: fixed addresses).

    ``seqs``: a batched decode step, token ``j`` of sequence ``j``: a position and a
    K and V cache address per sequence and layer (``kv_addresses``), and split-attention
    parts per sequence. The ids and positions are one device array (``io``: one copy a
    step) written from ``host_io``; ``pinned`` (the decode steps' buffers, kept) makes
    ``host_io`` and ``host_logits`` page-locked.
    """

    def __init__(
        self, cp: Any, cfg: Any, t: int, head_rows: int, seqs: bool = False, pinned: bool = False
    ) -> None:
        hidden, qdim = cfg.hidden_size, cfg.num_heads * cfg.head_dim
        qkv = (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim
        f = cfg.intermediate_size
        self.t = t
        npos = t if seqs else 1
        self.io = cp.zeros((t + npos,), dtype=np.int32)
        self.ids, self.pos = self.io[:t], self.io[t:]
        self.host_io = host_array(cp, (t + npos,), np.int32, pinned)
        self.host_logits = host_array(cp, (head_rows, cfg.vocab_size), np.float32, pinned)
        self.x = cp.zeros((t, hidden), dtype=np.float32)
        self.xq = cp.zeros((t, padded_cols(hidden)), dtype=np.int8)  # norm(x), int8
        self.qkv = cp.zeros((t, qkv), dtype=np.float32)
        self.q = cp.zeros((t, cfg.num_heads, cfg.head_dim), dtype=np.float32)
        self.att = cp.zeros((t, qdim), dtype=np.float32)
        self.aq = cp.zeros((t, padded_cols(qdim)), dtype=np.int8)  # norm(attention), int8
        self.gu = cp.zeros((t, 2 * f), dtype=np.float32)
        self.f = cp.zeros((t, f), dtype=np.float32)
        self.fq = cp.zeros((t, padded_cols(f)), dtype=np.int8)  # norm(act(gate) * up), int8
        # per-row scale and sum of the int8 rows above
        self.xs, self.as_, self.fs = (cp.zeros((t,), dtype=np.float32) for _ in range(3))
        self.xsum, self.asum, self.fsum = (cp.zeros((t,), dtype=np.int32) for _ in range(3))
        self.head_x = cp.zeros((head_rows, hidden), dtype=np.float32)
        self.logits = cp.zeros((head_rows, cfg.vocab_size), dtype=np.float32)
        if seqs:  # [layer, K or V, sequence]
            self.kv_addresses = cp.zeros((cfg.num_layers, 2, t), dtype=np.uint64)
        # attn_combine_norm_quant's count of merged heads a sequence (set to 0 by the
        # step's first kernel, embed_*)
        self.done = cp.zeros((t,), dtype=np.int32)
        if t == 1 or seqs:  # the decode attention's per-split results
            parts = t * cfg.num_heads * min(MAX_SPLITS, MAX_PARTS // cfg.num_heads)
            self.part_m = cp.zeros((parts,), dtype=np.float32)
            self.part_l = cp.zeros((parts,), dtype=np.float32)
            self.part_acc = cp.zeros((parts * cfg.head_dim,), dtype=np.float32)


class CudaRunner(GenericRunner):
    """``GenericRunner`` with the fused forward pass and graph-captured decode steps."""

    #: cache capacity per split of the decode attention (fewer: more, shorter splits)
    keys_per_split = 16
    #: GEMV rows a block of the four-launch layer (each block norms the whole input)
    layer_rows = 16

    def __init__(self, provider: CudaProvider, weights: Any, **opts: Any) -> None:
        super().__init__(provider, weights, **opts)
        cfg = self.config
        # (kernel limits: attn_split's head_dim, attn_combine's heads x splits)
        fits = cfg.head_dim <= MAX_D and cfg.num_heads <= MAX_PARTS
        self.fused = self.quantize_activations and fits
        self.use_graphs = env_enabled("BITNET_CUDA_GRAPHS")
        # one token's decode layer in four kernels (its int8 rows held in shared memory)
        widest = max(cfg.hidden_size, cfg.num_heads * cfg.head_dim, cfg.intermediate_size)
        self.layer_kernels = (
            env_enabled("BITNET_CUDA_LAYER") and padded_cols(widest) <= LAYER_MAX_KP
        )
        self._graphs: OrderedDict[tuple[Any, ...], Any] = OrderedDict()
        self._warm: set[tuple[Any, ...]] = set()  # layouts whose step ran once without a graph
        self._decode_bufs: StepBuffers | None = None
        self._batch_bufs: dict[int, StepBuffers] = {}  # batched decode steps, by batch size
        # the last decode step's cache arrays (its K and V lists) and graph key
        self._key_memo: tuple[Any, Any, tuple[Any, ...]] | None = None
        self._graph_kernels: dict[tuple[Any, ...], int] = {}  # kernels of each graph
        self._rings: dict[int, tuple[Any, np.ndarray]] = {}  # decode_greedy's, by k
        if not self.fused:
            return
        self.cp = provider.cp
        self.stream = self.cp.cuda.Stream(non_blocking=True)
        self._fn = {name: provider._k(name) for name in KERNELS}
        w = self.weights
        self.layers = fused_layers(self.weights, lambda ws: fuse_ternary(self.cp, ws))
        emb = w.embedding
        self._emb, self._emb_kind = (
            (emb.data, emb.kind) if isinstance(emb, HalfTable) else (emb, "f32")
        )
        self._emb_stride = int(self._emb.shape[1])
        self._head = w.head
        self._act = 0 if cfg.ffn_activation == "silu" else 1
        i32 = np.int32
        self._rope = (  # rope_store's geometry arguments
            i32(cfg.num_heads), i32(cfg.num_kv_heads), i32(cfg.head_dim), i32(cfg.rot_dim),
            i32(0 if cfg.rope_style == "neox" else 1), np.float32(math.log2(cfg.rope_theta)),
        )  # fmt: skip
        self._host_ops: Any = None  # _after_host_ops' event, made on first use
        self._wait_for_uploads()

    def _wait_for_uploads(self) -> None:
        """The weights were uploaded and stacked (q|k|v, gate|up) on the legacy default
        stream; the runner's stream is non_blocking, so it does not wait for that one:
        without this its first step could read weights still being copied."""
        self.cp.cuda.Stream.null.synchronize()

    def _after_host_ops(self) -> None:
        """Order the runner's stream after what the provider's own ops queued on the legacy
        default stream (the prefix cache's block copies into a sequence, ``kv_store``):
        an event recorded there and waited for here, no host wait."""
        if self._host_ops is None:
            self._host_ops = self.cp.cuda.Event()
        self._host_ops.record(self.cp.cuda.Stream.null)
        self.stream.wait_event(self._host_ops)

    # --- the forward pass -------------------------------------------------------------
    def forward(self, token_ids: Any, cache: Sequence, all_logits: bool = False) -> np.ndarray:
        if not self.fused:
            return super().forward(token_ids, cache, all_logits)
        # the chosen device (BITNET_CUDA_DEVICE) in whatever thread calls; cache growth
        # copies too run on the one stream that orders everything
        with self.cp.cuda.Device(self._provider.device_id):
            self._after_host_ops()
            with self.stream:
                return super().forward(token_ids, cache, all_logits)

    def _forward(self, ids: np.ndarray, cache: Sequence, all_logits: bool) -> np.ndarray:
        if not self.fused:
            return super()._forward(ids, cache, all_logits)
        t, start = int(ids.size), cache.length
        cache.reserve(start + t)
        if t == 1:
            logits = self._decode(ids, cache, start)
        else:
            b = StepBuffers(self.cp, self.config, t, t if all_logits else 1)
            self._set_inputs(b, ids, start)
            self._launch_step(b, self._ten(b, self._prefill_attention(b, cache, start)))
            logits = self._download(b)
        cache.advance(t)
        return logits if all_logits else logits[-1]

    def _decode(self, ids: np.ndarray, cache: Sequence, start: int) -> np.ndarray:
        if self._decode_bufs is None:
            self._decode_bufs = StepBuffers(self.cp, self.config, 1, 1, pinned=True)
        b = self._decode_bufs
        self._set_inputs(b, ids, start)
        splits = split_count(int(cache.k[0].shape[0]), self.config.num_heads, self.keys_per_split)
        key = (self.layer_kernels, *self._decode_key(cache, splits))
        self._run_step(key, b, self._decode_layer(b, cache, splits))
        return self._download(b)

    def _decode_key(self, cache: Sequence, splits: int) -> tuple[Any, ...]:
        """A decode step's graph key: its cache arrays' addresses. Kept while the sequence
        keeps its arrays (``cache.k`` is a new list when they change; the memo holds the
        list, so the identity test is exact): 2 x layers address reads a step saved."""
        memo = self._key_memo
        if memo is not None and memo[0] is cache.k and memo[1] is cache.v:
            return memo[2]
        key = tuple(
            (device_address(k), device_address(v)) for k, v in zip(cache.k, cache.v, strict=True)
        )
        key += (tuple(cache.k[0].shape), str(cache.k[0].dtype), splits)
        self._key_memo = (cache.k, cache.v, key)
        return key

    # --- greedy decoding with the token on the device -----------------------------------
    def device_sampling(
        self, temperature: float, top_k: int, top_p: float, min_p: float, seed: int
    ) -> DeviceSampling | None:
        """``decode_greedy``'s ``sampling`` for these settings (generation draws its tokens
        on the device with it), or None where this runner draws on the host (the generic
        engine)."""
        if not self.fused:
            return None
        return DeviceSampling(float(temperature), int(top_k), float(top_p), float(min_p), int(seed))

    def decode_greedy(
        self,
        token: int,
        cache: Sequence,
        k: int,
        eos: Collection[int] = (),
        sampling: DeviceSampling | None = None,
    ) -> list[int]:
        """The ``k`` greedy tokens after ``token`` (at ``cache.length``) in one graph launch:
        each step's argmax (``argmax_next``) writes the next step's id and position on the
        device and a slot of a token ring, read once at the end; ``k`` cache rows are
        reserved first. The tokens after the first one in ``eos`` are dropped and the cache
        forgets their rows. No logits reach the host. ``sampling``: draw each token on the
        device instead (``sample_next``: top-k, temperature, top-p, min-p, seeded by the
        seed and the position)."""
        if k <= 0:
            raise ValueError("decode_greedy: k must be positive")
        if not self.fused and sampling is None:  # the generic engine: the host loop
            out = []
            for _ in range(k):
                token = int(np.argmax(self.forward([token], cache)))
                out.append(token)
                if token in eos:
                    break
            return out
        ids = self._step_ids([token])  # (a clear error for an id outside the vocabulary)
        with self.cp.cuda.Device(self._provider.device_id):
            self._after_host_ops()
        with self.cp.cuda.Device(self._provider.device_id), self.stream, self._lock:
            start = cache.length
            cache.reserve(start + k)
            if self._decode_bufs is None:
                self._decode_bufs = StepBuffers(self.cp, self.config, 1, 1, pinned=True)
            b = self._decode_bufs
            ring, host_ring = self._ring(k)
            self._set_inputs(b, ids, start)
            capacity = int(cache.k[0].shape[0])
            splits = split_count(capacity, self.config.num_heads, self.keys_per_split)
            layer = self._decode_layer(b, cache, splits)
            vocab = np.int32(self.config.vocab_size)
            choose = (vocab,) if sampling is None else (vocab, *sampling.args())

            def steps() -> None:
                for j in range(k):
                    self._launch_step(b, layer)
                    args = (b.logits, *choose, b.ids, b.pos, ring, np.int32(j))
                    name = "argmax_next" if sampling is None else "sample_next"
                    self._fn[name]((1,), (NORM_THREADS,), args)

            how = "greedy" if sampling is None else sampling
            key = (how, k, self.layer_kernels, *self._decode_key(cache, splits))
            self._run_step(key, b, layer, steps)
            ring.get(stream=self.stream, out=host_ring)
            self.stream.synchronize()
            out = [int(t) for t in host_ring]
            cut = next((i for i, t in enumerate(out) if t in eos), None)
            if cut is not None:
                out = out[: cut + 1]
            cache.advance(len(out))
            return out

    def _ring(self, k: int) -> tuple[Any, np.ndarray]:
        """The device token ring of ``k`` slots and its page-locked host copy (kept)."""
        found = self._rings.get(k)
        if found is None:
            found = self._rings[k] = (
                self.cp.zeros((k,), dtype=np.int32),
                host_array(self.cp, (k,), np.int32, pinned=True),
            )
        return found

    # --- a batched decode step ----------------------------------------------------------
    def forward_batch(self, items: Any) -> np.ndarray:
        if not self.fused:
            return super().forward_batch(items)
        with self.cp.cuda.Device(self._provider.device_id):
            self._after_host_ops()
            with self.stream:
                return super().forward_batch(items)

    def _forward_batch(self, batch: list[tuple[np.ndarray, Sequence]]) -> np.ndarray:
        """Sequences with one new token decode in one step (the weights read once for all
        of them); a sequence with a longer chunk (a prompt) runs its own forward pass."""
        if not self.fused:
            return super()._forward_batch(batch)
        return decode_together(
            batch, self._decode_batch, lambda ids, cache: self._forward(ids, cache, False)
        )

    def _decode_batch(self, items: list[tuple[np.ndarray, Sequence]]) -> np.ndarray:
        cp, n = self.cp, len(items)
        b = self._batch_bufs.get(n)
        if b is None:
            b = self._batch_bufs[n] = StepBuffers(cp, self.config, n, n, seqs=True, pinned=True)
        caches = [cache for _, cache in items]
        b.host_io[:n] = [int(ids[0]) for ids, _ in items]
        b.host_io[n:] = [c.length for c in caches]
        b.io.set(b.host_io, stream=self.stream)
        addresses = [
            [[device_address(c.k[i]) for c in caches], [device_address(c.v[i]) for c in caches]]
            for i in range(self.config.num_layers)
        ]
        b.kv_addresses.set(np.array(addresses, dtype=np.uint64), stream=self.stream)
        capacity = max(int(c.k[0].shape[0]) for c in caches)
        splits = split_count(capacity, self.config.num_heads, self.keys_per_split)
        dtype = caches[0].k[0].dtype  # one runner, one cache dtype
        # the caches are data (their addresses in b.kv_addresses): one graph a batch size
        key = ("seqs", n, splits, str(dtype))
        self._run_step(key, b, self._ten(b, self._batch_attention(b, splits, dtype == np.float16)))
        return self._download(b)

    def _set_inputs(self, b: StepBuffers, ids: np.ndarray, start: int) -> None:
        b.host_io[: b.t] = ids
        b.host_io[b.t] = start
        b.io.set(b.host_io, stream=self.stream)

    def _download(self, b: StepBuffers) -> np.ndarray:
        """The step's logits, through ``b.host_logits`` (the caller gets its own copy: the
        buffer is the next step's too)."""
        b.logits.get(stream=self.stream, out=b.host_logits)
        self.stream.synchronize()
        return b.host_logits.copy()

    # --- CUDA graphs ------------------------------------------------------------------
    def _run_step(
        self,
        key: tuple[Any, ...],
        b: StepBuffers,
        layer: LayerLaunch,
        launch: Callable[[], None] | None = None,
    ) -> None:
        """A decode step (or ``launch``: several, decode_greedy's): its captured graph for
        ``key`` (captured on first use), or the kernels launched as they are."""
        launch = launch or (lambda: self._launch_step(b, layer))
        graph = self._graph(key, launch) if self.use_graphs else None
        if graph is not None:
            graph.launch(self.stream)
            self._provider.trace.submit()
            self._provider.trace.launched(self._graph_kernels[key])
        else:
            launch()

    def _graph(self, key: tuple[Any, ...], launch: Callable[[], None]) -> Any:
        """The captured step for ``key``, or None (its first step runs uncaptured)."""
        graph = self._graphs.get(key)
        if graph is not None:
            self._graphs.move_to_end(key)
            return graph
        if key not in self._warm:  # the first step on a layout runs uncaptured (modules load)
            if len(self._warm) > 4 * MAX_GRAPHS:
                self._warm.clear()
            self._warm.add(key)
            return None
        trace = self._provider.trace
        # a capture records the kernels: it submits and runs nothing
        submitted, launched = trace.submissions, trace.launches
        try:
            self.stream.begin_capture()
            try:
                launch()
            finally:
                graph = self.stream.end_capture()
        except Exception as exc:  # a driver or CuPy without capture: run the kernels as they are
            self.use_graphs = False
            trace.fallback(f"cuda: CUDA graph capture failed ({exc}); decoding without graphs")
            return None
        finally:
            captured = trace.launches - launched
            trace.submissions, trace.launches = submitted, launched
        self._graphs[key] = graph
        self._graph_kernels[key] = captured
        if len(self._graphs) > MAX_GRAPHS:
            dropped = self._graphs.popitem(last=False)[0]
            self._warm.discard(dropped)
            self._graph_kernels.pop(dropped, None)
        return graph

    # --- the kernels of one forward pass ------------------------------------------------
    def _launch_step(self, b: StepBuffers, layer: LayerLaunch) -> None:
        """Every kernel of a forward pass of ``b.t`` tokens: the embedding, ``layer(i, lw)``
        for each layer (``_ten`` or ``_four``), the output norm and the head."""
        cfg, fn, i32 = self.config, self._fn, np.int32
        t, hidden, eps = b.t, cfg.hidden_size, np.float32(cfg.rms_norm_eps)
        vocab, done = i32(self._emb.shape[0]), (b.done, i32(b.done.shape[0]))
        embed_args = (self._emb, b.ids, b.x, i32(hidden), i32(self._emb_stride), vocab, *done)
        fn[f"embed_{self._emb_kind}"]((t,), (NORM_THREADS,), embed_args)
        for i, lw in enumerate(self.layers):
            layer(i, lw)
        rows = int(b.head_x.shape[0])
        norm_args = (b.x[t - rows :], self.weights.output_norm, b.head_x, i32(hidden), eps)
        fn["rmsnorm"]((rows,), (NORM_THREADS,), norm_args)
        self._provider.launch_dense(self._head, b.head_x, b.logits, rows)

    def _ten(self, b: StepBuffers, attend: Attend) -> LayerLaunch:
        """A layer of ``b.t`` tokens in ten kernels; ``attend(i, lw)`` launches layer ``i``'s
        rope + KV store and attention, leaving its int8 output in ``b.aq``."""
        cfg, fn, i32 = self.config, self._fn, np.int32
        t, hidden, eps = b.t, cfg.hidden_size, np.float32(cfg.rms_norm_eps)
        act_args = (i32(cfg.intermediate_size), i32(b.fq.shape[1]), i32(self._act), eps)

        def layer(i: int, lw: FusedLayer) -> None:
            self._norm_quant(b.x, lw.attn_norm, b.xq, b.xs, b.xsum, t, hidden, eps)
            self._matmul(lw.qkv, b.xq, b.xs, b.xsum, b.qkv, t, add=False)
            attend(i, lw)
            self._matmul(lw.o, b.aq, b.as_, b.asum, b.x, t, add=True)
            self._norm_quant(b.x, lw.ffn_norm, b.xq, b.xs, b.xsum, t, hidden, eps)
            self._matmul(lw.gate_up, b.xq, b.xs, b.xsum, b.gu, t, add=False)
            act_out = (b.f, lw.ffn_sub_norm, b.fq, b.fs, b.fsum)
            fn["act_norm_quant"]((t,), (NORM_THREADS,), (b.gu, *act_out, *act_args))
            self._matmul(lw.down, b.fq, b.fs, b.fsum, b.x, t, add=True)

        return layer

    def _decode_layer(self, b: StepBuffers, cache: Sequence, splits: int) -> LayerLaunch:
        """One token's layer: four kernels (``layer_kernels``), else the ten."""
        if self.layer_kernels:
            return self._four(b, cache, splits)
        return self._ten(b, self._decode_attention(b, cache, splits))

    def _four(self, b: StepBuffers, cache: Sequence, splits: int) -> LayerLaunch:
        """One token's layer at position ``b.pos`` in four kernels (kernels' "four launches"):
        qkv_attend (a block a query head), then norm_gemv_add (o), norm_gemv_act (gate|up)
        and norm_gemv_add (down), ``layer_rows`` rows a block."""
        cfg, fn, i32 = self.config, self._fn, np.int32
        hidden, hq, d, f = cfg.hidden_size, cfg.num_heads, cfg.head_dim, cfg.intermediate_size
        eps, scale = np.float32(cfg.rms_norm_eps), np.float32(1.0 / math.sqrt(d))
        attend = fn["qkv_attend_f16" if cache.k[0].dtype == np.float16 else "qkv_attend"]
        geometry = (*self._rope, i32(splits), scale, eps)
        rows, block = self.layer_rows, (NORM_THREADS,)

        def weights(w: Any, k: int) -> tuple[Any, ...]:
            """A GEMV's weight arguments and sizes: k input values, kw4 16-byte words a row."""
            return (w.words, w.scales), (i32(k), i32(int(w.words.shape[1]) // 4))

        def layer(i: int, lw: FusedLayer) -> None:
            kc, vc = cache.layer(i)
            w, sizes = weights(lw.qkv, hidden)
            args = (b.x, lw.attn_norm, *w, *sizes, b.pos, kc, vc, b.part_m, b.part_l)
            attend((hq,), block, (*args, b.part_acc, b.att, *geometry))
            w, sizes = weights(lw.o, hq * d)
            args = (b.att, lw.attn_sub_norm, *w, b.x, i32(hidden), *sizes, i32(rows), eps)
            fn["norm_gemv_add"]((-(-hidden // rows),), block, args)
            w, sizes = weights(lw.gate_up, hidden)
            args = (b.x, lw.ffn_norm, *w, b.f, i32(f), *sizes, i32(rows), i32(self._act), eps)
            fn["norm_gemv_act"]((-(-f // rows),), block, args)
            w, sizes = weights(lw.down, f)
            args = (b.f, lw.ffn_sub_norm, *w, b.x, i32(hidden), *sizes, i32(rows), eps)
            fn["norm_gemv_add"]((-(-hidden // rows),), block, args)

        return layer

    def _prefill_attention(self, b: StepBuffers, cache: Sequence, start: int) -> Attend:
        """Layer attention of ``b.t`` prompt tokens from ``start`` (causal, over the cache)."""
        cfg, fn, i32 = self.config, self._fn, np.int32
        t, hq, hkv, d = b.t, cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        f16 = cache.k[0].dtype == np.float16
        scale, eps = np.float32(1.0 / math.sqrt(d)), np.float32(cfg.rms_norm_eps)

        def attend(i: int, lw: FusedLayer) -> None:
            kc, vc = cache.layer(i)
            rope_store = fn["rope_store_f16" if f16 else "rope_store"]
            rope_store((t, hq + 2 * hkv), (ROPE_THREADS,), (b.qkv, b.pos, b.q, kc, vc, *self._rope))
            n = start + t
            scores = self.cp.empty((t, hq, n), dtype=np.float32)
            geometry = (i32(hq), i32(hkv), i32(d), i32(start), i32(n), scale)
            attn = fn["attention_f16" if f16 else "attention"]
            attn((t, hq), (ATTN_THREADS,), (b.q, kc, vc, scores, b.att, *geometry))
            self._norm_quant(b.att, lw.attn_sub_norm, b.aq, b.as_, b.asum, t, hq * d, eps)

        return attend

    def _decode_attention(self, b: StepBuffers, cache: Sequence, splits: int) -> Attend:
        """Layer attention of one token at position ``b.pos`` (read on the device, so the
        launches can be captured): rope + store, then flash-decoding splits."""
        cfg = self.config
        hq, hkv = cfg.num_heads, cfg.num_kv_heads
        f16 = cache.k[0].dtype == np.float16

        def attend(i: int, lw: FusedLayer) -> None:
            kc, vc = cache.layer(i)
            rope_store = self._fn["rope_store_f16" if f16 else "rope_store"]
            rope_store((1, hq + 2 * hkv), (ROPE_THREADS,), (b.qkv, b.pos, b.q, kc, vc, *self._rope))
            split = self._fn["attn_split_f16" if f16 else "attn_split"]
            self._split_attention(b, lw, split, (kc, vc, b.pos), splits, seqs=1)

        return attend

    def _batch_attention(self, b: StepBuffers, splits: int, f16: bool) -> Attend:
        """Layer attention of a batched decode step: token ``j`` at ``b.pos[j]`` over
        sequence ``j``'s cache (addresses from ``b.kv_addresses``)."""
        cfg, n = self.config, b.t
        hq, hkv = cfg.num_heads, cfg.num_kv_heads
        suffix = "_f16" if f16 else ""

        def attend(i: int, lw: FusedLayer) -> None:
            kcs, vcs = b.kv_addresses[i, 0], b.kv_addresses[i, 1]
            rope_store = self._fn[f"rope_store_seqs{suffix}"]
            rope_store(
                (n, hq + 2 * hkv),
                (ROPE_THREADS,),
                (b.qkv, b.pos, b.q, kcs, vcs, *self._rope),
            )
            split = self._fn[f"attn_split_seqs{suffix}"]
            self._split_attention(b, lw, split, (kcs, vcs, b.pos), splits, seqs=n)

        return attend

    def _split_attention(
        self,
        b: StepBuffers,
        lw: FusedLayer,
        split: Any,
        cache_args: tuple[Any, ...],
        splits: int,
        seqs: int,
    ) -> None:
        """Flash-decoding attention of ``seqs`` tokens (one a sequence), then attn_sub_norm
        and int8: 2 kernels."""
        cfg, i32 = self.config, np.int32
        hq, hkv, d = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim
        scale, eps = np.float32(1.0 / math.sqrt(d)), np.float32(cfg.rms_norm_eps)
        parts = (b.part_m, b.part_l, b.part_acc)
        geometry = (i32(hq), i32(hkv), i32(d), i32(splits), scale)
        split((hq, splits, seqs), (ATTN_THREADS,), (b.q, *cache_args, *parts, *geometry))
        out = (b.att, lw.attn_sub_norm, b.aq, b.as_, b.asum, b.done)
        sizes = (i32(hq), i32(d), i32(splits), i32(b.aq.shape[1]), eps)
        combine = self._fn["attn_combine_norm_quant"]
        combine((hq, seqs), (COMBINE_THREADS,), (*parts, *out, *sizes))

    def _norm_quant(
        self, x: Any, g: Any, xq: Any, xs: Any, xsum: Any, t: int, d: int, eps: Any
    ) -> None:
        args = (x, g, xq, xs, xsum, np.int32(d), np.int32(xq.shape[1]), eps)
        self._fn["rmsnorm_quant"]((t,), (NORM_THREADS,), args)

    def _matmul(self, w: Any, xq: Any, xs: Any, xsum: Any, y: Any, t: int, add: bool) -> None:
        self._provider.launch_i2s(w.words, w.scales, xq, xs, xsum, y, t, add=add)
