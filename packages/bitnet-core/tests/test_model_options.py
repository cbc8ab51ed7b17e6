"""The model's options are declared once (``ModelOptions``): every entry point's flags
and the Ray Serve replica's arguments are made from it, and nothing is declared beside it."""

from __future__ import annotations

import argparse
import dataclasses

import pytest

from bitnet_core.cli.main import build_parser
from bitnet_core.model.load_options import ModelOptions, replica_fields
from bitnet_core.option_fields import from_namespace
from bitnet_core.server.options import ServerOptions
from bitnet_core.server.ray_config import RAY_FIELDS, RayServeArgs, model_options, parse_args

MODEL_COMMANDS = ("run", "chat", "bench", "embed", "serve")
# serve-ray's flags that are neither an argument of the application nor a replica's
SERVE_RAY_OWN = {"help", "host", "port", "address", "print_config"}


def subparser(name: str) -> argparse.ArgumentParser:
    (sub,) = [a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction)]
    return sub.choices[name]


def flags(p: argparse.ArgumentParser) -> dict[str, tuple[str, ...]]:
    """dest -> option strings of every flag of ``p``."""
    return {a.dest: tuple(a.option_strings) for a in p._actions if a.option_strings}


def declared() -> dict[str, tuple[str, ...]]:
    return {f.name: f.metadata["flags"] for f in dataclasses.fields(ModelOptions)}


@pytest.mark.parametrize("command", MODEL_COMMANDS)
def test_every_model_option_is_a_flag_of_every_model_command(command):
    got = flags(subparser(command))
    for name, opts in declared().items():
        assert got.get(name) == opts, f"bitnet {command}: {name} {got.get(name)} != {opts}"


def test_serve_takes_the_model_and_server_options_and_no_others():
    """A flag of ``bitnet serve`` beside the declared ones means an option declared twice."""
    server = {f.name for f in dataclasses.fields(ServerOptions)}
    assert set(flags(subparser("serve"))) == set(declared()) | server | {"help", "host", "port"}


def test_ray_args_and_serve_ray_flags_are_the_declared_ones_and_no_others():
    """A model field of ``RayServeArgs`` without a ``ModelOptions`` field (or a flag of
    ``serve-ray`` without a field) means an option was declared a second time."""
    replica = {f.name for f in replica_fields()}
    server = {f.name for f in dataclasses.fields(ServerOptions)}
    cli_only = set(declared()) - replica
    assert cli_only == {"progress"}  # a replica never draws a progress bar
    assert set(RayServeArgs.model_fields) == replica | server | RAY_FIELDS
    ray_flags = flags(subparser("serve-ray"))
    assert set(ray_flags) == replica | server | RAY_FIELDS | SERVE_RAY_OWN
    for name in replica:  # the same flags as `bitnet serve`, the same defaults
        assert ray_flags[name] == declared()[name]
        assert RayServeArgs.model_fields[name].default == getattr(ModelOptions(), name)


def test_flags_and_ray_args_read_back_the_same_options():
    argv = ["-m", "x.gguf", "--device", "cpu", "-t", "3", "--no-act-quant", "-c", "512"]
    argv += ["--kv-type", "f32", "--kv-budget", "64"]
    want = ModelOptions("x.gguf", "cpu", 3, False, 512, "f32", 64)
    served = subparser("serve").parse_args([*argv, "--no-progress"])
    assert from_namespace(ModelOptions, served) == dataclasses.replace(want, progress=False)
    ray = subparser("serve-ray").parse_args(argv)
    args = {f.name: getattr(ray, f.name) for f in replica_fields()}
    assert model_options(parse_args(args)) == want
    assert from_namespace(ModelOptions, subparser("run").parse_args(["-p", "hi"])) == ModelOptions()
    kv = want.kv_cache()
    assert kv is not None and (kv.max_seq_len, kv.dtype, kv.max_bytes) == (512, "float32", 64 << 20)
