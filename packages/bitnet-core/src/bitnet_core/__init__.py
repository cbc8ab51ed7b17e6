"""bitnet-core: BitNet b1.58 inference on whatever device the machine has.

The public API::

    import bitnet_core
    bitnet_core.list_providers()          # every registered provider, probed
    sel = bitnet_core.select("auto")      # chosen provider + startup summary
    model = bitnet_core.load("m.gguf")    # a Model: .generate, .stream, .logits
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
    "load",
    "select",
]


def __getattr__(name: str):
    if name in ("load", "Model"):  # imported on first use: keeps `import bitnet_core` light
        from . import model

        return getattr(model, name)
    raise AttributeError(f"module 'bitnet_core' has no attribute {name!r}")
