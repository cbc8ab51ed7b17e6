"""Per-dispatch GPU times from timestamp queries (``BITNET_VULKAN_TIMESTAMPS=1``)."""

from __future__ import annotations

import time

import numpy as np
import pytest

from bitnet_core.config import BitNetConfig
from bitnet_core.model import random_weights
from bitnet_vulkan.provider import VulkanProvider
from bitnet_vulkan.timestamps import ENV_TIMESTAMPS

CONFIG = BitNetConfig(
    vocab_size=512, hidden_size=128, num_layers=3, num_heads=4, num_kv_heads=2,
    intermediate_size=256, context_length=64,
)  # fmt: skip


def _provider(monkeypatch, on: bool) -> VulkanProvider:
    """A provider of its own (the switch is read when its device is set up)."""
    monkeypatch.setenv(ENV_TIMESTAMPS, "1" if on else "0")
    p = VulkanProvider()
    avail = p.probe(explicit=True)
    if not avail.available:
        pytest.skip(f"no Vulkan device: {avail.reason}")
    return p


def test_every_dispatch_of_a_replayed_decode_step_is_timed(monkeypatch):
    p = _provider(monkeypatch, on=True)
    if p.device_info.timestamp_period <= 0:
        pytest.skip(f"{p.device_info.name}: the compute queue has no timestamps")
    timer = p.stream.timer
    runner = p.make_runner(random_weights(CONFIG, seed=4), progress=False)
    assert timer is not None and type(runner).__name__ == "VulkanRunner"
    with runner.new_cache() as seq:
        tok = int(runner.forward(np.arange(1, 6), seq).argmax())
        for _ in range(2):  # the step is recorded, then replayed
            tok = int(runner.forward([tok], seq).argmax())
        timer.times.clear()
        steps = 4
        t0 = time.perf_counter()
        for _ in range(steps):
            tok = int(runner.forward([tok], seq).argmax())
        wall = time.perf_counter() - t0
    launches = {name: int(n) for name, (n, _) in timer.times.items()}
    layer = ("qkv_attend", "norm_gemv_add", "norm_gemv_act")  # a decode token's layer
    matmuls = sum(n for name, n in launches.items() if name.startswith(layer))
    assert matmuls == steps * 4 * CONFIG.num_layers  # q|k|v, o, gate|up, down a layer
    assert sum(launches.values()) == steps * (4 * CONFIG.num_layers + 3)
    assert sum(n for name, n in launches.items() if name.startswith("matmul_dense")) == steps
    assert launches.get("embedding") == steps
    seconds = [s for _, s in timer.times.values()]
    assert all(s > 0 for s in seconds)
    assert sum(seconds) <= wall  # each step waits for its device work
    p.close()


def test_off_by_default_no_queries(monkeypatch):
    p = _provider(monkeypatch, on=False)
    assert p.stream.timer is None
    runner = p.make_runner(random_weights(CONFIG, seed=4), progress=False)
    with runner.new_cache() as seq:
        assert runner.forward(np.arange(1, 4), seq).shape == (CONFIG.vocab_size,)
    p.close()


def test_step_profile_tool_reads_the_timestamps_per_split_size(tmp_path):
    """tools/bench/step_profile.py --kernels on this provider: a kernel table from the
    timestamps (set on for the load) for every split size asked, on the same weights."""
    import json
    import subprocess
    import sys
    from pathlib import Path

    probe = VulkanProvider().probe(explicit=True)
    if not probe.available:
        pytest.skip(f"no Vulkan device: {probe.reason}")
    root = Path(__file__).resolve().parents[3]
    out = tmp_path / "vk.json"
    argv = [sys.executable, str(root / "tools" / "bench" / "step_profile.py"), "--preset",
            "host-bound", "--layers", "2", "--device", "vulkan", "--kernels", "--steps", "2",
            "--prompt", "8", "40", "--keys-per-split", "16", "64", "--json", str(out)]  # fmt: skip
    env = {k: v for k, v in __import__("os").environ.items() if k != ENV_TIMESTAMPS}
    env["TMPDIR"] = str(tmp_path)
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=300, env=env)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    runs = json.loads(out.read_text())["variants"]["default"]["runs"]
    assert [(r["prompt"], r["keys_per_split"]) for r in runs] == [
        (8, 16), (8, 64), (40, 16), (40, 64)
    ]  # fmt: skip
    for r in runs:
        kernels = {k["kernel"]: k for k in r["kernels"]}
        assert kernels["qkv_attend"]["launches_per_step"] == 2  # a layer each
        assert kernels["norm_gemv_add"]["launches_per_step"] == 4, kernels  # o, down
        assert r["step_wall_us"] > 0 and r["capacity"] >= 40
