"""The generic Level-2 runner: BitNet b1.58 built only from Level-1 provider ops.

The graph is llama.cpp's ``bitnet`` (``src/models/bitnet.cpp``) and
transformers' ``BitNetForCausalLM``, per layer::

    h = rmsnorm(x, attn_norm)
    q, k, v = linear(h, Wq), linear(h, Wk), linear(h, Wv)      # ternary, int8 activations
    q, k = rope(q), rope(k)                                     # config.rope_style (NEOX)
    kv_store(k, v); a = attention(q, K, V)                      # causal, grouped-query
    x = x + linear(rmsnorm(a, attn_sub_norm), Wo)
    h = rmsnorm(x, ffn_norm)
    f = silu_mul(linear(h, Wgate), linear(h, Wup))              # or relu2_mul (config)
    x = x + linear(rmsnorm(f, ffn_sub_norm), Wdown)

In the ``llama`` graph (``config.sub_norms`` false: HF1BitLLM's and Falcon-Edge's
``LlamaForCausalLM`` checkpoints) the two sub-norms are skipped. With
``config.linear_norms`` (onebitllms' ``use_rms_norm``) every ``linear(h, W)`` is
``linear(rmsnorm(h, W_in_norm, linear_norm_eps), W)``: each BitLinear normalizes
its own input with its own weight before the activation quantization.

The ``qwen3`` and ``gemma3`` graphs (``config.qk_norms``; bitnet.cpp's embedding
models) differ in four places: q and k are RMS-normalized per head before rope
(``attn_q_norm``/``attn_k_norm``; the q norm carries the query scale of Gemma's
``query_pre_attn_scalar``); head_dim is ``config.key_length``; Gemma3 normalizes the
attention and FFN outputs before each residual add (``post_attention_norm``,
``post_ffw_norm``), multiplies the embeddings by sqrt(hidden) (folded into the table at
upload), uses GELU (tanh) and, on its local layers, attends through a sliding window
with a rope base of their own (``extra_ops``: ``gelu_mul``, ``attention_window``).

then ``logits = matmul_dense(rmsnorm(x, output_norm), head)`` with the head
the tied ``token_embd`` (or ``output.weight``). A forward call appends all its
tokens to the sequence at once (prefill is one ``[T, ...]`` batch; decode is
T = 1) and only the logits come back to the host. With
``quantize_activations=False`` every ternary matmul is
``matmul_ternary_float`` instead of ``linear`` (exact comparisons, debugging).

Device arrays are opaque except for one thing: the runner reshapes them
between ``[T, H*D]`` and ``[T, H, D]``, through the protocol's
``provider.reshape(x, shape)``; for a provider written before that op, it
falls back to ``x.reshape(shape)``, and failing that to a host round trip
per reshape (correct but slow, warned once).
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from collections.abc import Sequence as SequenceOf
from typing import Any

import numpy as np

from ..errors import ConfigError, ShapeError
from ..hal import extra_ops
from .host_memory import page_zeros
from .kv_cache import KVCache, KVCacheConfig, Sequence, resolve_kv_dtype
from .memory_pool import MemoryPool
from .weights import DeviceWeights, LayerWeights, ModelWeights, check_token_ids

log = logging.getLogger("bitnet")


def make_reshape(provider: Any) -> Callable[[Any, tuple[int, ...]], Any]:
    """The row-major reshape of device arrays for ``provider`` (see the module docstring)."""
    own = getattr(provider, "reshape", None)
    if callable(own):
        return own
    warned = False

    def reshape(x: Any, shape: tuple[int, ...]) -> Any:
        nonlocal warned
        method = getattr(x, "reshape", None)
        if callable(method):
            return method(shape)
        if not warned:
            log.warning(
                "provider %s has no reshape(x, shape) and its arrays no .reshape: "
                "reshaping through the host (slow); implement KernelProvider.reshape",
                getattr(provider, "name", type(provider).__name__),
            )
            warned = True
        return provider.to_device(np.ascontiguousarray(provider.to_host(x)).reshape(shape))

    return reshape


#: the error of logits/generation on an embedding model
NO_HEAD = (
    "this is an embedding model: it has no output head to generate text or logits with "
    "(use bitnet embed, Model.embed or /v1/embeddings)"
)


def generic_engine_fallback(provider: Any, reason: str) -> None:
    """Say that ``provider``'s fused runner is given up for the generic engine, and why:
    ``provider.trace.fallback`` where it has one (an error under BITNET_STRICT_MODE),
    else a logged warning. The receipt names the runner that runs."""
    trace = getattr(provider, "trace", None)
    if callable(getattr(trace, "fallback", None)):
        trace.fallback(reason)
    else:
        log.warning("%s", reason)


class GenericRunner:
    """Runs one model on one provider through the ops of the ``KernelProvider`` protocol."""

    def __init__(
        self,
        provider: Any,
        weights: ModelWeights,
        *,
        quantize_activations: bool = True,
        kv_cache: KVCacheConfig | None = None,
        progress: bool | None = None,
        max_batch: int = 512,
    ) -> None:
        if not isinstance(max_batch, int) or max_batch <= 0:
            raise ConfigError(f"max_batch must be a positive integer, got {max_batch!r}")
        self.max_batch = max_batch
        self._provider = provider
        self.config = weights.config
        self.quantize_activations = quantize_activations
        self.weights = DeviceWeights.upload(provider, weights, progress=progress)
        self.pool = MemoryPool(lambda shape, dtype: provider.empty(shape, dtype))
        cfg = self.config
        kv_dtype = resolve_kv_dtype(provider, kv_cache)
        lazy = getattr(provider, "commits_on_touch", False) is True
        # host memory: sequences' arrays in their own page-aligned mappings, so a prefix
        # cache can map its blocks into them (sdk/shared_pages.py)
        self.kv_pool = MemoryPool(page_zeros) if lazy else self.pool
        self.kv = KVCache(
            num_layers=cfg.num_layers,
            kv_heads=cfg.num_kv_heads,
            head_dim=cfg.head_dim,
            context_length=cfg.context_length,
            config=kv_cache,
            allocate=lambda shape: self.kv_pool.acquire(shape, kv_dtype),
            free=self.kv_pool.release,
            copy=lambda dst, src: provider.kv_store(dst, src, 0),
            dtype=kv_dtype,
            lazy=lazy,
        )
        self._reshape = make_reshape(provider)
        self._lock = threading.Lock()  # one forward at a time: the device and cache are shared
        self._ffn = {
            "silu": provider.silu_mul,
            "relu2": provider.relu2_mul,
            "gelu": lambda g, u: extra_ops.run(provider, "gelu_mul", g, u),
        }[cfg.ffn_activation]
        self._lin = provider.linear if quantize_activations else provider.matmul_ternary_float

    @property
    def provider(self) -> Any:
        return self._provider

    def new_cache(self, max_tokens: int | None = None) -> Sequence:
        """A new sequence in the shared KV cache (close it, or use ``with``, when done)."""
        return self.kv.new_sequence(max_tokens)

    def forward(self, token_ids: Any, cache: Sequence, all_logits: bool = False) -> np.ndarray:
        """Append ``token_ids`` to ``cache``; float32 logits ``[T, vocab]`` or ``[vocab]`` (last).

        Thread-safe: concurrent generations interleave one forward call at a time.
        """
        ids = self._step_ids(token_ids)
        with self._lock:  # reserve inside: eviction must not hit a sequence mid-forward
            cache.reserve(cache.length + int(ids.size))  # all of it up front, or a clear error
            # Long prompts go in chunks of max_batch tokens (bounded activation and
            # attention memory); the result is the same as one batch.
            outs = [
                self._forward(ids[i : i + self.max_batch], cache, all_logits)
                for i in range(0, ids.size, self.max_batch)
            ]
        return np.concatenate(outs) if all_logits else outs[-1]

    def forward_batch(self, items: SequenceOf[tuple[Any, Sequence]]) -> np.ndarray:
        """One step of several sequences: ``items`` are ``(token_ids, cache)`` pairs, each
        appending its ids to its own sequence; float32 logits ``[len(items), vocab]`` of each
        sequence's last token.

        All tokens go through the matmuls as one batch (decode tokens and prefill chunks
        mixed); attention runs per sequence over its own cache at its own position. Each
        row equals what ``forward`` gives for that sequence alone (bit for bit where the
        provider's ops are batch-invariant, as the native CPU ones). The caller bounds the
        step's tokens (no chunking here). Nothing is appended unless the whole step runs.
        A runner that fuses its single-sequence ``_forward`` but has no ``_forward_batch``
        of its own runs the sequences one after the other.
        """
        batch = [(self._step_ids(ids), cache) for ids, cache in items]
        if not batch:
            raise ShapeError("forward_batch needs at least one sequence")
        if len({id(cache) for _, cache in batch}) != len(batch):
            raise ShapeError("forward_batch: a sequence appears twice in one step")
        cls = type(self)
        if cls._forward is not GenericRunner._forward and (
            cls._forward_batch is GenericRunner._forward_batch
        ):
            return np.stack([self.forward(ids, cache) for ids, cache in batch])
        with self._lock:
            for ids, cache in batch:
                cache.reserve(cache.length + int(ids.size))
            for _, cache in batch:  # one reserve may have evicted another of the step
                cache.reserve(cache.length)
            return self._forward_batch(batch)

    def _project(self, x: Any, lw: LayerWeights, key: str) -> Any:
        """BitLinear ``key`` (``"q"`` ... ``"down"``) of layer ``lw`` on ``x``, after its
        own input RMSNorm where the model has one (``config.linear_norms``)."""
        norm = lw.in_norms.get(key)
        if norm is not None:
            x = self._provider.rmsnorm(x, norm, self.config.linear_norm_eps)
        return self._lin(x, getattr(lw, key))

    def _attention_inputs(
        self, x: Any, lw: LayerWeights, positions: np.ndarray, layer: int = 0
    ) -> tuple:
        """Layer ``lw``'s attention norm, then q ``[T, Hq, D]`` and k, v ``[T, Hkv, D]``
        (q and k head-normed where the model has QK norms, rotated at ``positions``
        with layer ``layer``'s rope base)."""
        p, cfg = self._provider, self.config
        t, d, view = int(positions.size), cfg.head_dim, self._reshape
        h = p.rmsnorm(x, lw.attn_norm, cfg.rms_norm_eps)
        q = view(self._project(h, lw, "q"), (t, cfg.num_heads, d))
        k = view(self._project(h, lw, "k"), (t, cfg.num_kv_heads, d))
        if lw.q_norm is not None:  # per head: rows of head_dim
            q = p.rmsnorm(view(q, (t * cfg.num_heads, d)), lw.q_norm, cfg.rms_norm_eps)
            k = p.rmsnorm(view(k, (t * cfg.num_kv_heads, d)), lw.k_norm, cfg.rms_norm_eps)
            q, k = view(q, (t, cfg.num_heads, d)), view(k, (t, cfg.num_kv_heads, d))
        v = view(self._project(h, lw, "v"), (t, cfg.num_kv_heads, d))
        theta = cfg.layer_rope_theta(layer)
        q = p.rope(q, positions, theta, cfg.rope_style, cfg.rot_dim)
        k = p.rope(k, positions, theta, cfg.rope_style, cfg.rot_dim)
        return q, k, v

    def _attend(self, q: Any, k_cache: Any, v_cache: Any, start: int, t: int, layer: int) -> Any:
        """``attention`` of ``t`` queries, through the sliding window on a local layer once
        a query reaches past it."""
        cfg = self.config
        if cfg.layer_is_local(layer) and start + t > cfg.sliding_window:
            return extra_ops.run(
                self._provider, "attention_window", q, k_cache, v_cache, start, cfg.sliding_window
            )
        return self._provider.attention(q, k_cache, v_cache, start)

    def _layer_tail(self, x: Any, a: Any, lw: LayerWeights) -> Any:
        """The residual stream ``x`` after layer ``lw``, given its attention output ``a``
        ``[T, Hq * D]``: sub-norm, o-projection, then the feed-forward block."""
        p, eps = self._provider, self.config.rms_norm_eps
        if lw.attn_sub_norm is not None:
            a = p.rmsnorm(a, lw.attn_sub_norm, eps)
        if lw.post_attn_norm is None:
            x = p.add(x, self._project(a, lw, "o"))
        else:
            x = p.add(x, p.rmsnorm(self._project(a, lw, "o"), lw.post_attn_norm, eps))
        h = p.rmsnorm(x, lw.ffn_norm, eps)
        f = self._ffn(self._project(h, lw, "gate"), self._project(h, lw, "up"))
        if lw.ffn_sub_norm is not None:
            f = p.rmsnorm(f, lw.ffn_sub_norm, eps)
        # temporaries, not locals: freed in the same order every step, so a backend's buffer
        # pool hands out the same buffers each decode step (WebGPU's bind-group cache,
        # tests/test_reuse.py there, relies on it)
        if lw.post_ffn_norm is None:
            return p.add(x, self._project(f, lw, "down"))
        return p.add(x, p.rmsnorm(self._project(f, lw, "down"), lw.post_ffn_norm, eps))

    def _step_ids(self, token_ids: Any) -> np.ndarray:
        ids = np.asarray(token_ids, dtype=np.int64).reshape(-1)
        if ids.size == 0:
            raise ShapeError("forward needs at least one token id")
        check_token_ids(ids, self.config.vocab_size)
        return ids

    def _forward_batch(
        self, batch: list[tuple[np.ndarray, Sequence]], hidden: bool = False
    ) -> np.ndarray:
        p, cfg, w = self._provider, self.config, self.weights
        if len(batch) == 1 and not hidden:
            ids, cache = batch[0]
            return self._forward(ids, cache, False)[None]
        counts = [int(ids.size) for ids, _ in batch]
        offsets = np.concatenate([[0], np.cumsum(counts)]).astype(np.int64)
        t = int(offsets[-1])
        starts = [cache.length for _, cache in batch]
        ids_all = np.concatenate([ids for ids, _ in batch])
        positions = np.concatenate(
            [np.arange(s, s + n, dtype=np.int64) for s, n in zip(starts, counts, strict=True)]
        )
        hq, hkv, d, view = cfg.num_heads, cfg.num_kv_heads, cfg.head_dim, self._reshape
        if w.head is None and not hidden:
            raise ShapeError(NO_HEAD)

        def rows(x: Any, j: int, heads: int) -> Any:  # sequence j's rows of x [T, heads * d]
            sel = np.arange(offsets[j], offsets[j + 1], dtype=np.int64)
            return view(p.embedding(x, sel), (counts[j], heads, d))

        x = p.embedding(w.embedding, ids_all)
        for i, lw in enumerate(w.layers):
            q, k, v = self._attention_inputs(x, lw, positions, i)
            q, k, v = view(q, (t, hq * d)), view(k, (t, hkv * d)), view(v, (t, hkv * d))
            a = p.empty((t, hq, d), np.float32)  # the sequences' outputs, stored row by row
            for j, (_, cache) in enumerate(batch):
                k_cache, v_cache = cache.layer(i)
                p.kv_store(k_cache, rows(k, j, hkv), starts[j])
                p.kv_store(v_cache, rows(v, j, hkv), starts[j])
                p.kv_store(
                    a,
                    self._attend(rows(q, j, hq), k_cache, v_cache, starts[j], counts[j], i),
                    int(offsets[j]),
                )
            x = self._layer_tail(x, view(a, (t, hq * d)), lw)
        for n, (_, cache) in zip(counts, batch, strict=True):
            cache.advance(n)
        if hidden:  # every token's final hidden state (embeddings are pooled from these)
            return np.asarray(p.to_host(p.rmsnorm(x, w.output_norm, cfg.rms_norm_eps)), np.float32)
        x = p.embedding(x, offsets[1:] - 1)  # each sequence's last token
        x = p.rmsnorm(x, w.output_norm, cfg.rms_norm_eps)
        return np.asarray(p.to_host(p.matmul_dense(x, w.head)), dtype=np.float32)

    def _forward(self, ids: np.ndarray, cache: Sequence, all_logits: bool) -> np.ndarray:
        p, cfg, w = self._provider, self.config, self.weights
        t = int(ids.size)
        start = cache.length
        cache.reserve(start + t)
        positions = np.arange(start, start + t, dtype=np.int64)
        if w.head is None:
            raise ShapeError(NO_HEAD)
        x = p.embedding(w.embedding, ids)
        for i, lw in enumerate(w.layers):
            q, k, v = self._attention_inputs(x, lw, positions, i)
            k_cache, v_cache = cache.layer(i)
            p.kv_store(k_cache, k, start)
            p.kv_store(v_cache, v, start)
            a = self._attend(q, k_cache, v_cache, start, t, i)
            x = self._layer_tail(x, self._reshape(a, (t, cfg.q_dim)), lw)
        cache.advance(t)
        if not all_logits and t > 1:
            x = p.embedding(x, np.array([t - 1], dtype=np.int64))  # row gather: the last token
        x = p.rmsnorm(x, w.output_norm, cfg.rms_norm_eps)
        logits = np.asarray(p.to_host(p.matmul_dense(x, w.head)), dtype=np.float32)
        return logits if all_logits else logits[-1]

    def hidden_states(self, sequences: SequenceOf[Any]) -> list[np.ndarray]:
        """The final (output-normed) hidden states ``[T_j, hidden]`` of each token-id list of
        ``sequences``, each from an empty cache, all through the matmuls as one batch
        (an embedding model's forward; nothing is kept). Long inputs go in chunks of
        ``max_batch`` tokens per sequence."""
        batch = [self._step_ids(ids) for ids in sequences]
        if not batch:
            return []
        caches = [self.new_cache(int(ids.size)) for ids in batch]
        try:
            outs: list[list[np.ndarray]] = [[] for _ in batch]
            step = self.max_batch
            longest = max(int(ids.size) for ids in batch)
            for lo in range(0, longest, step):
                live = [j for j, ids in enumerate(batch) if ids.size > lo]
                with self._lock:
                    for j in live:
                        caches[j].reserve(min(int(batch[j].size), lo + step))
                    h = self._forward_batch(
                        [(batch[j][lo : lo + step], caches[j]) for j in live], hidden=True
                    )
                at = 0
                for j in live:
                    n = min(int(batch[j].size), lo + step) - lo
                    outs[j].append(h[at : at + n])
                    at += n
            return [np.concatenate(parts) for parts in outs]
        finally:
            for cache in caches:
                cache.close()

    def logits(self, token_ids: Any) -> np.ndarray:
        """All-position logits ``[T, vocab]`` of ``token_ids`` from an empty cache (teacher forcing)."""
        with self.new_cache() as seq:
            return self.forward(token_ids, seq, all_logits=True)
