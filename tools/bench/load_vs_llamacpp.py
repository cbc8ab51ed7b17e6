"""Start-up of a one-token ``bitnet run`` against bitnet.cpp's ``llama-cli``, side by side.

    uv run --no-sync python tools/bench/load_vs_llamacpp.py --llama-cli PATH/llama-cli \\
        --gguf /tmp/r2b4t-i2_s.gguf --gguf /tmp/r2b4t-tq2_0.gguf --rounds 4

Each round runs, one after the other, ``bitnet run -m FILE -p Hello -n 1 -t T
--temperature 0 --device cpu`` for every ``--gguf`` and ``llama-cli -m FILE -p
Hello -n 1 -t T`` on the first one (bitnet.cpp reads I2_S; pass its file
first). Rounds interleave the programs, so each ratio compares minutes of the
same machine state. Prints JSON: per run the process wall, user + sys CPU,
peak RSS, our ``load=`` line with its stages and llama-cli's ``load time``;
per round ours / llama-cli wall; the median ratio. The files: 2B-4T-shaped
random models (``bitnet_core.model.random.random_model_file``, as the 2B-4T
guide in docs/RUN_2B4T.md makes them).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import statistics
import subprocess
import sys
import tempfile
import time


def timed(cmd: list[str]) -> dict:
    """Run ``cmd``; its wall and CPU seconds, peak RSS (GB) and output."""
    with tempfile.TemporaryFile() as out:
        t0 = time.perf_counter()
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT)
        _, status, usage = os.wait4(proc.pid, 0)  # this child's own rusage
        wall = time.perf_counter() - t0
        proc.returncode = os.waitstatus_to_exitcode(status)
        out.seek(0)
        text = out.read().decode("utf-8", "replace")
    if proc.returncode != 0:
        raise SystemExit(f"{cmd[0]} failed ({proc.returncode}): {text[-2000:]}")
    return {
        "wall_s": round(wall, 3),
        "cpu_s": round(usage.ru_utime + usage.ru_stime, 3),
        "peak_rss_gb": round(usage.ru_maxrss / 1e6, 3),  # (KiB on Linux)
        "out": text,
    }


def ours(gguf: str, threads: int) -> dict:
    cmd = [sys.executable, "-m", "bitnet_core", "run", "-m", gguf, "-p", "Hello", "-n", "1",
           "-t", str(threads), "--temperature", "0", "--device", "cpu"]  # fmt: skip
    r = timed(cmd)
    m = re.search(r"load=([\d.]+)s \(([^)]*)\)", r.pop("out"))
    r["load_s"] = float(m.group(1)) if m else None
    r["stages"] = m.group(2) if m else None
    return r


def llama(cli: str, gguf: str, threads: int) -> dict:
    r = timed([cli, "-m", gguf, "-p", "Hello", "-n", "1", "-t", str(threads), "--no-warmup"])
    m = re.search(r"load time =\s*([\d.]+) ms", r.pop("out"))
    r["load_s"] = round(float(m.group(1)) / 1e3, 3) if m else None
    return r


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--gguf", action="append", required=True, help="the I2_S file first")
    ap.add_argument("--llama-cli", required=True, help="bitnet.cpp's llama-cli")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--rounds", type=int, default=4)
    args = ap.parse_args(argv)
    for path in (*args.gguf, args.llama_cli):
        if not os.path.exists(path):
            raise SystemExit(f"no such file: {path}")
    ours(args.gguf[0], args.threads)  # page cache and bytecode warm, not measured
    llama(args.llama_cli, args.gguf[0], args.threads)
    rounds = []
    for _ in range(args.rounds):
        got = {os.path.basename(g): ours(g, args.threads) for g in args.gguf}
        got["llama-cli"] = llama(args.llama_cli, args.gguf[0], args.threads)
        got["ours_over_llama_cli"] = round(
            got[os.path.basename(args.gguf[0])]["wall_s"] / got["llama-cli"]["wall_s"], 3
        )
        got["loadavg"] = os.getloadavg()[0]
        rounds.append(got)
    ratios = [r["ours_over_llama_cli"] for r in rounds]
    print(json.dumps({"args": vars(args), "rounds": rounds,
                      "median_ours_over_llama_cli": statistics.median(ratios)}, indent=1))  # fmt: skip
    return 0


if __name__ == "__main__":
    sys.exit(main())
