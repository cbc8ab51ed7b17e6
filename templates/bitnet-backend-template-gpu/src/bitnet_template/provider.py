"""``TemplateProvider``: provider ``template``, a GPU backend's shape with one op accelerated.

How a GPU backend is put together (copy this shape):

- it derives from ``GpuProvider`` (``device_kind="gpu"``, ``fakeable``); class
  keywords describe the plugin (the core keeps no list of backends): ``family``
  is what ``--device`` and the entry point use, ``priority`` orders
  auto-selection (lower wins: GPU backends 10-50, CPU providers 60-100);
  ``kv_dtypes`` lists the KV cache dtypes its ``kv_store``/``attention`` take
  (none listed: float32 only);
- ``probe`` (``runtime.py``) never raises;
- the memory ops (``memory.py``) decide what a device array is and how a weight
  is kept; the kernels live in ``kernels/`` with their loader;
- ``make_runner`` returns the fused Level-2 runner (``runner.py``, on
  ``bitnet_core.sdk.fused``), or None for a graph its fused step does not compute.

Accelerated: ``matmul_i2s`` (``kernels/``). Every compute op the class does not
define runs on the HOST (the numpy reference), placed there by the registry
(``bitnet_core.hal.placement``); the receipt's ``provider.host_ops`` lists them.
Add your kernels one op at a time; the conformance kit tells you when one is wrong.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from bitnet_core.hal.placement import place
from bitnet_core.hal.provider import Availability
from bitnet_core.hal.registry import REGISTRY
from bitnet_core.sdk.fused import fused_graph_supported
from bitnet_core.sdk.provider import GpuProvider

from . import kernels
from .memory import TemplateMemory, TemplateWeight
from .runtime import probe as _probe


class TemplateProvider(
    TemplateMemory,
    GpuProvider,
    family="template",
    priority=500,  # after every CPU provider: auto never picks it until you lower it
    distribution="bitnet-template",
):
    """Provider ``template``: matmul_i2s in its kernels, a fused runner; the other ops on the host."""

    def probe(self, explicit: bool = False) -> Availability:
        return _probe(explicit)

    def matmul_i2s(self, xq: Any, xscale: Any, weight: TemplateWeight) -> np.ndarray:
        return kernels.matmul_i2s(xq, xscale, weight)

    def make_runner(self, weights: Any, **opts: Any) -> Any:
        """The fused runner (``runner.py``), over this provider with the ops it lacks
        placed on the host as the registry places them; None (the generic engine runs
        the model, visibly) for a graph the fused step does not compute."""
        if not fused_graph_supported(self, weights):
            return None
        from .runner import TemplateRunner

        host = REGISTRY.get("cpu-reference").provider
        return TemplateRunner(place(self, host), weights, **opts)
