"""Convert a Hugging Face BitNet checkpoint directory to a GGUF file."""

from __future__ import annotations

import logging
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .. import config as c
from ..errors import ModelFileError, UnsupportedModelError
from ..formats import ternarize_rows
from ..hal.weights import TernaryWeight
from ..tokenizer import tokenizer_metadata_from_hf
from . import hf_qwen3_gemma3 as qk
from .fallback import plan_fallbacks, summarize
from .hf_config import HFModelInfo, read_hf_config
from .names import gguf_name, hf_layer_names
from .packed import bitnet_scale, unpack_bitnet_weight
from .safetensors import Checkpoint
from .types import CONVERT_TYPES

_IGNORED_SUFFIXES = ("rotary_emb.inv_freq",)
log = logging.getLogger("bitnet.convert")


def _progress(total: int, enabled: bool | None, desc: str) -> Any:
    if enabled is None:
        enabled = sys.stderr.isatty()
    from tqdm import tqdm

    return tqdm(total=total, desc=desc, unit="tensor", disable=not enabled, leave=False)


def _gguf_name(name: str, info: HFModelInfo) -> str | None:
    if info.arch in qk.MODEL_TYPES.values():
        return qk.gguf_name(name, info.arch)
    return gguf_name(name)


def _check_names(ckpt: Checkpoint, info: HFModelInfo, src: Path) -> None:
    unknown = []
    for name in ckpt:
        if _gguf_name(name, info) is not None or name.endswith(_IGNORED_SUFFIXES):
            continue
        if info.config.is_embedding and name == "lm_head.weight":
            continue  # an embedding model has no head
        if info.has_weight_scale and name.endswith(".weight_scale"):
            continue
        unknown.append(name)
    if unknown:
        raise UnsupportedModelError(
            f"tensors this converter does not know: {', '.join(sorted(unknown)[:5])}"
            + (" ..." if len(unknown) > 5 else ""),
            src,
        )


def _weight_scale(ckpt: Checkpoint, module: str) -> float:
    """The one positive ``weight_scale`` of ``module``."""
    scale_name = module + ".weight_scale"
    if scale_name not in ckpt:
        raise UnsupportedModelError(f"{scale_name} is missing from the quantized checkpoint")
    return 1.0 / bitnet_scale(ckpt.get(scale_name), scale_name)  # checked, as stored


def _ternary(ckpt: Checkpoint, info: HFModelInfo, hf: str, rows: int) -> TernaryWeight:
    module = hf[: -len(".weight")]
    quantized = not any(module.endswith(m) for m in info.not_converted)
    w = ckpt.get(hf)
    if quantized and info.linear == "bitlinear":  # packed codes; output / weight_scale
        codes = unpack_bitnet_weight(w, rows, hf)
        return TernaryWeight.from_codes(codes, 1.0 / _weight_scale(ckpt, module), hf)
    if quantized and info.linear == "autobitlinear-offline":  # codes; output * weight_scale
        ws = _weight_scale(ckpt, module)
        if w.dtype == np.uint8 and w.shape[0] * 4 == rows:  # packed as transformers packs
            return TernaryWeight.from_codes(unpack_bitnet_weight(w, rows, hf), ws, hf)
        w = np.asarray(w, dtype=np.float32) * np.float32(ws)
    # Floats (autobitlinear online: latent weights). Already ternary (one magnitude):
    # exact; else absmean over the tensor, the rule of transformers' WeightQuant and
    # llama.cpp's converter (round(W / mean|W|).clamp(-1, 1) * mean|W|).
    codes, scales = ternarize_rows(np.asarray(w, dtype=np.float32), per_row=False)
    return TernaryWeight.from_codes(codes, scales, hf)


def llama_rope_permutation(rows: int, heads: int) -> np.ndarray:
    """Row order that turns q/k of NEOX rope (pairs ``i, i + d/2``, transformers) into the
    adjacent pairs of llama.cpp's ``llama`` graph: its converter's ``LlamaModel.permute``
    (``reshape(heads, 2, d/2, ...).swapaxes(1, 2)``)."""
    d = rows // heads
    return np.arange(rows).reshape(heads, 2, d // 2).swapaxes(1, 2).reshape(rows)


def _permute_for_llama_rope(w: TernaryWeight, gguf: str, cfg: Any) -> TernaryWeight:
    """q (``heads``) and k (``kv_heads``) rows in llama.cpp's order; other weights as they are."""
    i = gguf.split(".")[1]
    heads = {c.ATTN_Q.format(i=i): cfg.num_heads, c.ATTN_K.format(i=i): cfg.num_kv_heads}
    if gguf not in heads:
        return w
    codes, scales = w.unpack()
    order = llama_rope_permutation(w.rows, heads[gguf])
    return TernaryWeight.from_codes(codes[order], scales[order], w.name)


def load_tensors(src: Path, info: HFModelInfo, *, progress: bool | None = None) -> dict[str, Any]:
    """GGUF name -> float array (embeddings, norms) or TernaryWeight (BitLinear layers)."""
    cfg = info.config
    ckpt = Checkpoint(src)
    _check_names(ckpt, info, src)
    qk_arch = info.arch in qk.MODEL_TYPES.values()
    bare = qk_arch and "model.embed_tokens.weight" not in ckpt  # a Qwen3Model/Gemma3TextModel
    plan: list[tuple[str, str, bool]] = [
        (c.TOKEN_EMBD, "embed_tokens.weight" if bare else "model.embed_tokens.weight", False),
        (c.OUTPUT_NORM, "norm.weight" if bare else "model.norm.weight", False),
    ]
    if not cfg.tied_embeddings and not cfg.is_embedding:
        plan.append((c.OUTPUT, "lm_head.weight", False))
    ternary = set(c.TERNARY_LAYER_TENSORS)
    for i in range(cfg.num_layers):
        for tmpl in c.TERNARY_LAYER_TENSORS + cfg.layer_norm_tensors():
            aliases = qk.hf_names(i, tmpl, info.arch) if qk_arch else hf_layer_names(i, tmpl)
            hf = next((a for a in aliases if a in ckpt), aliases[0])
            plan.append((tmpl.format(i=i), hf, tmpl in ternary))
    missing = [hf for _, hf, _ in plan if hf not in ckpt]
    if missing:
        raise UnsupportedModelError(
            f"the checkpoint lacks {len(missing)} tensor(s) the config needs, e.g. {missing[0]}",
            src,
        )
    from ..gguf.metadata import expected_shapes  # the shapes the engine loads

    shapes = expected_shapes(cfg)
    tensors: dict[str, Any] = {}
    with _progress(len(plan), progress, "convert") as bar:
        for gguf, hf, is_ternary in plan:
            want = shapes[gguf]
            if is_ternary:
                tensors[gguf] = _ternary(ckpt, info, hf, want[0])
                got = (tensors[gguf].rows, tensors[gguf].cols)
                if cfg.arch == c.ARCH_LLAMA and tuple(got) == tuple(want):
                    tensors[gguf] = _permute_for_llama_rope(tensors[gguf], gguf, cfg)
            else:
                tensors[gguf] = np.asarray(ckpt.get(hf), dtype=np.float32)
                if qk.plus_one(gguf, info.arch):
                    tensors[gguf] = tensors[gguf] + np.float32(1.0)  # Gemma's x * (1 + w)
                got = tensors[gguf].shape
            if tuple(got) != tuple(want):
                raise UnsupportedModelError(f"{hf}: shape {got}, the config implies {want}", src)
            bar.update(1)
    return tensors


def convert_checkpoint(
    src: str | Path,
    out: str | Path,
    *,
    ternary_type: str = "tq2_0",
    overwrite: bool = False,
    progress: bool | None = None,
    report: Callable[[str], None] | None = None,
) -> Path:
    """Write the GGUF of the Hugging Face BitNet checkpoint in ``src`` to ``out``.

    Ternary layers go in ``ternary_type`` (:data:`CONVERT_TYPES`), each one
    whose rows that type cannot hold in F16 instead (``convert/fallback.py``);
    embeddings in f16 (f32 for ``f32``), norms in f32. ``report`` gets the
    summary lines of those fallbacks (default: logged as warnings). ``out`` is
    never overwritten unless ``overwrite``.
    """
    src, out = Path(src), Path(out)
    ternary_type = ternary_type.lower()
    if ternary_type not in CONVERT_TYPES:
        raise ModelFileError(
            f"unknown --type {ternary_type!r} (choose from {', '.join(CONVERT_TYPES)})", out
        )
    if not src.is_dir():
        raise ModelFileError("not a directory (expected a Hugging Face checkpoint)", src)
    if out.exists() and not overwrite:
        raise ModelFileError("file exists (use --force to replace it)", out)
    info = read_hf_config(src)
    tok_meta = tokenizer_metadata_from_hf(src, vocab_size=info.config.vocab_size)
    tensors = load_tensors(src, info, progress=progress)
    from ..gguf import write_gguf

    ternary = {n: v for n, v in tensors.items() if isinstance(v, TernaryWeight)}
    fallbacks = plan_fallbacks(ternary, ternary_type)
    extra = {"general.name": info.name or src.name}
    extra.update(qk.extra_metadata(info.config, tok_meta))
    path = write_gguf(
        out,
        info.config,
        tensors,
        ternary_type=ternary_type,
        tokenizer_metadata=tok_meta,
        extra_metadata=extra,
        overwrite=overwrite,
        dense_type="f32" if ternary_type == "f32" else "f16",
        tensor_types={f.tensor: f.written for f in fallbacks},
    )
    for line in summarize(fallbacks):
        (report or log.warning)(line)
    return path
