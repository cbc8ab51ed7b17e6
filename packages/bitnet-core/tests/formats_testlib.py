"""Helpers of the formats / GGUF tests: tiny random BitNet models and a minimal vocab."""

from __future__ import annotations

import numpy as np

from bitnet_core.config import (
    NORM_LAYER_TENSORS,
    OUTPUT,
    OUTPUT_NORM,
    TERNARY_LAYER_TENSORS,
    TOKEN_EMBD,
    BitNetConfig,
)
from bitnet_core.gguf import expected_shapes

#: A model llama.cpp accepts: ternary rows multiples of 256 for TQ1_0/TQ2_0.
TINY = BitNetConfig(
    vocab_size=300,
    hidden_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=512,
    context_length=128,
)

#: A small model for text in and out (server, CLI, hub tests): ffn 256, context 128.
TEXT_MODEL = BitNetConfig(
    vocab_size=300,
    hidden_size=256,
    num_layers=2,
    num_heads=4,
    num_kv_heads=2,
    intermediate_size=256,
    context_length=128,
)


def random_tensors(config: BitNetConfig, seed: int = 0) -> dict[str, np.ndarray]:
    """Random float weights for every tensor ``config`` needs (ternary ones not yet ternary)."""
    rng = np.random.default_rng(seed)
    out: dict[str, np.ndarray] = {}
    for name, shape in expected_shapes(config).items():
        if len(shape) == 1:
            out[name] = (1.0 + 0.1 * rng.standard_normal(shape)).astype(np.float32)
        else:
            out[name] = (0.05 * rng.standard_normal(shape)).astype(np.float32)
    return out


def gpt2_vocab(n: int) -> dict[str, object]:
    """A minimal byte-level gpt2 tokenizer: the 256 byte tokens, merges, padding tokens."""
    bs = list(range(ord("!"), ord("~") + 1)) + list(range(0xA1, 0xAD)) + list(range(0xAE, 0x100))
    cs = bs[:]
    k = 0
    for b in range(256):
        if b not in bs:
            bs.append(b)
            cs.append(256 + k)
            k += 1
    byte_tokens = [chr(c) for c in cs]
    merges = ["Ġ t", "h e", "Ġt he"]
    tokens = byte_tokens + ["Ġt", "he", "Ġthe"]
    tokens += [f"<pad{i}>" for i in range(n - len(tokens) - 1)] + ["<|endoftext|>"]
    types = [1] * (n - 1) + [3]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "gpt-2",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": n - 1,
        "tokenizer.ggml.eos_token_id": n - 1,
    }


__all__ = [
    "NORM_LAYER_TENSORS",
    "OUTPUT",
    "OUTPUT_NORM",
    "TERNARY_LAYER_TENSORS",
    "TINY",
    "TOKEN_EMBD",
    "gpt2_vocab",
    "random_tensors",
]


# --- hand-built GGUF bytes (for hostile and sparse files) -----------------------

_FMT = {
    0: "<B",
    1: "<b",
    2: "<H",
    3: "<h",
    4: "<I",
    5: "<i",
    6: "<f",
    7: "<?",
    10: "<Q",
    11: "<q",
    12: "<d",
}
STRING, ARRAY, UINT32, FLOAT32 = 8, 9, 4, 6


def _value(vtype: int, value: object) -> bytes:
    import struct

    if vtype in _FMT:
        return struct.pack(_FMT[vtype], value)
    if vtype == STRING:
        b = value.encode() if isinstance(value, str) else bytes(value)
        return struct.pack("<Q", len(b)) + b
    itype, items = value  # ARRAY: (item type, list)
    return struct.pack("<IQ", itype, len(items)) + b"".join(_value(itype, i) for i in items)


def gguf_blob(
    kvs: list[tuple[str, int, object]],
    tensors: list[tuple[str, tuple[int, ...], int, int]],
    data: bytes = b"",
    *,
    magic: bytes = b"GGUF",
    version: int = 3,
    n_tensors: int | None = None,
    n_kv: int | None = None,
    alignment: int = 32,
) -> bytes:
    """GGUF bytes from parts: ``kvs`` (key, type id, value), ``tensors`` (name, ggml dims, type, offset)."""
    import struct

    out = bytearray(magic + struct.pack("<I", version))
    out += struct.pack(
        "<QQ", len(tensors) if n_tensors is None else n_tensors, len(kvs) if n_kv is None else n_kv
    )
    for key, vt, val in kvs:
        out += _value(STRING, key) + struct.pack("<I", vt) + _value(vt, val)
    for name, dims, ttype, offset in tensors:
        out += _value(STRING, name) + struct.pack("<I", len(dims))
        out += b"".join(struct.pack("<Q", d) for d in dims) + struct.pack("<IQ", ttype, offset)
    out += b"\0" * (-len(out) % alignment)
    return bytes(out) + data


def one_tensor_blob(**kw: object) -> bytes:
    """A valid container: one F32 tensor of 8 values, arch 'test'."""
    kvs = [("general.architecture", STRING, "test")]
    return gguf_blob(kvs, [("t.weight", (4, 2), 0, 0)], bytes(32), **kw)  # type: ignore[arg-type]
