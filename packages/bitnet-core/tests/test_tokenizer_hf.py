"""Hugging Face tokenizer files -> GGUF tokenizer metadata -> the same token ids."""

from __future__ import annotations

import io
import json

import pytest
from tokenizer_vocabs import CORPUS, TEST_STRINGS, _trained_bytelevel, write_vocab_gguf
from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, processors

from bitnet_core.errors import TokenizerError
from bitnet_core.tokenizer import Tokenizer as BitnetTokenizer
from bitnet_core.tokenizer import tokenizer_metadata_from_hf
from bitnet_core.tokenizer.hf import _HF_REGEX_TO_PRE

LLAMA3_HF = next(r for r, pre in _HF_REGEX_TO_PRE.items() if pre == "llama-bpe")


def _hf_bytelevel(style: str) -> Tokenizer:
    tokens, merges = _trained_bytelevel()
    vocab = {t: i for i, t in enumerate(tokens)}
    tok = Tokenizer(models.BPE(vocab=vocab, merges=[tuple(m.split(" ", 1)) for m in merges]))
    if style == "llama3":
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [
                pre_tokenizers.Split(Regex(LLAMA3_HF), behavior="isolated"),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
            ]
        )
        tok.post_processor = processors.TemplateProcessing(
            single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)]
        )
    else:
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.add_special_tokens(["<|begin_of_text|>", "<|end_of_text|>"])
    tok.add_tokens(["<|user|>"])
    return tok


@pytest.mark.parametrize("style, pre", [("llama3", "llama-bpe"), ("gpt2", "gpt-2")])
def test_bytelevel_tokenizer_json(tmp_path, style, pre):
    hf = _hf_bytelevel(style)
    hf.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps(
            {
                "bos_token": "<|begin_of_text|>",
                "eos_token": {"content": "<|end_of_text|>"},
                "chat_template": "{{ messages[0]['content'] }}",
            }
        )
    )
    meta = tokenizer_metadata_from_hf(tmp_path, vocab_size=len(_trained_bytelevel()[0]) + 5)
    assert meta["tokenizer.ggml.model"] == "gpt2"
    assert meta["tokenizer.ggml.pre"] == pre
    assert meta["tokenizer.ggml.bos_token_id"] == 0 and meta["tokenizer.ggml.eos_token_id"] == 1
    assert meta["tokenizer.ggml.add_bos_token"] is (style == "llama3")
    assert meta["tokenizer.ggml.tokens"][-1].startswith("[PAD")
    assert meta["tokenizer.chat_template"] == "{{ messages[0]['content'] }}"
    ours = BitnetTokenizer.from_metadata(meta)
    for text in TEST_STRINGS:
        assert ours.encode(text, add_bos=None, special=True) == hf.encode(text).ids, text


def test_llama_cpp_reads_converted_vocab(tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    hf = _hf_bytelevel("llama3")
    hf.save(str(tmp_path / "tokenizer.json"))
    meta = tokenizer_metadata_from_hf(tmp_path)
    ref = llama_cpp.Llama(
        str(write_vocab_gguf(tmp_path / "v.gguf", meta)), vocab_only=True, verbose=False
    )
    for text in TEST_STRINGS:
        assert (
            ref.tokenize(text.encode(), add_bos=False, special=True) == hf.encode(text).ids[1:]
        ), text


@pytest.fixture(scope="module")
def sp_dir(tmp_path_factory):
    spm = pytest.importorskip("sentencepiece", reason="sentencepiece is not installed")
    out = io.BytesIO()
    spm.SentencePieceTrainer.train(
        sentence_iterator=iter(CORPUS),
        model_writer=out,
        vocab_size=700,
        model_type="bpe",
        byte_fallback=True,
        character_coverage=0.999,
        normalization_rule_name="identity",  # as LLaMA's tokenizer.model
        remove_extra_whitespaces=False,
        minloglevel=2,
    )
    d = tmp_path_factory.mktemp("sp")
    (d / "tokenizer.model").write_bytes(out.getvalue())
    (d / "tokenizer_config.json").write_text(json.dumps({"add_bos_token": True}))
    return d


def test_sentencepiece_model(sp_dir):
    import sentencepiece as spm

    sp = spm.SentencePieceProcessor(model_file=str(sp_dir / "tokenizer.model"))
    meta = tokenizer_metadata_from_hf(sp_dir)
    assert meta["tokenizer.ggml.model"] == "llama"
    ours = BitnetTokenizer.from_metadata(meta)
    assert (ours.bos_id, ours.eos_id) == (sp.bos_id(), sp.eos_id())
    for text in TEST_STRINGS:
        assert ours.encode(text, add_bos=False) == sp.encode(text), text
        assert ours.decode(sp.encode(text)) == sp.decode(sp.encode(text)), text


def test_sentencepiece_added_tokens_and_padding(sp_dir, tmp_path):
    import shutil

    d = tmp_path / "sp"
    shutil.copytree(sp_dir, d)
    (d / "tokenizer_config.json").write_text(
        json.dumps({"added_tokens_decoder": {"700": {"content": "<pad>", "special": True}}})
    )
    meta = tokenizer_metadata_from_hf(d, vocab_size=704)
    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    assert len(tokens) == 704 and tokens[700] == "<pad>" and types[700] == 3
    assert tokens[703] == "[PAD703]" and types[703] == 5
    ours = BitnetTokenizer.from_metadata(meta)
    assert 700 in ours.encode("a<pad>b", add_bos=False, special=True)
    assert 700 not in ours.encode("a<pad>b", add_bos=False)


def test_sentencepiece_ids_equal_llama_cpp(sp_dir, tmp_path):
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    meta = tokenizer_metadata_from_hf(sp_dir)
    path = write_vocab_gguf(tmp_path / "sp.gguf", meta)
    ref = llama_cpp.Llama(str(path), vocab_only=True, verbose=False)
    ours = BitnetTokenizer.from_metadata(meta)
    for text in TEST_STRINGS:
        assert ours.encode(text) == ref.tokenize(text.encode(), add_bos=True), text


def test_errors(tmp_path):
    with pytest.raises(TokenizerError, match="not a directory"):
        tokenizer_metadata_from_hf(tmp_path / "missing")
    with pytest.raises(TokenizerError, match="no tokenizer.json"):
        tokenizer_metadata_from_hf(tmp_path)
    (tmp_path / "tokenizer.json").write_text("{not json")
    with pytest.raises(TokenizerError, match="cannot read JSON"):
        tokenizer_metadata_from_hf(tmp_path)
    (tmp_path / "tokenizer.json").write_text(json.dumps({"model": {"type": "WordPiece"}}))
    with pytest.raises(TokenizerError, match="WordPiece"):
        tokenizer_metadata_from_hf(tmp_path)
    hf = _hf_bytelevel("gpt2")
    hf.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(TokenizerError, match="vocab_size"):
        tokenizer_metadata_from_hf(tmp_path, vocab_size=10)


def test_unreproducible_tokenizer_refused(tmp_path):
    hf = _hf_bytelevel("gpt2")
    hf.pre_tokenizer = pre_tokenizers.Sequence(
        [
            pre_tokenizers.Split(Regex(r"\p{N}{1,2}"), behavior="isolated"),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False),
        ]
    )
    hf.save(str(tmp_path / "tokenizer.json"))
    with pytest.raises(TokenizerError, match="not supported"):
        tokenizer_metadata_from_hf(tmp_path)


def _hf_llama_style() -> Tokenizer:
    """A LLaMA-2 style tokenizer.json: BPE with byte fallback over ``▁`` pieces."""
    from tokenizers import normalizers, trainers

    trainer_tok = Tokenizer(models.BPE(unk_token="<unk>"))
    trainer_tok.normalizer = normalizers.Sequence(
        [normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")]
    )
    trainer_tok.pre_tokenizer = pre_tokenizers.Metaspace(prepend_scheme="never")
    trainer_tok.train_from_iterator(
        CORPUS, trainers.BpeTrainer(vocab_size=500, special_tokens=["<unk>"], show_progress=False)
    )
    trained = json.loads(trainer_tok.to_str())["model"]
    vocab = {"<unk>": 0, "<s>": 1, "</s>": 2}
    vocab.update({f"<0x{b:02X}>": 3 + b for b in range(256)})
    for piece, _ in sorted(trained["vocab"].items(), key=lambda kv: kv[1]):
        vocab.setdefault(piece, len(vocab))
    merges = [
        tuple(m) if isinstance(m, list) else tuple(m.split(" ", 1)) for m in trained["merges"]
    ]
    tok = Tokenizer(
        models.BPE(vocab=vocab, merges=merges, unk_token="<unk>", byte_fallback=True, fuse_unk=True)
    )
    tok.normalizer = normalizers.Sequence([normalizers.Prepend("▁"), normalizers.Replace(" ", "▁")])
    tok.decoder = decoders.Sequence(
        [
            decoders.Replace("▁", " "),
            decoders.ByteFallback(),
            decoders.Fuse(),
            decoders.Strip(" ", 1, 0),
        ]
    )
    tok.add_special_tokens(["<unk>", "<s>", "</s>"])
    return tok


def test_llama_style_tokenizer_json(tmp_path):
    hf = _hf_llama_style()
    hf.save(str(tmp_path / "tokenizer.json"))
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": "<s>", "eos_token": "</s>", "add_bos_token": True})
    )
    meta = tokenizer_metadata_from_hf(tmp_path)
    assert meta["tokenizer.ggml.model"] == "llama"
    assert meta["tokenizer.ggml.add_space_prefix"] is True
    ours = BitnetTokenizer.from_metadata(meta)
    assert (ours.bos_id, ours.eos_id) == (1, 2)
    for text in TEST_STRINGS:
        assert ours.encode(text, add_bos=False, special=True) == hf.encode(text).ids, text
    llama_cpp = pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    ref = llama_cpp.Llama(
        str(write_vocab_gguf(tmp_path / "v.gguf", meta)), vocab_only=True, verbose=False
    )
    for text in TEST_STRINGS:
        assert ref.tokenize(text.encode(), add_bos=True) == ours.encode(text), text


@pytest.mark.parametrize(
    ("normalizer", "pre", "prefix"),
    [
        ("prepend", None, True),
        ("replace", None, False),  # no Prepend: no space before the text
        ("replace", "always", True),
        ("replace", "first", True),
        ("replace", "never", False),
    ],
)
def test_space_prefix_read_from_normalizer_and_metaspace(tmp_path, normalizer, pre, prefix):
    """``add_space_prefix`` is set by a ``Prepend`` normalizer or a ``Metaspace``
    pre-tokenizer whose ``prepend_scheme`` is not ``never``, and only by them."""
    from tokenizers import normalizers

    hf = _hf_llama_style()
    steps = [normalizers.Replace(" ", "▁")]
    if normalizer == "prepend":
        steps.insert(0, normalizers.Prepend("▁"))
    hf.normalizer = normalizers.Sequence(steps)
    if pre is not None:
        hf.pre_tokenizer = pre_tokenizers.Metaspace(replacement="▁", prepend_scheme=pre)
    hf.save(str(tmp_path / "tokenizer.json"))
    # the flag as read (a Metaspace splitting on "▁" too is not reproduced exactly: not checked)
    meta = tokenizer_metadata_from_hf(tmp_path, verify=False)
    assert meta["tokenizer.ggml.add_space_prefix"] is prefix
