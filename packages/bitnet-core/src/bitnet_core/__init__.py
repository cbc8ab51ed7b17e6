"""bitnet-core: BitNet b1.58 inference on whatever device the machine has.

The public API::

    import bitnet_core
    bitnet_core.list_providers()          # every registered provider, probed
    sel = bitnet_core.select("auto")      # chosen provider + startup summary
"""

from ._version import __version__
from .errors import BitnetError
from .hal import (
    Availability,
    BackendRequest,
    KernelProvider,
    StartupSummary,
    TernaryWeight,
    list_providers,
    select,
)

__all__ = [
    "Availability",
    "BackendRequest",
    "BitnetError",
    "KernelProvider",
    "StartupSummary",
    "TernaryWeight",
    "__version__",
    "list_providers",
    "select",
]
