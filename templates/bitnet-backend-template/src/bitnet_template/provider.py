"""``TemplateProvider``: provider ``template``, one op in C++ through pybind11.

How a backend is put together (copy this shape):

- class attributes describe the plugin (the core keeps no list of backends):
  ``name`` is what ``--device`` and the entry point use; ``family`` the
  device request it answers; ``device_kind`` ``"gpu"`` for a GPU backend;
  ``priority`` orders auto-selection (lower wins: CPU providers use 60-100,
  GPU backends less); ``fakeable = True`` lets ``BITNET_GPU_FAKE`` stand in
  for a GPU family; ``DeviceProvider`` supplies ``plugin_api``, which the
  registry checks at load;
- ``probe`` (``runtime.py``) never raises;
- the memory ops (``memory.py``: ``to_device``, ``to_host``, ``empty``,
  ``reshape``, ``load_ternary``, ``kv_store``) decide what a device array is
  and how a weight is kept. Every backend must have them;
- ``DeviceProvider`` checks every op's arguments before the op runs
  (``bitnet_core.sdk.checks``): an op's body does not repeat them.

Accelerated (C++, ``csrc/kernels.cpp``, loaded by ``kernels.py``): ``matmul_i2s``. Every compute op the
class does not define runs on the HOST (the numpy reference), placed there by
the registry with the copies around it (``bitnet_core.hal.placement``); the
receipt's ``provider.host_ops`` and ``bitnet devices --verbose`` list them.
Add your kernels one op at a time; the conformance kit
(``tests/test_conformance.py``) tells you when one is wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bitnet_core.hal.provider import Availability
from bitnet_core.sdk.provider import DeviceProvider

from . import kernels
from .memory import TemplateMemory, TemplateWeight
from .runtime import probe as _probe


class TemplateProvider(TemplateMemory, DeviceProvider):
    """Provider ``template``: C++ matmul_i2s; the other compute ops run on the host."""

    name = "template"
    family = "template"
    device_kind = "cpu"  # "gpu" for a GPU backend
    priority = 500  # after cpu-reference (100): never chosen by auto unless you lower it
    distribution = "bitnet-template"

    def probe(self, explicit: bool = False) -> Availability:
        return _probe(explicit)

    # --- the C++ kernels ---------------------------------------------------------
    def matmul_i2s(self, xq: Any, xscale: Any, weight: TemplateWeight) -> np.ndarray:
        return kernels.matmul_i2s(xq, xscale, weight)
