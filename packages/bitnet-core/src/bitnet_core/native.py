"""Access to the compiled module ``bitnet_core._native`` (CPU features, CPU kernels).

bitnet-core is always built with its native module; if it is missing (a
broken install, a source tree used without building), callers get a clear
reason instead of an ImportError deep in a kernel.
"""

from __future__ import annotations

from functools import lru_cache
from types import ModuleType


@lru_cache(maxsize=1)
def load_native() -> tuple[ModuleType | None, str]:
    """``(module, "")`` or ``(None, reason)``."""
    try:
        from . import _native  # type: ignore[attr-defined]
    except ImportError as exc:
        return None, f"bitnet_core._native is not built/installed: {exc}"
    return _native, ""


def cpu_features() -> dict[str, bool]:
    """The CPU features the native module detected (empty when it is missing)."""
    mod, _ = load_native()
    return dict(mod.cpu_features()) if mod else {}
