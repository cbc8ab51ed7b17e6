"""The probe on this machine, and its reason at each step that can fail.

The failing steps run for real in a subprocess with the environment that
breaks them (no driver, a device index that does not exist, no loader).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bitnet_core.hal.registry import REGISTRY
from bitnet_vulkan.provider import VulkanProvider

PROBE = """
import json, sys
from bitnet_vulkan.provider import VulkanProvider
a = VulkanProvider().probe(explicit=True)
print(json.dumps({"available": a.available, "reason": a.reason, "step": a.step}))
"""


def probe_in(env: dict[str, str], code: str = PROBE) -> dict:
    full = {**os.environ, "XDG_RUNTIME_DIR": "/tmp", **env}
    out = subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_explicit_probe_finds_a_device(vk):
    a = vk.probe(explicit=True)
    assert a.available and a.device and a.details["device_type"]


def test_auto_probe_skips_cpu_devices(vk):
    a = vk.probe(explicit=False)
    if vk.device_info.is_cpu:
        assert not a.available and "only a CPU Vulkan device" in a.reason
    else:
        assert a.available


def test_registered_as_entry_point():
    REGISTRY.refresh()
    rec = REGISTRY.get("vulkan")
    assert rec is not None and rec.family == "vulkan" and rec.device_kind == "gpu"
    assert isinstance(rec.provider, VulkanProvider)


def test_reason_when_no_driver():
    r = probe_in(
        {"VK_DRIVER_FILES": "/nonexistent/icd.json", "VK_ICD_FILENAMES": "/nonexistent/icd.json"}
    )
    assert not r["available"]
    assert "vkCreateInstance" in r["reason"] or "no Vulkan physical device" in r["reason"]


def test_reason_for_a_device_index_that_does_not_exist():
    r = probe_in({"BITNET_VULKAN_DEVICE": "99"})
    assert not r["available"] and "BITNET_VULKAN_DEVICE=99" in r["reason"]


def test_reason_for_a_malformed_device_index():
    r = probe_in({"BITNET_VULKAN_DEVICE": "first"})
    assert not r["available"] and "not a device index" in r["reason"]


def test_reason_when_the_loader_cannot_load(tmp_path):
    # dlopen("libvulkan.so.1") searches LD_LIBRARY_PATH first: a file there that is not a
    # library makes the real load fail, as on a machine without a usable loader.
    (tmp_path / "libvulkan.so.1").write_text("not a library")
    r = probe_in({"LD_LIBRARY_PATH": str(tmp_path)})
    assert not r["available"] and r["step"] == "loader"
    assert "libvulkan.so.1" in r["reason"]


def test_forcing_int_dot_is_honoured_where_supported(vk):
    """lavapipe (Mesa 22.3) has shaderIntegerDotProduct, not accelerated: off by default, on when forced."""
    if not vk.device_info.int_dot:
        pytest.skip(f"{vk.device_info.name} has no shaderIntegerDotProduct")
    code = PROBE.replace(
        '"step": a.step', '"step": a.step, "int_dot": a.details.get("integer_dot_product")'
    )
    r = probe_in({"BITNET_VULKAN_INT_DOT": "1"}, code)
    assert r["available"] and r["int_dot"] is True


def test_forcing_int_dot_where_unsupported_is_an_error(monkeypatch):
    """A device without the feature (its feature query answering no): the probe says why."""
    from bitnet_vulkan.runtime import devices

    monkeypatch.setattr(devices, "_integer_dot", lambda *args: (False, False))
    monkeypatch.setenv("BITNET_VULKAN_INT_DOT", "1")
    a = VulkanProvider().probe(explicit=True)
    assert not a.available
    assert "BITNET_VULKAN_INT_DOT=1" in a.reason and "shaderIntegerDotProduct" in a.reason


@pytest.mark.parametrize("value", ["0", "off"])
def test_int_dot_can_be_switched_off(value):
    full = {**os.environ, "XDG_RUNTIME_DIR": "/tmp", "BITNET_VULKAN_INT_DOT": value}
    code = (
        "from bitnet_vulkan.provider import VulkanProvider\n"
        "p = VulkanProvider(); a = p.probe(explicit=True)\n"
        "print(a.available and a.details['integer_dot_product'])\n"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], env=full, capture_output=True, text=True, timeout=120
    )
    assert out.stdout.strip().splitlines()[-1] == "False"


def test_reason_for_a_wheel_built_without_shaders(monkeypatch):
    """What a BITNET_VULKAN_SKIP_SHADERS=ON build installs: _spirv.SKIPPED, no modules."""
    from bitnet_vulkan import _spirv

    monkeypatch.setattr(_spirv, "SKIPPED", True)
    monkeypatch.setattr(_spirv, "MODULES", {})
    a = VulkanProvider().probe(explicit=True)
    assert not a.available and a.step == "kernels"
    assert "BITNET_VULKAN_SKIP_SHADERS" in a.reason and "glslangValidator" in a.reason


def test_auto_keeps_a_cpu_only_vulkan_out_of_the_process(vk):
    """auto probes Vulkan in a child process (bitnet_core.hal.probe_child): where the
    only Vulkan device is lavapipe, its driver and LLVM (~95 MB) are never loaded into
    the process that runs the model, and the summary still says why."""
    if not vk.device_info.is_cpu:
        pytest.skip("a Vulkan GPU is present: auto may select it")
    code = (
        "import bitnet_core; s = bitnet_core.select('auto'); "
        "print(s.summary.unavailable['vulkan']); "
        "print(any('libvulkan_lvp' in line for line in open('/proc/self/maps')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "XDG_RUNTIME_DIR": "/tmp"},
    )  # fmt: skip
    reason, loaded = out.stdout.strip().splitlines()[-2:]
    assert "only a CPU Vulkan device" in reason and loaded == "False", out.stdout
