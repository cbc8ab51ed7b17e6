"""The provider registry, selection, fakes, strict mode and the startup summary."""

from __future__ import annotations

import logging
import subprocess
import sys
import textwrap
import time

import pytest

from bitnet_core.errors import (
    ConfigError,
    DeviceUnavailableError,
    StrictModeError,
    UnknownDeviceError,
)
from bitnet_core.hal import BackendRequest, list_providers, select

PLUGIN_MODULE = textwrap.dedent(
    """
    import os
    import time

    from bitnet_core.providers.reference import ReferenceProvider
    from bitnet_core.hal.provider import Availability

    PROBES = []  # (name, explicit) of every probe

    class GoodGpu(ReferenceProvider):
        name = "testgpu"
        family = "testfam"
        device_kind = "gpu"
        priority = 25
        aliases = ("tfam",)
        fakeable = True
        distribution = "bitnet-test-plugin"

        def probe(self, explicit=False):
            PROBES.append((self.name, explicit))
            return Availability.yes("test gpu 0")

    class NoDevice(ReferenceProvider):
        name = "testvk"
        family = "vulkan"
        device_kind = "gpu"
        priority = 41

        def probe(self, explicit=False):
            PROBES.append((self.name, explicit))
            if os.environ.get("BITNET_TEST_STUCK_PROBE"):
                time.sleep(60)  # a driver that never answers
            return Availability.no("no Vulkan device with a compute queue")

    class ProbeRaises(ReferenceProvider):
        name = "testraise"
        family = "webgpu"
        device_kind = "gpu"
        priority = 51

        def probe(self, explicit=False):
            PROBES.append((self.name, explicit))
            raise RuntimeError("driver exploded")

    class OtherApi(ReferenceProvider):
        name = "testold"
        family = "testold"
        device_kind = "gpu"
        priority = 26
        plugin_api = 99

        def probe(self, explicit=False):
            PROBES.append((self.name, explicit))
            return Availability.yes("never asked")
    """
)

ENTRY_POINTS = textwrap.dedent(
    """
    [bitnet.providers]
    testgpu = bitnet_test_plugin:GoodGpu
    testvk = bitnet_test_plugin:NoDevice
    testraise = bitnet_test_plugin:ProbeRaises
    testbroken = bitnet_test_broken:Provider
    testold = bitnet_test_plugin:OtherApi
    """
)


@pytest.fixture
def installed_plugin(tmp_path, monkeypatch, clean_registry):
    """Install a real distribution with ``bitnet.providers`` entry points onto sys.path.

    It is what ``pip install`` leaves in site-packages (modules plus a
    ``.dist-info`` folder), found by ``importlib.metadata`` like any other.
    """
    (tmp_path / "bitnet_test_plugin.py").write_text(PLUGIN_MODULE)
    (tmp_path / "bitnet_test_broken.py").write_text(
        "raise ImportError('libfoo.so.1: cannot open shared object file')\n"
    )
    info = tmp_path / "bitnet_test_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: bitnet-test-plugin\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text(ENTRY_POINTS)
    monkeypatch.syspath_prepend(str(tmp_path))
    clean_registry.refresh()
    yield tmp_path
    for mod in ("bitnet_test_plugin", "bitnet_test_broken"):
        sys.modules.pop(mod, None)


def by_name(records):
    return {r.name: r for r in records}


def test_reference_provider_always_listed(clean_registry):
    recs = by_name(list_providers())
    assert recs["cpu-reference"].availability.available
    assert select().record.name in recs


def test_entry_point_plugin_found_and_ranked(installed_plugin):
    recs = list_providers()
    names = [r.name for r in recs]
    assert names.index("testgpu") < names.index("cpu-reference")
    assert [r.priority for r in recs] == sorted(r.priority for r in recs)
    sel = select("auto")
    assert sel.record.name == "testgpu"
    assert select("testfam").record.name == "testgpu"
    assert select("tfam").record.name == "testgpu"  # the plugin's own alias
    assert select("gpu").record.name == "testgpu"
    assert select("cpu").record.device_kind == "cpu"


def test_broken_plugin_is_unavailable_with_reason(installed_plugin):
    recs = by_name(list_providers())
    broken = recs["testbroken"]
    assert not broken.availability.available
    assert "libfoo.so.1" in broken.availability.reason
    raising = recs["testraise"]
    assert not raising.availability.available
    assert "driver exploded" in raising.availability.reason
    assert broken.availability.step == "plugin"
    # what a plugin that failed to load cannot say is not guessed
    assert (broken.family, broken.device_kind) == ("", "unknown")
    with pytest.raises(DeviceUnavailableError, match="libfoo.so.1"):
        select("testbroken")  # it answers its entry point's name
    # the core keeps working
    assert select("cpu-reference").record.name == "cpu-reference"


def test_plugin_describes_itself(installed_plugin):
    rec = by_name(list_providers())["testgpu"]
    assert (rec.family, rec.priority, rec.aliases, rec.fakeable) == ("testfam", 25, ("tfam",), True)
    assert rec.distribution == "bitnet-test-plugin"


def test_plugin_api_version_checked_at_load(installed_plugin):
    rec = by_name(list_providers())["testold"]
    assert not rec.availability.available and rec.availability.step == "plugin"
    assert "plugin API 99" in rec.availability.reason
    assert rec.family == "testold" and rec.priority == 26  # what it says of itself is kept
    assert ("testold", False) not in sys.modules["bitnet_test_plugin"].PROBES
    with pytest.raises(DeviceUnavailableError, match="plugin API 99"):
        select("testold")


def test_fakes_come_from_fakeable_plugins(installed_plugin, clean_registry, monkeypatch):
    monkeypatch.setenv("BITNET_GPU_FAKE", "testfam")
    clean_registry.refresh()
    fake = by_name(list_providers())["fake-testfam"]
    assert fake.priority == 24 and fake.availability.fake  # just ahead of the real one
    assert select("tfam").record.name == "fake-testfam"
    monkeypatch.setenv("BITNET_GPU_FAKE", "testvk")  # installed, but not fakeable
    clean_registry.refresh()
    with pytest.raises(ConfigError, match="unknown device testvk"):
        list_providers()


def test_specific_unavailable_request_names_reason(installed_plugin):
    with pytest.raises(DeviceUnavailableError, match="no Vulkan device with a compute queue"):
        select("testvk")


def test_missing_family_is_clear_error(clean_registry):
    with pytest.raises(DeviceUnavailableError, match="bitnet-cuda"):
        select("cuda")


def test_uninstalled_backend_hint_comes_from_the_meta_package_extras(
    clean_registry, monkeypatch, tmp_path
):
    """The core knows no backend: the ``bitnet`` meta package's extras name the distribution."""
    from bitnet_core.hal import extras

    info = tmp_path / "bitnet-9.9.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: bitnet\nVersion: 9.9\n"
        'Requires-Dist: bitnet-tpu; extra == "tpu"\n'
        'Requires-Dist: bitnet-tpu; extra == "gpu"\n'
        'Requires-Dist: bitnet-x; extra == "gpu"\n'
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    extras.extras.cache_clear()
    try:
        assert extras.extras() == {"tpu": "bitnet-tpu"}
        with pytest.raises(
            DeviceUnavailableError, match=r"install bitnet-tpu: pip install 'bitnet\[tpu\]'"
        ):
            select("tpu")
        with pytest.raises(UnknownDeviceError):
            select("npu")
    finally:
        extras.extras.cache_clear()


def test_unknown_device(clean_registry):
    with pytest.raises(UnknownDeviceError, match="unknown device 'tpu'"):
        select("tpu")


def test_request_sources(installed_plugin, monkeypatch):
    monkeypatch.setenv("BITNET_DEVICE", "TFAM")
    assert BackendRequest.parse(None) == BackendRequest("testfam", "env")
    assert BackendRequest.parse("cpu") == BackendRequest("cpu", "flag")
    monkeypatch.delenv("BITNET_DEVICE")
    assert BackendRequest.parse(None) == BackendRequest("auto", "default")


def test_env_device_used(clean_registry, monkeypatch):
    monkeypatch.setenv("BITNET_DEVICE", "cpu-reference")
    assert select().summary.requested == "cpu-reference"


def test_fake_gpu_selected_for_selection_tests(clean_registry, monkeypatch):
    monkeypatch.setenv("BITNET_GPU_FAKE", "cuda,vulkan")
    clean_registry.refresh()
    sel = select("auto")
    assert sel.record.name == "fake-cuda"
    assert sel.summary.fake
    assert select("vulkan").record.name == "fake-vulkan"


def test_strict_mode_rejects_fake_gpu(clean_registry, monkeypatch):
    monkeypatch.setenv("BITNET_GPU_FAKE", "cuda")
    monkeypatch.setenv("BITNET_STRICT_MODE", "1")
    clean_registry.refresh()
    with pytest.raises(StrictModeError) as err:
        select("cuda")
    assert err.value.exit_code == 8
    # the fake is never selected: cpu is real, and auto either finds a real GPU or
    # refuses to fall back past installed-but-unavailable GPU providers
    assert not select("cpu").record.fake
    try:
        assert not select("auto").record.fake
    except StrictModeError as exc:
        assert "forbids falling back" in str(exc)


def test_strict_mode_forbids_fallback_past_unavailable_gpu(installed_plugin, monkeypatch):
    monkeypatch.setenv("BITNET_STRICT_MODE", "1")
    # testgpu (priority 25) is available, so auto is fine ...
    assert select("auto").record.name == "testgpu"
    # ... but asking for the CPU while GPUs are unavailable is not a fallback
    assert select("cpu").record.device_kind == "cpu"


def test_cpu_requests_probe_only_cpu_providers(installed_plugin):
    for request in ("cpu", "cpu-reference"):
        sel = select(request)
        assert sel.record.device_kind == "cpu" and "testgpu" not in sel.summary.detected
    plugin = sys.modules.get("bitnet_test_plugin")
    assert plugin is None or plugin.PROBES == []  # never probed (perhaps not even imported)
    assert "testgpu" in select("auto").summary.detected  # auto probes everything
    assert sys.modules["bitnet_test_plugin"].PROBES


def test_strict_auto_fallback_error(clean_registry, monkeypatch, tmp_path):
    (tmp_path / "bitnet_only_broken.py").write_text(
        "from bitnet_core.providers.reference import ReferenceProvider\n"
        "from bitnet_core.hal.provider import Availability\n"
        "class P(ReferenceProvider):\n"
        "    name='onlygpu'; family='cuda'; device_kind='gpu'; priority=10\n"
        "    def probe(self, explicit=False):\n"
        "        return Availability.no('no NVIDIA driver')\n"
    )
    info = tmp_path / "bitnet_only_broken-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: bitnet-only-broken\nVersion: 1.0\n"
    )
    (info / "entry_points.txt").write_text("[bitnet.providers]\nonlygpu = bitnet_only_broken:P\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    clean_registry.refresh()
    assert select("auto").record.device_kind == "cpu"  # non-strict: falls back
    monkeypatch.setenv("BITNET_STRICT_MODE", "1")
    with pytest.raises(StrictModeError, match="no NVIDIA driver"):
        select("auto")
    sys.modules.pop("bitnet_only_broken", None)


def test_bad_fake_spec(clean_registry, monkeypatch):
    monkeypatch.setenv("BITNET_GPU_FAKE", "tpu")
    clean_registry.refresh()
    with pytest.raises(ConfigError, match="BITNET_GPU_FAKE"):
        list_providers()


def test_summary_logged_and_recorded(clean_registry, caplog):
    with caplog.at_level(logging.INFO, logger="bitnet"):
        sel = select("cpu")
    line = str(sel.summary)
    assert line.startswith("requested=cpu detected=[")
    assert line.endswith(f"selected={sel.record.name}")
    assert line in caplog.text
    assert sel.summary.as_dict()["line"] == line


def test_selection_is_cached(clean_registry):
    assert select("cpu") is select("cpu")


def run_cli(*args, env=None):
    import os

    full_env = {k: v for k, v in os.environ.items() if not k.startswith("BITNET_")}
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "bitnet_core.cli.main", *args],
        capture_output=True,
        text=True,
        env=full_env,
        timeout=120,
    )


def test_cli_devices_prints_summary():
    r = run_cli("devices")
    assert r.returncode == 0, r.stderr
    assert "cpu-reference" in r.stdout
    assert "requested=auto detected=[" in r.stdout


def test_cli_devices_json():
    import json

    r = run_cli("devices", "--json")
    assert r.returncode == 0, r.stderr
    data = json.loads(r.stdout)
    assert data["summary"]["line"].startswith("requested=auto")
    assert any(p["name"] == "cpu-reference" and p["available"] for p in data["providers"])


def test_cli_cuda_without_cuda_fails_clearly():
    r = run_cli("devices", "--device", "cuda")
    assert r.returncode != 0
    assert "error: device 'cuda' requested" in r.stderr
    assert "Traceback" not in r.stderr


def test_cli_strict_fake_exit_8():
    r = run_cli(
        "devices", "--device", "cuda", env={"BITNET_GPU_FAKE": "cuda", "BITNET_STRICT_MODE": "1"}
    )
    assert r.returncode == 8
    assert "fake" in r.stderr


def test_auto_probes_gpu_providers_in_a_child_process(installed_plugin):
    """auto asks every GPU provider in one child process: the parent loads and probes
    only the one it selects; the others' verdicts (and reasons) come from the child."""
    sel = select("auto")
    assert sel.record.name == "testgpu"
    assert sys.modules["bitnet_test_plugin"].PROBES == [("testgpu", False)]
    assert "testgpu" in sel.summary.detected
    assert sel.summary.unavailable["testvk"] == "no Vulkan device with a compute queue"
    assert "driver exploded" in sel.summary.unavailable["testraise"]
    assert "testbroken" in sel.summary.unavailable


def test_gpu_probes_fall_back_in_process_when_no_child_can_start(installed_plugin, monkeypatch):
    monkeypatch.setattr(sys, "executable", str(installed_plugin / "no-such-python"))
    sel = select("auto")
    assert sel.record.name == "testgpu"
    probes = sys.modules["bitnet_test_plugin"].PROBES
    assert ("testvk", False) in probes and ("testraise", False) in probes  # probed here
    assert sel.summary.unavailable["testvk"] == "no Vulkan device with a compute queue"


def test_a_stuck_gpu_probe_is_reported_not_waited_for(installed_plugin, monkeypatch):
    from bitnet_core.hal import probe_child

    monkeypatch.setenv("BITNET_TEST_STUCK_PROBE", "1")
    monkeypatch.setattr(probe_child, "PROBE_TIMEOUT_S", 5.0)
    t0 = time.monotonic()
    sel = select("auto")
    assert time.monotonic() - t0 < 30
    assert sel.record.device_kind == "cpu"  # every GPU provider shared the stuck child
    assert "did not finish in 5 s" in sel.summary.unavailable["testvk"]
    assert "did not finish in 5 s" in sel.summary.unavailable["testgpu"]


def test_explicit_request_probes_only_what_it_could_choose(installed_plugin):
    sel = select("testfam")  # testgpu's family
    assert sel.record.name == "testgpu"
    assert {name for name, _ in sys.modules["bitnet_test_plugin"].PROBES} == {"testgpu"}
    assert "testvk" not in sel.summary.detected and "testvk" not in sel.summary.unavailable


def test_cli_devices_verbose_says_which_ops_run_where():
    import json

    r = run_cli("devices", "--verbose", "--device", "cpu")
    assert r.returncode == 0, r.stderr
    assert "on the device: to_device" in r.stdout and "on the host:" in r.stdout
    data = json.loads(run_cli("devices", "--json").stdout)
    ref = next(p for p in data["providers"] if p["name"] == "cpu-reference")
    assert "attention" in ref["device_ops"] and ref["host_ops"] == []
