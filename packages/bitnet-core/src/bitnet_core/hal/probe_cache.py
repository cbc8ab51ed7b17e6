"""GPU providers found unavailable, remembered between processes.

An auto request probes every installed GPU provider in a child process
(``probe_child.py``): on a machine with PoCL and Mesa's lavapipe that child
loads LLVM three times and took 1.5-2 s of every ``bitnet run``, only to learn
again that the OpenCL, Vulkan and WebGPU devices are CPU ones. So a provider
the child found *unavailable* is remembered in the user's cache
(``$XDG_CACHE_HOME/bitnet/probes.json``, else ``~/.cache/bitnet``), under a
fingerprint of what could change the answer: the provider's distribution and
version, bitnet-core's, the interpreter, the ``BITNET_*`` and driver
selection variables, the GPU device nodes and the ICD folders (names and
times), and the boot. Any change, or a day passing, probes again. Only
negative answers are kept: a provider found usable is probed in the process
that runs it, every time. The startup line's reason says the answer was
remembered. ``BITNET_CACHE=0`` neither reads nor writes it; the file is
written atomically and ignored when unreadable.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import sys
import tempfile
import time
from importlib import metadata
from pathlib import Path

from .provider import Availability

#: seconds a remembered answer holds
MAX_AGE_S = 24 * 3600.0
#: driver selection variables that change what a probe finds
DRIVER_VARIABLES = (
    "CUDA_VISIBLE_DEVICES", "HIP_VISIBLE_DEVICES", "OCL_ICD_VENDORS", "OPENCL_VENDOR_PATH",
    "VK_ICD_FILENAMES", "VK_DRIVER_FILES", "VK_ADD_DRIVER_FILES", "WGPU_BACKEND",
    "WGPU_ADAPTER_NAME", "LD_LIBRARY_PATH",
)  # fmt: skip
#: where GPU device nodes and installable client drivers live
DRIVER_PATHS = (
    "/dev", "/dev/dri", "/etc/OpenCL/vendors", "/usr/share/vulkan/icd.d",
    "/etc/vulkan/icd.d", "/usr/local/share/vulkan/icd.d",
)  # fmt: skip
REMEMBERED = "remembered from an earlier probe; BITNET_CACHE=0 probes again"


def enabled() -> bool:
    return os.environ.get("BITNET_CACHE", "1").strip().lower() not in ("0", "false", "no", "off")


def path() -> Path:
    base = os.environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return Path(base) / "bitnet" / "probes.json"


def _version(dist: str) -> str:
    try:
        return metadata.version(dist) if dist else ""
    except metadata.PackageNotFoundError:
        return ""


def _listing(folder: str) -> list:
    try:
        with os.scandir(folder) as it:
            entries = [e for e in it if folder != "/dev" or e.name.startswith(("nvidia", "kfd"))]
            return sorted((e.name, e.stat(follow_symlinks=False).st_mtime_ns) for e in entries)
    except OSError:
        return []


def machine_state() -> dict:
    """What every provider's probe depends on: bitnet-core, the interpreter, the
    variables, the device nodes and ICD folders, the boot."""
    boot = ""
    with contextlib.suppress(OSError):
        boot = Path("/proc/sys/kernel/random/boot_id").read_text().strip()
    return {
        "core": _version("bitnet-core"),
        "python": [sys.executable, sys.version],
        "env": sorted(
            (k, v)
            for k, v in os.environ.items()
            if k.startswith("BITNET_") or k in DRIVER_VARIABLES
        ),
        "drivers": {p: _listing(p) for p in DRIVER_PATHS},
        "boot": boot,
    }


def fingerprint(name: str, distribution: str, machine: dict | None = None) -> str:
    """What the probe of provider ``name`` depends on, hashed (``machine``: the
    ``machine_state()`` of this call, read once for every provider)."""
    state = dict(machine if machine is not None else machine_state())
    state["provider"] = [name, distribution, _version(distribution)]
    return hashlib.sha256(json.dumps(state, sort_keys=True).encode()).hexdigest()


def _read() -> dict:
    try:
        data = json.loads(path().read_text())
    except (OSError, ValueError):
        return {}
    return data if isinstance(data, dict) else {}


def recall(names: dict[str, str]) -> dict[str, Availability]:
    """The remembered unavailability of each of ``names`` (``{name: distribution}``) whose
    fingerprint still holds."""
    if not enabled() or not names:
        return {}
    data, now, out = _read(), time.time(), {}
    machine: dict | None = None  # read once, and only if some entry is fresh
    for name, dist in names.items():
        entry = data.get(name)
        try:
            if not 0.0 <= now - float(entry["at"]) <= MAX_AGE_S:
                continue
            if machine is None:
                machine = machine_state()
            if entry["fingerprint"] == fingerprint(name, dist, machine):
                out[name] = Availability.no(f"{entry['reason']} ({REMEMBERED})")
        except (TypeError, KeyError, ValueError):
            continue
    return out


def remember(found: dict[str, Availability], names: dict[str, str]) -> None:
    """Keep the providers of ``found`` that are unavailable (``names``: their distributions)."""
    unavailable = {  # a probe cut off by the timeout may answer otherwise next time
        n: a
        for n, a in found.items()
        if not a.available and n in names and "did not finish" not in a.reason
    }
    if not enabled() or not unavailable:
        return
    data, now, machine = _read(), time.time(), machine_state()
    for name, avail in unavailable.items():
        reason = avail.reason.removesuffix(f" ({REMEMBERED})")
        data[name] = {
            "at": now,
            "fingerprint": fingerprint(name, names[name], machine),
            "reason": reason,
        }
    target = path()
    try:
        target.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=".probes-", suffix=".json")
        with os.fdopen(fd, "w") as f:
            json.dump(data, f)
        os.replace(tmp, target)
    except OSError:
        with contextlib.suppress(OSError, UnboundLocalError):
            os.unlink(tmp)
