"""The native module is built and reports CPU features."""

import platform
from pathlib import Path

from bitnet_core.native import cpu_features, load_native


def test_native_module_loads():
    mod, reason = load_native()
    assert mod is not None, reason


def test_cpu_features_match_architecture():
    feats = cpu_features()
    if platform.machine() in ("x86_64", "AMD64"):
        assert feats["sse4_2"]  # every x86-64 CPU this project supports has it
        assert set(feats) >= {"avx2", "avx512f", "avx512vnni", "fma"}
        cpuinfo = Path("/proc/cpuinfo").read_text() if platform.system() == "Linux" else ""
        if cpuinfo:
            assert feats["avx2"] == (" avx2" in cpuinfo)
            assert feats["avx512f"] == (" avx512f" in cpuinfo)
    elif platform.machine() in ("aarch64", "arm64"):
        assert feats["neon"]
