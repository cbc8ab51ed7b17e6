"""The CUDA provider on a CPU emulator of the device (see cupy_emulator.py)."""

from __future__ import annotations

from typing import Any

from bitnet_cuda.provider import CudaProvider

from .cupy_emulator import SEEDS, EmulatedCuPy, StreamRace, missing

__all__ = ["SEEDS", "EmulatedCudaProvider", "StreamRace", "missing"]


class EmulatedCudaProvider(CudaProvider):
    """The real ``cuda`` provider, its CuPy replaced by ``EmulatedCuPy``."""

    def _cupy_module(self) -> Any:
        return EmulatedCuPy()
