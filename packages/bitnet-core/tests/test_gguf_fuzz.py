"""A short run of the atheris fuzz target (tools/fuzz/fuzz_gguf.py), as CI runs it."""

from __future__ import annotations

import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

TARGET = Path(__file__).resolve().parents[3] / "tools" / "fuzz" / "fuzz_gguf.py"


def test_fuzz_target_short_run(tmp_path):
    pytest.importorskip("atheris", reason="atheris (dev dependency) is not installed")
    seconds = os.environ.get("BITNET_FUZZ_SECONDS", "5")
    # libFuzzer's RSS is getrusage's peak, which Linux carries across fork and
    # exec: the child starts at this (pytest) process's peak, so the 1 GiB
    # budget is counted on top of it; one allocation stays capped at 1 GiB.
    parent_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss // 1024
    proc = subprocess.run(
        [
            sys.executable,
            str(TARGET),
            f"-max_total_time={seconds}",
            f"-rss_limit_mb={parent_mb + 1024}",
            "-malloc_limit_mb=1024",
            f"-artifact_prefix={tmp_path}/",
        ],
        capture_output=True,
        text=True,
        timeout=int(seconds) + 120,
        cwd=tmp_path,
    )
    tail = (proc.stdout + proc.stderr)[-3000:]
    assert proc.returncode == 0, tail
    assert "Done" in tail, tail
