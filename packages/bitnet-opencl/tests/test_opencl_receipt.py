"""The receipt of a run on opencl (PoCL's CPU device in CI): what ran, and on what device."""

from __future__ import annotations

from bitnet_core.testing.receipt import check_run_receipt


def test_receipt_lists_what_ran_and_names_the_explicit_device() -> None:
    check_run_receipt("opencl", emulated=lambda avail: avail.details["kind"] == "cpu")
