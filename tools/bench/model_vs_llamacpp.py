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

Against the machine (``machine_probe.py``, run between the engines in every
round, same threads): the bytes our engine reads per decode token (every
ternary matrix, the output head as it runs, norms, one embedding row, and the
KV cache at the run's mean decode context) times decode tok/s, as a fraction of
the probe's read bandwidth; and prefill's int8 multiply-accumulates (every
ternary matrix, rows x columns a token) times prompt tok/s, as a fraction of
the probe's int8 peak (of the loop our provider's GEMM uses: ``pmaddubsw`` for
``--device cpu-avx2``, also on a CPU with VNNI). ``--variant NAME:VAR=VALUE,...``
adds our engine once more under those environment variables (e.g.
``int8head:BITNET_CPU_INT8_HEAD=1``), in the same rounds; ``--no-llama`` runs
only ours and the probes (no ratios: for a machine without llama-cpp-python, or
one so oversubscribed that llama.cpp's spinning thread barriers collapse).

    uv sync --all-packages --inexact --group bench
    uv pip install --find-links /root/.cache/bitnet-ci/wheels llama-cpp-python==0.3.36
    uv run --no-sync python tools/bench/model_vs_llamacpp.py --make /tmp/large-tq2_0.gguf \\
        --threads 2 --runs 5 --out model_bench.json --png model_bench.png

``--make PATH`` writes a random bitnet_b1_58-large-shaped model (1536 hidden,
24 layers, 16 heads, 4096 FFN, 32002 vocab, tied float16 head, TQ2_0) there
first unless it exists;
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

sys.path.insert(0, str(Path(__file__).parent))
import machine_probe  # noqa: E402
from plotting import pyplot  # noqa: E402


def make_model(path: Path) -> Path:
    from bitnet_core.model import random_model_file
    from bitnet_core.model.presets import preset

    if not path.exists():
        t0 = time.perf_counter()
        random_model_file(path, preset("large"), seed=0, ternary_type="tq2_0")
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
    info.update(traffic(model))
    rng = np.random.default_rng(0)

    def run() -> tuple[float, float]:
        r = bench_once(model, args.n_prompt, args.n_gen, rng)
        return r.prompt_tokens_per_s, r.decode_tokens_per_s

    return info, run


def traffic(model) -> dict:
    """What one token costs our engine: ``weight_bytes_per_token`` (every byte a decode step
    reads besides the KV cache: ternary matrices, the head as it runs, norms, an embedding
    row), ``kv_bytes_per_context_token`` (K and V of one cache row, every layer: what
    attention reads per token of context) and ``int8_macs_per_token`` (the ternary
    matmuls' multiply-accumulates)."""
    from bitnet_core.providers.cpu_runner import op_bytes

    runner, cfg = model.runner, model.config
    w = runner.weights
    nbytes = op_bytes(model.provider, w)  # the ternary ops and the head as it runs
    head_bytes = nbytes["head"]
    weight_bytes = sum(nbytes.values()) + np.asarray(w.output_norm).nbytes
    weight_bytes += cfg.hidden_size * np.asarray(w.embedding).itemsize
    macs = 0
    for layer in w.layers:
        for name in ("q", "k", "v", "o", "gate", "up", "down"):
            m = getattr(layer, name)
            macs += int(m.rows) * int(m.cols)
        for name in ("attn_norm", "attn_sub_norm", "ffn_norm", "ffn_sub_norm"):
            weight_bytes += np.asarray(getattr(layer, name)).nbytes
    return {
        "weight_bytes_per_token": weight_bytes,
        "head_bytes": head_bytes,
        "kv_bytes_per_context_token": runner.kv.bytes_per_token,
        "int8_macs_per_token": macs,
        "layout": getattr(model.provider, "layout", None),
        "head_mode": model.provider.head_mode_for(w.head),
    }


def worker_llama(args: argparse.Namespace):
    import llama_cpp
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

    def greedy() -> int:
        # the last evaluated token's logits (``llm.scores`` is filled only with
        # logits_all, and has n_batch rows without it)
        row = llama_cpp.llama_get_logits_ith(llm.ctx, -1)
        return int(np.argmax(np.ctypeslib.as_array(row, shape=(llm.n_vocab(),))))

    def run() -> tuple[float, float]:
        llm.reset()
        t0 = time.perf_counter()
        llm.eval(ids)
        tp = time.perf_counter() - t0
        tok = greedy()
        t0 = time.perf_counter()
        for _ in range(args.n_gen):
            llm.eval([tok])
            tok = greedy()
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
    def __init__(
        self, kind: str, args: argparse.Namespace, name: str | None = None, env: dict | None = None
    ) -> None:
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
        env = dict(os.environ, BITNET_THREADS=str(args.threads), **(env or {}))
        self.kind = kind
        self.name = name or kind
        self.proc = subprocess.Popen(
            cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env
        )
        self.info = self._read()

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise SystemExit(f"{self.name} worker died (exit {self.proc.wait()})")
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


def parse_variant(text: str) -> tuple[str, dict[str, str]]:
    """``NAME:VAR=VALUE,VAR=VALUE`` -> (name, env); ValueError if malformed."""
    name, sep, rest = text.partition(":")
    env = dict(item.split("=", 1) for item in rest.split(",") if "=" in item) if sep else {}
    if not name.isidentifier() or name in ("ours", "llama") or not env:
        raise ValueError(f"{text!r}: expected NAME:VAR=VALUE[,VAR=VALUE...]")
    return name, env


def engine_report(
    w: Worker, runs: list[dict], read_gbps: float, peak_gmacs: float | None, args
) -> dict:
    """Medians of one engine; for ours, bytes a decode token reads and int8 MACs a prompt
    token does, against the probes' read bandwidth and int8 peak."""
    out = {
        "info": w.info,
        "pp": summary([r["pp"] for r in runs]),
        "tg": summary([r["tg"] for r in runs]),
    }
    if w.kind != "ours":
        return out
    info = w.info
    # decode step i reads the cache rows 0 .. n_prompt + i: the mean context of the run
    mean_ctx = args.n_prompt + (args.n_gen + 1) / 2
    step_bytes = info["weight_bytes_per_token"] + info["kv_bytes_per_context_token"] * mean_ctx
    decode_gbps = out["tg"]["median"] * step_bytes / 1e9
    out["bytes_per_decode_token"] = step_bytes
    out["decode_gbps"] = decode_gbps
    out["decode_frac_of_read"] = decode_gbps / read_gbps
    prompt_gmacs = out["pp"]["median"] * info["int8_macs_per_token"] / 1e9
    out["prompt_int8_gmacs"] = prompt_gmacs
    out["prompt_frac_of_int8_peak"] = prompt_gmacs / peak_gmacs if peak_gmacs else None
    return out


def ratio(value: float | None) -> str:
    return f" x{value:.2f}" if value is not None else ""


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
    ap.add_argument(
        "--variant",
        action="append",
        default=[],
        metavar="NAME:VAR=VALUE,...",
        help="also run our engine under these environment variables (repeatable)",
    )
    ap.add_argument("--no-probe", action="store_true", help="skip the machine probes")
    ap.add_argument(
        "--no-llama", action="store_true", help="only our engine(s) and the probes: no ratios"
    )
    ap.add_argument(
        "--probe-mib", type=int, default=machine_probe.READ_MIB, help="MiB the read probe streams"
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
    try:
        variants = [parse_variant(v) for v in args.variant]
    except ValueError as exc:
        ap.error(f"--variant: {exc}")

    workers = [Worker("ours", args)]
    workers += [Worker("ours", args, name, env) for name, env in variants]
    if not args.no_llama:
        workers.append(Worker("llama", args))
    for w in workers:
        print(f"{w.name}: {w.info}", file=sys.stderr)
    res: dict[str, list[dict]] = {w.name: [] for w in workers}
    reads: list[float] = []
    peaks: list[dict] = []
    for i in range(args.runs):
        for w in workers if i % 2 == 0 else workers[::-1]:
            r = w.run()
            res[w.name].append(r)
            print(
                f"run {i} {w.name:9s} pp {r['pp']:7.1f} tok/s  tg {r['tg']:6.1f} tok/s",
                file=sys.stderr,
            )
        if not args.no_probe:
            reads += machine_probe.read_gbps(args.threads, reps=2, mib=args.probe_mib)
            loop = machine_probe.loop_for(workers[0].info["provider"])
            peaks.append(machine_probe.int8_peak(args.threads, loop=loop))
            print(
                f"run {i} probe     read {reads[-1]:5.1f} GB/s  int8 "
                f"{peaks[-1].get('gmacs', float('nan')):.1f} G MAC/s",
                file=sys.stderr,
            )
    peak_rss = {w.name: w.close()["peak_rss_bytes"] for w in workers}
    rss, llama_rss = peak_rss["ours"], peak_rss.get("llama")
    ours = workers[0]
    llama = None if args.no_llama else workers[-1]

    from bitnet_core.gguf import open_model_file

    cfg = open_model_file(args.model).config
    # the KV cache each engine holds: ours what the run's tokens use, in its dtype;
    # llama.cpp's its whole n_ctx in float16 (its default cache type)
    kv_bytes = ours.info["kv_bytes_per_token"] * (args.n_prompt + args.n_gen + 1)
    llama_kv = (
        2 * cfg.num_layers * llama.info["n_ctx"] * cfg.num_kv_heads * cfg.head_dim * 2
        if llama
        else None
    )
    gguf_bytes = args.model.stat().st_size
    base = ours.info["rss_before_load_bytes"]
    read = statistics.median(reads) if reads else float("nan")
    gmacs = [p["gmacs"] for p in peaks if "gmacs" in p]
    peak = statistics.median(gmacs) if gmacs else None
    machine = {
        "read_gbps": summary(reads) if reads else None,
        "int8_peak_gmacs": summary(gmacs) if gmacs else None,
        "int8_instruction": peaks[0].get("instruction", peaks[0].get("error")) if peaks else None,
    }
    report: dict = {
        "model": str(args.model),
        "gguf_bytes": gguf_bytes,
        "threads": args.threads,
        "n_prompt": args.n_prompt,
        "n_gen": args.n_gen,
        "runs": args.runs,
        "load_avg": os.getloadavg(),
        "machine": machine,
        "ours": engine_report(ours, res["ours"], read, peak, args),
        "llama": engine_report(llama, res["llama"], read, peak, args) if llama else None,
        "variants": {
            w.name: engine_report(w, res[w.name], read, peak, args)
            for w in workers[1 : 1 + len(variants)]
        },
        "peak_rss_bytes": rss,
        "kv_cache_bytes": kv_bytes,
        "rss_over_gguf_plus_kv": rss / (gguf_bytes + kv_bytes),
        "rss_before_load_bytes": base,
        "rss_over_gguf_plus_kv_after_import": (rss - base) / (gguf_bytes + kv_bytes),
        "llama_peak_rss_bytes": llama_rss,
        "llama_kv_cache_bytes": llama_kv,
        "llama_rss_over_gguf_plus_kv": llama_rss / (gguf_bytes + llama_kv) if llama else None,
    }
    for k in ("pp", "tg"):
        for v in (report["ours"], *report["variants"].values()):
            v[f"ratio_{k}"] = v[k]["median"] / report["llama"][k]["median"] if llama else None
        report[f"ratio_{k}"] = report["ours"][f"ratio_{k}"]
    args.out.write_text(json.dumps(report, indent=2))
    lines = [
        f"machine: read {read:.1f} GB/s, int8 peak "
        + (f"{peak:.1f} G MAC/s ({machine['int8_instruction']})" if peak else "n/a")
        + f", {args.threads} threads (medians of the probes between rounds); "
        f"load average {report['load_avg'][0]:.2f}",
        (
            f"llama-cpp-python: prompt {report['llama']['pp']['median']:.1f} tok/s, "
            f"decode {report['llama']['tg']['median']:.1f} tok/s"
            if llama
            else "llama-cpp-python: not run (--no-llama)"
        ),
    ]
    for name, r in [("ours", report["ours"]), *report["variants"].items()]:
        pfrac = r["prompt_frac_of_int8_peak"]
        lines.append(
            f"{name} ({r['info']['provider']}): prompt {args.n_prompt}: "
            f"{r['pp']['median']:.1f} tok/s{ratio(r['ratio_pp'])}, "
            f"{r['prompt_int8_gmacs']:.1f} G MAC/s"
            + (f" = {100 * pfrac:.0f}% of int8 peak" if pfrac else "")
            + f" | decode {args.n_gen}: {r['tg']['median']:.1f} tok/s{ratio(r['ratio_tg'])}, "
            f"{r['bytes_per_decode_token'] / 1e6:.1f} MB/token -> {r['decode_gbps']:.1f} GB/s"
            + (
                f" = {100 * r['decode_frac_of_read']:.0f}% of read"
                if r["decode_frac_of_read"] == r["decode_frac_of_read"]
                else ""
            )
        )
    lines += [
        f"peak RSS {rss / 1e6:.0f} MB = {report['rss_over_gguf_plus_kv']:.2f} x (GGUF + KV cache "
        f"{kv_bytes / 1e6:.0f} MB {ours.info['kv_dtype']}); "
        f"{report['rss_over_gguf_plus_kv_after_import']:.2f} x over the {base / 1e6:.0f} MB "
        "held before loading",
    ]
    if llama:
        lines.append(
            f"llama-cpp-python peak RSS {llama_rss / 1e6:.0f} MB = "
            f"{report['llama_rss_over_gguf_plus_kv']:.2f} x (GGUF + its KV cache "
            f"{llama_kv / 1e6:.0f} MB)"
        )
    lines.append(f"wrote {args.out}")
    print("\n".join(lines))
    if args.png and llama:
        plot(report, args.png)
    return 0


def plot(report: dict, path: Path) -> None:
    if (plt := pyplot()) is None:
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
