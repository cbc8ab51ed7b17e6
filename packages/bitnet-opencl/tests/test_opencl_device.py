"""Device choice: ranking, BITNET_OPENCL_DEVICE, explicit vs auto, probe reasons."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bitnet_core.hal import REGISTRY
from bitnet_core.hal.selection import select
from bitnet_opencl import OpenCLProvider
from bitnet_opencl.runtime.devices import (
    DeviceInfo,
    Discovery,
    choose_device,
    discover,
    parse_device_env,
)


def dev(p: int, d: int, kind: str, cu: int = 8, version=(3, 0), **kw) -> DeviceInfo:
    return DeviceInfo(p, d, f"plat{p}", f"dev{p}{d}", kind, version, "OpenCL x", cu, 1 << 30, **kw)


CPU = dev(0, 0, "cpu", cu=64)
IGPU = dev(1, 0, "integrated-gpu", cu=96)
DGPU = dev(1, 1, "discrete-gpu", cu=16)
ALL = Discovery([CPU, IGPU, DGPU])


def test_ranking_prefers_discrete_then_integrated_gpu():
    assert choose_device(False, "", ALL)[0] == DGPU
    assert choose_device(True, "", ALL)[0] == DGPU
    assert choose_device(False, "", Discovery([CPU, IGPU]))[0] == IGPU


def test_cpu_device_only_when_explicit():
    info, reason = choose_device(False, "", Discovery([CPU]))
    assert info is None and "no OpenCL GPU" in reason and "--device opencl" in reason
    assert choose_device(True, "", Discovery([CPU]))[0] == CPU


def test_device_request():
    assert choose_device(True, "0:0", ALL)[0] == CPU
    assert choose_device(False, "1:0", ALL)[0] == IGPU
    assert choose_device(False, "1", ALL)[0] == DGPU  # best of platform 1
    info, reason = choose_device(False, "0:0", ALL)
    assert info is None and "not a GPU" in reason
    info, reason = choose_device(True, "4:0", ALL)
    assert info is None and "matches no device" in reason and "1:1=dev11" in reason
    info, reason = choose_device(True, "gpu please", ALL)
    assert info is None and "platform:device" in reason


def test_unusable_devices_are_skipped_with_reasons():
    old = dev(0, 0, "discrete-gpu", version=(1, 1))
    assert choose_device(False, "", Discovery([old, IGPU]))[0] == IGPU
    info, reason = choose_device(False, "", Discovery([old]))
    assert info is None and "needs OpenCL 1.2+" in reason
    info, reason = choose_device(True, "0:0", Discovery([old]))
    assert info is None and "needs OpenCL 1.2+" in reason


def test_parse_device_env():
    assert parse_device_env("0:1") == (0, 1)
    assert parse_device_env(" 2 ") == (2, None)
    for bad in ("", "a:b", "1:2:3", "-1:0"):
        with pytest.raises(ValueError):
            parse_device_env(bad)


# --- on this machine's real OpenCL stack ------------------------------------------


@pytest.fixture
def clean_env(monkeypatch):
    for var in ("BITNET_DEVICE", "BITNET_GPU_FAKE", "BITNET_STRICT_MODE", "BITNET_OPENCL_DEVICE"):
        monkeypatch.delenv(var, raising=False)
    REGISTRY.refresh()
    yield monkeypatch
    REGISTRY.refresh()


def test_env_picks_the_device(clean_env, ocl):
    address = ocl.device_info.address
    clean_env.setenv("BITNET_OPENCL_DEVICE", address)
    p = OpenCLProvider()
    avail = p.probe(explicit=True)
    assert avail.available and avail.details["address"] == address
    clean_env.setenv("BITNET_OPENCL_DEVICE", "97:0")
    avail = OpenCLProvider().probe(explicit=True)
    assert not avail.available and "97:0 matches no device" in avail.reason


def test_registry_selection_explicit_vs_auto(clean_env, ocl):
    found = discover()
    has_gpu = any(d.is_gpu for d in found.devices)
    for request in ("opencl", "ocl"):
        assert select(request).record.name == "opencl"
    auto = select("auto")
    if has_gpu:
        assert auto.record.name == "opencl" or auto.record.priority < 30
    else:
        assert auto.record.name != "opencl"
        assert "no OpenCL GPU" in auto.summary.unavailable["opencl"]


def test_probe_without_pyopencl(monkeypatch):
    monkeypatch.setitem(sys.modules, "pyopencl", None)  # import raises ImportError
    avail = OpenCLProvider().probe(explicit=True)
    assert not avail.available and "pyopencl is not installed" in avail.reason
    assert avail.step == "import"


def test_probe_without_any_icd(tmp_path):
    """An ICD loader with no driver registered: the reason says so (checked in a child
    process, since the loader reads OCL_ICD_VENDORS once)."""
    env = dict(os.environ, OCL_ICD_VENDORS=str(tmp_path))
    code = "from bitnet_opencl import OpenCLProvider; print(OpenCLProvider().probe(True).reason)"
    out = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    assert "no platform" in out.stdout and "ICD" in out.stdout


def test_unavailable_provider_refuses_ops(clean_env):
    clean_env.setenv("BITNET_OPENCL_DEVICE", "97:0")
    from bitnet_core.errors import DeviceUnavailableError

    with pytest.raises(DeviceUnavailableError, match="97:0"):
        OpenCLProvider().empty((2,))


def test_auto_keeps_a_cpu_only_opencl_out_of_the_process(clean_env, ocl):
    """auto probes OpenCL in a child process (bitnet_core.hal.probe_child): where the only
    OpenCL device is a CPU (PoCL here), PoCL and its LLVM (~70 MB) are never loaded
    into the process that runs the model, and the summary still says why."""
    if any(d.is_gpu for d in discover().devices):
        pytest.skip("an OpenCL GPU is present: auto may select it")
    code = (
        "import bitnet_core; s = bitnet_core.select('auto'); "
        "print(s.summary.unavailable['opencl']); "
        "print(any('libpocl' in line for line in open('/proc/self/maps')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True
    )
    reason, loaded = out.stdout.strip().splitlines()[-2:]
    assert "no OpenCL GPU" in reason and loaded == "False", out.stdout
