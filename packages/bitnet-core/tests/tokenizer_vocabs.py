"""Small real vocabularies for tokenizer tests, trained here with ``tokenizers``.

``gpt2_metadata`` trains a byte-level BPE; ``spm_metadata`` a SentencePiece-style
BPE (``▁`` spaces, ``<0xXX>`` byte fallback, scores). Both return GGUF
``tokenizer.ggml.*`` keys as llama.cpp's converter writes them;
``write_vocab_gguf`` writes a vocab-only ``bitnet`` GGUF that llama.cpp loads.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

CORPUS = [
    "The quick brown fox jumps over the lazy dog. I'm sure they'll say it's fine!",
    "Numbers: 0 1 12 123 1234 12345 3.14159 2026-11-23 1,000,000 and 42nd.",
    "def main():\n    return {'a': [1, 2, 3]}  # comment\n\n\tindented\r\n",
    "Unicode: café naïve Ünïcödé Straße — “quotes” «guillemets» … ½ ² µ",
    "日本語のテキストと中文字符，한국어 텍스트, Ελληνικά, русский текст, עברית, العربية.",
    "Emoji 🤖🚀👍🏽 and symbols $ + < = > ^ ~ | ` @ # % & * ( ) [ ] { } \\ / _",
    "    leading spaces, trailing spaces    \n\n\nmany newlines   and   gaps  ",
    "Hello world! Hello, World? hello-world hello_world HELLO WORLD hellO",
] * 20

#: Strings the tests compare on: unicode, spaces, digits, newlines, specials.
TEST_STRINGS = [
    "",
    " ",
    "  ",
    "\n",
    "Hello world",
    " Hello world",
    "Hello  world  ",
    "hello\n\nworld\n",
    "\t tabs\tand\r\nCRLF",
    "1 12 123 1234 12345 123456789",
    "3.14159, 1,000,000 and 2026-11-23",
    "I'm don't they'll we've she'd IT'S",
    "café naïve Straße Ünïcödé",
    "日本語 中文 한국어 Ελληνικά русский",
    "🤖 emoji 🚀👍🏽 mixed",
    "$ + < = > ^ ~ | ` !!! ??? ... ---",
    "def f(x):\n    return x ** 2  # square\n",
    "   many    spaces   ",
    "unseen: ξψζ ☃ 𝔘𝔫𝔦",
    "<s> and </s> and <|end_of_text|> as plain text",
    "user tok: <|user|>hello<|user|>",
]


def _write_common(writer, n_vocab: int) -> None:
    writer.add_context_length(64)
    writer.add_embedding_length(64)
    writer.add_block_count(1)
    writer.add_feed_forward_length(128)
    writer.add_head_count(4)
    writer.add_head_count_kv(4)
    writer.add_layer_norm_rms_eps(1e-5)
    writer.add_rope_dimension_count(16)
    writer.add_vocab_size(n_vocab)


def write_vocab_gguf(path: Path, meta: dict) -> Path:
    """A vocab-only GGUF of architecture ``bitnet`` with the given tokenizer keys."""
    import gguf

    writer = gguf.GGUFWriter(str(path), "bitnet")
    _write_common(writer, len(meta["tokenizer.ggml.tokens"]))
    writer.add_tokenizer_model(meta["tokenizer.ggml.model"])
    if "tokenizer.ggml.pre" in meta:
        writer.add_tokenizer_pre(meta["tokenizer.ggml.pre"])
    writer.add_token_list(meta["tokenizer.ggml.tokens"])
    writer.add_token_types(meta["tokenizer.ggml.token_type"])
    if "tokenizer.ggml.scores" in meta:
        writer.add_token_scores(meta["tokenizer.ggml.scores"])
    if "tokenizer.ggml.merges" in meta:
        writer.add_token_merges(meta["tokenizer.ggml.merges"])
    for key, add in (
        ("tokenizer.ggml.bos_token_id", writer.add_bos_token_id),
        ("tokenizer.ggml.eos_token_id", writer.add_eos_token_id),
        ("tokenizer.ggml.unknown_token_id", writer.add_unk_token_id),
        ("tokenizer.ggml.add_bos_token", writer.add_add_bos_token),
        ("tokenizer.ggml.add_eos_token", writer.add_add_eos_token),
        ("tokenizer.ggml.add_space_prefix", writer.add_add_space_prefix),
        ("tokenizer.chat_template", writer.add_chat_template),
    ):
        if key in meta:
            add(meta[key])
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path


@cache
def _trained_bytelevel() -> tuple[tuple[str, ...], tuple[str, ...]]:
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=700,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=["<|begin_of_text|>", "<|end_of_text|>", "<|user|>"],
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tuple(t for t, _ in vocab), tuple(merges)


def gpt2_metadata(pre: str | None = "default") -> dict:
    """A trained byte-level BPE vocabulary as GGUF ``gpt2`` tokenizer keys."""
    tokens, merges = _trained_bytelevel()
    types = [1] * len(tokens)
    types[0] = types[1] = 3  # control: begin/end of text
    types[2] = 4  # user-defined: <|user|>
    meta = {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.tokens": list(tokens),
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": list(merges),
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 1,
    }
    if pre is not None:
        meta["tokenizer.ggml.pre"] = pre
    return meta


@cache
def _trained_metaspace() -> tuple[str, ...]:
    tok = Tokenizer(models.BPE(unk_token="<unk>"))
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme="never")
    tok.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=600, special_tokens=["<unk>"], show_progress=False)
    tok.train_from_iterator(CORPUS, trainer)
    vocab = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    return tuple(t for t, _ in vocab if t != "<unk>")


def spm_metadata(*, random_scores: bool = False, seed: int = 0) -> dict:
    """A SentencePiece-style vocabulary as GGUF ``llama`` tokenizer keys.

    Layout as llama's: ``<unk>``, ``<s>``, ``</s>``, the 256 byte tokens, then
    pieces (chars and merges, merges scored by training order; ``random_scores``
    shuffles the scores of the merged pieces, all distinct).
    """
    pieces = _trained_metaspace()
    tokens = ["<unk>", "<s>", "</s>"] + [f"<0x{b:02X}>" for b in range(256)]
    types = [2, 3, 3] + [6] * 256
    scores = [0.0] * len(tokens)
    tokens.append("<|user|>")
    types.append(4)
    scores.append(0.0)
    n_pieces = len(pieces)
    piece_scores = -np.arange(n_pieces, dtype=np.float32)
    if random_scores:
        multi = [i for i, p in enumerate(pieces) if len(p) > 1]
        rng = np.random.default_rng(seed)
        piece_scores[multi] = rng.permutation(piece_scores[multi])
    for p, s in zip(pieces, piece_scores, strict=True):
        if p in tokens:
            continue
        tokens.append(p)
        types.append(1)
        scores.append(float(s))
    return {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.bos_token_id": 1,
        "tokenizer.ggml.eos_token_id": 2,
        "tokenizer.ggml.unknown_token_id": 0,
    }


#: The Llama-3 chat template (the tokenizer of BitNet b1.58 2B-4T): "Hello" is 11 tokens.
LLAMA3_TEMPLATE = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n'"
    "+ message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}"
    "{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}"
    "{% endif %}"
)
LLAMA3_SPECIALS = (
    "<|begin_of_text|>",
    "<|end_of_text|>",
    "<|start_header_id|>",
    "<|end_header_id|>",
    "<|eot_id|>",
)


@cache
def _trained_llama3() -> tuple[tuple[str, ...], tuple[str, ...]]:
    chat_words = ["system\n\nuser\n\nassistant\n\nHello\n\n"] * 50
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(
        vocab_size=800,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=list(LLAMA3_SPECIALS),
        show_progress=False,
    )
    tok.train_from_iterator(CORPUS + chat_words, trainer)
    model = json.loads(tok.to_str())["model"]
    vocab = sorted(model["vocab"].items(), key=lambda kv: kv[1])
    merges = [m if isinstance(m, str) else " ".join(m) for m in model["merges"]]
    return tuple(t for t, _ in vocab), tuple(merges)


def llama3_metadata() -> dict:
    """A Llama-3-like vocabulary (``llama-bpe``, header/eot control tokens, its chat template)."""
    tokens, merges = _trained_llama3()
    types = [1] * len(tokens)
    for i in range(len(LLAMA3_SPECIALS)):
        types[i] = 3  # control
    return {
        "tokenizer.ggml.model": "gpt2",
        "tokenizer.ggml.pre": "llama-bpe",
        "tokenizer.ggml.tokens": list(tokens),
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.merges": list(merges),
        "tokenizer.ggml.bos_token_id": 0,
        "tokenizer.ggml.eos_token_id": 4,
        "tokenizer.ggml.add_bos_token": True,
        "tokenizer.chat_template": LLAMA3_TEMPLATE,
    }
