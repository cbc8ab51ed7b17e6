"""Schemathesis against a live ``bitnet serve`` (the bundled demo model), from its OpenAPI schema.

    .venv/bin/python tools/fuzz/schemathesis_serve.py --examples 1000 [--out DIR]

Starts ``bitnet serve`` on a free loopback port (``--max-tokens 2``: each
request stays short), runs ``schemathesis run`` over every operation of
``/openapi.json`` with every check but ``positive_data_acceptance`` (a
request the schema allows may still be refused with a documented 400: a
``top_logprobs`` without ``logprobs``, an empty token prompt), then checks
``/health`` still answers. The requests sent are kept as a HAR file
(``DIR/requests.har``) and counted per operation (``DIR/counts.json``,
printed). Exit status: schemathesis' (0: no 5xx, every response with a
documented status, content type and body), or 1 if the server died.
"""

from __future__ import annotations

import argparse
import collections
import json
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

BIN = Path(sys.executable).parent
EXCLUDED_CHECKS = "positive_data_acceptance"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_healthy(url: str, proc: subprocess.Popen, seconds: float = 120) -> None:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"bitnet serve exited with {proc.returncode}")
        try:
            if httpx.get(url + "/health", timeout=5).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.3)
    raise RuntimeError("bitnet serve did not become healthy")


def count_requests(har: Path, url: str) -> dict[str, int]:
    """Requests in a HAR file per ``METHOD path`` (the query left out)."""
    if not har.exists():
        return {}
    entries = json.loads(har.read_text())["log"]["entries"]
    keys = (
        f"{e['request']['method']} {e['request']['url'].removeprefix(url).split('?')[0]}"
        for e in entries
    )
    return dict(sorted(collections.Counter(keys).items()))


def run(examples: int, out: Path, seed: int = 0) -> tuple[int, str]:
    """``(exit status, schemathesis output)`` of one run against a fresh server."""
    out.mkdir(parents=True, exist_ok=True)
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    log = open(out / "serve.log", "w")  # noqa: SIM115 - open for the server's life
    proc = subprocess.Popen(
        [str(BIN / "bitnet"), "serve", "--port", str(port), "--max-tokens", "2",
         "--threads", "1", "--no-progress"],
        stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_healthy(url, proc)
        st = subprocess.run(
            [str(BIN / "schemathesis"), "run", url + "/openapi.json",
             "--max-examples", str(examples), "--checks", "all",
             "--exclude-checks", EXCLUDED_CHECKS, "--seed", str(seed), "--no-color",
             "--workers", "1", "--report", "har", "--report-har-path", str(out / "requests.har")],
            capture_output=True, text=True, timeout=3600,
        )  # fmt: skip
        output = st.stdout + st.stderr
        (out / "schemathesis.log").write_text(output)
        counts = count_requests(out / "requests.har", url)
        (out / "counts.json").write_text(json.dumps(counts, indent=1))
        output += "\nrequests sent, per operation: " + json.dumps(counts)
        healthy = httpx.get(url + "/health", timeout=10).json().get("status") == "ok"
        if not healthy:
            return 1, output + "\n/health is not ok after the run"
        return st.returncode, output
    finally:
        proc.terminate()
        proc.wait(timeout=30)
        log.close()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--examples", type=int, default=1000, help="per operation and phase")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--out", default="out/schemathesis")
    args = ap.parse_args()
    code, output = run(args.examples, Path(args.out), args.seed)
    print(output[-4000:])
    return code


if __name__ == "__main__":
    sys.exit(main())
