"""The runtime role of the ``vulkan`` backend: the loader, the device choice, the device's state.

``vkapi``: loading the ``vulkan`` package and turning its errors into ours;
``devices``: the physical devices and ``BITNET_VULKAN_DEVICE``; ``context``:
instance, logical device, compute queue, buffers and memory
(``VulkanContext``); ``session``: the provider's part of it
(``VulkanRuntime``: the probe, the context made on first use, a dispatch).
The package imports none of them itself, so ``kernels`` and ``stream`` can
use ``vkapi`` and ``context`` while ``session`` uses them.
"""
