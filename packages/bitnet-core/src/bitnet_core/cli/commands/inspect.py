"""``bitnet inspect FILE``: what a GGUF model file holds.

Architecture, configuration, metadata, tokenizer summary, every tensor with
its shape, type and size, and for each ternary weight the share of its
-1 / 0 / +1 codes (``--no-stats`` skips that, which reads every weight).
"""

from __future__ import annotations

import argparse
import json
import re
from typing import Any

import numpy as np

from ...config import BitNetConfig
from ...errors import BitnetError, ModelFileError
from ...formats import get_codec
from ...gguf import GGUFFile, config_from_metadata
from ...gguf.metadata import scale_tensor_name

TERNARY_NAME = re.compile(
    r"blk\.\d+\.(attn_q|attn_k|attn_v|attn_output|ffn_gate|ffn_up|ffn_down)\.weight$"
)


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("inspect", help="show what a GGUF model file holds")
    p.add_argument("file", help="a .gguf file, or a hub model ORG/NAME[@REV][:FILE]")
    p.add_argument("--json", action="store_true", help="machine-readable output")
    p.add_argument(
        "--no-stats", action="store_true", help="skip the -1/0/+1 shares (reads every weight)"
    )
    p.set_defaults(func=run)


def _short(value: Any, limit: int = 80) -> Any:
    if isinstance(value, float):
        return float(f"{value:.7g}")  # float32 keys: 1e-05, not 9.999999747e-06
    if isinstance(value, list):
        head = ", ".join(repr(v) for v in value[:4])
        return f"[{len(value)} items: {head}{', ...' if len(value) > 4 else ''}]"[:limit]
    if isinstance(value, str) and len(value) > limit:
        return value[: limit - 3] + "..."
    return value


def tokenizer_summary(md: dict[str, Any]) -> dict[str, Any] | None:
    if not any(k.startswith("tokenizer.") for k in md):
        return None
    tokens = md.get("tokenizer.ggml.tokens")
    merges = md.get("tokenizer.ggml.merges")
    template = md.get("tokenizer.chat_template")
    return {
        "model": md.get("tokenizer.ggml.model"),
        "pre": md.get("tokenizer.ggml.pre"),
        "tokens": len(tokens) if isinstance(tokens, list) else None,
        "merges": len(merges) if isinstance(merges, list) else None,
        "bos_id": md.get("tokenizer.ggml.bos_token_id"),
        "eos_id": md.get("tokenizer.ggml.eos_token_id"),
        "chat_template_chars": len(template) if isinstance(template, str) else None,
    }


def ternary_shares(f: GGUFFile, name: str) -> dict[str, float]:
    """Share of -1 / 0 / +1 among the codes of a ternary tensor."""
    info = f.tensor_info(name)
    codec = get_codec(info.codec or "")
    if info.codec == "qk256":
        codec = codec.with_scales(1.0)  # type: ignore[attr-defined]
    rows, cols = info.shape
    try:
        codes, _ = codec.unpack(f.raw(name), rows, cols)
    except BitnetError as exc:
        raise ModelFileError(f"tensor {name!r}: {exc}", f.path) from None
    n = max(codes.size, 1)
    counts = np.bincount((codes.reshape(-1) + 1).astype(np.int64), minlength=3)
    return {"-1": counts[0] / n, "0": counts[1] / n, "+1": counts[2] / n}


def graph_summary(config: BitNetConfig) -> str:
    """The layer graph a model runs, and the engines that run it (``bitnet inspect``)."""
    parts = [
        "bitnet: attn_sub_norm + ffn_sub_norm"
        if config.sub_norms
        else f"{config.arch}: no sub-norms",
        f"{config.rope_style} rope",
    ]
    if config.linear_norms:
        parts.append(
            f"an input RMSNorm on every BitLinear (use_rms_norm, eps {config.linear_norm_eps:g}): "
            "the fused CPU pass runs it, the GPU fused passes fall back to the generic engine"
        )
    return ", ".join(parts)


def collect(path: str, stats: bool) -> dict[str, Any]:
    f = GGUFFile(path)
    md = f.metadata
    config, note, graph = None, None, None
    try:
        embd = f.tensors.get("token_embd.weight")
        rows = embd.shape[0] if embd is not None and len(embd.shape) == 2 else None
        cfg = config_from_metadata(md, f.tensor_names, f.path, rows)
        config, graph = cfg.as_dict(), graph_summary(cfg)
    except ModelFileError as exc:
        note = str(exc)
    tensors = [t.as_dict() for t in f.tensors.values()]
    shares = {}
    if stats:
        for t in f.tensors.values():
            if t.codec and len(t.shape) == 2 and TERNARY_NAME.search(t.name):
                shares[t.name] = ternary_shares(f, t.name)
    return {
        "path": str(f.path),
        "file_size": f.header.file_size,
        "gguf_version": f.header.version,
        "alignment": f.header.alignment,
        "architecture": md.get("general.architecture"),
        "config": config,
        "config_error": note,
        "graph": graph,
        "metadata": {
            k: _short(v, 200) for k, v in md.items() if not k.startswith("tokenizer.ggml.")
        },
        "tokenizer": tokenizer_summary(md),
        "tensors": tensors,
        "tensor_bytes": sum(t["nbytes"] for t in tensors),
        "scale_tensors": [t["name"] for t in tensors if t["name"].endswith(".scale")],
        "ternary_shares": shares,
    }


def _human(n: int) -> str:
    for unit in ("B", "KiB", "MiB", "GiB"):
        if n < 1024 or unit == "GiB":
            return f"{n:.0f} {unit}" if unit == "B" else f"{n:.1f} {unit}"
        n /= 1024
    return str(n)


def render(r: dict[str, Any]) -> str:
    lines = [
        f"file          {r['path']} ({_human(r['file_size'])}, GGUF v{r['gguf_version']})",
        f"architecture  {r['architecture']}",
    ]
    if r["config"]:
        lines.append("config        " + ", ".join(f"{k}={v}" for k, v in r["config"].items()))
        lines.append(f"graph         {r['graph']}")
    else:
        lines.append(f"config        not a loadable BitNet model: {r['config_error']}")
    tok = r["tokenizer"]
    if tok:
        lines.append(
            "tokenizer     " + ", ".join(f"{k}={v}" for k, v in tok.items() if v is not None)
        )
    else:
        lines.append("tokenizer     none in the file")
    lines.append(f"metadata      {len(r['metadata'])} keys (besides tokenizer.ggml.*)")
    for k, v in r["metadata"].items():
        lines.append(f"  {k} = {_short(v)}")
    lines.append(f"tensors       {len(r['tensors'])}, {_human(r['tensor_bytes'])}")
    width = max((len(t["name"]) for t in r["tensors"]), default=4)
    for t in r["tensors"]:
        shape = "x".join(str(d) for d in t["shape"])
        kind = f"{t['type']}" + (f" ({t['codec']})" if t["codec"] and t["type"] == "I2_S" else "")
        share = r["ternary_shares"].get(t["name"])
        extra = ""
        if share:
            extra = "  -1 {:5.1%}  0 {:5.1%}  +1 {:5.1%}".format(
                share["-1"], share["0"], share["+1"]
            )
        lines.append(
            f"  {t['name']:<{width}}  {kind:<16} {shape:<12} {_human(t['nbytes']):>10}{extra}"
        )
    return "\n".join(lines)


def run(args: argparse.Namespace) -> int:
    from ...hub.names import parse_model_ref

    path = args.file
    ref = parse_model_ref(path)
    if ref is not None:
        from ...hub.fetch import fetch_model

        path = str(fetch_model(ref))
    report = collect(path, stats=not args.no_stats)
    if args.json:
        print(json.dumps(report, indent=2, default=str))
    else:
        print(render(report))
    return 0


__all__ = ["collect", "register", "run", "scale_tensor_name"]
