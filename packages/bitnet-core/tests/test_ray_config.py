"""Ray Serve options and config file of ``bitnet serve-ray`` (no Ray needed: ``server/ray_config``)."""

from __future__ import annotations

import subprocess
import sys

import pytest
import yaml

from bitnet_core.errors import ConfigError
from bitnet_core.server.ray_config import (
    DEPLOYMENT_NAME,
    IMPORT_PATH,
    RayServeArgs,
    deployment_options,
    parse_args,
    serve_config,
)


def test_fixed_replicas_tie_ongoing_requests_to_the_server_limits():
    opts = deployment_options(parse_args({"replicas": 3, "threads": 2, "max_active": 4}))
    assert opts["num_replicas"] == 3
    assert "autoscaling_config" not in opts
    assert opts["max_ongoing_requests"] == 4  # a replica takes what it decodes together
    assert opts["max_queued_requests"] == 256  # the rest wait in Ray's router, up to --max-queue
    assert opts["ray_actor_options"] == {"num_cpus": 2}  # one CPU per kernel thread


def test_autoscaling_bounds_and_target():
    args = parse_args({"min_replicas": 1, "max_replicas": 4, "max_active": 6})
    opts = deployment_options(args)
    assert "num_replicas" not in opts
    assert opts["autoscaling_config"] == {
        "min_replicas": 1,
        "max_replicas": 4,
        "target_ongoing_requests": 6,
    }
    opts = deployment_options(
        parse_args({"min_replicas": 0, "max_replicas": 2, "target_ongoing_requests": 1.5})
    )
    assert opts["autoscaling_config"]["target_ongoing_requests"] == 1.5


@pytest.mark.parametrize("device", ["cuda", "CUDA:0", "gpu"])
def test_a_gpu_replica_asks_for_one_gpu(device):
    actor = deployment_options(parse_args({"device": device}))["ray_actor_options"]
    assert actor["num_gpus"] == 1
    assert actor["num_cpus"] == 1


def test_cpu_replica_asks_for_no_gpu_and_explicit_resources_win():
    assert "num_gpus" not in deployment_options(parse_args({"device": "cpu"}))["ray_actor_options"]
    actor = deployment_options(parse_args({"device": "cuda", "num_gpus": 0.5, "num_cpus": 4}))[
        "ray_actor_options"
    ]
    assert actor == {"num_cpus": 4, "num_gpus": 0.5}
    assert parse_args({"num_cpus": 4}).replica_threads() == 4  # threads follow the CPUs asked for
    assert parse_args({"num_cpus": 4, "threads": 2}).replica_threads() == 2


@pytest.mark.parametrize(
    "bad, needle",
    [
        ({"replicas": 2, "min_replicas": 1, "max_replicas": 3}, "not both"),
        ({"min_replicas": 1}, "both min_replicas and max_replicas"),
        ({"min_replicas": 3, "max_replicas": 2}, "min_replicas (3) > max_replicas (2)"),
        ({"target_ongoing_requests": 2}, "needs min_replicas"),
        ({"replicas": 0}, "replicas"),
        ({"threads": 0}, "threads"),
        ({"max_active": -1}, "max_active"),
        ({"replica": 2}, "replica"),  # a typo is refused, not ignored
        ({"kv_type": "q8"}, "kv_type"),
        ({"max_active": 8, "step_tokens": 8}, "--step-tokens (8) must be above --parallel (8)"),
        ({"ctx_size": 0}, "ctx_size"),
    ],
)
def test_bad_args_are_config_errors(bad, needle):
    with pytest.raises(ConfigError, match="ray serve args") as info:
        parse_args(bad)
    assert needle in str(info.value)


def test_config_file_splits_engine_args_from_deployment_options():
    args = RayServeArgs(model="/models/m.gguf", device="cuda", replicas=2, max_active=4)
    cfg = serve_config(args, host="0.0.0.0", port=9000)
    assert cfg["http_options"] == {"host": "0.0.0.0", "port": 9000}
    (app,) = cfg["applications"]
    assert app["import_path"] == IMPORT_PATH
    assert app["args"] == {
        "model": "/models/m.gguf",
        "device": "cuda",
        "max_active": 4,
        "threads": 1,
    }
    (dep,) = app["deployments"]
    assert dep["name"] == DEPLOYMENT_NAME
    assert dep["num_replicas"] == 2
    assert dep["ray_actor_options"] == {"num_cpus": 1, "num_gpus": 1}
    # the builder accepts the args the file gives it
    assert parse_args(app["args"]).model == "/models/m.gguf"


def cli(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "bitnet_core.cli.main", "serve-ray", *argv],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_cli_prints_the_config_file():
    out = cli("--replicas", "2", "--threads", "1", "--print-config", "--port", "8123")
    assert out.returncode == 0, out.stderr
    cfg = yaml.safe_load(out.stdout)
    assert cfg["http_options"]["port"] == 8123
    engine = ("-c", "512", "--kv-type", "f32", "--kv-budget", "64", "--max-body-bytes", "4096")
    out = cli(*engine, "--step-tokens", "32", "--print-config")
    assert out.returncode == 0, out.stderr
    args = yaml.safe_load(out.stdout)["applications"][0]["args"]
    assert args == {
        "ctx_size": 512,
        "kv_type": "f32",
        "kv_budget": 64,
        "max_body_bytes": 4096,
        "step_tokens": 32,
        "threads": 1,
    }
    dep = cfg["applications"][0]["deployments"][0]
    assert dep["num_replicas"] == 2 and dep["ray_actor_options"] == {"num_cpus": 1}


@pytest.mark.parametrize(
    "argv, needle",
    [
        (["--replicas", "2", "--max-replicas", "3", "--min-replicas", "1"], "not both"),
        (["--min-replicas", "4", "--max-replicas", "2"], "min_replicas (4) > max_replicas (2)"),
        (["--port", "70000"], "--port out of range"),
    ],
)
def test_cli_bad_flags_exit_nonzero_with_one_line(argv, needle):
    out = cli(*argv, "--print-config")
    assert out.returncode != 0
    assert out.stderr.startswith("error: ") and needle in out.stderr
    assert "Traceback" not in out.stderr
