"""Level 1 of the HAL: the ``KernelProvider`` protocol (seed 003).

A provider owns one device and runs the ops a BitNet model needs on arrays
that live on that device between ops. The model (Level 2, ``ModelRunner``) only
moves token ids in and logits out.

Array conventions (the numpy reference provider is the executable spec):

- a *device array* is whatever the provider returns from ``to_device`` or an
  op (numpy array, CuPy array, OpenCL buffer wrapper...); the model never
  looks inside, it only passes it back to the same provider;
- activations are float32, row-major ``[T, ...]`` with T tokens;
- ternary weights come in as ``TernaryWeight`` and are made resident by
  ``load_ternary``; dense tables (embeddings, the tied output head) by
  ``to_device`` and may be kept as float16 or float32;
- arrays are immutable once an op returned them: nothing writes into an op's
  input or result except ``kv_store`` (into a cache from ``empty``), so a
  provider may share or cache results (one activation quantization for q/k/v);
- ``rope`` positions and ``embedding`` ids stay host numpy arrays (a provider
  may build exact tables from them on the host).

Numerics every provider must match (``bitnet_core.testing`` checks them):

- ``quantize_act``: per token (row) absmax to int8 as in BitNet b1.58:
  ``s = 127 / max(max|x|, 1e-5)``, ``xq = clamp(round_half_even(x*s), -128, 127)``;
- ``matmul_i2s``: ``y[t, n] = (sum_k xq[t, k] * codes[n, k]) * scales[n] / s[t]``
  with exact integer accumulation;
- ``rope``: rotation by ``pos * theta ** (-2i / rot_dim)``; style ``"neox"``
  pairs ``(i, i + rot_dim/2)`` (Hugging Face ``rotate_half``), style ``"norm"``
  pairs ``(2i, 2i+1)`` (GGML's default);
- ``attention``: causal, grouped-query; query ``t`` sits at absolute position
  ``start + t`` and sees cache positions ``0 .. start + t``; scale ``1/sqrt(D)``.

Optional members (``OPTIONAL_OPS``; the generic engine, ``bitnet_core.sdk.runner``,
uses them when present):

- ``make_runner(weights, **opts)``: a fused Level-2 runner, or None;
- ``set_threads(n)``: CPU threads (``bitnet run --threads``);
- ``kernel_names()``: the kernels a receipt lists when the provider keeps no
  ``trace`` (``sdk.trace.LaunchTrace``; default: the ops above).

Optional attributes (read by the generic engine):

- ``kv_dtypes``: the KV cache dtypes ``kv_store``/``attention`` accept,
  preferred first (default ``("float32",)``: ``sdk.kv_cache.DEFAULT_KV_DTYPES``); ``"float16"`` caches hold the
  round-to-nearest-even float16 of what ``kv_store`` gets;
- ``table_dtypes``: the dtypes ``to_device`` takes for the 2-D embedding and
  output tables (``embedding``, ``matmul_dense``); default
  ``("float32", "float16")``. A provider listing ``"bfloat16"`` gets a BF16
  file's tables as ``hal.bf16.BF16Array`` (bit patterns); the others get
  them widened to float32;
- ``commits_on_touch``: True when memory from ``empty`` costs nothing until
  written (numpy on the host): KV caches are then made once at full length
  and grow without copies.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from .weights import TernaryWeight

DeviceKind = Literal["cpu", "gpu"]
RopeStyle = Literal["neox", "norm"]

#: The version of the plugin interface this core speaks. A provider declares the
#: one it was written for as ``plugin_api``; the registry refuses another.
PLUGIN_API_VERSION = 1

#: The ops of the protocol: seed 003's kernel inventory plus what a whole model needs.
#: A provider may lack compute ops: they then run on the host (``placement.py``).
#: Quantizing float weights to a ternary format is host work (``bitnet_core.formats``).
KERNEL_INVENTORY: tuple[str, ...] = (
    "to_device",
    "to_host",
    "empty",
    "load_ternary",
    "reshape",
    "embedding",
    "rmsnorm",
    "quantize_act",
    "matmul_i2s",
    "linear",
    "matmul_ternary_float",
    "matmul_dense",
    "rope",
    "kv_store",
    "attention",
    "silu",
    "relu2",
    "silu_mul",
    "relu2_mul",
    "add",
    "mul",
)

#: Members a provider may have; see the module docstring.
OPTIONAL_OPS: tuple[str, ...] = ("make_runner", "set_threads", "kernel_names")


@dataclass(frozen=True)
class Availability:
    """Result of a provider's probe: can it run here, on what, and if not, why.

    ``step`` names where an unavailable provider stopped, one of ``STEPS``
    (``"import"``: its SDK is not installed; ``"loader"``: the SDK is there but
    the driver library is not; ``"device"``: no usable device; ``"kernels"``:
    its programs failed to build or load; ``"plugin"``: the plugin itself failed
    to load or is for another core).

    ``device_kind`` is what the device found is, when the provider knows it
    better than its class attribute does: ``"cpu"`` for a CPU that a GPU API
    emulates (PoCL's CPU device, lavapipe, llvmpipe); ``""`` means the
    provider's ``device_kind``.
    """

    available: bool
    reason: str = ""
    device: str = ""
    fake: bool = False
    details: dict[str, Any] = field(default_factory=dict)
    step: str = ""
    device_kind: str = ""

    @classmethod
    def yes(cls, device: str, device_kind: str = "", **details: Any) -> Availability:
        return cls(True, "", device, False, details, "", device_kind)

    @classmethod
    def no(cls, reason: str, step: str = "device", **details: Any) -> Availability:
        return cls(False, reason, "", False, details, step)


#: Where a probe can stop (``Availability.step``), in the order a probe walks them.
STEPS: tuple[str, ...] = ("plugin", "import", "loader", "device", "kernels")


@runtime_checkable
class KernelProvider(Protocol):
    """What a backend package implements (and registers under ``bitnet.providers``).

    The plugin describes itself with class attributes; the core keeps no list:

    - ``name``: unique (``"cpu-avx2"``), the entry point's name;
    - ``family``: the device request it answers (``"cpu"`` or the backend's own);
    - ``device_kind``: ``"cpu"`` or ``"gpu"``;
    - ``priority``: its rank in auto-selection (lower wins; the CPU providers
      use 60 to 100, GPU backends rank below 60);
    - ``plugin_api``: the ``PLUGIN_API_VERSION`` it was written for;
    - optional: ``aliases`` (more request names for its family), ``fakeable``
      (``BITNET_GPU_FAKE`` may stand in for it), ``distribution`` (the package
      that ships it, for "install it" hints; default: the entry point's).

    ``probe`` must never raise: it returns ``Availability.no(reason, step=...)``
    instead. ``explicit`` is true when the user asked for this provider by name
    or family, which may allow devices auto-selection skips (a CPU device of a
    GPU API).
    """

    name: str
    family: str
    device_kind: DeviceKind
    priority: int
    plugin_api: int

    def probe(self, explicit: bool = False) -> Availability: ...

    # memory
    def to_device(self, array: np.ndarray) -> Any: ...
    def to_host(self, array: Any) -> np.ndarray: ...
    def empty(self, shape: tuple[int, ...], dtype: Any = np.float32) -> Any: ...
    def load_ternary(self, weight: TernaryWeight) -> Any: ...
    def reshape(self, array: Any, shape: tuple[int, ...]) -> Any:
        """A row-major view of ``array`` with the same number of elements (no copy)."""
        ...

    # ops
    def embedding(self, table: Any, ids: np.ndarray) -> Any: ...
    def rmsnorm(self, x: Any, weight: Any, eps: float) -> Any: ...
    def quantize_act(self, x: Any) -> tuple[Any, Any]: ...
    def matmul_i2s(self, xq: Any, xscale: Any, weight: Any) -> Any: ...
    def linear(self, x: Any, weight: Any) -> Any: ...
    def matmul_ternary_float(self, x: Any, weight: Any) -> Any: ...
    def matmul_dense(self, x: Any, table: Any) -> Any: ...
    def rope(
        self, x: Any, positions: np.ndarray, theta: float, style: RopeStyle, rot_dim: int
    ) -> Any: ...
    def kv_store(self, cache: Any, x: Any, start: int) -> None: ...
    def attention(self, q: Any, k_cache: Any, v_cache: Any, start: int) -> Any: ...
    def silu(self, x: Any) -> Any: ...
    def relu2(self, x: Any) -> Any: ...
    def silu_mul(self, gate: Any, up: Any) -> Any: ...
    def relu2_mul(self, gate: Any, up: Any) -> Any: ...
    def add(self, a: Any, b: Any) -> Any: ...
    def mul(self, a: Any, b: Any) -> Any: ...
