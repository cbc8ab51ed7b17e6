"""The machine's ceilings, measured independently of our kernels: read bandwidth, int8 and FMA peaks.

``machine_probe.c`` (next to this file) is compiled on first use with the
system C compiler (``cc -O2 -pthread``, cached by source hash under
``~/.cache/bitnet-bench``) and run as a subprocess:

- ``read_gbps(threads)``: every thread streams its slice of a 512 MiB buffer
  (256-bit loads on AVX2 CPUs): the read bandwidth a decode step is judged against;
- ``int8_peak(threads)``: independent chains of the CPU's widest int8 dot
  product (AVX-512 VNNI ``vpdpbusd``, AVX-VNNI ``vpdpbusd``, else AVX2
  ``pmaddubsw`` + ``paddw``): the multiply-accumulates per second prefill's
  int8 GEMM is judged against; ``loop=`` (``--int8``) names one of them
  instead, e.g. ``pmaddubsw`` for the AVX2 table on an AVX-512 CPU;
- ``fma_peak(threads)``: independent chains of 256-bit ``vfmadd231ps``, the
  float32 GFLOP/s prompt attention is judged against.

    uv run --no-sync python tools/bench/machine_probe.py --threads 2 1 --reps 5
    uv run --no-sync python tools/bench/machine_probe.py --threads 2 --int8 pmaddubsw
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import statistics
import subprocess
import sys
from pathlib import Path

SOURCE = Path(__file__).with_name("machine_probe.c")
READ_MIB = 512


class ProbeError(RuntimeError):
    """The probe could not be built or run."""


def binary() -> Path:
    """The compiled probe (built once per source version)."""
    digest = hashlib.sha256(SOURCE.read_bytes()).hexdigest()[:16]
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "bitnet-bench"
    exe = cache / f"machine_probe-{digest}"
    if exe.exists():
        return exe
    cc = os.environ.get("CC") or shutil.which("cc") or shutil.which("gcc")
    if not cc:
        raise ProbeError("no C compiler (cc) to build the machine probe")
    cache.mkdir(parents=True, exist_ok=True)
    tmp = exe.with_suffix(f".{os.getpid()}.tmp")
    done = subprocess.run(
        [cc, "-O2", "-pthread", "-o", str(tmp), str(SOURCE)], capture_output=True, text=True
    )
    if done.returncode:
        raise ProbeError(f"building {SOURCE.name} failed:\n{done.stderr}")
    tmp.replace(exe)
    return exe


def _run(*args: str) -> dict:
    done = subprocess.run([str(binary()), *args], capture_output=True, text=True)
    if done.returncode:
        raise ProbeError(f"machine_probe {' '.join(args)} failed: {done.stderr.strip()}")
    return json.loads(done.stdout)


def read_gbps(threads: int, reps: int = 3, mib: int = READ_MIB) -> list[float]:
    """GB/s of ``reps`` passes over a ``mib`` MiB buffer, ``threads`` threads (after a warm-up pass)."""
    return _run("read", str(mib), str(threads), str(reps))["gbps"]


INT8_LOOPS = ("auto", "pmaddubsw", "avx-vnni", "avx512-vnni")


def loop_for(provider: str) -> str:
    """The int8 loop whose peak a provider's GEMM is judged against: ``pmaddubsw`` for the
    AVX2 table (``cpu-avx2``, also on a CPU with VNNI), else the widest (``auto``)."""
    return "pmaddubsw" if provider == "cpu-avx2" else "auto"


def int8_peak(threads: int, ms: float = 200, loop: str = "auto") -> dict:
    """``{"gmacs": G MAC/s, "instruction": ...}`` over ``threads`` threads for ~``ms`` ms, of
    ``loop`` (``auto``: the widest int8 dot product this CPU has; see INT8_LOOPS);
    ``{"error": ...}`` on a CPU without it."""
    if loop not in INT8_LOOPS:
        raise ProbeError(f"unknown int8 loop {loop!r} (one of {', '.join(INT8_LOOPS)})")
    return _run("int8", str(threads), str(ms), loop)


def fma_peak(threads: int, ms: float = 200) -> dict:
    """``{"gflops": GFLOP/s, "instruction": ...}`` of 256-bit float32 FMAs (two FLOPs each)
    over ``threads`` threads for ~``ms`` ms; ``{"error": ...}`` on a CPU without AVX2 FMA."""
    return _run("fma", str(threads), str(ms))


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", type=int, nargs="+", default=[len(os.sched_getaffinity(0))])
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--mib", type=int, default=READ_MIB)
    ap.add_argument(
        "--int8", choices=INT8_LOOPS, default="auto", help="the int8 loop (auto: the widest)"
    )
    args = ap.parse_args(argv)
    if args.reps < 1 or args.mib < 1 or min(args.threads) < 1:
        ap.error("--reps, --mib and --threads must be positive")
    try:
        for t in args.threads:
            reads = read_gbps(t, args.reps, args.mib)
            peaks = [int8_peak(t, loop=args.int8) for _ in range(args.reps)]
            if "error" in peaks[0]:
                peak = peaks[0]["error"]
            else:
                gmacs = statistics.median(p["gmacs"] for p in peaks)
                peak = f"{gmacs:.1f} G MAC/s ({peaks[0]['instruction']})"
            fmas = [fma_peak(t) for _ in range(args.reps)]
            fma = (
                fmas[0]["error"]
                if "error" in fmas[0]
                else f"{statistics.median(f['gflops'] for f in fmas):.1f} GFLOP/s"
            )
            print(
                f"threads {t}: read {statistics.median(reads):.1f} GB/s "
                f"(median of {len(reads)}, {min(reads):.1f}-{max(reads):.1f}); int8 peak {peak}; "
                f"float32 FMA peak {fma}"
            )
    except ProbeError as exc:
        print(exc, file=sys.stderr)
        return 1
    print(f"load average {os.getloadavg()[0]:.2f}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
