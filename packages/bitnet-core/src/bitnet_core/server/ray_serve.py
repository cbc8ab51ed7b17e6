"""``bitnet serve`` as a Ray Serve application: replicas, autoscaling, failover.

Each replica of ``BitnetServer`` loads the model once on its own node (device
selection runs there, with the replica's thread count) and serves the very
ASGI app ``bitnet serve`` runs (``create_app``) through Ray Serve's ingress, so
the API, streaming, metrics and errors are the same. ``ReplicaMiddleware`` adds
what only a cluster needs: the ``x-bitnet-replica`` response header, per-replica
counters in ``/metrics`` and ``GET /replica`` (the replica's startup summary).

``build_app`` is the application builder of a Ray Serve config file
(``import_path: bitnet_core.server.ray_serve:build_app``, see ``ray_config``).
Needs ``pip install 'bitnet-core[ray]'``.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import socket
import sys
import time
from dataclasses import dataclass
from typing import Any

# Replicas run this interpreter, where bitnet-core is installed; under `uv run`, Ray's
# default would re-create the project's environment in every worker (read at import)
os.environ.setdefault("RAY_ENABLE_UV_RUN_RUNTIME_ENV", "0")

import ray  # noqa: E402
from ray import serve  # noqa: E402
from ray.serve import Application  # noqa: E402

from ..model.load_options import apply_threads  # noqa: E402
from .app import create_app  # noqa: E402
from .ray_config import (  # noqa: E402
    APP_NAME,
    DEPLOYMENT_NAME,
    RayServeArgs,
    deployment_options,
    model_options,
    parse_args,
)

logger = logging.getLogger("ray.serve")
REPLICA_HEADER = b"x-bitnet-replica"


@dataclass
class ReplicaInfo:
    """Who a replica is and what it loaded; ``GET /replica`` returns it."""

    replica: str  # Ray Serve's replica id, also the x-bitnet-replica header
    actor_name: str  # the replica's Ray actor (namespace "serve")
    node: str
    pid: int
    threads: int
    summary: str  # the startup summary: requested=... detected=[...] selected=...
    model: str
    load_s: float

    def line(self) -> str:
        return (
            f"bitnet replica {self.replica}: {self.summary} model={self.model} "
            f"threads={self.threads} node={self.node} pid={self.pid} load={self.load_s:.2f}s"
        )


class ReplicaMiddleware:
    """ASGI middleware: the replica header, ``GET /replica`` and per-replica counters."""

    def __init__(self, app: Any, info: ReplicaInfo) -> None:
        self.app, self.info = app, info
        self.requests_total = 0
        self.label = json.dumps(info.replica)  # a quoted, escaped Prometheus label value

    def metrics(self) -> bytes:
        i = self.info
        rows = [
            "# HELP bitnet_replica_info The replica that answered (value 1)",
            "# TYPE bitnet_replica_info gauge",
            f"bitnet_replica_info{{replica={self.label},node={json.dumps(i.node)},"
            f'pid="{i.pid}",threads="{i.threads}"}} 1',
            "# HELP bitnet_replica_requests_total HTTP requests this replica answered",
            "# TYPE bitnet_replica_requests_total counter",
            f"bitnet_replica_requests_total{{replica={self.label}}} {self.requests_total}",
        ]
        return ("\n".join(rows) + "\n").encode()

    async def __call__(self, scope: dict, receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.requests_total += 1
        path = scope["path"]
        root = scope.get("root_path", "")
        if root and path.startswith(root):
            path = path[len(root) :] or "/"
        header = (REPLICA_HEADER, self.info.replica.encode())
        if path == "/replica" and scope["method"] == "GET":
            body = json.dumps({**vars(self.info), "requests_total": self.requests_total}).encode()
            await send(
                {
                    "type": "http.response.start",
                    "status": 200,
                    "headers": [
                        (b"content-type", b"application/json"),
                        (b"content-length", str(len(body)).encode()),
                        header,
                    ],
                }
            )
            await send({"type": "http.response.body", "body": body})
            return
        held: dict | None = None
        chunks: list[bytes] = []

        async def send_marked(message: dict) -> None:
            nonlocal held
            if message["type"] == "http.response.start":
                message = {**message, "headers": [*message.get("headers", []), header]}
                if path == "/metrics" and message.get("status") == 200:
                    held = message  # sent with the extended body
                    return
            elif held is not None and message["type"] == "http.response.body":
                chunks.append(message.get("body", b""))
                if message.get("more_body"):
                    return
                body = b"".join(chunks) + self.metrics()
                headers = [(k, v) for k, v in held["headers"] if k.lower() != b"content-length"]
                headers.append((b"content-length", str(len(body)).encode()))
                await send({**held, "headers": headers})
                message = {"type": "http.response.body", "body": body}
            await send(message)

        await self.app(scope, receive, send_marked)


@serve.deployment(name=DEPLOYMENT_NAME)
@serve.ingress()
class BitnetServer:
    """One replica: the model, loaded once on this node, behind ``bitnet serve``'s app."""

    def __init__(self, args: dict[str, Any]) -> None:
        from ..model.api import load

        self.args = parse_args(args)
        threads = self.args.replica_threads()
        apply_threads(threads)  # before the provider loads its kernels
        opts = model_options(self.args)
        model = load(
            opts.model,
            device=opts.device,
            quantize_activations=opts.act_quant,
            kv_cache=opts.kv_cache(),
            progress=False,
        )
        set_threads = getattr(model.provider, "set_threads", None)
        if callable(set_threads):
            set_threads(threads)
        ctx = serve.get_replica_context()
        self.model = model
        self.name = self.args.model_name or (
            os.path.splitext(os.path.basename(model.path))[0] if model.path else "bitnet"
        )
        self.info = ReplicaInfo(
            replica=ctx.replica_id.unique_id,
            actor_name=ctx.replica_id.to_full_id_str(),
            node=socket.gethostname(),
            pid=os.getpid(),
            threads=threads,
            summary=str(model.selection),
            model=str(model.path),
            load_s=round(model.load_s, 3),
        )
        logger.info(self.info.line())
        print(self.info.line(), file=sys.stderr, flush=True)
        self.started = time.time()

    def __serve_build_asgi_app__(self) -> Any:
        opts = self.args.server_options()
        if opts.api_key is None and os.environ.get("BITNET_API_KEY"):
            opts = dataclasses.replace(opts, api_key=os.environ["BITNET_API_KEY"])
        app = create_app(self.model, self.name, opts)
        return ReplicaMiddleware(app, self.info)


def build_app(args: dict[str, Any] | RayServeArgs | None = None) -> Application:
    """Ray Serve application builder: ``RayServeArgs`` in, the bound deployment out."""
    parsed = parse_args(args)
    return BitnetServer.options(**deployment_options(parsed)).bind(parsed.model_dump())


def start_ray(address: str | None = None, num_cpus: int | None = None, attempts: int = 3) -> None:
    """``ray.init``: join ``address``, else start a local cluster on loopback.

    Retried: on a loaded machine a new local node can miss Ray's fixed 30 s
    start-up window.
    """
    local = {} if address else {"_node_ip_address": "127.0.0.1", "include_dashboard": False}
    for attempt in range(attempts):
        try:
            ray.init(address=address, num_cpus=num_cpus, **local)
            return
        except Exception:
            ray.shutdown()
            if attempt == attempts - 1:
                raise


def serve_until_stopped(
    args: RayServeArgs, host: str, port: int, address: str | None = None
) -> None:
    """Serve the application on ``host:port`` until interrupted (``bitnet serve-ray``).

    Without ``address`` a local cluster is started and shut down with it; with
    one, only this application is removed from the cluster at the end.
    """
    start_ray(address)
    try:
        serve.start(http_options={"host": host, "port": port})
        serve.run(build_app(args), name=APP_NAME, route_prefix="/")
        print(f"serving on http://{host}:{port} (Ray Serve app {APP_NAME!r})", file=sys.stderr)
        while True:
            time.sleep(3600)
    finally:
        if address:
            serve.delete(APP_NAME)
        else:
            serve.shutdown()
        ray.shutdown()
