"""Random Hugging Face BitNet checkpoints for tests and cross-validation (needs torch + transformers).

``random_hf_checkpoint(dir, ...)`` saves a transformers ``BitNetForCausalLM``
whose BitLinear weights are already ternary times one scale per tensor (so
conversion is exact and the model transformers runs, plain ``nn.Linear``
without a ``quantization_config``, is the model our GGUF describes),
embeddings exact in float16, norms near 1, and a small byte-level BPE
tokenizer trained here. ``packed=True`` stores the BitLinear weights as
transformers' packed ``bitnet`` quantization does (uint8 + ``weight_scale``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np

from ..errors import ConfigError

TERNARY_PROJ = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
_CORPUS = [
    "The quick brown fox jumps over the lazy dog. BitNet b1.58 uses ternary weights.",
    "Numbers 0 1 12 123 1234, unicode café 日本語 🤖, code: def f(x): return x * 2",
] * 10


def _need_torch() -> tuple[Any, Any]:
    try:
        import torch
        import transformers
    except ImportError as exc:  # pragma: no cover - exercised where they are missing
        raise ConfigError(
            "building a transformers BitNet model needs torch and transformers "
            "(bash ci/python-extras.sh)"
        ) from exc
    return torch, transformers


def write_tokenizer(directory: Path, vocab_size: int) -> int:
    """Train a byte-level BPE of at most ``vocab_size`` tokens; write tokenizer files."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    specials = ["<|begin_of_text|>", "<|end_of_text|>"]
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        special_tokens=specials,
        show_progress=False,
    )
    tok.train_from_iterator(_CORPUS, trainer)
    tok.post_processor = processors.TemplateProcessing(
        single="<|begin_of_text|> $A", special_tokens=[("<|begin_of_text|>", 0)]
    )
    tok.save(str(directory / "tokenizer.json"))
    (directory / "tokenizer_config.json").write_text(
        json.dumps({"bos_token": specials[0], "eos_token": specials[1], "add_bos_token": True})
    )
    return tok.get_vocab_size()


def random_hf_checkpoint(
    directory: str | Path,
    *,
    vocab_size: int = 320,
    hidden_size: int = 64,
    num_layers: int = 2,
    num_heads: int = 4,
    num_kv_heads: int = 2,
    intermediate_size: int = 128,
    hidden_act: str = "silu",
    tie_word_embeddings: bool = True,
    rope_theta: float = 10000.0,
    max_position_embeddings: int = 256,
    seed: int = 0,
    dtype: str = "float32",
    packed: bool = False,
    max_shard_size: str | None = None,
) -> Any:
    """Save a random BitNetForCausalLM (+ tokenizer) to ``directory``; return the torch model."""
    torch, transformers = _need_torch()
    directory = Path(directory)
    directory.mkdir(parents=True, exist_ok=True)
    n_tok = write_tokenizer(directory, vocab_size)
    if n_tok > vocab_size:
        raise ConfigError(f"tokenizer has {n_tok} tokens, more than vocab_size {vocab_size}")
    cfg = transformers.BitNetConfig(
        vocab_size=vocab_size,
        hidden_size=hidden_size,
        intermediate_size=intermediate_size,
        num_hidden_layers=num_layers,
        num_attention_heads=num_heads,
        num_key_value_heads=num_kv_heads,
        hidden_act=hidden_act,
        max_position_embeddings=max_position_embeddings,
        rms_norm_eps=1e-5,
        tie_word_embeddings=tie_word_embeddings,
        bos_token_id=0,
        eos_token_id=1,
        rope_parameters={"rope_type": "default", "rope_theta": rope_theta},
    )
    torch.manual_seed(seed)
    model = transformers.BitNetForCausalLM(cfg).eval()
    rng = np.random.default_rng(seed)
    scales: dict[str, float] = {}
    with torch.no_grad():
        for name, p in model.named_parameters():
            rows = p.shape[0]
            if name.endswith("weight") and any(f".{m}." in name for m in TERNARY_PROJ):
                codes = rng.choice(np.array([-1, 0, 1], np.float32), size=tuple(p.shape))
                scale = float(np.float16(rng.uniform(0.5, 1.5) / np.sqrt(p.shape[1])))
                scales[name] = scale
                p.copy_(torch.from_numpy(codes * np.float32(scale)))
            elif p.ndim == 1:  # RMSNorm weights
                p.copy_(torch.from_numpy(rng.uniform(0.8, 1.2, rows).astype(np.float32)))
            else:  # embeddings / head: exact in float16 (the GGUF stores them so)
                w = rng.normal(0, 1.0, tuple(p.shape)).astype(np.float16).astype(np.float32)
                p.copy_(torch.from_numpy(w))
    if tie_word_embeddings:
        model.tie_weights()
    model = model.to(getattr(torch, dtype))
    save_kw: dict[str, Any] = {"safe_serialization": True}
    if max_shard_size:
        save_kw["max_shard_size"] = max_shard_size
    model.save_pretrained(directory, **save_kw)
    if packed:
        _repack(directory, scales)
    return model


def pack_bitnet_weight(codes: np.ndarray) -> np.ndarray:
    """transformers' ``pack_weights``: ternary ``[rows, cols]`` (rows % 4 == 0) to uint8 ``[rows/4, cols]``."""
    rows = codes.shape[0]
    if rows % 4:
        raise ConfigError(f"packing needs a multiple of 4 rows, got {rows}")
    r = rows // 4
    u = (codes.astype(np.int16) + 1).astype(np.uint8)
    return u[:r] | (u[r : 2 * r] << 2) | (u[2 * r : 3 * r] << 4) | (u[3 * r :] << 6)


def _repack(directory: Path, scales: dict[str, float]) -> None:
    """Rewrite the BitLinear weights the way transformers' packed ``bitnet`` quantization stores them."""
    import torch
    from safetensors.torch import load_file, save_file

    for f in sorted(directory.glob("*.safetensors")):
        sd = load_file(str(f))
        out = {}
        for name, t in sd.items():
            if name in scales:
                codes = np.round(t.float().numpy() / scales[name]).astype(np.int8)
                out[name] = torch.from_numpy(pack_bitnet_weight(codes))
                out[name[: -len(".weight")] + ".weight_scale"] = torch.tensor(
                    [1.0 / scales[name]], dtype=t.dtype
                )
            else:
                out[name] = t
        save_file(out, str(f), metadata={"format": "pt"})
    cfg_path = directory / "config.json"
    cfg = json.loads(cfg_path.read_text())
    cfg["quantization_config"] = {
        "quant_method": "bitnet",
        "linear_class": "bitlinear",
        "quantization_mode": "offline",
        "modules_to_not_convert": ["lm_head"],
    }
    cfg_path.write_text(json.dumps(cfg, indent=2))
