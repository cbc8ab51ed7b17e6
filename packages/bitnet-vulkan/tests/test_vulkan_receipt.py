"""The receipt of a run on vulkan (lavapipe in CI): what ran, and on what device."""

from __future__ import annotations

from bitnet_core.testing.receipt import check_run_receipt


def test_receipt_lists_what_ran_and_names_the_explicit_device() -> None:
    check_run_receipt("vulkan", emulated=lambda avail: avail.details["device_type"] == "cpu")
