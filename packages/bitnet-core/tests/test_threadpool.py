"""The CPU kernels' thread pool under oversubscription (more threads than CPUs).

Jobs follow each other back to back while the OS preempts workers at any
point: a late worker must never claim a chunk of the next job with the last
job's ticket. Before that was fixed, this loop hung (a chunk counted twice)
or returned a wrong sum (a chunk skipped) within seconds on 2 CPUs. It runs in
a subprocess so that a hang fails the test instead of the whole session.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bitnet_core.native import cpu_features, load_native

STRESS = """
import sys, time
import numpy as np
from bitnet_core import _native

k = _native.Kernels(sys.argv[3], int(sys.argv[1]))
buf = np.ones(4 << 20, np.uint8)
sizes = [(1 << 20) * c + 7 for c in (1, 2, 1, 3, 1, 2)]  # 2 to 4 chunks of 1 MB
calls, t0 = 0, time.time()
while time.time() - t0 < float(sys.argv[2]):
    for s in sizes:
        got = k.sum_bytes(buf[:s])
        if got != s:
            sys.exit(f"job {calls}: sum {got}, expected {s}")
        calls += 1
print(calls)
"""


@pytest.mark.skipif(load_native()[0] is None, reason="bitnet_core._native is not built")
@pytest.mark.parametrize(
    ("threads", "spin_us"),
    [(8, None), (16, None), (8, "0")],  # "0": BITNET_CPU_SPIN_US, every job a wake-up
)
def test_back_to_back_jobs_with_preempted_workers(threads, spin_us):
    env = dict(os.environ)
    env.pop("BITNET_CPU_SPIN_US", None)
    if spin_us is not None:
        env["BITNET_CPU_SPIN_US"] = spin_us
    isa = (
        "avx2"
        if "avx2" in load_native()[0].compiled_isas() and cpu_features().get("avx2")
        else "scalar"
    )
    try:
        r = subprocess.run(
            [sys.executable, "-c", STRESS, str(threads), "10", isa],
            capture_output=True,
            text=True,
            timeout=90,
            env=env,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"the thread pool hung ({threads} threads)")
    assert r.returncode == 0, r.stderr
    assert int(r.stdout) > 1000  # it really ran jobs


PINNING = """
import os, sys, threading
import numpy as np
from bitnet_core.providers.cpu_native import NativeCpuProvider

class P(NativeCpuProvider):
    isa = sys.argv[1]

p = P(threads=2)
p.kernels.sum_bytes(np.ones(4 << 20, np.uint8))  # a job: the caller and a worker run chunks
me = threading.get_native_id()
tasks = {int(t): os.sched_getaffinity(int(t)) for t in os.listdir("/proc/self/task")}
print(sorted(tasks[me]), sorted(sorted(c) for t, c in tasks.items() if t != me and len(c) == 1))
"""


@pytest.mark.skipif(load_native()[0] is None, reason="bitnet_core._native is not built")
@pytest.mark.skipif(not hasattr(os, "sched_getaffinity"), reason="no per-thread affinity here")
def test_cpu_affinity_pins_the_caller_and_the_workers():
    """BITNET_CPU_AFFINITY=LIST: the calling thread on the first CPU, the worker on the
    second (read back from the OS); a CPU outside the process's set is a ConfigError."""
    isa = "avx2" if cpu_features().get("avx2") else "scalar"
    cpus = sorted(os.sched_getaffinity(0))
    order = [cpus[-1], cpus[0]]  # reversed: not what the OS would pick anyway
    env = dict(os.environ, BITNET_CPU_AFFINITY=",".join(map(str, order)))
    run = subprocess.run(
        [sys.executable, "-c", PINNING, isa], env=env, capture_output=True, text=True, timeout=120
    )
    assert run.returncode == 0, run.stderr
    caller, pinned = run.stdout.strip().split(" ", 1)
    assert caller == f"[{order[0]}]"
    assert f"[{order[1]}]" in pinned  # the pool's worker
    env["BITNET_CPU_AFFINITY"] = f"{max(cpus) + 1}"
    bad = subprocess.run(
        [sys.executable, "-c", PINNING, isa], env=env, capture_output=True, text=True, timeout=120
    )
    assert bad.returncode != 0 and "BITNET_CPU_AFFINITY" in bad.stderr


def test_parse_cpu_list():
    from bitnet_core.providers.cpu_native import parse_cpu_list

    assert parse_cpu_list("0-3,8, 10-11") == [0, 1, 2, 3, 8, 10, 11]
    for bad in ("", "a", "3-1", "1-", "-2"):
        with pytest.raises(ValueError):
            parse_cpu_list(bad)
