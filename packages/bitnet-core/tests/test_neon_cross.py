"""The arm64 NEON kernel tables, cross-compiled and run under qemu-user.

No arm64 machine runs CI, so ``tests/cross/check_kernels.cpp`` (every kernel
of the NEON tables against the portable scalar table, on random inputs of
awkward shapes) is built with ``aarch64-linux-gnu-g++`` with the wheel's flags
and run under ``qemu-aarch64``: on an emulated CPU with SDOT (the +dotprod
table must be the one picked) and on a Cortex-A53 without it (the ARMv8.0
table). The whole native module (pybind11 glue included) is also compiled for
arm64, syntax and types only. Lane ``neon`` (marker ``cross``) installs the toolchain; elsewhere the
tests skip with the reason. Correctness only: emulated speed means nothing.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
from kernel_check_build import CSRC, build_check_kernels, simd_file_flags

pytestmark = pytest.mark.cross

CXX = os.environ.get("BITNET_CROSS_CXX", "aarch64-linux-gnu-g++")
QEMU = next((q for q in ("qemu-aarch64-static", "qemu-aarch64") if shutil.which(q)), None)

# as the wheel builds them: CMakeLists.txt's -O3, and simd_flags.cmake's arm64 block
FLAGS = ["-std=gnu++17", "-O3", "-I", str(CSRC)]


# the x86 files compile to null tables on arm64 (check_kernels links every getter)
SOURCES = {
    "kernels_scalar.cpp": [],
    "kernels_neon.cpp": [],
    "kernels_avx2.cpp": [],
    "kernels_avx512.cpp": [],
    **simd_file_flags("arm64"),
}


def _missing_tools() -> str | None:
    if not shutil.which(CXX):
        return f"{CXX} not found (Debian: g++-aarch64-linux-gnu)"
    if QEMU is None:
        return "qemu-aarch64 not found (Debian: qemu-user-static)"
    return None


@pytest.fixture(scope="module")
def check_binary(tmp_path_factory: pytest.TempPathFactory) -> Path:
    reason = _missing_tools()
    if reason:
        pytest.skip(reason)
    return build_check_kernels(CXX, FLAGS, SOURCES, tmp_path_factory.mktemp("neon"), ["-static"])


@pytest.mark.parametrize(
    ("cpu", "table"),
    [("max", "neon+dotprod"), ("cortex-a53", "neon")],
    ids=["sdot", "armv8.0"],
)
def test_neon_tables_equal_scalar(check_binary: Path, cpu: str, table: str) -> None:
    run = subprocess.run(
        [QEMU, "-cpu", cpu, str(check_binary), "--expect", table],
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert run.returncode == 0, run.stdout + run.stderr
    assert f"{table}: " in run.stdout and " 0 failures" in run.stdout, run.stdout


def test_native_module_compiles_for_arm64() -> None:
    """Every csrc/*.cpp, with its wheel flags, through the arm64 compiler's front end."""
    reason = _missing_tools()
    if reason:
        pytest.skip(reason)
    pybind11 = pytest.importorskip("pybind11", reason="pybind11 (dev group) not installed")
    python_include = Path(sysconfig.get_paths()["include"])
    if not (python_include / "Python.h").exists():
        pytest.skip(f"no Python.h under {python_include}")
    includes = ["-I", str(python_include), "-I", pybind11.get_include()]

    def check(src: Path) -> str:
        extra = SOURCES.get(src.name, [])
        cmd = [CXX, *FLAGS, *includes, *extra, "-Wall", "-fsyntax-only", str(src)]
        run = subprocess.run(cmd, capture_output=True, text=True)
        return "" if run.returncode == 0 else f"{src.name}:\n{run.stderr[-3000:]}"

    with ThreadPoolExecutor(max_workers=os.cpu_count() or 2) as pool:
        errors = [e for e in pool.map(check, sorted(CSRC.glob("*.cpp"))) if e]
    assert not errors, "\n".join(errors)
