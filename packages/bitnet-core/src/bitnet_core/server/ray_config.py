"""What a Ray Serve deployment of ``bitnet serve`` is made of, without importing Ray.

``RayServeArgs`` are the application's arguments (the ``args:`` of a Ray Serve
config file, or ``bitnet serve-ray``'s flags); ``deployment_options`` turns them
into Ray Serve's deployment options: replicas or ``autoscaling_config``,
``ray_actor_options`` (CPUs and GPUs per replica) and ``max_ongoing_requests``
tied to the server's ``--max-active``/``--max-queue``, the prefix-aware request
router (``ray_router``); ``serve_config`` writes
the whole config file ``serve deploy`` reads.
"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError, create_model, model_validator

from ..errors import ConfigError
from ..model.load_options import ModelOptions, replica_fields
from .options import RayOptions, ServerOptions

APP_NAME = "bitnet"
DEPLOYMENT_NAME = "BitnetServer"
IMPORT_PATH = "bitnet_core.server.ray_serve:build_app"
#: the request router: a session's requests to the replica holding its prefix (ray_router.py)
ROUTER_CLASS = "bitnet_core.server.ray_router:PrefixAffinityRouter"
# fields that become Ray Serve deployment options rather than engine settings
RAY_FIELDS = frozenset(f.name for f in dataclasses.fields(RayOptions))


class _ReplicaArgs(BaseModel):
    """The checks and helpers of ``RayServeArgs``, whose fields are made below from the
    model each replica loads (``ModelOptions``, ``model/load_options.py``: the path on
    every node, the device selected on the replica's node, its threads and KV cache),
    Ray Serve's own settings (``RayOptions``) and the server's options (``ServerOptions``,
    ``server/options.py``)."""

    model_config = ConfigDict(extra="forbid", protected_namespaces=())

    def server_options(self) -> ServerOptions:
        """The replica's ``ServerOptions`` (``ConfigError`` for a bad one)."""
        names = [f.name for f in dataclasses.fields(ServerOptions)]
        return ServerOptions(**{n: getattr(self, n) for n in names})

    @model_validator(mode="after")
    def _check(self) -> _ReplicaArgs:
        try:
            self.server_options()
        except ConfigError as exc:
            raise ValueError(str(exc)) from None
        autoscaling = self.min_replicas is not None or self.max_replicas is not None
        if autoscaling and self.replicas is not None:
            raise ValueError("give replicas, or min_replicas/max_replicas, not both")
        if autoscaling:
            if self.min_replicas is None or self.max_replicas is None:
                raise ValueError("autoscaling needs both min_replicas and max_replicas")
            if self.min_replicas > self.max_replicas:
                raise ValueError(
                    f"min_replicas ({self.min_replicas}) > max_replicas ({self.max_replicas})"
                )
        elif self.target_ongoing_requests is not None:
            raise ValueError("target_ongoing_requests needs min_replicas/max_replicas")
        return self

    @property
    def wants_gpu(self) -> bool:
        """Whether only a GPU meets the device request (its replicas ask Ray for one): ``gpu``,
        or a family or provider the installed plugins describe as a GPU device."""
        request = (self.device or "").lower().split(":")[0]
        if request == "gpu":
            return True
        from ..hal.registry import REGISTRY

        family = REGISTRY.aliases().get(request, request)
        return any(
            r.device_kind == "gpu" and family in (r.family, r.name) for r in REGISTRY.records()
        )

    def replica_threads(self) -> int:
        """CPU threads of each replica's kernels: ``threads``, else its CPUs, else 1."""
        if self.threads is not None:
            return self.threads
        return max(1, int(self.num_cpus)) if self.num_cpus else 1


def _fields(cls: type, fields: list[dataclasses.Field], bounds: bool) -> dict[str, Any]:
    """pydantic fields of these dataclass fields of ``cls``; ``bounds``: each one's
    ``minimum``/``above`` as its ``ge``/``gt`` (for a class that does not check its own)."""
    hints = typing.get_type_hints(cls)
    out = {}
    for f in fields:
        ge, gt = (f.metadata["minimum"], f.metadata["above"]) if bounds else (None, None)
        out[f.name] = (hints[f.name], Field(default=f.default, ge=ge, gt=gt))
    return out


#: the application's arguments: ``_ReplicaArgs`` plus the replica's ``ModelOptions``
#: fields, every ``RayOptions`` field and every ``ServerOptions`` field
RayServeArgs = create_model(
    "RayServeArgs",
    __base__=_ReplicaArgs,
    __doc__="The application's arguments; every field has ``bitnet serve``'s meaning.",
    **_fields(ModelOptions, replica_fields(), bounds=True),
    **_fields(RayOptions, list(dataclasses.fields(RayOptions)), bounds=True),
    # ServerOptions.__post_init__ checks its ranges (server_options, in _check)
    **_fields(ServerOptions, list(dataclasses.fields(ServerOptions)), bounds=False),
)


def model_options(args: RayServeArgs) -> ModelOptions:
    """The ``ModelOptions`` each replica loads its model with."""
    return ModelOptions(**{f.name: getattr(args, f.name) for f in replica_fields()})


def parse_args(args: dict[str, Any] | RayServeArgs | None) -> RayServeArgs:
    """The arguments, checked; a bad one is a ``ConfigError`` naming it."""
    if isinstance(args, RayServeArgs):
        return args
    try:
        return RayServeArgs.model_validate(args or {})
    except ValidationError as exc:
        first = exc.errors()[0]
        where = ".".join(str(p) for p in first.get("loc", ()))
        msg = str(first["msg"]).removeprefix("Value error, ")
        raise ConfigError(f"ray serve args: {where + ': ' if where else ''}{msg}") from exc


def deployment_options(args: RayServeArgs) -> dict[str, Any]:
    """Ray Serve options of the deployment (``Deployment.options(**...)``).

    A replica takes at most ``max_active`` requests (the sequences it decodes
    together); up to ``max_queue`` more wait in Ray's router for whichever
    replica frees a slot first, so a replica that dies loses only the requests
    it was decoding, and further ones get HTTP 503 from Ray's proxy.
    """
    actor: dict[str, Any] = {
        "num_cpus": args.num_cpus if args.num_cpus is not None else args.replica_threads()
    }
    num_gpus = args.num_gpus if args.num_gpus is not None else (1 if args.wants_gpu else 0)
    if num_gpus:
        actor["num_gpus"] = num_gpus
    opts: dict[str, Any] = {
        "max_ongoing_requests": args.max_active,
        "max_queued_requests": args.max_queue,
        "ray_actor_options": actor,
        "request_router_config": {"request_router_class": ROUTER_CLASS},
    }
    if args.min_replicas is not None:
        opts["autoscaling_config"] = {
            "min_replicas": args.min_replicas,
            "max_replicas": args.max_replicas,
            "target_ongoing_requests": args.target_ongoing_requests or args.max_active,
        }
    else:
        opts["num_replicas"] = args.replicas or 1
    return opts


def serve_config(args: RayServeArgs, host: str = "0.0.0.0", port: int = 8000) -> dict[str, Any]:
    """A Ray Serve config file (``serve deploy FILE``) for this application.

    The engine settings go to the builder's ``args``; replicas, autoscaling and
    resources to the ``deployments`` entry, where ``serve deploy`` reads them.
    """
    app_args = args.model_dump(exclude_none=True, exclude_defaults=True, exclude=set(RAY_FIELDS))
    app_args["threads"] = args.replica_threads()
    return {
        "proxy_location": "EveryNode",
        "http_options": {"host": host, "port": port},
        "applications": [
            {
                "name": APP_NAME,
                "route_prefix": "/",
                "import_path": IMPORT_PATH,
                "args": app_args,
                "deployments": [{"name": DEPLOYMENT_NAME, **deployment_options(args)}],
            }
        ],
    }
