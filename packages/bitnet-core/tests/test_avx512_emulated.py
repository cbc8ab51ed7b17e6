"""The AVX-512 kernel table, run through SIMDe on any AVX2 CPU, and for real on AVX-512.

CI machines have rarely had AVX-512, yet ``cpu-avx512`` is the provider chosen first on
most x86 servers. ``tests/cross/check_kernels.cpp`` (every kernel of a table
against the portable scalar table, random inputs of awkward shapes) is built
natively with the AVX2 flags and ``-DBITNET_SIMDE_AVX512``: the 512-bit
intrinsics of the AVX-512 table then come from SIMDe's portable definitions
(Debian ``libsimde-dev``), so the table's own logic (two blocks per 64-byte
load, ``vpdpbusd`` accumulation, the odd last block, the horizontal sums) runs
here. What this cannot check is the compiler's AVX-512 code generation: on a
CPU with AVX-512 (F, BW, VL, VNNI) the harness is also built with the wheel's
real ``-mavx512*`` flags and run on the real instructions. The AVX2 table goes
through the same harness as a control. Lane ``cross`` (marker ``cross``)
installs SIMDe; elsewhere the tests skip with the reason.
"""

from __future__ import annotations

import os
import platform
import shutil
import subprocess
from pathlib import Path

import pytest
from kernel_check_build import CSRC, build_check_kernels, simd_file_flags

pytestmark = pytest.mark.cross

CXX = os.environ.get("BITNET_NATIVE_CXX", "g++")
# CMakeLists.txt's -O3; SIMDe passes 64-byte vectors by value (-Wpsabi notes)
FLAGS = ["-std=gnu++17", "-O3", "-Wno-psabi", "-I", str(CSRC)]


def _cpu_flags() -> set[str]:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return set()
    return {
        f
        for line in text.splitlines()
        if line.startswith("flags")
        for f in line.split(":", 1)[1].split()
    }


def _avx2_cpu() -> bool:
    return {"avx2", "fma", "f16c"} <= _cpu_flags()


def _missing() -> str | None:
    if platform.machine().lower() not in ("x86_64", "amd64"):
        return f"not an x86_64 machine ({platform.machine()})"
    if not _avx2_cpu():
        return "this CPU lacks AVX2/FMA/F16C (the emulated build runs on the AVX2 code)"
    if not shutil.which(CXX):
        return f"{CXX} not found"
    probe = subprocess.run(
        [CXX, "-x", "c++", "-fsyntax-only", "-"],
        input="#include <simde/x86/avx512.h>\n",
        capture_output=True,
        text=True,
    )
    if probe.returncode != 0:
        return "SIMDe headers not found (Debian: libsimde-dev)"
    return None


@pytest.fixture(scope="module")
def check_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    x86 = simd_file_flags("x86")
    assert "-mavx512vnni" in x86["kernels_avx512.cpp"], "simd_flags.cmake changed: update this test"
    # the AVX-512 table on AVX2 flags, its 512-bit intrinsics from SIMDe
    sources = _x86_sources([*x86["kernels_avx2.cpp"], "-DBITNET_SIMDE_AVX512"])
    return build_check_kernels(CXX, FLAGS, sources, tmp_path_factory.mktemp("avx512"), [])


def _x86_sources(avx512_flags: list[str]) -> dict[str, list[str]]:
    """check_kernels' sources with their flags, the AVX-512 table's given."""
    return {
        "kernels_scalar.cpp": [],
        "kernels_avx2.cpp": simd_file_flags("x86")["kernels_avx2.cpp"],
        "kernels_avx512.cpp": avx512_flags,
        "kernels_neon.cpp": [],  # null tables on x86 (check_kernels links them)
        "kernels_neon_dotprod.cpp": [],
    }


def _assert_table_equals_scalar(binary: Path, isa: str) -> None:
    run = subprocess.run(
        [str(binary), "--isa", isa, "--expect", isa],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{isa}: " in run.stdout and " 0 failures" in run.stdout, run.stdout


@pytest.mark.parametrize("isa", ["avx512", "avx2"])
def test_x86_tables_equal_scalar(check_binary: Path, isa: str) -> None:
    _assert_table_equals_scalar(check_binary, isa)


def test_real_avx512_build_equals_scalar(tmp_path: Path) -> None:
    """The wheel's own ``-mavx512*`` build of the table, on a CPU that has those instructions."""
    if platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip(f"not an x86_64 machine ({platform.machine()})")
    if not {"avx512f", "avx512bw", "avx512vl", "avx512_vnni"} <= _cpu_flags():
        pytest.skip(
            "this CPU lacks AVX-512 F/BW/VL/VNNI (the emulated build above covers the logic)"
        )
    if not shutil.which(CXX):
        pytest.skip(f"{CXX} not found")
    sources = _x86_sources(simd_file_flags("x86")["kernels_avx512.cpp"])
    _assert_table_equals_scalar(build_check_kernels(CXX, FLAGS, sources, tmp_path, []), "avx512")
