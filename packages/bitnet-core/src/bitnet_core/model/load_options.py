"""How a model is loaded, from the options every entry point shares (``bitnet
run``/``chat``/``bench``/``embed``/``serve``, ``serve-ray``'s replicas).

``ModelOptions`` declares them once: each field carries its flag and help
(``option_fields``), so the command line's flags (``cli/model_options.py``) and
the Ray Serve replica's arguments (``server/ray_config.py``) are both made from
it. ``apply_threads`` and ``kv_cache_config`` turn the values into the kernels'
threads and the KV cache.
"""

from __future__ import annotations

import dataclasses
import os
from dataclasses import dataclass
from typing import Literal

from ..errors import ConfigError
from ..option_fields import option
from ..sdk.kv_cache import KVCacheConfig


@dataclass(frozen=True)
class ModelOptions:
    """The model to load, on which device, with what threads and KV cache."""

    model: str | None = option(
        None, "--model", "-m",
        help="GGUF file, or a hub model ORG/NAME[@REV][:FILE] or hf://ORG/NAME/FILE.gguf "
        "(default: the bundled demo model)",
    )  # fmt: skip
    device: str | None = option(
        None, "--device",
        help="auto, cpu, gpu, a device family or a provider name (see bitnet devices)",
    )  # fmt: skip
    threads: int | None = option(
        None, "--threads", "-t", help="CPU threads for the kernels", minimum=1
    )
    act_quant: bool = option(
        True, "--no-act-quant",
        help="debug: keep activations in float (no per-token int8 quantization)",
    )  # fmt: skip
    ctx_size: int | None = option(
        None, "--ctx-size", "-c", help="context length (tokens)", minimum=1
    )
    kv_type: Literal["f16", "f32"] | None = option(
        None, "--kv-type",
        help="KV cache element type (default: the device's choice; f16 on the native CPU providers)",
    )  # fmt: skip
    kv_budget: int | None = option(
        None, "--kv-budget", metavar="MIB", minimum=1,
        help="KV cache memory for all sequences together, MiB (default 1024)",
    )  # fmt: skip
    progress: bool = option(
        True, "--no-progress", help="no progress bar while the model loads", replica=False
    )

    def kv_cache(self) -> KVCacheConfig | None:
        """``--ctx-size``, ``--kv-type`` and ``--kv-budget`` as a ``KVCacheConfig``."""
        return kv_cache_config(self.ctx_size, self.kv_type, self.kv_budget)


def replica_fields() -> list[dataclasses.Field]:
    """The ``ModelOptions`` fields a Ray Serve replica takes (all but the command line's own)."""
    return [f for f in dataclasses.fields(ModelOptions) if f.metadata["replica"]]


def apply_threads(threads: int | None) -> None:
    """``--threads``: exported as ``BITNET_THREADS``/``OMP_NUM_THREADS`` before providers load."""
    if threads is None:
        return
    if threads <= 0:
        raise ConfigError(f"--threads must be a positive integer, got {threads}")
    os.environ["BITNET_THREADS"] = str(threads)
    os.environ["OMP_NUM_THREADS"] = str(threads)


def kv_cache_config(
    ctx_size: int | None, kv_type: str | None, kv_budget_mib: int | None
) -> KVCacheConfig | None:
    """``--ctx-size``, ``--kv-type`` and ``--kv-budget`` as a ``KVCacheConfig`` (None: defaults)."""
    if ctx_size is not None and ctx_size <= 0:
        raise ConfigError(f"--ctx-size must be a positive integer, got {ctx_size}")
    if kv_budget_mib is not None and kv_budget_mib <= 0:
        raise ConfigError(f"--kv-budget must be a positive number of MiB, got {kv_budget_mib}")
    if ctx_size is None and kv_type is None and kv_budget_mib is None:
        return None
    kv = KVCacheConfig(max_seq_len=ctx_size, dtype=kv_type)
    if kv_budget_mib is not None:
        kv = dataclasses.replace(kv, max_bytes=kv_budget_mib << 20)
    return kv
