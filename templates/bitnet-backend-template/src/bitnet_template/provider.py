"""``TemplateProvider``: the kernels of provider ``template``, C++ through pybind11.

How a backend is put together (copy this shape):

- class attributes ``name`` / ``family`` / ``device_kind`` / ``priority`` /
  ``plugin_api`` describe the plugin (the core keeps no list of backends):
  ``name`` is what ``--device`` and the entry point use; ``family`` the
  device request it answers; ``device_kind`` ``"gpu"`` for a GPU backend;
  ``priority`` orders auto-selection (lower wins: CPU providers use 60-100,
  GPU backends less); ``plugin_api`` is checked by the registry at load;
  ``fakeable = True`` lets ``BITNET_GPU_FAKE`` stand in for a GPU family;
- ``probe`` (``probe.py``) never raises;
- the memory ops decide what a device array is (here: a host numpy array;
  a GPU backend returns its buffer type and copies in ``to_device``/``to_host``);
- ``load_ternary`` turns a ``TernaryWeight`` into the layout the kernels
  want (here: the canonical 2-bit I2 packing, a quarter byte per weight);
- every op validates shapes and raises ``bitnet_core.errors`` errors.

Implemented in C++ (``csrc/kernels.cpp``): ``matmul_i2s`` and ``rmsnorm``.
Every other op is INHERITED from ``ReferenceProvider`` (numpy) so the
provider is complete from the start; replace them one at a time with your
own kernels, and the conformance kit (``tests/test_conformance.py``) tells
you when one is wrong. Inherited ops that take a weight
(``matmul_ternary_float``) read ``.codes``/``.scales``, which
``TemplateWeight`` keeps for them; drop those once you override the ops.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bitnet_core.errors import ShapeError
from bitnet_core.hal.provider import PLUGIN_API_VERSION, Availability
from bitnet_core.hal.weights import TernaryWeight
from bitnet_core.providers.reference import ReferenceProvider, ReferenceWeight

from .probe import probe as _probe


class TemplateWeight(ReferenceWeight):
    """A resident ternary weight: 2-bit packed codes for the C++ kernel (plus int8 codes)."""

    __slots__ = ("packed",)

    def __init__(self, name: str, codes: np.ndarray, scales: np.ndarray) -> None:
        super().__init__(name, codes, scales)
        self.packed = np.ascontiguousarray(TernaryWeight.from_codes(codes, scales).packed_i2())


class TemplateProvider(ReferenceProvider):
    """Provider ``template``: C++ matmul_i2s and rmsnorm, the rest from the reference."""

    name = "template"
    family = "template"
    device_kind = "cpu"  # "gpu" for a GPU backend
    priority = 500  # after cpu-reference (100): never chosen by auto unless you lower it
    plugin_api = PLUGIN_API_VERSION
    distribution = "bitnet-template"

    def probe(self, explicit: bool = False) -> Availability:
        return _probe(explicit)

    # --- memory: device arrays are contiguous host numpy arrays here ------------
    def to_device(self, array: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(array)

    def load_ternary(self, weight: TernaryWeight) -> TemplateWeight:
        codes, scales = weight.unpack()
        return TemplateWeight(weight.name, codes, scales.astype(np.float32))

    # --- the C++ kernels ---------------------------------------------------------
    def matmul_i2s(self, xq: Any, xscale: Any, weight: TemplateWeight) -> np.ndarray:
        from . import _kernels

        xq = np.asarray(xq)
        if xq.ndim != 2 or xq.shape[1] != weight.codes.shape[1]:
            raise ShapeError(
                f"matmul_i2s: activations {xq.shape} do not match weight {weight.codes.shape}"
            )
        xscale = np.asarray(xscale, dtype=np.float32).reshape(-1)
        if xscale.shape[0] != xq.shape[0]:
            raise ShapeError(f"matmul_i2s: {xscale.shape[0]} scales for {xq.shape[0]} rows")
        return _kernels.matmul_i2s(
            xq.astype(np.int8, copy=False), xscale, weight.packed, weight.scales, xq.shape[1]
        )

    def rmsnorm(self, x: Any, weight: Any, eps: float) -> np.ndarray:
        from . import _kernels

        x = np.asarray(x, dtype=np.float32)
        weight = np.asarray(weight, dtype=np.float32).reshape(-1)
        if x.ndim == 0 or x.shape[-1] != weight.shape[0]:
            raise ShapeError(f"rmsnorm: x {x.shape} does not match weight {weight.shape}")
        flat = x.reshape(-1, x.shape[-1])
        return _kernels.rmsnorm(flat, weight, float(eps)).reshape(x.shape)

    # Everything else (embedding, quantize_act, rope, attention, kv_store,
    # activations, ...) is ReferenceProvider's numpy code: replace with your kernels.
