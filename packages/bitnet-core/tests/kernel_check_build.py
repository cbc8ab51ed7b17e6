"""Building ``cross/check_kernels.cpp`` with the kernel tables for another ISA.

Shared by test_neon_cross.py (arm64, run under qemu) and
test_avx512_emulated.py (x86, AVX-512 through SIMDe): both compile each
``csrc/kernels_*.cpp`` with the wheel's per-file flags, read from
``csrc/simd_flags.cmake`` (one place for them), plus the harness, and link.
"""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

CSRC = Path(__file__).resolve().parent.parent / "csrc"
CHECK = Path(__file__).resolve().parent / "cross" / "check_kernels.cpp"


def simd_file_flags(arch: str) -> dict[str, list[str]]:
    """The per-file flags of simd_flags.cmake's ``"x86"`` or ``"arm64"`` block."""
    text = (CSRC / "simd_flags.cmake").read_text()
    split = text.index("aarch64")
    block = text[:split] if arch == "x86" else text[split:]
    found = re.findall(r"csrc/(\S+\.cpp)\s+PROPERTIES COMPILE_OPTIONS \"([^\"]*)\"", block)
    return {name: opts.split(";") for name, opts in found}


def compile_checked(cmd: list[str]) -> None:
    run = subprocess.run(cmd, capture_output=True, text=True)
    assert run.returncode == 0, f"{' '.join(cmd)}\n{run.stderr[-3000:]}"


def build_check_kernels(
    cxx: str, flags: list[str], sources: dict[str, list[str]], out: Path, link: list[str]
) -> Path:
    """Compile ``sources`` (csrc file -> extra flags) and the harness into ``out/check_kernels``."""
    objects = []
    for src, extra in [*sources.items(), (str(CHECK), [])]:
        obj = out / (Path(src).stem + ".o")
        path = src if Path(src).is_absolute() else str(CSRC / src)
        compile_checked([cxx, *flags, *extra, "-c", path, "-o", str(obj)])
        objects.append(str(obj))
    exe = out / "check_kernels"
    compile_checked([cxx, *link, *objects, "-o", str(exe)])
    return exe
