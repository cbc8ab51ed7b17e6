"""Probe GPU providers in a child process, so runtimes that are not chosen stay out of ours.

An auto (or ``gpu``) request asks every installed GPU provider whether it has
a device, and asking loads the runtime: PoCL's OpenCL, Mesa's lavapipe under
Vulkan and WebGPU each bring LLVM and 70-95 MB of resident memory into the
process, and nothing unloads a shared library again. On a machine whose only
OpenCL/Vulkan devices are CPU ones (auto skips them) that memory stayed for
the whole run: ``bitnet run`` on a 275 MB model peaked at 463 MB, against 342
with ``--device cpu``. On a GPU machine every runtime probed stayed loaded
beside the one chosen. Here the probes run in one child process (``main``, run
by ``python -c``): a provider it finds unavailable is never loaded in the
parent, and the one selected is probed again in the parent, where it runs.

The child sees the parent's environment and ``sys.path`` (so the same entry
points). Where it cannot run (no interpreter to start, a crash, unreadable
output) the caller probes in-process instead; a child still probing after
``PROBE_TIMEOUT_S`` is killed and its providers are reported unavailable with
that reason, rather than the request hanging on a stuck driver.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from dataclasses import asdict

from .provider import Availability

log = logging.getLogger("bitnet")

#: seconds the child may take for every probe together (CUDA's first init takes a few)
PROBE_TIMEOUT_S = 120.0


def probe_in_child(
    names: list[str], timeout: float | None = None
) -> dict[str, Availability] | None:
    """Each named provider's non-explicit availability, probed in a child process.

    None when the child could not report (the caller then probes in-process).
    """
    if not names:
        return {}
    timeout = PROBE_TIMEOUT_S if timeout is None else timeout
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
    code = f"import sys; from {__name__} import main; sys.exit(main(sys.argv[1:]))"
    cmd = [sys.executable, "-c", code, *names]
    try:
        proc = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=env)
    except subprocess.TimeoutExpired:
        reason = f"its probe did not finish in {timeout:.0f} s (run in a child process)"
        log.warning("GPU probe child timed out after %.0f s: %s", timeout, ", ".join(names))
        return {n: Availability.no(reason) for n in names}
    except OSError as exc:
        log.debug("GPU probe child could not start (%s); probing in-process", exc)
        return None
    try:
        found = json.loads(proc.stdout)
        result = {n: Availability(**found[n]) for n in names}
    except (ValueError, KeyError, TypeError) as exc:
        log.debug(
            "GPU probe child exited %s without a report (%s); probing in-process\n%s",
            proc.returncode,
            exc,
            proc.stderr[-2000:],
        )
        return None
    if proc.stderr.strip():
        log.debug("GPU probe child stderr:\n%s", proc.stderr[-2000:])
    return result


def main(names: list[str]) -> int:
    """Probe ``names`` here and print ``{name: Availability fields}`` as JSON on stdout."""
    # What the runtimes print on stdout goes to stderr: stdout carries only the report.
    report = os.fdopen(os.dup(1), "w")
    os.dup2(2, 1)
    from .registry import REGISTRY

    out = {}
    for name in names:
        rec = REGISTRY.get(name)
        avail = rec.probe(False) if rec else Availability.no("not registered in the probe process")
        out[name] = asdict(avail)
    json.dump(out, report, default=str)
    report.close()
    return 0
