"""The two-level hardware abstraction layer: providers (ops) and backends (models)."""

from .provider import KERNEL_INVENTORY, PLUGIN_API_VERSION, Availability, KernelProvider
from .registry import ENTRY_POINT_GROUP, REGISTRY, ProviderRecord, list_providers
from .runner import ModelRunner
from .selection import BackendRequest, Selection, StartupSummary, select, strict_mode
from .weights import TernaryWeight, pack_i2, unpack_i2

__all__ = [
    "Availability",
    "ModelRunner",
    "BackendRequest",
    "ENTRY_POINT_GROUP",
    "KERNEL_INVENTORY",
    "KernelProvider",
    "PLUGIN_API_VERSION",
    "ProviderRecord",
    "REGISTRY",
    "Selection",
    "StartupSummary",
    "TernaryWeight",
    "list_providers",
    "pack_i2",
    "select",
    "strict_mode",
    "unpack_i2",
]
