"""What can be checked without a GPU: the kernels compile, the layout is right, the probe explains."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest
from cuda_emulator.cupy_emulator import KERNEL_RE

from bitnet_core.hal import REGISTRY
from bitnet_cuda.kernels import FATBIN, KERNELS, SOURCE
from bitnet_cuda.provider import CudaProvider, pack_cuda_ternary

NVCC = shutil.which("nvcc")


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_kernels_compile_with_nvcc_for_sm90(tmp_path):
    out = tmp_path / "k.cubin"
    r = subprocess.run(
        [NVCC, "-cubin", "-std=c++17", "-O3", "-arch=sm_90", "-o", str(out), str(SOURCE)],
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert r.returncode == 0, r.stderr
    assert out.stat().st_size > 0
    cuobjdump = shutil.which("cuobjdump") or str(Path(NVCC).resolve().parent / "cuobjdump")
    if Path(cuobjdump).is_file():
        symbols = subprocess.run([cuobjdump, "-symbols", str(out)], capture_output=True, text=True)
        assert symbols.returncode == 0, symbols.stderr
        for name in KERNELS:
            assert name in symbols.stdout


def test_kernels_lists_every_kernel_of_the_source():
    # a fatbin is checked against KERNELS before use: one missing here would let a stale
    # fatbin without it through, to fail at the first launch instead of falling back to NVRTC
    defined = KERNEL_RE.findall(SOURCE.read_text())
    assert sorted(KERNELS) == sorted(defined)


@pytest.mark.skipif(NVCC is None, reason="nvcc is not installed")
def test_wheel_ships_fatbin_when_built_with_nvcc():
    assert FATBIN.is_file(), "built where nvcc exists, the package must carry the fatbin"


def test_registered_and_probe_explains():
    rec = REGISTRY.get("cuda")
    assert rec is not None and rec.provider is not None
    avail = CudaProvider().probe()
    if not avail.available:
        assert avail.reason  # e.g. CuPy missing (with the pip hint) or no driver/device
        assert "CuPy" in avail.reason or "CUDA" in avail.reason or "device" in avail.reason


def test_pack_layout_matches_kernel_contract():
    rng = np.random.default_rng(0)
    codes = rng.integers(-1, 2, (3, 70)).astype(np.int8)
    words = pack_cuda_ternary(codes)
    assert words.shape == (3, 8)  # rows padded to 128 columns: 8 words, a multiple of 4
    # decode: column 16w + 4j + i sits at bits 8i + 2j of word w
    for r in range(3):
        for c in range(70):
            w, j, i = c // 16, (c % 16) // 4, c % 4
            assert ((int(words[r, w]) >> (8 * i + 2 * j)) & 3) - 1 == codes[r, c]
    # padding columns decode to 0
    assert ((int(words[0, 7]) >> 30) & 3) == 1


def test_cli_cuda_request_fails_clearly_without_gpu():
    if CudaProvider().probe().available:
        pytest.skip("a CUDA device is present")
    r = subprocess.run(
        ["bitnet", "devices", "--device", "cuda"], capture_output=True, text=True, timeout=120
    )
    assert r.returncode != 0
    assert "error: device 'cuda' requested" in r.stderr and "Traceback" not in r.stderr
