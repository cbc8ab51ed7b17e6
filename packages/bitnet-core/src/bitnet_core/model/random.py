"""Random BitNet models of any ``BitNetConfig``, in memory or as a GGUF file, for tests and benches.

Weights are ternary codes drawn uniformly from {-1, 0, +1} with one scale per
tensor chosen so activations keep unit scale through the stack (``1 /
sqrt(2/3 * fan_in)``, the residual projections further divided by
``sqrt(2 * layers)``), rounded to float16 so every file format stores them
exactly. Embeddings are float16, uniform with a standard deviation near
``1/sqrt(hidden)`` (small against the layers' outputs, so a tied head does
not just repeat the input token), norms ``1 + N(0,
0.1)`` (float16-exact float32), the output norm three times that, so logits
have a standard deviation of about 3, which keeps sampling interesting. Ternary tensors are generated
lazily from the seed, one at a time, when a provider or the GGUF writer
unpacks them, so a 700M-parameter model costs little memory.

``random_model_file`` needs ``bitnet_core.gguf.write_gguf``; by default it
also writes a tiny byte-level GPT-2 tokenizer (``byte_tokenizer_metadata``)
so text goes in and out.
"""

from __future__ import annotations

import math
import os
from pathlib import Path
from typing import Any

import numpy as np

from .. import config as names
from ..config import BitNetConfig
from ..errors import ConfigError
from ..hal.weights import TernaryWeight
from ..sdk.weights import LAYER_TERNARY, ModelWeights, expected_shapes


def _f16_exact(x: np.ndarray | float) -> np.ndarray:
    return np.asarray(x, dtype=np.float32).astype(np.float16).astype(np.float32)


class RandomTernaryCodec:
    """Unpacks a ternary tensor from its seed: uniform codes, one scale (deterministic)."""

    name = "random"

    def __init__(self, seed: int, scale: float) -> None:
        self.seed = seed
        self.scale = float(scale)

    def unpack(self, raw: np.ndarray, rows: int, cols: int) -> tuple[np.ndarray, np.ndarray]:
        rng = np.random.default_rng(self.seed)
        codes = rng.integers(-1, 2, size=(rows, cols), dtype=np.int8)
        return codes, np.full(rows, self.scale, dtype=np.float32)


def random_ternary(name: str, rows: int, cols: int, seed: int, scale: float) -> TernaryWeight:
    """A lazily generated random ternary weight (format ``"random"``)."""
    codec = RandomTernaryCodec(seed, float(_f16_exact(scale)))
    return TernaryWeight(name, rows, cols, "random", np.array([seed], dtype=np.int64), codec)


def _tensor_seed(seed: int, index: int) -> int:
    return int(np.random.SeedSequence([seed, index]).generate_state(1)[0])


def _uniform_f16(rng: np.random.Generator, shape: tuple[int, int], std: float) -> np.ndarray:
    """float16 values ``k * 2**-e`` (|k| < 2048, exact in float16), uniform, std within 2x of ``std``.

    Uniform integers are an order of magnitude faster than normals for a
    vocabulary-sized table, and embeddings need no Gaussian tails.
    """
    step = 2.0 ** round(math.log2(std * math.sqrt(3.0) / 2047.0))
    k = rng.integers(-2047, 2048, size=shape, dtype=np.int16)
    return (k.astype(np.float32) * np.float32(step)).astype(np.float16)


def random_weights(config: BitNetConfig, seed: int = 0) -> ModelWeights:
    """A random model of ``config`` in memory (ternary tensors generated on first use)."""
    if not isinstance(seed, int) or seed < 0:
        raise ConfigError(f"random model: seed must be an integer >= 0, got {seed!r}")
    rng = np.random.default_rng(seed)
    h, L = config.hidden_size, config.num_layers
    ternary: dict[str, TernaryWeight] = {}
    dense: dict[str, np.ndarray] = {}
    shapes = expected_shapes(config)
    index = 0
    residual = {"o", "down"}
    for i in range(L):
        for key, pattern in LAYER_TERNARY.items():
            name = pattern.format(i=i)
            rows, cols = shapes[name]
            scale = 1.0 / math.sqrt(2.0 / 3.0 * cols)
            if key in residual:
                scale /= math.sqrt(2.0 * L)
            index += 1
            ternary[name] = random_ternary(name, rows, cols, _tensor_seed(seed, index), scale)
        for pattern in config.layer_norm_tensors():  # (no sub-norms in the llama graph)
            name = pattern.format(i=i)
            dense[name] = _f16_exact(1.0 + 0.1 * rng.standard_normal(shapes[name][0]))
    dense[names.TOKEN_EMBD] = _uniform_f16(rng, (config.vocab_size, h), 1.0 / math.sqrt(h))
    if not config.tied_embeddings:
        dense[names.OUTPUT] = _uniform_f16(rng, (config.vocab_size, h), 1.0 / math.sqrt(h))
    dense[names.OUTPUT_NORM] = _f16_exact(3.0 * (1.0 + 0.1 * rng.standard_normal(h)))
    return ModelWeights(config, ternary, dense, {}, f"<random seed={seed}>")


# --- a tiny byte-level tokenizer, so random models speak text ---------------------


def _bytes_to_unicode() -> dict[int, str]:
    """GPT-2's reversible byte -> printable character map."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    n = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + n)
            n += 1
    return dict(zip(bs, (chr(c) for c in cs), strict=True))


_MERGES = [("Ġ", "t"), ("h", "e"), ("Ġt", "he"), ("i", "n"), ("e", "r"), ("a", "n"), ("Ġ", "a")]

#: A chat template in the Jinja dialect of Hugging Face/llama.cpp files.
BYTE_CHAT_TEMPLATE = (
    "{% for m in messages %}<|{{ m['role'] }}|>{{ m['content'] }}\n{% endfor %}"
    "{% if add_generation_prompt %}<|assistant|>{% endif %}"
)


_SYLLABLES = [c + v for c in "bdfgklmnprstvz" for v in "aeiou"]


def _filler_word(i: int) -> str:
    """A unique pronounceable word token (``Ġ`` is the byte-level space): random text reads as words."""
    parts = []
    while True:
        parts.append(_SYLLABLES[i % len(_SYLLABLES)])
        i //= len(_SYLLABLES)
        if i == 0:
            break
    return "Ġ" + "".join(parts) + ("n" if len(parts) == 1 else "")


def byte_tokenizer_metadata(vocab_size: int) -> dict[str, Any]:
    """GGUF ``tokenizer.*`` metadata of a byte-level GPT-2 BPE vocabulary of ``vocab_size`` tokens.

    Ids 0-255 are the bytes, then a few merges, ``<|bos|>``, ``<|eos|>``,
    and made-up words (`` bakan``, `` dabe``...) up to ``vocab_size`` (at
    least 265), so a random model's output reads as words.
    """
    byte_tokens = list(_bytes_to_unicode().values())
    merged = [a + b for a, b in _MERGES]
    specials = ["<|bos|>", "<|eos|>"]
    base = byte_tokens + merged + specials
    if vocab_size < len(base):
        raise ConfigError(f"byte tokenizer needs vocab_size >= {len(base)}, got {vocab_size}")
    tokens = base + [_filler_word(i) for i in range(vocab_size - len(base))]
    types = [1] * (len(byte_tokens) + len(merged)) + [3, 3] + [1] * (vocab_size - len(base))
    bos = len(byte_tokens) + len(merged)
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "default",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": [f"{a} {b}" for a, b in _MERGES],
        "tokenizer.ggml.bos_token_id": bos,
        "tokenizer.ggml.eos_token_id": bos + 1,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": BYTE_CHAT_TEMPLATE,
    }


def random_model_file(
    path: str | os.PathLike,
    config: BitNetConfig,
    seed: int = 0,
    *,
    ternary_type: str = "tq2_0",
    tokenizer: str | dict | None = "bytes",
    overwrite: bool = False,
    dense_type: str = "f16",
) -> Path:
    """Write a random model of ``config`` as GGUF (``write_gguf``) and return its path.

    ``tokenizer``: ``"bytes"`` writes :func:`byte_tokenizer_metadata` (when the
    vocabulary is large enough, else none), a dict is written as given, None
    writes no tokenizer. TQ2_0/TQ1_0 need ``hidden_size`` and
    ``intermediate_size`` to be multiples of 256 (their block size).
    ``dense_type`` (``f16``, ``bf16``, ``f32``) is the embedding/output tables' type.
    """
    from ..gguf import write_gguf  # the formats package owns GGUF writing

    weights = random_weights(config, seed)
    if tokenizer == "bytes":
        try:
            tok_meta = byte_tokenizer_metadata(config.vocab_size)
        except ConfigError:
            tok_meta = None
    elif tokenizer is None or isinstance(tokenizer, dict):
        tok_meta = tokenizer
    else:
        raise ConfigError(
            f"random_model_file: tokenizer must be 'bytes', a dict or None, got {tokenizer!r}"
        )
    tensors: dict[str, Any] = {**weights.dense, **weights.ternary}
    write_gguf(
        path,
        config,
        tensors,
        ternary_type=ternary_type,
        tokenizer_metadata=tok_meta,
        overwrite=overwrite,
        dense_type=dense_type,
    )
    return Path(path)
