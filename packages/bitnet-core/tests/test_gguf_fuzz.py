"""A short run of the atheris fuzz target (tools/fuzz/fuzz_gguf.py), as CI runs it."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

TARGET = Path(__file__).resolve().parents[3] / "tools" / "fuzz" / "fuzz_gguf.py"


def test_fuzz_target_short_run(tmp_path):
    pytest.importorskip("atheris", reason="atheris (dev dependency) is not installed")
    seconds = os.environ.get("BITNET_FUZZ_SECONDS", "5")
    proc = subprocess.run(
        [
            sys.executable,
            str(TARGET),
            f"-max_total_time={seconds}",
            "-rss_limit_mb=1024",
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
