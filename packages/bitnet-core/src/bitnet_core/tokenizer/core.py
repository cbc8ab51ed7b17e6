"""The tokenizer of a GGUF model: encode like llama.cpp, decode token bytes exactly."""

from __future__ import annotations

import re
import threading
from collections.abc import Iterable, Mapping, Sequence
from functools import cached_property

from tokenizers import Tokenizer as HFTokenizer

from ..errors import TokenizerError
from .build import SPACE, build
from .chat import render_chat, render_chat_parts
from .metadata import TokenType, VocabSpec
from .pretokenize import pre_tokenizer_for
from .stream import StreamDecoder

#: Texts llama.cpp treats as end-of-generation besides the eos/eot ids.
EOG_TEXTS = frozenset(
    {"<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>"}
)


def _byte_decoder() -> dict[str, int]:
    """The inverse of GPT-2's byte-to-unicode table (printable stand-ins for bytes)."""
    printable = (
        list(range(ord("!"), ord("~") + 1))
        + list(range(ord("¡"), ord("¬") + 1))
        + list(range(ord("®"), ord("ÿ") + 1))
    )
    chars = printable[:]
    n = 0
    for b in range(256):
        if b not in printable:
            printable.append(b)
            chars.append(256 + n)
            n += 1
    return {chr(c): b for b, c in zip(printable, chars, strict=True)}


_BYTE_DECODER = _byte_decoder()


class Tokenizer:
    """Encode text to token ids and back, with llama.cpp's ids for the same GGUF file.

    Build it with :meth:`from_metadata` from a GGUF metadata dict
    (``tokenizer.ggml.*`` keys). ``encode`` uses the ``tokenizers`` library;
    ``decode`` joins the exact bytes of each token (see :meth:`token_bytes`).
    """

    def __init__(self, spec: VocabSpec) -> None:
        self.spec = spec
        self._hf: HFTokenizer = build(spec)
        self._lock = threading.Lock()
        default_bos = pre_tokenizer_for(spec.pre).add_bos if spec.model == "gpt2" else True
        self.add_bos_default: bool = default_bos if spec.add_bos is None else spec.add_bos

    @classmethod
    def from_metadata(cls, metadata: Mapping) -> Tokenizer:
        """Build from GGUF metadata; :class:`TokenizerError` when it is missing or malformed."""
        return cls(VocabSpec.from_metadata(metadata))

    # --- properties ----------------------------------------------------------

    @property
    def model(self) -> str:
        """``gpt2`` (byte-level BPE) or ``llama`` (SentencePiece)."""
        return self.spec.model

    @property
    def vocab_size(self) -> int:
        return len(self.spec.tokens)

    @property
    def bos_id(self) -> int | None:
        return self.spec.bos_id

    @property
    def eos_id(self) -> int | None:
        return self.spec.eos_id

    @property
    def chat_template(self) -> str | None:
        return self.spec.chat_template

    @cached_property
    def eog_ids(self) -> frozenset[int]:
        """Ids that end generation: eos, eot and llama.cpp's end-of-turn texts."""
        ids = {i for i in (self.spec.eos_id, self.spec.eot_id) if i is not None}
        for i, (text, kind) in enumerate(zip(self.spec.tokens, self.spec.token_types, strict=True)):
            if text in EOG_TEXTS and kind in (TokenType.CONTROL, TokenType.USER_DEFINED):
                ids.add(i)
        return frozenset(ids)

    def token_text(self, token_id: int) -> str:
        """The token's text as stored in the file."""
        self._check_id(token_id)
        return self.spec.tokens[token_id]

    def is_special(self, token_id: int) -> bool:
        """Control and unknown tokens (hidden by ``decode(skip_special=True)``)."""
        self._check_id(token_id)
        return self.spec.token_types[token_id] in (TokenType.CONTROL, TokenType.UNKNOWN)

    # --- encoding ------------------------------------------------------------

    def encode(self, text: str, add_bos: bool | None = None, *, special: bool = False) -> list[int]:
        """Token ids of ``text``.

        ``add_bos=None`` adds what the file asks for (``tokenizer.ggml.add_bos_token``,
        ``add_eos_token``, else llama.cpp's default for the vocabulary type), as
        llama.cpp's ``add_special=true``; ``True`` adds the BOS token, ``False`` nothing.
        ``special=True`` turns the texts of control tokens (``<s>``, ``<|eot_id|>``)
        into their ids, as llama.cpp's ``parse_special``; user-defined tokens are
        always parsed.
        """
        if not isinstance(text, str):
            raise TokenizerError(f"encode: expected a str, got {type(text).__name__}")
        want_bos = self.add_bos_default if add_bos is None else bool(add_bos)
        want_eos = add_bos is None and self.spec.add_eos
        ids: list[int] = []
        if want_bos:
            if self.bos_id is None:
                raise TokenizerError(
                    "encode: a BOS token was asked for but the vocabulary has none"
                )
            ids.append(self.bos_id)
        if text:
            with self._lock:
                self._hf.encode_special_tokens = not special
                try:
                    ids.extend(self._hf.encode(text, add_special_tokens=False).ids)
                except Exception as exc:  # tokenizers raises its own exception types
                    raise TokenizerError(f"encode failed: {exc}") from exc
        if want_eos:
            if self.eos_id is None:
                raise TokenizerError(
                    "encode: an EOS token was asked for but the vocabulary has none"
                )
            ids.append(self.eos_id)
        return ids

    # --- decoding ------------------------------------------------------------

    def _check_id(self, token_id: int) -> None:
        if not isinstance(token_id, int) or not 0 <= token_id < self.vocab_size:
            raise TokenizerError(
                f"token id {token_id!r} is outside the vocabulary (0..{self.vocab_size - 1})"
            )

    def token_bytes(self, token_id: int, *, special: bool = False) -> bytes:
        """The bytes one token stands for (llama.cpp's ``token_to_piece``).

        Control and unknown tokens give ``b""`` unless ``special``; user-defined
        tokens their text; byte tokens (``<0x0A>``) their byte; other tokens
        their text with ``▁`` as space (llama) or GPT-2's byte mapping undone (gpt2).
        """
        self._check_id(token_id)
        text = self.spec.tokens[token_id]
        kind = self.spec.token_types[token_id]
        if kind in (TokenType.CONTROL, TokenType.UNKNOWN):
            return text.encode("utf-8") if special else b""
        if kind == TokenType.USER_DEFINED:
            return text.encode("utf-8")
        if self.spec.model == "llama":
            if kind == TokenType.BYTE and len(text) == 6 and text.startswith("<0x"):
                try:
                    return bytes([int(text[3:5], 16)])
                except ValueError:
                    pass
            return text.replace(SPACE, " ").encode("utf-8")
        return b"".join(
            bytes([_BYTE_DECODER[c]]) if c in _BYTE_DECODER else c.encode("utf-8") for c in text
        )

    @property
    def strips_prefix_space(self) -> bool:
        """Whether ``encode`` prepends a space that ``decode`` removes again (SentencePiece)."""
        return self.spec.model == "llama" and self.spec.add_space_prefix

    def decode(self, ids: Iterable[int], skip_special: bool = True) -> str:
        """Text of ``ids``; the space ``encode`` prepended (SentencePiece) is removed.

        Invalid UTF-8 (a multi-byte character cut off) becomes U+FFFD.
        """
        data = b"".join(self.token_bytes(int(i), special=not skip_special) for i in ids)
        text = data.decode("utf-8", errors="replace")
        if self.strips_prefix_space and text.startswith(" "):
            text = text[1:]
        return text

    def stream(
        self, *, skip_special: bool = True, strip_prefix_space: bool = False
    ) -> StreamDecoder:
        """A :class:`StreamDecoder` over this tokenizer."""
        return StreamDecoder(self, skip_special=skip_special, strip_prefix_space=strip_prefix_space)

    # --- chat ----------------------------------------------------------------

    @cached_property
    def _control_text(self) -> re.Pattern | None:
        """Matches the texts of control tokens, longest first (what ``special=True`` parses)."""
        texts = {
            t
            for t, kind in zip(self.spec.tokens, self.spec.token_types, strict=True)
            if t and kind in (TokenType.CONTROL, TokenType.UNKNOWN)
        }
        if not texts:
            return None
        return re.compile("|".join(re.escape(t) for t in sorted(texts, key=len, reverse=True)))

    def chat_ids(
        self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True
    ) -> list[int]:
        """Token ids of the chat prompt for ``messages``: the one way a chat is encoded.

        The template's own special-token texts (``<|eot_id|>``) become their ids;
        the text of every message stays plain text whatever it contains. The
        text between special tokens is encoded in one run, template and message
        text together, so the ids equal ``encode(prompt, special=True)`` whenever
        no message contains a special token's text. BOS comes once: from the
        template when it renders ``bos_token``, else added when the file asks
        for it (``tokenizer.ggml.add_bos_token``); no EOS is added.
        """
        bos = self.spec.tokens[self.bos_id] if self.bos_id is not None else ""
        eos = self.spec.tokens[self.eos_id] if self.eos_id is not None else ""
        parts = render_chat_parts(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos,
            eos_token=eos,
        )
        ids: list[int] = []
        run: list[str] = []

        def flush() -> None:
            if run:
                ids.extend(self.encode("".join(run), add_bos=False))
                run.clear()

        for text, is_message in parts:
            if is_message or self._control_text is None:
                run.append(text)
                continue
            pos = 0
            for hit in self._control_text.finditer(text):
                run.append(text[pos : hit.start()])
                flush()
                ids.append(self._hf.token_to_id(hit[0]))
                pos = hit.end()
            run.append(text[pos:])
        flush()
        if self.add_bos_default and self.bos_id is not None and ids[:1] != [self.bos_id]:
            ids.insert(0, self.bos_id)
        return ids

    def apply_chat_template(
        self, messages: Sequence[Mapping[str, str]], *, add_generation_prompt: bool = True
    ) -> str:
        """The prompt for ``messages`` (``[{"role": ..., "content": ...}]``).

        Rendered with the file's ``tokenizer.chat_template`` (Jinja2, sandboxed)
        when present, else with the plain fallback of :func:`render_chat`.
        """
        bos = self.spec.tokens[self.bos_id] if self.bos_id is not None else ""
        eos = self.spec.tokens[self.eos_id] if self.eos_id is not None else ""
        return render_chat(
            self.chat_template,
            messages,
            add_generation_prompt=add_generation_prompt,
            bos_token=bos,
            eos_token=eos,
        )
