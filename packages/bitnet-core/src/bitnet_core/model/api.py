"""The Python API: ``bitnet_core.load(path, device="auto") -> Model``.

::

    model = bitnet_core.load("model.gguf", device="auto")
    print(model.selection)                      # requested=auto detected=[...] selected=...
    model.generate("Hello", max_tokens=32, temperature=0)
    for piece in model.stream("Hello", seed=1): print(piece, end="")
    model.logits([1, 2, 3])                     # float32 [3, vocab]
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Iterator, Sequence
from importlib import resources
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ModelFileError, RequestError, TokenizerError
from ..hal.selection import Selection, StartupSummary, prefetch, select
from ..sdk.kv_cache import KVCacheConfig
from ..sdk.load_stages import measuring, stage
from ..sdk.runner import GenericRunner
from ..sdk.trace import LaunchTrace
from ..sdk.weights import ModelWeights
from .generation import GenerationStats, Session, generate_steps, generate_tokens
from .sampling import SamplingParams

log = logging.getLogger("bitnet")


def demo_model_path() -> Path | None:
    """The bundled demo model (``bitnet_core/data/*.gguf``), or None when this install has none."""
    try:
        data = resources.files("bitnet_core") / "data"
        found = sorted(
            (e for e in data.iterdir() if e.name.endswith(".gguf")), key=lambda e: e.name
        )
    except (FileNotFoundError, NotADirectoryError, ModuleNotFoundError, OSError):
        return None
    return Path(str(found[0])) if found else None


def resolve_model_path(path: str | os.PathLike | None, *, progress: bool | None = None) -> Path:
    """``path`` checked to exist, a hub model's cached file, or the demo model when None.

    A local path that exists always wins; ``ORG/NAME[@REV][:FILE]`` and
    ``hf://ORG/NAME[@REV]/FILE`` are fetched into huggingface_hub's cache
    (``bitnet_core.hub``).
    """
    if path is None:
        demo = demo_model_path()
        if demo is None:
            raise ModelFileError(
                "no --model given and this install has no bundled demo model "
                "(bitnet_core/data/*.gguf); pass --model PATH.gguf"
            )
        return demo
    from ..hub.names import parse_model_ref

    ref = parse_model_ref(os.fspath(path))
    if ref is not None:
        from ..hub.fetch import fetch_model

        return fetch_model(ref, progress=progress)
    p = Path(path)
    if not p.exists():
        raise ModelFileError("no such file", p)
    if not p.is_file():
        raise ModelFileError("not a file", p)
    return p


def _tokenizer_from_metadata(metadata: dict) -> Any | None:
    if not any(str(k).startswith("tokenizer.") for k in metadata):
        return None
    from ..tokenizer import Tokenizer

    return Tokenizer.from_metadata(metadata)


def _make_runner(provider: Any, weights: ModelWeights, **opts: Any) -> Any:
    """The provider's own runner when it offers one (``make_runner``), else the generic one."""
    make = getattr(provider, "make_runner", None)
    if make is not None:
        runner = make(weights, **opts)
        if runner is not None:
            return runner
    return GenericRunner(provider, weights, **opts)


class Model:
    """A loaded model on one device: logits, generation, streaming."""

    def __init__(
        self,
        runner: Any,
        *,
        selection: Selection | None = None,
        tokenizer: Any | None = None,
        weights: ModelWeights | None = None,
        path: Path | None = None,
        load_s: float = 0.0,
        load_stages: dict[str, float] | None = None,
    ) -> None:
        self.runner = runner
        self.config = runner.config
        self._selection = selection
        self.tokenizer = tokenizer
        self.weights = weights
        self.path = path
        self.load_s = load_s
        #: seconds of load_s by stage (``model.load_stages``): read, device, repack, upload, head
        self.load_stages = dict(load_stages or {})
        self.last_stats: GenerationStats | None = None
        self.last_params: SamplingParams | None = None
        trace = getattr(self.provider, "trace", None)
        #: where the provider's trace stood when this model was made (its receipt's start)
        self.trace_mark = trace.mark() if isinstance(trace, LaunchTrace) else None
        #: the host ops a partial provider had run by then (``hal.placement``)
        self.host_calls_mark = dict(getattr(self.provider, "host_calls", {}))

    @classmethod
    def from_weights(
        cls,
        weights: ModelWeights,
        device: str | None = "auto",
        *,
        tokenizer: Any | None = None,
        quantize_activations: bool = True,
        kv_cache: KVCacheConfig | None = None,
        progress: bool | None = False,
    ) -> Model:
        """Run in-memory weights (tests, random models) on the selected device."""
        t0 = time.perf_counter()
        selection = select(device)
        runner = _make_runner(
            selection.provider,
            weights,
            quantize_activations=quantize_activations,
            kv_cache=kv_cache,
            progress=progress,
        )
        if tokenizer is None:
            tokenizer = _tokenizer_from_metadata(weights.metadata)
        return cls(
            runner,
            selection=selection,
            tokenizer=tokenizer,
            weights=weights,
            load_s=time.perf_counter() - t0,
        )

    # --- what it runs on ---------------------------------------------------------
    @property
    def selection(self) -> StartupSummary | None:
        """The startup summary: ``requested=X detected=[...] selected=Y``."""
        return self._selection.summary if self._selection else None

    @property
    def provider(self) -> Any:
        return self.runner.provider

    @property
    def availability(self) -> Any:
        """The probe's answer for this model's device: the one that selected it, else (a
        model made from a runner directly, so asked for) the provider's explicit probe."""
        if self._selection is not None and self._selection.availability is not None:
            return self._selection.availability
        probe = getattr(self.provider, "probe", None)
        return probe(explicit=True) if callable(probe) else None

    @property
    def quantize_activations(self) -> bool:
        return bool(getattr(self.runner, "quantize_activations", True))

    # --- numbers -------------------------------------------------------------------
    def logits(self, token_ids: Sequence[int] | np.ndarray) -> np.ndarray:
        """float32 logits ``[T, vocab]`` of every position of ``token_ids`` (fresh context)."""
        with self.runner.new_cache() as seq:
            return self.runner.forward(np.asarray(token_ids), seq, all_logits=True)

    # --- text -----------------------------------------------------------------------
    @property
    def is_embedding(self) -> bool:
        """Whether this is an embedding model (``embed``; no text generation)."""
        return bool(self.config.is_embedding)

    def embed_inputs(
        self, inputs: str | Sequence[str] | Sequence[Sequence[int]]
    ) -> list[list[int]]:
        """Token-id lists of ``inputs``: a text, texts (each encoded as the file asks:
        Qwen3's end-of-sequence token appended), or token-id lists as they are."""
        if isinstance(inputs, str):
            inputs = [inputs]
        if isinstance(inputs, np.ndarray):
            inputs = [inputs] if inputs.ndim == 1 else list(inputs)
        out: list[list[int]] = []
        for item in inputs:
            if isinstance(item, str):
                out.append(self.encode(item))
            else:
                ids = np.asarray(item).reshape(-1)
                if ids.size and not np.issubdtype(ids.dtype, np.integer):
                    raise RequestError(
                        f"embed: expected texts or token-id lists, got {item!r}"[:200]
                    )
                out.append([int(t) for t in ids])
        return out

    def embed(
        self,
        inputs: str | Sequence[str] | Sequence[Sequence[int]],
        *,
        dimensions: int | None = None,
        normalize: bool = True,
    ) -> np.ndarray:
        """Embeddings ``[n, dimensions or hidden]`` (float32, L2-normalized) of texts or
        token-id lists, all in one batch (``model/embeddings.py``)."""
        from .embeddings import embed_ids

        return embed_ids(
            self.runner, self.embed_inputs(inputs), dimensions=dimensions, normalized=normalize
        )

    def _need_tokenizer(self) -> Any:
        if self.tokenizer is None:
            raise TokenizerError(
                "this model file has no tokenizer: pass token ids (generate_ids) instead of text"
            )
        return self.tokenizer

    def encode(self, text: str, add_bos: bool | None = None, special: bool = False) -> list[int]:
        """Token ids; ``add_bos=None`` does what the file asks (``tokenizer.ggml.add_bos_token``)."""
        tok = self._need_tokenizer()
        if special:
            return list(tok.encode(text, add_bos=add_bos, special=True))
        return list(tok.encode(text, add_bos=add_bos))

    def decode(self, ids: Sequence[int]) -> str:
        return self._need_tokenizer().decode(list(ids))

    @property
    def eos_ids(self) -> list[int]:
        """Ids that end generation: the tokenizer's end-of-generation set (eos, eot...)."""
        tok = self.tokenizer
        if tok is None:
            return []
        eog = getattr(tok, "eog_ids", None)
        if eog is not None:
            return sorted(int(i) for i in eog)
        eos = getattr(tok, "eos_id", None)
        return [] if eos is None or eos < 0 else [int(eos)]

    def _prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            return self.encode(prompt)
        if isinstance(prompt, np.ndarray):
            prompt = prompt.reshape(-1).tolist()
        return [int(t) for t in prompt]

    def session(self) -> Session:
        """A KV-cache sequence kept across calls (``stream(..., session=s)``): a chat
        re-sends the whole conversation and only the new suffix is computed."""
        return Session(self.runner)

    def stream_ids(
        self,
        prompt: str | Sequence[int],
        max_tokens: int = 128,
        *,
        session: Session | None = None,
        **sampling: Any,
    ) -> Iterator[int]:
        """Sampled token ids one by one (no text; works without a tokenizer)."""
        params = SamplingParams.from_kwargs(max_tokens=max_tokens, **sampling)
        ids = self._prompt_ids(prompt)
        self.last_stats, self.last_params = GenerationStats(), params
        return generate_tokens(
            self.runner, ids, params, eos_ids=self.eos_ids, stats=self.last_stats, session=session
        )

    def generate_ids(
        self, prompt: str | Sequence[int], max_tokens: int = 128, **sampling: Any
    ) -> list[int]:
        return list(self.stream_ids(prompt, max_tokens, **sampling))

    def stream(
        self,
        prompt: str | Sequence[int],
        max_tokens: int = 128,
        *,
        session: Session | None = None,
        **sampling: Any,
    ) -> Iterator[str]:
        """Text pieces as they are generated (stop strings cut the text and end generation)."""
        tok = self._need_tokenizer()
        params = SamplingParams.from_kwargs(max_tokens=max_tokens, **sampling)
        ids = self._prompt_ids(prompt)
        self.last_stats, self.last_params = GenerationStats(), params
        steps = generate_steps(
            self.runner,
            ids,
            params,
            eos_ids=self.eos_ids,
            stats=self.last_stats,
            session=session,
            decode=tok.decode,
        )
        return _pieces(steps)

    def generate(self, prompt: str | Sequence[int], max_tokens: int = 128, **sampling: Any) -> str:
        """The generated text (without the prompt)."""
        return "".join(self.stream(prompt, max_tokens, **sampling))

    # --- chat ------------------------------------------------------------------------
    def chat_prompt(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> str:
        """``messages`` rendered by the tokenizer (the file's chat template, or its plain fallback)."""
        return self._need_tokenizer().apply_chat_template(
            messages, add_generation_prompt=add_generation_prompt
        )

    def chat_ids(self, messages: Sequence[dict], add_generation_prompt: bool = True) -> list[int]:
        """Token ids of the chat prompt (``Tokenizer.chat_ids``): the template's special
        tokens become their ids, the messages' text stays plain text, BOS once."""
        return list(
            self._need_tokenizer().chat_ids(messages, add_generation_prompt=add_generation_prompt)
        )

    # --- receipts ---------------------------------------------------------------------
    def receipt(self, stats: GenerationStats | None = None, **extra: Any) -> dict:
        """A receipt of the last generation (``bitnet_core.model.receipt``)."""
        from .receipt import build_receipt

        return build_receipt(self, stats or self.last_stats or GenerationStats(), **extra)

    def __repr__(self) -> str:
        where = self.selection or getattr(self.provider, "name", "?")
        return f"<Model {self.path or '<memory>'} {self.config.num_layers} layers on {where}>"


def load(
    path: str | os.PathLike | None = None,
    device: str | None = "auto",
    *,
    quantize_activations: bool = True,
    kv_cache: KVCacheConfig | None = None,
    progress: bool | None = None,
) -> Model:
    """Load a GGUF model onto the selected device (None: the bundled demo model).

    ``path`` is a GGUF file or a hub model name, ``ORG/NAME[@REV][:FILE]`` or
    ``hf://ORG/NAME[@REV]/FILE.gguf`` (downloaded once into huggingface_hub's
    cache; a checkpoint repo is converted there on first use).

    The device (``--device``, ``BITNET_DEVICE``, auto) is resolved before any
    weight is read, and an impossible request is the error raised even when
    the file is bad too (the GGUF header and tokenizer are read while auto's
    GPU probes run in a child process).
    """
    t0 = time.perf_counter()

    def read() -> tuple[Path, ModelWeights, Any]:
        from ..gguf import open_model_file  # the formats package owns GGUF reading

        model_path = resolve_model_path(path, progress=progress)
        weights = ModelWeights.from_model_file(open_model_file(model_path))
        return model_path, weights, _tokenizer_from_metadata(weights.metadata)

    with measuring() as stages:
        # auto/gpu probe GPU runtimes in a child process (hal/probe_child.py): the
        # file's header and tokenizer are read meanwhile; a device error is still
        # the one raised
        with stage("read"):
            prefetch(device)
            try:
                model_path, weights, tokenizer = read()
            except Exception:
                select(device)  # raises the device error, if any
                raise
        with stage("device"):
            selection = select(device)
        runner = _make_runner(
            selection.provider,
            weights,
            quantize_activations=quantize_activations,
            kv_cache=kv_cache,
            progress=progress,
        )
    return Model(
        runner,
        selection=selection,
        tokenizer=tokenizer,
        weights=weights,
        path=model_path,
        load_stages=stages,
        load_s=time.perf_counter() - t0,
    )


def _pieces(steps: Iterator) -> Iterator[str]:
    """The non-empty text pieces of ``generate_steps``' steps."""
    try:
        for out in steps:
            if out.piece:
                yield out.piece
    finally:
        steps.close()
