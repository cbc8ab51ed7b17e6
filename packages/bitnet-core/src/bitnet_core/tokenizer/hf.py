"""Hugging Face tokenizer files to GGUF tokenizer metadata (for ``bitnet convert``).

Reads a checkpoint directory as transformers saves it:

- ``tokenizer.model`` (SentencePiece, needs the ``sentencepiece`` package):
  pieces, scores and types as llama.cpp's converter writes them (``llama``);
- else ``tokenizer.json``: a byte-level BPE (``gpt2``, with the ``pre`` value
  recognised from its pre-tokenizer regex) or a SentencePiece-style BPE with
  byte fallback (``llama``, scores from the merge ranks);
- ``tokenizer_config.json`` / ``special_tokens_map.json`` / ``config.json`` for
  the BOS/EOS tokens and ``add_bos_token``; ``chat_template.jinja`` or the
  config's ``chat_template``.

The result is checked: a :class:`~bitnet_core.tokenizer.Tokenizer` built from it
must encode a set of check strings to the same ids as the Hugging Face
tokenizer itself, otherwise :class:`TokenizerError` says so.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from ..errors import TokenizerError
from .metadata import TokenType

#: Check strings: spaces, digits, punctuation, contractions, several scripts.
CHECK_STRINGS = (
    "Hello world",
    " leading and trailing spaces  ",
    "new\nlines\n\n\ttabs\r\n",
    "Digits 1 12 123 1234 12345 3.14 1,000",
    "I'm sure they'll say it's fine, don't you?",
    "café naïve Straße 日本語 한국어 Ελληνικά 🤖🚀",
    "$+<=>^~|` !!! ... ---",
)

# Hugging Face pre-tokenizer regexes (tokenizer.json) -> llama.cpp's `pre` value.
_HF_REGEX_TO_PRE = {
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "llama-bpe",
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+": "qwen2",
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+": "gpt-2",
}


def _read_json(path: Path) -> dict:
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise TokenizerError(f"{path}: cannot read JSON: {exc}") from exc
    if not isinstance(data, dict):
        raise TokenizerError(f"{path}: expected a JSON object")
    return data


def _token_content(value: Any) -> str | None:
    if isinstance(value, dict):
        value = value.get("content")
    return value if isinstance(value, str) else None


def _chat_template(directory: Path, tok_config: dict) -> str | None:
    jinja = directory / "chat_template.jinja"
    if jinja.is_file():
        return jinja.read_text(encoding="utf-8")
    tmpl = tok_config.get("chat_template")
    if isinstance(tmpl, list):  # [{"name": ..., "template": ...}]
        named = {t.get("name"): t.get("template") for t in tmpl if isinstance(t, dict)}
        tmpl = named.get("default") or next(iter(named.values()), None)
    return tmpl if isinstance(tmpl, str) else None


def _walk(node: Any):
    """Every dict inside a tokenizer.json component (Sequence members included)."""
    if isinstance(node, dict):
        yield node
        for value in node.values():
            yield from _walk(value)
    elif isinstance(node, list):
        for item in node:
            yield from _walk(item)


def _detect_pre(pre_tokenizer: Any) -> str:
    for node in _walk(pre_tokenizer):
        if node.get("type") == "Split":
            pattern = node.get("pattern", {})
            regex = pattern.get("Regex") if isinstance(pattern, dict) else None
            if regex in _HF_REGEX_TO_PRE:
                return _HF_REGEX_TO_PRE[regex]
            raise TokenizerError(f"tokenizer.json: pre-tokenizer regex {regex!r} is not supported")
    for node in _walk(pre_tokenizer):
        if node.get("type") == "ByteLevel" and node.get("use_regex", True):
            return "gpt-2"
    raise TokenizerError("tokenizer.json: cannot recognise the byte-level pre-tokenizer")


def _pad(tokens: list[str], types: list[int], scores: list[float], vocab_size: int | None):
    if vocab_size is None:
        return
    if vocab_size < len(tokens):
        raise TokenizerError(
            f"the tokenizer has {len(tokens)} tokens but the model's vocab_size is {vocab_size}"
        )
    for i in range(len(tokens), vocab_size):
        tokens.append(f"[PAD{i}]")
        types.append(int(TokenType.UNUSED))
        scores.append(-1000.0)


def _from_tokenizer_json(data: dict) -> tuple[dict, dict[str, int]]:
    model = data.get("model") or {}
    if model.get("type") != "BPE":
        raise TokenizerError(
            f"tokenizer.json: model type {model.get('type')!r} is not supported (BPE only)"
        )
    vocab: dict[str, int] = dict(model.get("vocab") or {})
    added = [a for a in data.get("added_tokens") or [] if isinstance(a, dict)]
    for a in added:
        vocab.setdefault(a["content"], int(a["id"]))
    n = max(vocab.values()) + 1 if vocab else 0
    tokens = [f"[PAD{i}]" for i in range(n)]
    types = [int(TokenType.UNUSED)] * n
    for text, i in vocab.items():
        tokens[i] = text
        types[i] = int(TokenType.NORMAL)
    for a in added:
        types[int(a["id"])] = int(TokenType.CONTROL if a.get("special") else TokenType.USER_DEFINED)
    merges = [m if isinstance(m, str) else " ".join(m) for m in model.get("merges") or []]
    byte_level = any(n.get("type") == "ByteLevel" for n in _walk(data.get("pre_tokenizer")))
    if byte_level:
        meta = {
            "tokenizer.ggml.model": "gpt2",
            "tokenizer.ggml.pre": _detect_pre(data.get("pre_tokenizer")),
            "tokenizer.ggml.merges": merges,
        }
        scores = None
    elif model.get("byte_fallback"):
        # SentencePiece-style BPE: rank the merged tokens by the merge that makes them.
        scores = [-1e9] * n
        for rank, m in enumerate(merges):
            a, b = m.split(" ", 1)
            i = vocab.get(a + b)
            if i is not None and scores[i] == -1e9:
                scores[i] = -float(rank)
        for i, text in enumerate(tokens):
            if len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
                types[i] = int(TokenType.BYTE)
        unk = model.get("unk_token")
        if unk in vocab:
            types[vocab[unk]] = int(TokenType.UNKNOWN)
        prefix = any(
            n.get("type") == "Prepend"
            or (n.get("type") == "Metaspace" and n.get("prepend_scheme", "always") != "never")
            for n in _walk([data.get("normalizer"), data.get("pre_tokenizer")])
        )
        meta = {"tokenizer.ggml.model": "llama", "tokenizer.ggml.add_space_prefix": prefix}
    else:
        raise TokenizerError("tokenizer.json: a BPE that is neither byte-level nor byte-fallback")
    meta["tokenizer.ggml.tokens"] = tokens
    meta["tokenizer.ggml.token_type"] = types
    if scores is not None:
        meta["tokenizer.ggml.scores"] = scores
    return meta, vocab


def _from_sentencepiece(path: Path, added: list[dict]) -> tuple[dict, dict[str, int]]:
    import sentencepiece as spm

    try:
        sp = spm.SentencePieceProcessor(model_file=str(path))
    except Exception as exc:
        raise TokenizerError(f"{path}: cannot load the SentencePiece model: {exc}") from exc
    tokens, scores, types = [], [], []
    for i in range(sp.vocab_size()):
        tokens.append(sp.id_to_piece(i))
        scores.append(float(sp.get_score(i)))
        if sp.is_unknown(i):
            kind = TokenType.UNKNOWN
        elif sp.is_control(i):
            kind = TokenType.CONTROL
        elif sp.is_unused(i):
            kind = TokenType.UNUSED
        elif sp.is_byte(i):
            kind = TokenType.BYTE
        else:
            kind = TokenType.NORMAL
        types.append(int(kind))
    vocab = {t: i for i, t in enumerate(tokens)}
    for a in sorted(added, key=lambda a: int(a["id"])):
        i = int(a["id"])
        if i < len(tokens):
            continue
        if i != len(tokens):
            raise TokenizerError(f"added token {a['content']!r} has id {i}, expected {len(tokens)}")
        tokens.append(a["content"])
        scores.append(-1000.0)
        types.append(int(TokenType.CONTROL if a.get("special") else TokenType.USER_DEFINED))
        vocab[a["content"]] = i
    meta = {
        "tokenizer.ggml.model": "llama",
        "tokenizer.ggml.tokens": tokens,
        "tokenizer.ggml.scores": scores,
        "tokenizer.ggml.token_type": types,
        "tokenizer.ggml.add_space_prefix": _sp_add_dummy_prefix(path),
    }
    for key, value in (
        ("tokenizer.ggml.bos_token_id", sp.bos_id()),
        ("tokenizer.ggml.eos_token_id", sp.eos_id()),
        ("tokenizer.ggml.unknown_token_id", sp.unk_id()),
    ):
        if value >= 0:
            meta[key] = int(value)
    return meta, vocab


def _sp_normalizer(path: Path):
    """The model's normalizer spec, or None without protobuf."""
    try:
        from sentencepiece import sentencepiece_model_pb2 as pb2
    except Exception:
        return None
    proto = pb2.ModelProto()
    proto.ParseFromString(path.read_bytes())
    return proto.normalizer_spec


def _sp_add_dummy_prefix(path: Path) -> bool:
    spec = _sp_normalizer(path)
    return True if spec is None else bool(spec.add_dummy_prefix)  # SentencePiece's default


def _added_tokens(directory: Path, data: dict, tok_config: dict) -> list[dict]:
    """Added tokens ``{"id", "content", "special"}`` from tokenizer.json, else the
    config's ``added_tokens_decoder``, else ``added_tokens.json``."""
    added = [a for a in data.get("added_tokens") or [] if isinstance(a, dict)]
    if added:
        return added
    decoder = tok_config.get("added_tokens_decoder")
    if isinstance(decoder, dict):
        return [
            {"id": int(i), "content": a["content"], "special": bool(a.get("special"))}
            for i, a in decoder.items()
            if isinstance(a, dict) and isinstance(a.get("content"), str)
        ]
    extra = _read_json(directory / "added_tokens.json")
    return [{"id": int(i), "content": t, "special": False} for t, i in extra.items()]


def _have_sentencepiece() -> bool:
    try:
        import sentencepiece  # noqa: F401
    except ImportError:
        return False
    return True


def tokenizer_metadata_from_hf(
    directory: str | Path, *, vocab_size: int | None = None, verify: bool = True
) -> dict:
    """GGUF ``tokenizer.*`` metadata from a Hugging Face checkpoint directory.

    ``vocab_size`` (the model's embedding rows) pads the vocabulary with unused
    ``[PADn]`` tokens, as llama.cpp's converter does. ``verify`` compares our
    encoding with the Hugging Face tokenizer's on :data:`CHECK_STRINGS`.
    """
    directory = Path(directory)
    if not directory.is_dir():
        raise TokenizerError(f"{directory}: not a directory")
    tok_json = directory / "tokenizer.json"
    sp_model = directory / "tokenizer.model"
    tok_config = _read_json(directory / "tokenizer_config.json")
    special_map = _read_json(directory / "special_tokens_map.json")
    model_config = _read_json(directory / "config.json")
    data = _read_json(tok_json)

    if sp_model.is_file() and _have_sentencepiece():
        meta, vocab = _from_sentencepiece(sp_model, _added_tokens(directory, data, tok_config))
    elif data:
        meta, vocab = _from_tokenizer_json(data)
    elif sp_model.is_file():
        raise TokenizerError(
            f"{directory}: only tokenizer.model is present and the sentencepiece package "
            "is not installed (pip install sentencepiece)"
        )
    else:
        raise TokenizerError(f"{directory}: no tokenizer.json or tokenizer.model")

    for name, key in (("bos", "bos_token_id"), ("eos", "eos_token_id")):
        text = _token_content(tok_config.get(f"{name}_token")) or _token_content(
            special_map.get(f"{name}_token")
        )
        if text is not None and text in vocab:
            meta[f"tokenizer.ggml.{key}"] = vocab[text]
        elif f"tokenizer.ggml.{key}" not in meta and isinstance(model_config.get(key), int):
            meta[f"tokenizer.ggml.{key}"] = model_config[key]
    for flag in ("add_bos_token", "add_eos_token"):
        if isinstance(tok_config.get(flag), bool):
            meta[f"tokenizer.ggml.{flag}"] = tok_config[flag]
    if data and "tokenizer.ggml.add_bos_token" not in meta:
        meta.update(_special_flags_from_post_processor(tok_json, meta))
    template = _chat_template(directory, tok_config)
    if template:
        meta["tokenizer.chat_template"] = template

    tokens, types = meta["tokenizer.ggml.tokens"], meta["tokenizer.ggml.token_type"]
    scores = meta.setdefault("tokenizer.ggml.scores", [0.0] * len(tokens))
    _pad(tokens, types, scores, vocab_size)
    if meta["tokenizer.ggml.model"] == "gpt2":
        del meta["tokenizer.ggml.scores"]
    if verify:
        reference = _reference_encoder(directory, data, meta)
        if reference is not None:
            _verify(directory, meta, reference)
    return meta


def _special_flags_from_post_processor(tok_json: Path, meta: dict) -> dict:
    """add_bos/add_eos as the tokenizer's post-processor applies them."""
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_file(str(tok_json))
    plain = hf.encode("a", add_special_tokens=False).ids
    full = hf.encode("a", add_special_tokens=True).ids
    bos, eos = meta.get("tokenizer.ggml.bos_token_id"), meta.get("tokenizer.ggml.eos_token_id")
    extra = len(full) > len(plain)
    return {
        "tokenizer.ggml.add_bos_token": bool(extra and bos is not None and full[0] == bos),
        "tokenizer.ggml.add_eos_token": bool(extra and eos is not None and full[-1] == eos),
    }


def _reference_encoder(directory: Path, data: dict, meta: dict):
    """The source's own encoder: SentencePiece when it was the source, else tokenizers.

    None for a SentencePiece model that normalizes text (NFKC, collapsing
    spaces): llama.cpp does not, so ids legitimately differ from SentencePiece's.
    """
    if meta["tokenizer.ggml.model"] == "llama" and (directory / "tokenizer.model").is_file():
        import sentencepiece as spm

        spec = _sp_normalizer(directory / "tokenizer.model")
        if spec is None or spec.name != "identity" or spec.remove_extra_whitespaces:
            return None
        sp = spm.SentencePieceProcessor(model_file=str(directory / "tokenizer.model"))
        return lambda text: sp.encode(text)
    from tokenizers import Tokenizer as HFTokenizer

    hf = HFTokenizer.from_str(json.dumps(data))
    return lambda text: hf.encode(text, add_special_tokens=False).ids


def _verify(directory: Path, meta: dict, reference) -> None:
    from .core import Tokenizer

    ours = Tokenizer.from_metadata(meta)
    for text in CHECK_STRINGS:
        want = list(reference(text))
        got = ours.encode(text, add_bos=False)
        if got != want:
            raise TokenizerError(
                f"{directory}: the converted tokenizer does not reproduce the source tokenizer "
                f"on {text!r} ({got[:12]} vs {want[:12]}); this tokenizer is not supported"
            )
