"""Loading the ``vulkan`` package (which dlopens ``libvulkan.so.1``) and turning its errors into ours.

Every Vulkan call the provider makes goes through :func:`call` (the
package's wrappers) or :func:`check` (raw ``lib`` calls returning a
``VkResult``), so a failure is a ``ProviderError`` that names the call.
"""

from __future__ import annotations

from types import ModuleType
from typing import Any

from bitnet_core.errors import ProviderError
from bitnet_core.sdk.runtime import RuntimeUnavailable, import_runtime

_VK: ModuleType | None = None
_LOAD_ERROR: RuntimeUnavailable | None = None


def load() -> ModuleType:
    """The imported ``vulkan`` package; ``RuntimeUnavailable`` (step import/loader) when it cannot load."""
    global _VK, _LOAD_ERROR
    if _VK is not None:
        return _VK
    if _LOAD_ERROR is None:
        try:
            _VK = import_runtime("vulkan", "pip install vulkan")
            return _VK
        except RuntimeUnavailable as exc:
            if exc.step == "loader":  # the package raises OSError when no loader library is found
                exc = RuntimeUnavailable(
                    f"the Vulkan loader libvulkan.so.1 could not be loaded ({exc.__cause__})",
                    "loader",
                )
            _LOAD_ERROR = exc
    raise _LOAD_ERROR


def result_name(code: int) -> str:
    """``VK_ERROR_OUT_OF_DEVICE_MEMORY`` for its numeric ``VkResult``."""
    vk = load()
    for name in dir(vk):
        if (name.startswith("VK_ERROR_") or name in ("VK_TIMEOUT", "VK_NOT_READY")) and getattr(
            vk, name
        ) == code:
            return name
    return f"VkResult {code}"


def call(name: str, *args: Any) -> Any:
    """Call ``vulkan.<name>(*args)``; any Vulkan error becomes ``ProviderError`` naming the call."""
    vk = load()
    try:
        return getattr(vk, name)(*args)
    except vk.VkError as exc:
        raise ProviderError(f"{name} failed: {type(exc).__name__}") from exc


def check(name: str, result: int) -> None:
    """Raise ``ProviderError`` naming ``name`` unless ``result`` is ``VK_SUCCESS``."""
    if result != 0:
        raise ProviderError(f"{name} failed: {result_name(result)}")
