"""The build-time kernel check (CMakeLists.txt) fails on a broken kernel."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

PKG = Path(__file__).resolve().parents[1]


@pytest.mark.skipif(shutil.which("cmake") is None, reason="cmake is not installed")
def test_planted_kernel_error_fails_the_build(tmp_path):
    src = tmp_path / "src"
    kernels = src / "src" / "bitnet_opencl" / "kernels"
    kernels.mkdir(parents=True)
    shutil.copy(PKG / "CMakeLists.txt", src / "CMakeLists.txt")
    shutil.copy(PKG / "src" / "bitnet_opencl" / "kernels" / "common.clh", kernels)
    (kernels / "broken.cl").write_text(
        "kernel void broken(global float* y) { y[0] = not_declared_anywhere; }\n"
    )
    conf = subprocess.run(
        ["cmake", "-S", str(src), "-B", str(tmp_path / "b")], capture_output=True, text=True
    )
    assert conf.returncode == 0, conf.stderr
    if "NOT checked" in conf.stderr:
        pytest.skip("no clang with an OpenCL front end: the check is skipped (as it says)")
    build = subprocess.run(
        ["cmake", "--build", str(tmp_path / "b")], capture_output=True, text=True, timeout=300
    )
    assert build.returncode != 0
    assert "not_declared_anywhere" in build.stdout + build.stderr
