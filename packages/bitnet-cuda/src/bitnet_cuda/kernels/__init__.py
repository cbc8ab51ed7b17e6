"""The kernels of the ``cuda`` backend: the fatbin built by nvcc at wheel-build time, else NVRTC.

``bitnet_kernels.fatbin`` beside this module (sm_75..sm_90 SASS + compute_90 PTX) ships
in wheels built where nvcc was present. Where it is absent, or has no code
for this GPU, CuPy compiles ``bitnet_kernels.cu`` (here) with NVRTC at run
time (seed 002: compile everywhere).
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import Any


def _kernel_file(name: str) -> Path:
    """A file of ``bitnet_cuda/kernels`` (through importlib.resources: editable installs
    keep the built fatbin in site-packages and the source in the source tree)."""
    return Path(str(resources.files("bitnet_cuda").joinpath("kernels", name)))


SOURCE = _kernel_file("bitnet_kernels.cu")
FATBIN = _kernel_file("bitnet_kernels.fatbin")
KERNELS = (
    # the provider's ops
    "quantize_act",
    "matmul_i2s",
    "matmul_dense_f16",
    "matmul_dense_bf16",
    "matmul_dense_f32",
    "matmul_i2s_r2",
    "matmul_i2s_r4",
    "matmul_dense_f16_r4",
    "matmul_dense_bf16_r4",
    "matmul_dense_f32_r4",
    "rmsnorm",
    "rope",
    "attention",
    "attention_f16",
    # the fused decode step of runner.py
    "matmul_i2s_add",
    "matmul_i2s_r2_add",
    "matmul_i2s_r4_add",
    "matmul_i2s_mma",
    "matmul_i2s_mma_add",
    "embed_f16",
    "embed_bf16",
    "embed_f32",
    "rmsnorm_quant",
    "act_norm_quant",
    "rope_store",
    "rope_store_f16",
    "attn_split",
    "attn_split_f16",
    "rope_store_seqs",
    "rope_store_seqs_f16",
    "attn_split_seqs",
    "attn_split_seqs_f16",
    "attn_combine_norm_quant",
    "qkv_attend",
    "qkv_attend_f16",
    "norm_gemv_add",
    "norm_gemv_act",
    "argmax_next",
    "sample_next",
)


def load_module(cp: Any) -> tuple[Any, str]:
    """``(RawModule, how)`` where how is ``"fatbin"`` or ``"nvrtc"``."""
    if FATBIN.is_file():
        try:
            mod = cp.RawModule(path=str(FATBIN))
            for name in KERNELS:
                mod.get_function(name)  # fails when the fatbin has no code for this GPU
            return mod, "fatbin"
        except Exception:
            pass
    mod = cp.RawModule(code=SOURCE.read_text(), options=("-std=c++17",), name_expressions=None)
    for name in KERNELS:
        mod.get_function(name)
    return mod, "nvrtc"
