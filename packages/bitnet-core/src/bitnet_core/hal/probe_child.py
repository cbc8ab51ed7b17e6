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
import time
from dataclasses import asdict

from .provider import Availability

log = logging.getLogger("bitnet")

#: seconds the child may take for every probe together (CUDA's first init takes a few)
PROBE_TIMEOUT_S = 120.0


class ChildProbe:
    """A child process probing ``names`` (not empty): started at once, read with ``result()``."""

    def __init__(self, names: list[str]) -> None:
        self.names = list(names)
        self._started = time.monotonic()
        self._result: dict[str, Availability] | None = None
        self._proc: subprocess.Popen | None = None
        env = dict(os.environ, PYTHONPATH=os.pathsep.join(p for p in sys.path if p))
        code = f"import sys; from {__name__} import main; sys.exit(main(sys.argv[1:]))"
        try:
            self._proc = subprocess.Popen(
                [sys.executable, "-c", code, *self.names],
                stdout=subprocess.PIPE,
                stderr=subprocess.PIPE,
                text=True,
                errors="replace",  # a driver's non-UTF-8 message must not break the probe
                env=env,
            )
        except OSError as exc:
            log.debug("GPU probe child could not start (%s); probing in-process", exc)

    def result(self) -> dict[str, Availability] | None:
        """Each provider's non-explicit availability; None: the caller probes in-process."""
        if self._result is not None or self._proc is None:
            return self._result
        proc, self._proc = self._proc, None
        wait = max(0.0, PROBE_TIMEOUT_S - (time.monotonic() - self._started))
        try:
            out, err = proc.communicate(timeout=wait)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate()
            reason = f"its probe did not finish in {PROBE_TIMEOUT_S:.0f} s (run in a child process)"
            log.warning("GPU probe child killed after %.0f s: %s", PROBE_TIMEOUT_S, self.names)
            self._result = {n: Availability.no(reason) for n in self.names}
            return self._result
        try:
            found = json.loads(out)
            self._result = {n: Availability(**found[n]) for n in self.names}
        except (ValueError, KeyError, TypeError) as exc:
            log.debug(
                "GPU probe child exited %s without a report (%s); probing in-process\n%s",
                proc.returncode,
                exc,
                err[-2000:],
            )
            return None
        if err.strip():
            log.debug("GPU probe child stderr:\n%s", err[-2000:])
        return self._result

    def cancel(self) -> None:
        """Stop the child if it still runs (its result is no longer wanted)."""
        if self._proc is not None:
            self._proc.kill()
            self._proc.communicate()
            self._proc = None


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
