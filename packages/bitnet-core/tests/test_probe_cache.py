"""GPU providers found unavailable, remembered between processes (hal/probe_cache.py):
recalled while nothing that could change the answer changed, never when something
did, the cache off with ``BITNET_CACHE=0``; a second ``auto`` process starts no
probe child."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest

from bitnet_core.hal import REGISTRY, probe_cache
from bitnet_core.hal.provider import Availability

NAMES = {"opencl": "bitnet-opencl", "vulkan": "bitnet-vulkan"}
NO = Availability.no("no OpenCL GPU (found: a CPU device)")


@pytest.fixture
def cache(tmp_path, monkeypatch):
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.setenv("BITNET_CACHE", "1")
    return tmp_path / "bitnet" / "probes.json"


def test_an_unavailable_provider_is_recalled_with_its_reason(cache):
    probe_cache.remember({"opencl": NO, "vulkan": Availability.yes("lavapipe")}, NAMES)
    assert set(json.loads(cache.read_text())) == {"opencl"}  # a usable one is never kept
    got = probe_cache.recall(NAMES)
    assert set(got) == {"opencl"} and not got["opencl"].available
    assert (
        got["opencl"].reason.startswith(NO.reason)
        and probe_cache.REMEMBERED in got["opencl"].reason
    )
    probe_cache.remember(got, NAMES)  # remembered again: the note is not doubled
    assert json.loads(cache.read_text())["opencl"]["reason"] == NO.reason


@pytest.mark.parametrize(
    "change", ["env", "driver_env", "age", "corrupt", "off"], ids=str
)  # fmt: skip
def test_nothing_is_recalled_once_something_changed(cache, monkeypatch, change):
    probe_cache.remember({"opencl": NO}, NAMES)
    if change == "env":
        monkeypatch.setenv("BITNET_OPENCL_PLATFORM", "1")
    elif change == "driver_env":
        monkeypatch.setenv("OCL_ICD_VENDORS", "/elsewhere")
    elif change == "age":
        data = json.loads(cache.read_text())
        data["opencl"]["at"] -= probe_cache.MAX_AGE_S + 1
        cache.write_text(json.dumps(data))
    elif change == "corrupt":
        cache.write_text('{"opencl": {"at": "x"')
    else:
        monkeypatch.setenv("BITNET_CACHE", "0")
    assert probe_cache.recall(NAMES) == {}


def test_off_writes_nothing_and_timeouts_are_not_kept(cache, monkeypatch):
    probe_cache.remember({"opencl": Availability.no("its probe did not finish in 120 s")}, NAMES)
    assert not cache.exists()
    monkeypatch.setenv("BITNET_CACHE", "0")
    probe_cache.remember({"opencl": NO}, NAMES)
    assert not cache.exists()


_SELECT = """
import json
from bitnet_core.hal import probe_child, selection
started = []
class Counted(probe_child.ChildProbe):
    def __init__(self, names):
        started.append(list(names))
        super().__init__(names)
selection.ChildProbe = Counted
sel = selection.select("auto")
print(json.dumps({"started": started, "selected": sel.provider.name,
                  "unavailable": sel.summary.unavailable}))
"""


def test_a_second_auto_process_starts_no_probe_child(cache):
    gpus = [r.name for r in REGISTRY.records() if r.device_kind == "gpu" and r.from_entry_point]
    if not gpus:
        pytest.skip("no GPU provider package is installed here")
    env = dict(os.environ)
    env.pop("BITNET_DEVICE", None)

    def run() -> dict:
        out = subprocess.run(
            [sys.executable, "-c", _SELECT], capture_output=True, text=True, env=env, timeout=300
        )
        assert out.returncode == 0, out.stderr
        return json.loads(out.stdout.strip().splitlines()[-1])

    first, second = run(), run()
    assert first["started"]  # the first process asked a child
    kept = set(json.loads(cache.read_text())) if cache.exists() else set()
    if not kept:
        pytest.skip(f"every GPU provider here is usable ({gpus}): nothing to remember")
    assert second["selected"] == first["selected"]
    assert all(name not in kept for names in second["started"] for name in names)
    for name in kept:
        assert probe_cache.REMEMBERED in second["unavailable"][name]
