"""Atheris fuzz target: request bodies of ``/v1/*`` through the app, in-process.

Run: ``python tools/fuzz/fuzz_api.py -max_total_time=60`` (see ``harness.py``).
The bundled demo model is served by ``create_app`` behind a Starlette
``TestClient``. An input's first byte picks the route (completions or chat
completions), the rest is the body as sent. To keep each run short the
harness caps ``max_tokens`` at 2 and ``n`` at 2 in bodies that parse as JSON
objects (everything else goes as it came). The KV budget is 32 MiB, so the
prefix cache fills up within minutes and evicts from then on.

Property: no 5xx; a 4xx carries a JSON body ``{"error": {"message": ...}}``;
a 200 is JSON (or an event stream that ends with ``[DONE]``).
"""

from __future__ import annotations

import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402
from starlette.testclient import TestClient  # noqa: E402

from bitnet_core.model.api import demo_model_path, load  # noqa: E402
from bitnet_core.sdk.kv_cache import KVCacheConfig  # noqa: E402
from bitnet_core.server.app import create_app  # noqa: E402

ROUTES = ("/v1/completions", "/v1/chat/completions")
# a small KV budget: the prefix cache keeps every prompt's blocks up to the budget
# (1 GiB by default: a campaign's RSS grew to 700 MB, bounded but slow), and a
# full cache makes every run go through eviction too
KV = KVCacheConfig(max_bytes=32 << 20)
APP = create_app(load(demo_model_path(), device="cpu", kv_cache=KV), "demo", default_max_tokens=2)
CLIENT = TestClient(APP, raise_server_exceptions=False).__enter__()


def _capped(body: bytes) -> bytes:
    try:
        obj = json.loads(body)
    except (ValueError, RecursionError):
        return body
    if not isinstance(obj, dict):
        return body
    for key, cap in (("max_tokens", 2), ("max_completion_tokens", 2), ("n", 2)):
        if isinstance(obj.get(key), int) and not isinstance(obj[key], bool) and obj[key] > cap:
            obj[key] = cap
    return json.dumps(obj).encode()


def test_one_input(data: bytes) -> None:
    if not data:
        return
    route = ROUTES[data[0] % len(ROUTES)]
    body = _capped(data[1:])
    r = CLIENT.post(route, content=body, headers={"content-type": "application/json"})
    assert r.status_code < 500, (r.status_code, r.text[:500])
    if r.status_code >= 400:
        error = r.json()["error"]
        assert isinstance(error["message"], str), r.text[:500]
    elif r.headers.get("content-type", "").startswith("text/event-stream"):
        assert r.text.rstrip().endswith("data: [DONE]"), r.text[-500:]
    else:
        assert isinstance(r.json(), dict)


if __name__ == "__main__":
    harness.run("api", test_one_input)
