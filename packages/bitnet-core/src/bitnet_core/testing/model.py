"""Whole-model conformance: logits and greedy tokens against the CPU reference engine.

Small random BitNet models (``bitnet_core.model.random_weights``; awkward
sizes: FFN widths and vocabularies that are no multiple of any block,
grouped-query heads, a partial rotary dimension, both FFN activations, tied
and untied heads) run on the provider under test, through its own runner
when it offers one (``make_runner``) else the generic engine, and on
``cpu-reference`` through the generic engine. Compared:

- ``prefill``: the logits of every position of one prompt;
- ``decode``: a short prefill then single-token steps (the KV cache path),
  each step's logits;
- ``file-<format>``: the same model written to GGUF with its ternary layers in
  that format (``tq2_0``, ``tq1_0``, ``i2_s``, ``qk256``) and read back
  through ``bitnet_core.gguf``, so the provider gets file-backed weights
  (``TernaryWeight.raw`` in the file's layout): prefill logits;
- ``greedy``: argmax decoding of 12 tokens; the token sequences must be
  identical up to the first step where the reference's best two logits are
  closer than twice the provider's logit error at that step (a tie the
  provider may break either way; nothing after it is compared).

Logits tolerance: ``|got - want| <= LOGIT_ATOL * max|want|`` (1 %). Float32
arithmetic in any order moves these logits by ~5e-7 (measured); what needs
the room is an int8 activation code decided the other way at a quantizer
tie, which propagates through the layers (one such code in every row of
every linear moved them by 1.5-3.7 %; a real provider has a handful per
forward at most). A wrong op or a broken cache moves them by tens of %
(a matmul that drops its last column: 46-57 %).
These checks catch what op-level checks cannot: device arrays reused while
still in use, reshape semantics, the cache across calls. Both engines keep
their KV cache in float32 when the provider supports it (``kv_dtypes``), even
where it prefers float16 (see ``_kv_config``).
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from .tolerances import ConformanceFailure, Tolerance, assert_close

#: Bound on logit differences, relative to the largest reference logit.
LOGIT_ATOL = 1e-2


class ModelUnavailable(Exception):
    """The engine (``bitnet_core.model``) the model checks need is not installed."""


@dataclass(frozen=True)
class ModelCheck:
    """One whole-model comparison on ``provider``."""

    id: str
    check: Callable[[Any], None] = field(repr=False)

    def run(self, provider: Any) -> None:
        self.check(provider)


def engine_available() -> bool:
    return importlib.util.find_spec("bitnet_core.model") is not None


#: Small configs with awkward sizes (keyword arguments of ``BitNetConfig``).
MODEL_CONFIGS: dict[str, dict[str, Any]] = {
    "gqa-relu2": dict(
        vocab_size=263, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=172, context_length=64, ffn_activation="relu2",
    ),
    "mqa-silu-untied-partial-rope": dict(
        vocab_size=101, hidden_size=48, num_layers=1, num_heads=3, num_kv_heads=1,
        intermediate_size=100, context_length=40, ffn_activation="silu", rope_style="norm",
        rope_dim=8, tied_embeddings=False, rope_theta=500000.0,
    ),
    # llama-architecture 1.58-bit checkpoints: no sub-norms, adjacent-pair rope; and with
    # an input RMSNorm on every BitLinear (use_rms_norm). A fused runner that computes
    # only BitNet's graph must give these to the generic engine.
    "llama-no-subnorms": dict(
        vocab_size=90, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=96, context_length=40, ffn_activation="silu", arch="llama",
        rope_style="norm",
    ),
    "llama-bitlinear-norms": dict(
        vocab_size=90, hidden_size=64, num_layers=1, num_heads=4, num_kv_heads=4,
        intermediate_size=96, context_length=40, ffn_activation="silu", arch="llama",
        rope_style="norm", linear_norms=True, linear_norm_eps=1e-6,
    ),
}  # fmt: skip

#: Embedding models (bitnet.cpp's qwen3/gemma3 graphs): head_dim != hidden/heads, QK and
#: BitLinear input norms; Gemma3 with GELU, post-norms, scaled embeddings, a query
#: scalar, and local layers (window 4) beside global ones, checked on inputs past it.
EMBED_CONFIGS: dict[str, dict[str, Any]] = {
    "qwen3": dict(
        vocab_size=97, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=2,
        intermediate_size=96, context_length=40, arch="qwen3", key_length=24,
        linear_norms=True, pooling="last", rms_norm_eps=1e-6, rope_theta=1e6,
    ),
    "gemma3": dict(
        vocab_size=97, hidden_size=64, num_layers=2, num_heads=4, num_kv_heads=1,
        intermediate_size=96, context_length=40, arch="gemma3", key_length=32,
        linear_norms=True, pooling="mean", rms_norm_eps=1e-6, ffn_activation="gelu",
        attn_scalar=20.0, embedding_scale=8.0, sliding_window=4, sliding_window_pattern=2,
        rope_theta_local=1e4, rope_theta=1e6,
    ),
}  # fmt: skip
#: cosine floor of a backend's embeddings against the reference provider's
EMBED_COSINE = 0.9999

#: The model written to GGUF per format (block formats need multiples of 256).
FILE_CONFIG: dict[str, Any] = dict(
    vocab_size=300, hidden_size=256, num_layers=1, num_heads=4, num_kv_heads=2,
    intermediate_size=768, context_length=32, ffn_activation="relu2",
)  # fmt: skip
FILE_FORMATS = ("tq2_0", "tq1_0", "i2_s", "qk256")
#: also checked: a TQ2_0 file whose embedding/head table is BF16 (``table_dtypes``)
FILE_TABLES = ("bf16",)

_REFERENCE_RUNNERS: dict[str, Any] = {}
_FILES: dict[str, Any] = {}


def _weights(config_name: str) -> Any:
    from ..config import BitNetConfig
    from ..model import random_weights

    return random_weights(BitNetConfig(**MODEL_CONFIGS[config_name]), seed=7)


def _kv_config(provider: Any) -> Any:
    """The KV cache both engines use: float32 where ``provider`` supports it, else its own dtype.

    Rounding K/V to float16 is a storage choice on top of the computation the
    kit checks: it moves int8 activation codes at quantizer ties (see the
    module doc), by up to a few % of the logits on these tiny random models
    (0.4 % on the trained demo model), so it is compared in float32.
    """
    from ..model import KVCacheConfig
    from ..sdk.kv_cache import provider_kv_dtypes

    supported = provider_kv_dtypes(provider)
    return KVCacheConfig(dtype="float32" if "float32" in supported else supported[0])


def _reference(config_name: str, provider: Any) -> Any:
    """The reference engine for a config and ``provider``'s KV dtype (built once per process)."""
    kv = _kv_config(provider)
    key = f"{config_name}/{kv.dtype}"
    if key not in _REFERENCE_RUNNERS:
        from ..model import GenericRunner
        from ..providers.reference import ReferenceProvider

        _REFERENCE_RUNNERS[key] = GenericRunner(
            ReferenceProvider(), _weights(config_name), progress=False, kv_cache=kv
        )
    return _REFERENCE_RUNNERS[key]


def _backend(provider: Any, config_name: str) -> Any:
    """The provider's own runner when it offers one, else the generic engine."""
    return _provider_backend(provider, _weights(config_name))


def _provider_backend(provider: Any, weights: Any) -> Any:
    from ..model import GenericRunner

    opts = dict(progress=False, kv_cache=_kv_config(provider))
    make = getattr(provider, "make_runner", None)
    runner = make(weights, **opts) if make is not None else None
    return runner if runner is not None else GenericRunner(provider, weights, **opts)


def _prompt(config_name: str, n: int, seed: int) -> np.ndarray:
    vocab = MODEL_CONFIGS[config_name]["vocab_size"]
    ids = np.random.default_rng(seed).integers(0, vocab, size=n)
    ids[0] = vocab - 1  # the last row of the embedding and of the head
    return ids


def _close(what: str, got: np.ndarray, want: np.ndarray) -> None:
    assert_close(what, got, want, tol=Tolerance(0.0, LOGIT_ATOL))


def check_prefill(provider: Any, config_name: str) -> None:
    ids = _prompt(config_name, 11, 1)
    want = _reference(config_name, provider).logits(ids)
    got = _backend(provider, config_name).logits(ids)
    _close(f"prefill logits ({config_name}, {ids.size} tokens)", got, want)


def check_decode(provider: Any, config_name: str) -> None:
    ids = _prompt(config_name, 11, 2)
    ref, dut = _reference(config_name, provider), _backend(provider, config_name)
    with ref.new_cache() as ref_seq, dut.new_cache() as dut_seq:
        for start, stop in ((0, 5), *((i, i + 1) for i in range(5, 11))):
            chunk = ids[start:stop]
            want = ref.forward(chunk, ref_seq)
            got = dut.forward(chunk, dut_seq)
            _close(f"decode logits ({config_name}, tokens {start}..{stop - 1})", got, want)


def check_greedy(provider: Any, config_name: str, steps: int = 12) -> int:
    """Compare greedy tokens; returns how many steps were compared before a tie (if any).

    Each step's logits must be within tolerance; the argmax may then differ only
    where the reference's best two logits are closer than twice the provider's
    actual error at that step (a tie it may break either way: stop comparing).
    """
    ref, dut = _reference(config_name, provider), _backend(provider, config_name)
    prompt = _prompt(config_name, 4, 3)
    want_tokens: list[int] = []
    got_tokens: list[int] = []
    with ref.new_cache() as ref_seq, dut.new_cache() as dut_seq:
        want_logits = ref.forward(prompt, ref_seq)
        got_logits = dut.forward(prompt, dut_seq)
        for step in range(steps):
            _close(f"greedy step {step} logits ({config_name})", got_logits, want_logits)
            want_t, got_t = int(np.argmax(want_logits)), int(np.argmax(got_logits))
            want_tokens.append(want_t)
            got_tokens.append(got_t)
            top2 = np.sort(want_logits.astype(np.float64))[-2:]
            error = float(np.abs(got_logits.astype(np.float64) - want_logits).max())
            if top2[1] - top2[0] <= 2 * error:
                return step  # a tie within the provider's error: either token is right
            if want_t != got_t:
                raise ConformanceFailure(
                    f"greedy tokens ({config_name}) differ at step {step}: got {got_tokens}, "
                    f"expected {want_tokens} (reference margin {top2[1] - top2[0]:.4g}, "
                    f"logit error {error:.3g})"
                )
            want_logits = ref.forward(np.array([want_t]), ref_seq)
            got_logits = dut.forward(np.array([got_t]), dut_seq)
    return steps


def check_batch(provider: Any, config_name: str) -> None:
    """``forward_batch`` (one step of several sequences: decode tokens and prompt chunks
    mixed, each at its own position) against the reference's per-sequence forwards."""
    ids = _prompt(config_name, 16, 5)
    ref, dut = _reference(config_name, provider), _backend(provider, config_name)
    # (sequence, tokens) per step: three sequences at different positions
    steps = (
        ((0, ids[0:5]), (2, ids[10:12])),
        ((0, ids[5:6]), (1, ids[6:9]), (2, ids[12:13])),
        ((1, ids[9:10]), (0, ids[13:14]), (2, ids[14:16])),
    )
    ref_seqs = [ref.new_cache() for _ in range(3)]
    dut_seqs = [dut.new_cache() for _ in range(3)]
    try:
        for n, step in enumerate(steps):
            got = dut.forward_batch([(chunk, dut_seqs[j]) for j, chunk in step])
            for row, (j, chunk) in enumerate(step):
                want = ref.forward(chunk, ref_seqs[j])
                _close(f"batched step {n} logits of sequence {j} ({config_name})", got[row], want)
    finally:
        for seq in (*ref_seqs, *dut_seqs):
            seq.close()


def _file_weights(fmt: str, tables: str = "f16") -> Any:
    """The FILE_CONFIG model as a GGUF file in ``fmt`` with ``tables`` embeddings, opened
    (written once per process)."""
    key = f"{fmt}-{tables}"
    if key not in _FILES:
        import tempfile

        from ..config import BitNetConfig
        from ..gguf import open_model_file
        from ..model import ModelWeights, random_model_file

        directory = _FILES.setdefault("dir", tempfile.TemporaryDirectory(prefix="bitnet-kit-"))
        path = random_model_file(
            f"{directory.name}/model-{key}.gguf", BitNetConfig(**FILE_CONFIG), seed=5,
            ternary_type=fmt, tokenizer=None, dense_type=tables,
        )  # fmt: skip
        _FILES[key] = ModelWeights.from_model_file(open_model_file(path))
    return _FILES[key]


def check_file(provider: Any, fmt: str, tables: str = "f16") -> None:
    from ..model import GenericRunner
    from ..providers.reference import ReferenceProvider

    weights = _file_weights(fmt, tables)
    ids = np.random.default_rng(4).integers(0, FILE_CONFIG["vocab_size"], size=9)
    key = f"file-{fmt}-{tables}"
    kv = _kv_config(provider)
    key = f"{key}/{kv.dtype}"
    if key not in _REFERENCE_RUNNERS:
        _REFERENCE_RUNNERS[key] = GenericRunner(
            ReferenceProvider(), weights, progress=False, kv_cache=kv
        )
    want = _REFERENCE_RUNNERS[key].logits(ids)
    _close(
        f"prefill logits of a {fmt} GGUF model with {tables} tables",
        _provider_backend(provider, weights).logits(ids),
        want,
    )


def check_embed(provider: Any, config_name: str) -> None:
    """Embeddings of three inputs (one past the window) in one batch: cosine with the
    reference provider's >= ``EMBED_COSINE`` each."""
    from ..config import BitNetConfig
    from ..model import random_weights
    from ..model.embeddings import embed_ids

    weights = random_weights(BitNetConfig(**EMBED_CONFIGS[config_name]), seed=11)
    kv = _kv_config(provider)
    key = f"embed-{config_name}/{kv.dtype}"
    if key not in _REFERENCE_RUNNERS:
        from ..model import GenericRunner
        from ..providers.reference import ReferenceProvider

        _REFERENCE_RUNNERS[key] = GenericRunner(
            ReferenceProvider(), weights, progress=False, kv_cache=kv
        )
    rng = np.random.default_rng(6)
    vocab = EMBED_CONFIGS[config_name]["vocab_size"]
    inputs = [rng.integers(0, vocab, n).tolist() for n in (9, 3, 6)]
    want = embed_ids(_REFERENCE_RUNNERS[key], inputs)
    got = embed_ids(_provider_backend(provider, weights), inputs)
    cos = np.sum(got * want, axis=1)
    if cos.min() < EMBED_COSINE:
        raise AssertionError(
            f"{config_name} embeddings: cosine with the reference {cos.round(6).tolist()} "
            f"(floor {EMBED_COSINE})"
        )


def model_checks() -> list[ModelCheck]:
    """The whole-model checks (one that skips with the reason when the engine is missing)."""
    if not engine_available():
        return [ModelCheck("engine", _engine_missing)]
    checks = []
    for config_name in MODEL_CONFIGS:
        for kind, fn in (("prefill", check_prefill), ("decode", check_decode),
                         ("greedy", check_greedy), ("batch", check_batch)):  # fmt: skip
            checks.append(
                ModelCheck(f"{kind}-{config_name}", lambda p, f=fn, c=config_name: f(p, c))
            )
    for config_name in EMBED_CONFIGS:
        checks.append(
            ModelCheck(f"embed-{config_name}", lambda p, c=config_name: check_embed(p, c))
        )
    if importlib.util.find_spec("bitnet_core.gguf") is not None:
        for fmt in FILE_FORMATS:
            checks.append(ModelCheck(f"file-{fmt}", lambda p, f=fmt: check_file(p, f)))
        for tables in FILE_TABLES:
            checks.append(
                ModelCheck(f"file-tq2_0-{tables}", lambda p, t=tables: check_file(p, "tq2_0", t))
            )
    return checks


def _engine_missing(provider: Any) -> None:
    raise ModelUnavailable("bitnet_core.model (the engine) is not installed: model checks skipped")
