"""The backend SDK's one convention for a missing runtime: ``RuntimeUnavailable`` with its step."""

from __future__ import annotations

import sys

import pytest

from bitnet_core.errors import DeviceUnavailableError
from bitnet_core.sdk.runtime import RuntimeUnavailable, import_runtime


@pytest.fixture
def modules(tmp_path, monkeypatch):
    """A folder on sys.path for real modules that fail to import in the ways SDKs do."""
    monkeypatch.syspath_prepend(str(tmp_path))
    yield tmp_path
    for name in ("bitnet_fake_sdk_oserror", "bitnet_fake_sdk_needs_dep", "bitnet_fake_sdk_ok"):
        sys.modules.pop(name, None)


def test_a_missing_package_is_step_import_with_the_install_hint():
    with pytest.raises(RuntimeUnavailable) as err:
        import_runtime("bitnet_no_such_sdk", "pip install no-such-sdk", "NoSuchSDK")
    assert err.value.step == "import"
    assert "NoSuchSDK is not installed (pip install no-such-sdk)" in str(err.value)
    assert isinstance(err.value, DeviceUnavailableError)
    avail = err.value.availability()
    assert (avail.available, avail.step, avail.reason) == (False, "import", str(err.value))


def test_a_missing_native_library_is_step_loader(modules):
    (modules / "bitnet_fake_sdk_oserror.py").write_text(
        "raise OSError('libdriver.so.1: cannot open shared object file')\n"
    )
    with pytest.raises(RuntimeUnavailable) as err:
        import_runtime("bitnet_fake_sdk_oserror", "pip install x")
    assert err.value.step == "loader" and "libdriver.so.1" in str(err.value)


def test_a_package_missing_its_own_dependency_is_step_loader(modules):
    (modules / "bitnet_fake_sdk_needs_dep.py").write_text("import bitnet_absent_dependency\n")
    with pytest.raises(RuntimeUnavailable) as err:
        import_runtime("bitnet_fake_sdk_needs_dep", "pip install x")
    assert err.value.step == "loader" and "bitnet_absent_dependency" in str(err.value)


def test_an_importable_runtime_is_returned(modules):
    (modules / "bitnet_fake_sdk_ok.py").write_text("VALUE = 7\n")
    assert import_runtime("bitnet_fake_sdk_ok", "pip install x").VALUE == 7


def test_one_device_variable_scheme_with_deprecated_names(monkeypatch, caplog):
    from bitnet_core.sdk.runtime import device_choice, device_variable

    assert device_variable("level-zero") == "BITNET_LEVEL_ZERO_DEVICE"
    monkeypatch.delenv("BITNET_XPU_DEVICE", raising=False)
    monkeypatch.setenv("BITNET_XPU_OLD", "2")
    assert device_choice("xpu") == ""
    assert device_choice("xpu", deprecated=("BITNET_XPU_OLD",)) == "2"
    assert "BITNET_XPU_OLD is deprecated; set BITNET_XPU_DEVICE=2" in caplog.text
    monkeypatch.setenv("BITNET_XPU_DEVICE", "1")
    assert device_choice("xpu", deprecated=("BITNET_XPU_OLD",)) == "1"  # the new name wins
