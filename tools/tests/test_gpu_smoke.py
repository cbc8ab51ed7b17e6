"""ci/gpu_smoke.py and ci/gpu-bench.sh, the GPU machine's scripts, where CI can run them:
on the CPU devices that emulate a GPU API (lavapipe), with time limits too short to pass."""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tarfile
import time
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def _lavapipe() -> None:
    sys.path.insert(0, str(ROOT / "packages" / "bitnet-vulkan" / "src"))
    from bitnet_vulkan.provider import VulkanProvider

    avail = VulkanProvider().probe(explicit=True)
    if not avail.available:
        pytest.skip(f"no Vulkan device to run the smoke script on: {avail.reason}")


def test_a_provider_past_its_time_is_stopped_with_its_stack_and_the_next_still_runs(tmp_path):
    """Each provider runs in a process of its own; one that outlives ``--timeout`` prints
    every thread's stack and exits, and the receipt says so."""
    _lavapipe()
    t0 = time.perf_counter()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "ci" / "gpu_smoke.py"), "--providers", "vulkan", "webgpu",
         "--skip-model", "--timeout", "2", "--out", str(tmp_path)],
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 1, proc.stdout + proc.stderr
    receipt = json.loads((tmp_path / "parity-receipt.json").read_text())
    for name in ("vulkan", "webgpu"):
        entry = receipt["providers"][name]
        assert entry["status"] == "failed" and entry["error"] == "timed out after 2.0 s"
        assert "Timeout (0:00:02)!" in entry["log_tail"]
        assert "(most recent call first):" in entry["log_tail"]  # the threads' stacks
        assert (tmp_path / f"smoke-{name}.log").exists()
    assert elapsed < 60  # both stopped: the whole conformance kit takes far longer here


def test_the_log_tail_of_a_timeout_keeps_the_watchdog_header_over_a_deep_stack():
    """A stack deeper than the tail's budget (a parser's recursion) still leaves the
    watchdog's header and the innermost and outermost frames in the receipt."""
    spec = importlib.util.spec_from_file_location("gpu_smoke", ROOT / "ci" / "gpu_smoke.py")
    smoke = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(smoke)
    frames = "".join(f'  File "parser.py", line {i} in _parse\n' for i in range(400))
    text = "ok op 1\n" * 50 + "Timeout (0:00:02)!\nThread 0x1 (most recent call first):\n"
    tail = smoke._log_tail(text + frames + '  File "gpu_smoke.py", line 314 in <module>\n')
    assert len(tail) < 4100
    assert tail.startswith("Timeout (0:00:02)!\nThread 0x1 (most recent call first):")
    assert tail.endswith("line 314 in <module>\n") and "[...]" in tail
    assert smoke._log_tail("short log\n") == "short log\n"  # no timeout: the tail as it is
    assert smoke._log_tail("x" * 5000) == "x" * 4000


def test_gpu_bench_ends_inside_its_budget_with_every_stage_accounted_for(tmp_path):
    """ci/gpu-bench.sh with a 25-second budget: every stage is cut to what is left or
    skipped, and the summary, logs and results archive still come back."""
    _lavapipe()
    env = dict(os.environ, BITNET_GPU_BUDGET="25", BITNET_GPU_STAGE_SCALE="0.05")
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", str(ROOT / "ci" / "gpu-bench.sh"), str(tmp_path)],
                          capture_output=True, text=True, timeout=180, env=env)  # fmt: skip
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (tmp_path / "summary.txt").read_text()
    assert "GPU providers:" in summary
    for stage in ("smoke-vulkan", "cuda", "vulkan", "opencl", "steps", "kv-diff", "host-cpu"):
        assert f"\n{stage}: " in "\n" + summary, summary
    assert "PROVIDER" in (tmp_path / "setup.log").read_text()  # `bitnet devices` ran
    with tarfile.open(tmp_path / "results.tgz") as tar:
        assert any(n.startswith("results") for n in tar.getnames())
    assert elapsed < 25 + 60  # the budget, setup and the last stage's grace


def test_host_cpu_ends_inside_its_budget_with_every_stage_accounted_for(tmp_path):
    """ci/host-cpu.sh with a 20-second budget: the machine is named, every stage runs cut
    to its share or is skipped, and the logs land where asked."""
    env = dict(os.environ, BITNET_HOST_BUDGET="20", BITNET_GPU_STAGE_SCALE="0.05")
    env.pop("PY", None)
    out, res = tmp_path / "out", tmp_path / "res"
    t0 = time.perf_counter()
    proc = subprocess.run(["bash", str(ROOT / "ci" / "host-cpu.sh"), str(out), str(res)],
                          capture_output=True, text=True, timeout=180, env=env)  # fmt: skip
    elapsed = time.perf_counter() - t0
    assert proc.returncode == 0, proc.stdout + proc.stderr
    summary = (out / "summary.txt").read_text()
    assert f"{len(os.sched_getaffinity(0))} CPUs" in summary, summary
    assert "llama-cpp-python: " in summary, summary
    for stage in ("tests", "probe", "issue29", "issue28", "sweep"):
        assert f"\n{stage}: " in "\n" + summary, summary
    assert (out / "lscpu.txt").exists() and res.is_dir()
    assert elapsed < 20 + 60  # the budget, setup and the last stage's grace


def test_kv_diff_finds_the_first_differing_row_and_runs_on_lavapipe(tmp_path):
    """ci/gpu_kv_diff.py (gpu-bench's float16-cache question): a planted one-ulp change in
    row 5 is reported as such; on lavapipe the whole comparison runs, every row compared."""
    import numpy as np

    spec = importlib.util.spec_from_file_location("gpu_kv_diff", ROOT / "ci" / "gpu_kv_diff.py")
    kvd = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(kvd)
    a = np.random.default_rng(0).standard_normal((9, 2, 8)).astype(np.float16)
    b = a.copy()
    b.view(np.uint16)[5, 1, 3] += 1
    assert kvd.diff_rows(a, a, 9) == {
        "rows_differing": 0, "first_row": None, "max_ulp": 0, "max_rel": 0.0
    }  # fmt: skip
    got = kvd.diff_rows(a, b, 9)
    assert got["rows_differing"] == 1 and got["first_row"] == 5 and got["max_ulp"] == 1
    _lavapipe()
    out = tmp_path / "kv.json"
    assert (
        kvd.main(["--device", "vulkan", "--layers", "2", "--prompt", "6", "--json", str(out)]) == 0
    )
    result = json.loads(out.read_text())
    assert [r["layer"] for r in result["layers"]] == [0, 1] and result["kv_type"] == "float16"
