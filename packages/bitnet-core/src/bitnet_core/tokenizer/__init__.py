"""Tokenizers read from GGUF metadata, with llama.cpp's token ids.

``Tokenizer.from_metadata(model_file.metadata)`` builds a byte-level BPE
(``tokenizer.ggml.model = "gpt2"``) or SentencePiece (``"llama"``) tokenizer
on the ``tokenizers`` library; ``StreamDecoder`` turns generated ids into text;
``tokenizer_metadata_from_hf`` turns a Hugging Face tokenizer into those keys.
See docs/TOKENIZER.md.
"""

from .core import Tokenizer
from .hf import tokenizer_metadata_from_hf
from .metadata import TokenType, VocabSpec
from .stream import StreamDecoder

__all__ = ["StreamDecoder", "TokenType", "Tokenizer", "VocabSpec", "tokenizer_metadata_from_hf"]
