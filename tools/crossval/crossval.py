#!/usr/bin/env python3
"""Cross-validate bitnet's logits against transformers and llama-cpp-python.

Builds a random BitNet model with transformers (CPU torch; BitLinear weights
already ternary x scale, so conversion is exact), converts it with
``bitnet_core.convert`` to GGUF (f32, i2_s, tq2_0, tq1_0), and compares logits on
the same token ids:

- ours (activation quantization off) vs transformers' ``BitNetForCausalLM``
  (which, without a ``quantization_config``, runs plain ``nn.Linear``): exact;
- ours (per-token int8 activations) vs transformers with the same activation
  quantization emulated by forward pre-hooks on the BitLinear layers; the band
  two correct implementations differ by is measured as transformers in float32
  vs float64 and per-token vs per-256-block activation scales;
- ours on the TQ2_0/TQ1_0 files vs llama-cpp-python on the same files (SiLU-gated,
  tied embeddings: what llama.cpp's ``bitnet`` graph computes).

Prints relative L2 error, teacher-forced argmax agreement and greedy agreement.

    uv run --no-sync python tools/crossval/crossval.py [--layers 4] [--tokens 48]
"""

from __future__ import annotations

import argparse
import contextlib
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from bitnet_core.convert.hf_random import TERNARY_PROJ


@dataclass
class Setup:
    """A random transformers model, its checkpoint directory and its GGUF files."""

    model: object
    directory: Path
    files: dict[str, Path]
    vocab_size: int


def rel_l2(a: np.ndarray, b: np.ndarray) -> float:
    """``|a - b| / |b|`` over all logits."""
    a, b = np.asarray(a, np.float64), np.asarray(b, np.float64)
    return float(np.linalg.norm(a - b) / max(np.linalg.norm(b), 1e-30))


def argmax_agreement(a: np.ndarray, b: np.ndarray) -> float:
    """Share of positions whose argmax token is the same."""
    return float(np.mean(np.argmax(a, axis=-1) == np.argmax(b, axis=-1)))


def build(
    directory: Path,
    *,
    layers: int = 4,
    hidden: int = 256,
    intermediate: int = 512,
    heads: int = 4,
    kv_heads: int = 2,
    vocab: int = 320,
    act: str = "silu",
    types: tuple[str, ...] = ("f32", "tq2_0"),
    seed: int = 0,
) -> Setup:
    from bitnet_core.convert import convert_checkpoint
    from bitnet_core.convert.hf_random import random_hf_checkpoint

    model = random_hf_checkpoint(
        directory / "hf",
        vocab_size=vocab,
        hidden_size=hidden,
        intermediate_size=intermediate,
        num_layers=layers,
        num_heads=heads,
        num_kv_heads=kv_heads,
        hidden_act=act,
        tie_word_embeddings=True,
        seed=seed,
    )
    files = {
        t: convert_checkpoint(
            directory / "hf", directory / f"model-{t}.gguf", ternary_type=t, progress=False
        )
        for t in types
    }
    return Setup(model, directory, files, vocab)


def _act_quant_hook(block: int | None):
    """A forward pre-hook quantizing the input to int8 per token (or per ``block`` values)."""

    def hook(_module, args):
        (x,) = args
        shape = x.shape
        xs = x.reshape(*shape[:-1], -1, block) if block else x.unsqueeze(-2)
        s = 127.0 / xs.abs().amax(dim=-1, keepdim=True).clamp(min=1e-5)
        q = (xs * s).round().clamp(-128, 127) / s
        return (q.reshape(shape),)

    return hook


@contextlib.contextmanager
def activation_quant(model, block: int | None = None):
    """transformers' BitNet activation quantization, emulated on a plain-Linear model."""
    handles = [
        m.register_forward_pre_hook(_act_quant_hook(block))
        for name, m in model.named_modules()
        if name.rsplit(".", 1)[-1] in TERNARY_PROJ
    ]
    try:
        yield model
    finally:
        for h in handles:
            h.remove()


def hf_logits(model, ids, *, quant: bool, block: int | None = None, double: bool = False):
    import torch

    m = model.double() if double else model.float()
    try:
        with torch.no_grad(), activation_quant(m, block) if quant else contextlib.nullcontext():
            out = m(torch.tensor([list(ids)])).logits[0]
        return out.double().numpy() if double else out.float().numpy()
    finally:
        model.float()


def our_logits(path: Path, ids, *, quant: bool, device: str = "cpu-reference") -> np.ndarray:
    import bitnet_core

    model = bitnet_core.load(path, device=device, quantize_activations=quant, progress=False)
    return np.asarray(model.logits(list(ids)), np.float32)


def llama_cpp_logits(path: Path, ids) -> np.ndarray:
    import llama_cpp

    llm = llama_cpp.Llama(
        str(path), n_ctx=max(64, len(ids)), logits_all=True, n_threads=2, verbose=False
    )
    llm.eval(list(ids))
    return np.array(llm.scores[: len(ids)], dtype=np.float32)


def greedy_hf(model, prompt, n: int, *, quant: bool) -> list[int]:
    ids = list(prompt)
    for _ in range(n):
        ids.append(int(np.argmax(hf_logits(model, ids, quant=quant)[-1])))
    return ids[len(prompt) :]


def greedy_ours(path: Path, prompt, n: int, *, quant: bool) -> list[int]:
    import bitnet_core

    model = bitnet_core.load(
        path, device="cpu-reference", quantize_activations=quant, progress=False
    )
    return list(model.generate_ids(list(prompt), max_tokens=n, temperature=0.0))[:n]


def greedy_llama_cpp(path: Path, prompt, n: int) -> list[int]:
    import llama_cpp

    llm = llama_cpp.Llama(str(path), n_ctx=128, n_threads=2, verbose=False)
    out = []
    for tok in llm.generate(list(prompt), temp=0.0, top_k=1, reset=True):
        out.append(int(tok))
        if len(out) == n:
            break
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--layers", type=int, default=4)
    p.add_argument("--hidden", type=int, default=256)
    p.add_argument("--intermediate", type=int, default=512)
    p.add_argument("--tokens", type=int, default=48)
    p.add_argument("--greedy", type=int, default=16, help="greedy tokens to compare")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--act", choices=["silu", "relu2"], default="silu")
    p.add_argument("--keep", type=Path, help="write the checkpoint and GGUFs here")
    args = p.parse_args(argv)

    tmp = None if args.keep else tempfile.TemporaryDirectory()
    root = args.keep or Path(tmp.name)
    root.mkdir(parents=True, exist_ok=True)
    types = ("f32", "i2_s", "tq2_0", "tq1_0")
    s = build(
        root,
        layers=args.layers,
        hidden=args.hidden,
        intermediate=args.intermediate,
        act=args.act,
        types=types,
        seed=args.seed,
    )
    ids = np.random.default_rng(args.seed + 1).integers(2, s.vocab_size, args.tokens).tolist()
    print(
        f"model: {args.layers} layers, hidden {args.hidden}, ffn {args.intermediate}, "
        f"{args.act}, vocab {s.vocab_size}; {len(ids)} token ids"
    )

    hf_plain = hf_logits(s.model, ids, quant=False)
    hf_q = hf_logits(s.model, ids, quant=True)
    hf_q64 = hf_logits(s.model, ids, quant=True, double=True)
    hf_blk = hf_logits(s.model, ids, quant=True, block=256)
    band = max(rel_l2(hf_q, hf_q64), rel_l2(hf_blk, hf_q))
    print(f"band (two correct int8 implementations): {band:.2e}")
    print(
        f"  transformers q8 float32 vs float64 {rel_l2(hf_q, hf_q64):.2e}, "
        f"per-token vs per-256-block {rel_l2(hf_blk, hf_q):.2e}"
    )

    def row(name, ours, ref):
        print(
            f"  {name:<44} rel L2 {rel_l2(ours, ref):.2e}   argmax agree "
            f"{100 * argmax_agreement(ours, ref):5.1f}%"
        )

    print("vs transformers:")
    for t in ("f32", "i2_s"):
        row(
            f"ours {t}, activations float vs HF float",
            our_logits(s.files[t], ids, quant=False),
            hf_plain,
        )
        row(
            f"ours {t}, activations int8 vs HF int8 (hooks)",
            our_logits(s.files[t], ids, quant=True),
            hf_q,
        )
    try:
        import llama_cpp  # noqa: F401
    except ImportError:
        print("llama-cpp-python not installed: skipping the llama.cpp comparison")
    else:
        print("vs llama-cpp-python (its q8_K activations per 256 values):")
        for t in ("tq2_0", "tq1_0"):
            ref = llama_cpp_logits(s.files[t], ids)
            row(f"ours {t} int8 vs llama.cpp {t}", our_logits(s.files[t], ids, quant=True), ref)
            row(f"transformers int8 vs llama.cpp {t}", hf_q, ref)
    if args.greedy:
        prompt = ids[:8]
        g_hf = greedy_hf(s.model, prompt, args.greedy, quant=True)
        g_ours = greedy_ours(s.files["f32"], prompt, args.greedy, quant=True)
        same = sum(a == b for a, b in zip(g_hf, g_ours, strict=False))
        print(f"greedy {args.greedy} tokens: ours vs transformers {same}/{args.greedy} equal")
        with contextlib.suppress(ImportError):
            g_ll = greedy_llama_cpp(s.files["tq2_0"], prompt, args.greedy)
            g_ours2 = greedy_ours(s.files["tq2_0"], prompt, args.greedy, quant=True)
            same = sum(a == b for a, b in zip(g_ll, g_ours2, strict=False))
            print(
                f"greedy {args.greedy} tokens: ours tq2_0 vs llama.cpp tq2_0 {same}/{args.greedy} equal"
            )
    if tmp:
        tmp.cleanup()
    return 0


if __name__ == "__main__":
    sys.path.insert(0, str(Path(__file__).resolve().parent))
    sys.exit(main())
