"""Write the committed seed corpora under ``tools/fuzz/corpus`` (run after changing a target).

``python tools/fuzz/make_seeds.py`` rewrites them all. GGUF seeds are small
valid model files of every ternary type ``write_gguf`` writes, with tokenizer
metadata (byte-level GPT-2 or SentencePiece) and a chat template; the others
are inputs in each target's own encoding (see the target's docstring).
"""

from __future__ import annotations

import shutil
import struct
import sys
import zlib
from pathlib import Path

import numpy as np

from bitnet_core.config import BitNetConfig
from bitnet_core.gguf import write_gguf
from bitnet_core.gguf.metadata import expected_shapes
from bitnet_core.gguf.writer import WRITABLE_TERNARY_TYPES
from bitnet_core.model.random import BYTE_CHAT_TEMPLATE, byte_tokenizer_metadata

HERE = Path(__file__).resolve().parent
CORPUS = HERE / "corpus"
SEED_NAME = "fuzz-seed-model:" + "x" * 240  # harness.SEED_NAME

#: Chat templates of the kinds model files carry (Llama 3, ChatML, the byte model's).
CHAT_TEMPLATES = {
    "llama3": (
        "{{ bos_token }}{% for m in messages %}<|start_header_id|>{{ m['role'] }}"
        "<|end_header_id|>\n\n{{ m['content'] | trim }}<|eot_id|>{% endfor %}"
        "{% if add_generation_prompt %}<|start_header_id|>assistant<|end_header_id|>\n\n"
        "{% endif %}"
    ),
    "chatml": (
        "{% for m in messages %}{{ '<|im_start|>' + m['role'] + '\n' + m['content'] "
        "+ '<|im_end|>' + '\n' }}{% endfor %}{% if add_generation_prompt %}"
        "{{ '<|im_start|>assistant\n' }}{% endif %}"
    ),
    "byte": BYTE_CHAT_TEMPLATE,
    "strict": (
        "{% if messages[0]['role'] != 'system' %}{{ raise_exception('system first') }}"
        "{% endif %}{% for m in messages %}{% if loop.index0 % 2 == 0 %}User: {% else %}"
        "Assistant: {% endif %}{{ m['content'] }}\n{% endfor %}"
    ),
}


def spm_tokenizer_metadata() -> dict:
    """A SentencePiece (``llama``) vocabulary: specials, the 256 byte tokens, a few pieces."""
    pieces = ["\u2581", "\u2581t", "he", "\u2581the", "in", "er", "an", "\u2581a"]
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)] + pieces
    types = [2, 3, 3] + [6] * 256 + [1] * len(pieces)
    scores = [0.0] * 259 + [-float(i) for i in range(len(pieces))]
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.add_space_prefix": True,
        "tokenizer.chat_template": CHAT_TEMPLATES["llama3"],
    }


#: Row lengths the block types need (every other type takes any).
WIDE = {"tq2_0": 256, "tq1_0": 256, "qk256": 256, "i2_s": 128}


def small_bpe_metadata(template: str) -> dict:
    """A 16-token byte-level BPE vocabulary (not every byte: text falls back to nothing)."""
    tokens = ["<|bos|>", "<|eos|>", "<|user|>", "a", "b", "c", "d", "e", "Ġ"]
    tokens += ["ab", "abc", "Ġa", "de", "Ġab", "cd", "Ġabc"]
    merges = ["a b", "ab c", "Ġ a", "d e", "Ġ ab", "c d", "Ġ abc"]
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": [3, 3, 4] + [1] * (len(tokens) - 3),
        "tokenizer.ggml.merges": merges,
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": template,
    }


def _config(ternary_type: str, vocab: int) -> BitNetConfig:
    hidden = WIDE.get(ternary_type, 8)
    return BitNetConfig(
        vocab_size=vocab,
        hidden_size=hidden,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=hidden,
        context_length=16,
    )


def gguf_seeds(out: Path) -> None:
    for i, ternary_type in enumerate(WRITABLE_TERNARY_TYPES):
        template = list(CHAT_TEMPLATES.values())[i % len(CHAT_TEMPLATES)]
        if ternary_type in WIDE:  # small vocabularies keep the embedding small
            tok = small_bpe_metadata(template)
        elif i % 2 == 0:
            tok = {**byte_tokenizer_metadata(265), "tokenizer.chat_template": template}
        else:
            tok = spm_tokenizer_metadata()
        vocab = len(tok["tokenizer.ggml.tokens"])
        cfg = _config(ternary_type, vocab)
        rng = np.random.default_rng(zlib.crc32(ternary_type.encode()))
        tensors = {
            n: rng.standard_normal(s).astype(np.float32) for n, s in expected_shapes(cfg).items()
        }
        dense = "bf16" if ternary_type == "bf16" else "f16"
        write_gguf(
            out / f"{ternary_type}.gguf",
            cfg,
            tensors,
            ternary_type=ternary_type,
            tokenizer_metadata=tok,
            extra_metadata={"general.name": SEED_NAME},
            dense_type=dense,
            overwrite=True,
        )
    rng = np.random.default_rng(zlib.crc32(b"codec"))
    for i in range(8):  # codec inputs: a zero byte, then FuzzedDataProvider bytes
        (out / f"codec-{i}").write_bytes(b"\x00" + bytes([i]) + rng.bytes(300))


def _esc(b: bytes) -> str:
    return "".join(chr(c) if 32 <= c < 127 and c not in b'"\\' else f"\\x{c:02x}" for c in b)


#: Keys the seeds lack that the reader knows.
_MORE_KEYS = (
    "general.alignment",
    "general.file_type",
    "bitnet.attention.key_length",
    "bitnet.tie_word_embeddings",
    "llama.vocab_size",
    "llama.block_count",
    "llama.embedding_length",
    "tokenizer.ggml.unknown_token_id",
    "tokenizer.ggml.padding_token_id",
    "tokenizer.ggml.eot_token_id",
    "tokenizer.ggml.add_eos_token",
    "tokenizer.ggml.add_space_prefix",
)


def gguf_dictionary(seeds: Path) -> str:
    """The libFuzzer dictionary of fuzz_gguf.py: magic, version, value and tensor type ids,
    every metadata key of the seeds (also with its uint64 length prefix), tensor names."""
    from bitnet_core.gguf import GGUFFile
    from bitnet_core.gguf.gguf_constants import GGMLQuantizationType

    keys, tensors = set(_MORE_KEYS), set()
    for p in seeds.glob("*.gguf"):
        with GGUFFile(p) as f:
            keys |= set(f.metadata)
            tensors |= set(f.tensor_names)
    lines = [
        "# written by tools/fuzz/make_seeds.py",
        'magic="GGUF"',
        'version3="\\x03\\x00\\x00\\x00"',
    ]
    lines += [f'value_type{i}="{_esc(struct.pack("<I", i))}"' for i in range(13)]
    types = [int(t) for t in GGMLQuantizationType] + [36, 37, 38, 39]
    lines += [f'tensor_type{t}="{_esc(struct.pack("<I", t))}"' for t in sorted(set(types))]
    for i, k in enumerate(sorted(keys)):
        b = k.encode()
        lines += [f'key{i}="{_esc(b)}"', f'key{i}_len="{_esc(struct.pack("<Q", len(b)) + b)}"']
    lines += [f'tensor{i}="{_esc(k.encode())}"' for i, k in enumerate(sorted(tensors))]
    for v in (0, 1, 2, 3, 255, 256, 65535, 2**31 - 1, 2**32 - 1, 2**63 - 1, 2**64 - 1):
        lines.append(f'u64_{v}="{_esc(struct.pack("<Q", v))}"')
    return "\n".join(lines) + "\n"


def provider_seeds(out: Path, texts: list[str]) -> None:
    """Inputs of a FuzzedDataProvider target: random bytes, and bytes then a text."""
    rng = np.random.default_rng(zlib.crc32(out.name.encode()))
    for i in range(6):
        (out / f"random-{i}").write_bytes(rng.bytes(64 + 64 * i))
    for i, text in enumerate(texts):
        (out / f"text-{i}").write_bytes(rng.bytes(48) + text.encode())


def convert_seeds(out: Path) -> None:
    """config.json + separator + model.safetensors of tiny BitNetForCausalLM checkpoints."""
    import json
    import tempfile

    sys.path.insert(0, str(HERE.parents[1] / "packages/bitnet-core/tests"))
    from hf_layouts import bitnet_tensors

    from bitnet_core.convert.safetensors import write_safetensors

    sep = b"\n--model.safetensors--\n"  # fuzz_convert.SEP
    for i, (bf16, tie, act) in enumerate([(False, True, "relu2"), (True, False, "silu")]):
        dims = {"vocab_size": 16, "hidden_size": 8, "intermediate_size": 16, "num_layers": 1}
        tensors = bitnet_tensors(**dims, num_heads=2, num_kv_heads=1, tie=tie, seed=i)
        with tempfile.TemporaryDirectory() as d:
            path = Path(d) / "model.safetensors"
            write_safetensors(path, tensors, bf16=tuple(tensors) if bf16 else ())
            weights = path.read_bytes()
        config = {
            "architectures": ["BitNetForCausalLM"],
            "model_type": "bitnet",
            "vocab_size": 16,
            "hidden_size": 8,
            "intermediate_size": 16,
            "num_hidden_layers": 1,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "hidden_act": act,
            "max_position_embeddings": 64,
            "rms_norm_eps": 1e-5,
            "rope_theta": 500000.0,
            "tie_word_embeddings": tie,
            "bos_token_id": 0,
            "eos_token_id": 1,
            "torch_dtype": "bfloat16" if bf16 else "float32",
        }
        (out / f"bitnet-{i}").write_bytes(json.dumps(config).encode() + sep + weights)


SCHEMAS = [
    {"type": "object"},
    {
        "type": "object",
        "properties": {"name": {"type": "string", "maxLength": 8}, "age": {"type": "integer"}},
        "required": ["name"],
        "additionalProperties": False,
    },
    {"type": "array", "items": {"enum": ["a", "b", 3, None]}, "minItems": 1, "maxItems": 3},
    {"anyOf": [{"type": "number", "minimum": 0}, {"type": "boolean"}]},
    {"type": "string", "pattern": "^[a-z]{2,4}$"},
    {
        "$defs": {"n": {"type": "object", "properties": {"next": {"$ref": "#/$defs/n"}}}},
        "$ref": "#/$defs/n",
    },
    {
        "type": "object",
        "properties": {"x": {"const": 1}},
        "x-guidance": {"whitespace_flexible": True},
    },
    {"oneOf": [{"type": "integer", "multipleOf": 3}, {"type": "null"}], "format": "date-time"},
]


def schema_seeds(out: Path) -> None:
    import json

    for i, schema in enumerate(SCHEMAS):
        (out / f"schema-{i}.json").write_text(json.dumps(schema))


API_BODIES = [
    (0, {"model": "demo", "prompt": "Hello", "max_tokens": 2}),
    (0, {"prompt": ["a", "b"], "max_tokens": 1, "temperature": 0.7, "top_p": 0.9, "seed": 1}),
    (0, {"prompt": "x", "max_tokens": 2, "stream": True, "logprobs": 2, "stop": ["\n"]}),
    (1, {"messages": [{"role": "user", "content": "Hi"}], "max_tokens": 2}),
    (
        1,
        {
            "messages": [
                {"role": "system", "content": "Be brief"},
                {"role": "user", "content": "?"},
            ],
            "max_tokens": 2,
            "stream": True,
            "n": 2,
        },
    ),
    (
        1,
        {
            "messages": [{"role": "user", "content": "json"}],
            "max_tokens": 2,
            "response_format": {
                "type": "json_schema",
                "json_schema": {"schema": {"type": "object"}},
            },
        },
    ),
    (1, {"messages": [], "max_tokens": 0}),
]


def api_seeds(out: Path) -> None:
    import json

    for i, (route, body) in enumerate(API_BODIES):
        (out / f"body-{i}").write_bytes(bytes([route]) + json.dumps(body).encode())


SAMPLE_TEXTS = [
    "Hello world, the answer is 42.",
    " leading space and  two spaces\n\ttab",
    "abcde abc ab <|bos|> <|user|> <|eos|>",
    "na\u00efve caf\u00e9 \u65e5\u672c\u8a9e \U0001f600 \u00a0\u200b",
    "{{ messages }} {% if x %}<|im_start|>",
]


def main() -> None:
    targets = {
        "gguf": gguf_seeds,
        "tokenizer": lambda out: provider_seeds(out, SAMPLE_TEXTS),
        "chat": lambda out: provider_seeds(out, SAMPLE_TEXTS),
        "convert": convert_seeds,
        "schema": schema_seeds,
        "api": api_seeds,
    }
    only = sys.argv[1:] or list(targets)
    for name in only:
        out = CORPUS / name
        shutil.rmtree(out, ignore_errors=True)
        out.mkdir(parents=True)
        targets[name](out)
        sizes = sorted(p.stat().st_size for p in out.iterdir())
        if name == "gguf":
            (HERE / "gguf.dict").write_text(gguf_dictionary(out))
        print(f"{name}: {len(sizes)} seeds, {sum(sizes)} bytes, largest {sizes[-1]}")


if __name__ == "__main__":
    main()
