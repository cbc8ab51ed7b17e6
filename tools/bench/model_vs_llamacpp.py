"""Model-level benchmark: our engine vs llama-cpp-python on the same GGUF, same threads.

Prompt processing (``--n-prompt`` random token ids in one batch) and greedy
decode (``--n-gen`` steps) tokens/s, measured the way ``bitnet bench`` does
(``bitnet_core.cli.commands.bench.bench_once``) and the same way for
llama-cpp-python (``Llama.eval``). Each engine lives in its own worker process
(loaded once); runs alternate A/B, B/A, ... so drift in machine load hits both
alike. Reports medians, min/max and the ratios ours / llama.cpp, our peak RSS
against the GGUF size plus the KV cache it holds (also counted from the RSS
before the model loads: the interpreter and numpy), llama-cpp-python's peak
RSS the same way, and writes JSON and a PNG.

    uv sync --all-packages --inexact --group bench
    uv pip install --find-links /root/.cache/bitnet-ci/wheels llama-cpp-python==0.3.36
    uv run --no-sync python tools/bench/model_vs_llamacpp.py --make /tmp/large-tq2_0.gguf \\
        --threads 2 --runs 5 --out model_bench.json --png model_bench.png

``--make PATH`` writes a random bitnet_b1_58-large-shaped model (1536 hidden,
24 layers, 4096 FFN, 32000 vocab, TQ2_0) there first unless it exists;
``--model PATH`` uses an existing GGUF.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

LARGE = dict(
    vocab_size=32000,
    hidden_size=1536,
    num_layers=24,
    num_heads=16,
    num_kv_heads=16,
    intermediate_size=4096,
    context_length=2048,
)


def make_model(path: Path) -> Path:
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import random_model_file

    if not path.exists():
        t0 = time.perf_counter()
        random_model_file(path, BitNetConfig(**LARGE), seed=0, ternary_type="tq2_0")
        print(f"wrote {path} in {time.perf_counter() - t0:.0f} s", file=sys.stderr)
    return path


# ----------------------------------------------------------------- workers
def _prompt(n_vocab: int, n: int) -> list[int]:
    return np.random.default_rng(0).integers(0, n_vocab, n).tolist()


def _rss_now() -> int:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")


def worker_ours(args: argparse.Namespace):
    import bitnet_core
    from bitnet_core.cli.commands.bench import bench_once

    baseline = _rss_now()  # the interpreter, numpy and bitnet_core, before any model
    t0 = time.perf_counter()
    model = bitnet_core.load(args.model, device=args.device)
    kv = model.runner.kv
    info = {
        "provider": model.provider.name,
        "load_s": time.perf_counter() - t0,
        "rss_before_load_bytes": baseline,
        "kv_dtype": str(kv.dtype),
        "kv_bytes_per_token": kv.bytes_per_token,
    }
    if hasattr(model.provider, "threads"):
        info["threads"] = model.provider.threads
    rng = np.random.default_rng(0)

    def run() -> tuple[float, float]:
        return bench_once(model, args.n_prompt, args.n_gen, rng)

    return info, run


def worker_llama(args: argparse.Namespace):
    from llama_cpp import Llama

    t0 = time.perf_counter()
    llm = Llama(
        model_path=str(args.model),
        n_ctx=args.n_prompt + args.n_gen + 8,
        n_threads=args.threads,
        n_threads_batch=args.threads,
        n_batch=512,
        verbose=False,
    )
    info = {
        "provider": "llama-cpp-python",
        "load_s": time.perf_counter() - t0,
        "threads": args.threads,
        "n_ctx": llm.n_ctx(),
    }
    ids = _prompt(llm.n_vocab(), args.n_prompt)

    def run() -> tuple[float, float]:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        tp = time.perf_counter() - t0
        tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        t0 = time.perf_counter()
        for _ in range(args.n_gen):
            llm.eval([tok])
            tok = int(np.argmax(llm.scores[llm.n_tokens - 1]))
        return args.n_prompt / tp, args.n_gen / (time.perf_counter() - t0)

    return info, run


def worker_main(args: argparse.Namespace) -> int:
    info, run = (worker_ours if args.worker == "ours" else worker_llama)(args)
    print(json.dumps(info), flush=True)
    for line in sys.stdin:
        if line.strip() != "run":
            break
        pp, tg = run()
        print(json.dumps({"pp": pp, "tg": tg}), flush=True)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    print(json.dumps({"peak_rss_bytes": rss}), flush=True)
    return 0


# -------------------------------------------------------------------- main
class Worker:
    def __init__(self, kind: str, args: argparse.Namespace) -> None:
        cmd = [
            sys.executable,
            __file__,
            "--worker",
            kind,
            "--model",
            str(args.model),
            "--threads",
            str(args.threads),
            "--n-prompt",
            str(args.n_prompt),
            "--n-gen",
            str(args.n_gen),
            "--device",
            args.device,
        ]
        env = dict(os.environ, BITNET_THREADS=str(args.threads))
        self.kind = kind
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.info = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.kind} worker died (exit {self.proc.wait()})")
        return json.loads(line)

    def run(self) -> dict:
        self.proc.stdin.write("run\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> dict:
        self.proc.stdin.write("quit\n")
        self.proc.stdin.flush()
        out = self._read()
        self.proc.wait()
        return out


def summary(values: list[float]) -> dict:
    return {
        "median": statistics.median(values),
        "min": min(values),
        "max": max(values),
        "runs": values,
    }


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", type=Path)
    ap.add_argument("--make", type=Path, help="write a random large-shaped TQ2_0 model here first")
    ap.add_argument("--threads", type=int, default=len(os.sched_getaffinity(0)))
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--n-prompt", type=int, default=128)
    ap.add_argument("--n-gen", type=int, default=128)
    ap.add_argument(
        "--device", default="cpu", help="our device request (default: best CPU provider)"
    )
    ap.add_argument("--out", type=Path, default=Path("model_bench.json"))
    ap.add_argument("--png", type=Path)
    ap.add_argument("--worker", choices=["ours", "llama"], help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.make:
        args.model = make_model(args.make)
    if not args.model:
        ap.error("give --model or --make")
    if args.worker:
        return worker_main(args)

    ours, llama = Worker("ours", args), Worker("llama", args)
    print(f"ours: {ours.info}\nllama: {llama.info}", file=sys.stderr)
    res: dict[str, list[dict]] = {"ours": [], "llama": []}
    for i in range(args.runs):
        for w in (ours, llama) if i % 2 == 0 else (llama, ours):
            r = w.run()
            res[w.kind].append(r)
            print(
                f"run {i} {w.kind:5s} pp {r['pp']:7.1f} tok/s  tg {r['tg']:6.1f} tok/s",
                file=sys.stderr,
            )
    rss = ours.close()["peak_rss_bytes"]
    llama_rss = llama.close()["peak_rss_bytes"]

    from bitnet_core.gguf import open_model_file

    cfg = open_model_file(args.model).config
    # the KV cache each engine holds: ours what the run's tokens use, in its dtype;
    # llama.cpp's its whole n_ctx in float16 (its default cache type)
    kv_bytes = ours.info["kv_bytes_per_token"] * (args.n_prompt + args.n_gen + 1)
    llama_kv = 2 * cfg.num_layers * llama.info["n_ctx"] * cfg.num_kv_heads * cfg.head_dim * 2
    gguf_bytes = args.model.stat().st_size
    base = ours.info["rss_before_load_bytes"]
    report: dict = {
        "model": str(args.model),
        "gguf_bytes": gguf_bytes,
        "threads": args.threads,
        "n_prompt": args.n_prompt,
        "n_gen": args.n_gen,
        "runs": args.runs,
        "load_avg": os.getloadavg(),
        "ours": {
            "info": ours.info,
            "pp": summary([r["pp"] for r in res["ours"]]),
            "tg": summary([r["tg"] for r in res["ours"]]),
        },
        "llama": {
            "info": llama.info,
            "pp": summary([r["pp"] for r in res["llama"]]),
            "tg": summary([r["tg"] for r in res["llama"]]),
        },
        "peak_rss_bytes": rss,
        "kv_cache_bytes": kv_bytes,
        "rss_over_gguf_plus_kv": rss / (gguf_bytes + kv_bytes),
        "rss_before_load_bytes": base,
        "rss_over_gguf_plus_kv_after_import": (rss - base) / (gguf_bytes + kv_bytes),
        "llama_peak_rss_bytes": llama_rss,
        "llama_kv_cache_bytes": llama_kv,
        "llama_rss_over_gguf_plus_kv": llama_rss / (gguf_bytes + llama_kv),
    }
    for k in ("pp", "tg"):
        report[f"ratio_{k}"] = report["ours"][k]["median"] / report["llama"][k]["median"]
    args.out.write_text(json.dumps(report, indent=2))
    print(
        f"prompt {args.n_prompt}: ours {report['ours']['pp']['median']:.1f} tok/s, llama.cpp "
        f"{report['llama']['pp']['median']:.1f} -> x{report['ratio_pp']:.2f}\n"
        f"decode {args.n_gen}: ours {report['ours']['tg']['median']:.1f} tok/s, llama.cpp "
        f"{report['llama']['tg']['median']:.1f} -> x{report['ratio_tg']:.2f}\n"
        f"peak RSS {rss / 1e6:.0f} MB = {report['rss_over_gguf_plus_kv']:.2f} x (GGUF + KV cache "
        f"{kv_bytes / 1e6:.0f} MB {ours.info['kv_dtype']}); "
        f"{report['rss_over_gguf_plus_kv_after_import']:.2f} x over the {base / 1e6:.0f} MB "
        "held before loading\n"
        f"llama-cpp-python peak RSS {llama_rss / 1e6:.0f} MB = "
        f"{report['llama_rss_over_gguf_plus_kv']:.2f} x (GGUF + its KV cache {llama_kv / 1e6:.0f} MB)\n"
        f"wrote {args.out}"
    )
    if args.png:
        plot(report, args.png)
    return 0


def plot(report: dict, path: Path) -> None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("matplotlib is not installed: no PNG (uv sync --group bench)", file=sys.stderr)
        return
    fig, axes = plt.subplots(1, 2, figsize=(8, 4))
    for ax, key, title in zip(
        axes,
        ("pp", "tg"),
        (f"prompt {report['n_prompt']}", f"decode {report['n_gen']}"),
        strict=True,
    ):
        names = ["ours", "llama"]
        med = [report[n][key]["median"] for n in names]
        err = [
            [m - report[n][key]["min"] for n, m in zip(names, med, strict=True)],
            [report[n][key]["max"] - m for n, m in zip(names, med, strict=True)],
        ]
        ax.bar(
            [report["ours"]["info"]["provider"], "llama-cpp-python"],
            med,
            yerr=err,
            capsize=6,
            color=["tab:blue", "tab:gray"],
        )
        ax.set_title(f"{title}: x{report[f'ratio_{key}']:.2f}")
        ax.set_ylabel("tokens/s (median, min-max)")
    fig.suptitle(
        f"{Path(report['model']).name}, {report['threads']} threads, {report['runs']} runs A/B"
    )
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    print(f"wrote {path}", file=sys.stderr)


if __name__ == "__main__":
    raise SystemExit(main())
