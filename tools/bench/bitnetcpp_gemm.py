"""Kernel-level benchmark: our prompt GEMM against bitnet.cpp's own I2_S kernel, side by side.

    uv run --no-sync python tools/bench/bitnetcpp_gemm.py --bitnet-src ~/src/BitNet --threads 1 2

bitnet.cpp (microsoft/BitNet) runs a prompt's ternary matmuls through
``ggml_vec_dot_i2_i8_s`` in its ``src/ggml-bitnet-mad.cpp``; with
``ACT_PARALLEL`` (``include/gemm-config.h``, the default since its
activation-parallel update) that is ``ggml_vec_dot_i2_i8_s_Nx1``: one weight
row against ``PARALLEL_SIZE`` activation columns at a time, AVX2 ``pmaddubsw``.
This tool reads that function and its ``hsum_i32_8`` from a checkout's source
(nothing of it is kept here), compiles them into ``bitnetcpp_gemm_harness.cpp``
with ``-O3 -march=native`` (as bitnet.cpp builds) and times them on the ternary
shapes of bitnet_b1_58-large at ``--tokens`` tokens (default 128, a prompt):
every weight row against every token, rows split evenly over the threads,
``--rounds`` rounds alternating the two sides, the best of each. The
harness checks the kernel's dots against a scalar reference first. In the
same run it times our ``Kernels.linear`` on the same shapes and tokens, for
``cpu-avx2`` (the same instructions as theirs) and the best table this CPU
has. Theirs counts only the integer dots (no activation quantization, no
scales; its threads wait at a barrier between calls); ours is the whole
linear. The weights are cache-resident for both (one matrix, again and
again): this compares kernels, not memory.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from bitnet_core.model.presets import matrix_shapes, preset

HARNESS = Path(__file__).resolve().parent / "bitnetcpp_gemm_harness.cpp"
SHAPES = matrix_shapes(preset("large"))  # rows x columns: q/k/v/o, gate/up, down


class HarnessError(RuntimeError):
    """bitnet.cpp's kernel could not be found, built or run."""


def gmacs(result: dict) -> float:
    return result["gmacs"]


def extract_kernel(source: str) -> str:
    """The AVX2 ``hsum_i32_8`` and ``ggml_vec_dot_i2_i8_s_Nx1`` of ggml-bitnet-mad.cpp, as
    compilable text (the function's AVX2 branch, its other branches cut off)."""
    hs = re.search(r"static inline int hsum_i32_8\(const __m256i a\) \{.*?\n\}", source, re.S)
    fn = re.search(
        r"void ggml_vec_dot_i2_i8_s_Nx1\([^)]*\) \{\s*#if defined\(__AVX2__\)(.*?)#elif",
        source,
        re.S,
    )
    if not hs or not fn:
        raise HarnessError("ggml_vec_dot_i2_i8_s_Nx1 (AVX2) or hsum_i32_8 not found in the source")
    head = fn.group(0)[: fn.group(0).index("{") + 1]
    return f"{hs.group(0)}\n{head}{fn.group(1)}}}\n"


def build(src: Path, workdir: Path) -> Path:
    """Compile the harness around the checkout's kernel; the executable's path."""
    mad, config = src / "src" / "ggml-bitnet-mad.cpp", src / "include" / "gemm-config.h"
    if not mad.is_file() or not config.is_file():
        raise HarnessError(
            f"{src} is not a bitnet.cpp checkout (no src/ggml-bitnet-mad.cpp, include/gemm-config.h)"
        )
    inc = workdir / "kernel.inc"
    inc.write_text(
        "#include <immintrin.h>\n#include <cstddef>\n#include <cstdint>\n"
        f'#include "{config}"\n#define QK_I2_S 128\n'
        "#if !defined(ACT_PARALLEL)\n#error gemm-config.h does not select the activation-parallel kernel\n#endif\n"
        + extract_kernel(mad.read_text(errors="replace"))
    )
    cxx = os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++")
    if not cxx:
        raise HarnessError("no C++ compiler")
    exe = workdir / "harness"
    done = subprocess.run(
        [
            cxx,
            "-std=c++20",
            "-O3",
            "-march=native",
            "-pthread",
            f'-DKERNEL_INC="{inc}"',
            "-o",
            str(exe),
            str(HARNESS),
        ],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise HarnessError(f"building the harness failed:\n{done.stderr[-2000:]}")
    return exe


def theirs(exe: Path, rows: int, cols: int, tokens: int, threads: int, reps: int) -> dict:
    done = subprocess.run(
        [str(exe), str(rows), str(cols), str(tokens), str(threads), str(reps)],
        capture_output=True,
        text=True,
    )
    if done.returncode:
        raise HarnessError(f"harness {rows}x{cols}: {done.stderr.strip()}")
    out = json.loads(done.stdout)
    if out["wrong_rows"]:
        raise HarnessError(
            f"bitnet.cpp's kernel gave wrong dots on {out['wrong_rows']} rows of {rows}x{cols}"
        )
    return out


def our_inputs(rows: int, cols: int, tokens: int) -> tuple:
    """A random ternary matrix as TQ2_0 bytes (what a TQ2_0 GGUF runs on) and float
    activations [tokens, cols]."""
    from bitnet_core import _native
    from bitnet_core.formats import get_codec

    rng = np.random.default_rng(0)
    codes = rng.integers(-1, 2, size=(rows, cols), dtype=np.int8)
    raw = get_codec("tq2_0").pack(codes, np.ones(rows, np.float32))
    w = _native.TernaryMatrix.from_tq2_0(raw, rows, cols)
    return w, rng.standard_normal((tokens, cols)).astype(np.float32)


def ours(isa: str, w, x: np.ndarray, threads: int, reps: int) -> dict:
    from bitnet_core import _native

    kernels = _native.Kernels(isa, threads)
    kernels.linear(x, w)
    best = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        kernels.linear(x, w)
        best = min(best, time.perf_counter() - t0)
    rows, cols = w.shape
    return {"us": best * 1e6, "gmacs": rows * cols * x.shape[0] / best / 1e9}


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--bitnet-src", type=Path, required=True, help="a microsoft/BitNet checkout")
    ap.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--tokens", type=int, default=128)
    ap.add_argument("--reps", type=int, default=5, help="calls a round (the best counts)")
    ap.add_argument("--rounds", type=int, default=3, help="alternations of theirs and ours")
    ap.add_argument(
        "--shapes", nargs="+", default=[f"{r}x{c}" for r, c in SHAPES], help="ROWSxCOLS"
    )
    ap.add_argument("--out", type=Path)
    args = ap.parse_args(argv)
    shapes = []
    for s in args.shapes:
        m = re.fullmatch(r"(\d+)x(\d+)", s)
        if not m or int(m[1]) < 1 or int(m[2]) < 256 or int(m[2]) % 256:
            ap.error(f"shape {s!r}: ROWSxCOLS with COLS a multiple of 256 (TQ2_0 blocks)")
        shapes.append((int(m[1]), int(m[2])))
    if args.tokens < 4 or args.tokens % 4 or min(args.reps, args.rounds, *args.threads) < 1:
        ap.error("--tokens a multiple of 4; --reps, --rounds and --threads positive")
    from bitnet_core import _native

    features = _native.cpu_features()
    if not features.get("avx2"):
        print("bitnetcpp_gemm: bitnet.cpp's x86 kernel needs AVX2", file=sys.stderr)
        return 1
    avx512 = all(features.get(f) for f in ("avx512f", "avx512bw", "avx512vl", "avx512vnni"))
    isas = ["avx2"] + (["avx512"] if avx512 and "avx512" in _native.compiled_isas() else [])
    rows_out = []
    try:
        with tempfile.TemporaryDirectory() as tmp:
            exe = build(args.bitnet_src.expanduser(), Path(tmp))
            inputs = {(r, c): our_inputs(r, c, args.tokens) for r, c in shapes}  # made once
            for threads in args.threads:
                for r, c in shapes:
                    # rounds alternate the two sides (this VM's speed drifts); the best of each
                    them, mine = {"gmacs": 0.0}, {i: {"gmacs": 0.0} for i in isas}
                    for _ in range(args.rounds):
                        them = max(
                            them, theirs(exe, r, c, args.tokens, threads, args.reps), key=gmacs
                        )
                        for i in isas:
                            mine[i] = max(
                                mine[i], ours(i, *inputs[r, c], threads, args.reps), key=gmacs
                            )
                    rows_out.append(
                        {"shape": [r, c], "threads": threads, "bitnet_cpp": them, "ours": mine}
                    )
                    cells = "  ".join(
                        f"ours {i} {m['gmacs']:6.1f} (x{m['gmacs'] / them['gmacs']:.2f})"
                        for i, m in mine.items()
                    )
                    print(
                        f"{r}x{c} T={args.tokens} t={threads}: bitnet.cpp {them['gmacs']:6.1f} G MAC/s  {cells}"
                    )
    except HarnessError as exc:
        print(f"bitnetcpp_gemm: {exc}", file=sys.stderr)
        return 1
    for i in isas:
        ratios = [row["ours"][i]["gmacs"] / row["bitnet_cpp"]["gmacs"] for row in rows_out]
        print(
            f"ours {i} / bitnet.cpp: median x{statistics.median(ratios):.2f} ({min(ratios):.2f}-{max(ratios):.2f})"
        )
    if args.out:
        args.out.write_text(json.dumps({"tokens": args.tokens, "rows": rows_out}, indent=1) + "\n")
        print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
