"""Receipts that tell the truth: the kernels that ran (from ``provider.trace``), the device
the selecting probe found, ``device_kind``, fallbacks (an error in strict mode), and
``bitnet bench --profile``'s per-step figures."""

from __future__ import annotations

import json

import numpy as np
import pytest
from formats_testlib import TEXT_MODEL

from bitnet_core.cli.main import main
from bitnet_core.errors import ShapeError, StrictModeError, ValidationError
from bitnet_core.hal.provider import Availability
from bitnet_core.model import Model, random_weights
from bitnet_core.model.receipt import build_receipt, validate
from bitnet_core.providers.reference import ReferenceProvider
from bitnet_core.sdk.provider import TRACED_OPS
from bitnet_core.sdk.runner import GenericRunner
from bitnet_core.testing.strict import strict_config

#: what the generic engine calls for a silu model with int8 activations (model/runner.py);
#: the ops an op calls itself (the reference's linear: quantize_act, matmul_i2s) are part of it
GENERIC_SILU_OPS = [
    "add",
    "attention",
    "embedding",
    "kv_store",
    "linear",
    "matmul_dense",
    "rmsnorm",
    "rope",
    "silu_mul",
]


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    from bitnet_core.model import random_model_file

    return random_model_file(tmp_path_factory.mktemp("m") / "tiny.gguf", TEXT_MODEL, seed=1)


def _generated(device: str, model_file, **env) -> dict:
    from bitnet_core.model.api import load

    model = load(model_file, device)
    model.generate_ids([1, 2, 3], max_tokens=3, temperature=0)
    return model.receipt()


def test_receipt_lists_the_ops_that_ran_on_the_reference(model_file, clean_registry):
    r = _generated("cpu-reference", model_file)
    validate(r, strict=True)
    prov = r["provider"]
    assert TEXT_MODEL.ffn_activation == "silu"
    assert prov["kernels"] == GENERIC_SILU_OPS  # not silu, relu2, matmul_ternary_float
    assert prov["fallbacks"] == [] and prov["submissions"] == 0
    assert prov["device"] and prov["device_kind"] == "cpu"


def test_the_fused_cpu_engine_names_its_kernels_and_native_calls(
    model_file, clean_registry, monkeypatch
):
    monkeypatch.delenv("BITNET_CPU_FUSED", raising=False)
    from bitnet_core.model.api import load

    model = load(model_file, "cpu")
    if type(model.runner).__name__ != "FusedCpuRunner":
        pytest.skip(f"{model.provider.name} has no fused engine here")
    before = model.provider.trace.submissions
    model.generate_ids([1, 2, 3], max_tokens=3, temperature=0)
    r = model.receipt()
    validate(r, strict=True)
    kernels = r["provider"]["kernels"]
    assert all(k.startswith("CpuModel.") for k in kernels)
    for k in ("ternary", "attention", "attention_decode", "quantize", "dense"):
        assert f"CpuModel.{k}" in kernels
    steps = r["throughput"]["decode_steps"]
    assert model.provider.trace.submissions - before == 1 + steps  # one native call a forward
    assert r["provider"]["device"].startswith("CPU ") and r["provider"]["device_kind"] == "cpu"


class _OwnKernels(ReferenceProvider, name="own-kernels-test", family="own-kernels-test"):
    """A per-op provider whose rmsnorm names its own (fused) kernel."""

    device_kind = "gpu"

    def probe(self, explicit: bool = False) -> Availability:
        return Availability.yes("emulated", device_kind="cpu" if explicit else "gpu")

    def rmsnorm(self, x, weight, eps):
        self.trace.kernel("rmsnorm_quant")
        return super().rmsnorm(x, weight, eps)


def test_an_op_that_names_its_kernel_is_not_listed_twice_and_a_refused_op_ran_nothing():
    p = _OwnKernels()
    x = np.ones((2, 8), np.float32)
    p.rmsnorm(x, np.ones(8, np.float32), 1e-5)
    p.add(x, x)
    with pytest.raises(ShapeError):
        p.mul(x, np.ones((3, 8), np.float32))  # refused by the shared check
    assert p.trace.kernel_names() == ["add", "rmsnorm_quant"]
    assert "mul" in TRACED_OPS and "to_device" not in TRACED_OPS


def test_receipt_device_kind_and_fallbacks_come_from_the_run(monkeypatch):
    monkeypatch.delenv("BITNET_STRICT_MODE", raising=False)
    provider = _OwnKernels()
    model = Model(GenericRunner(provider, random_weights(TEXT_MODEL, seed=2)))
    model.generate_ids([4, 5], max_tokens=2, temperature=0)
    provider.trace.fallback("step replay unavailable: test")
    r = model.receipt()
    prov = r["provider"]
    # a model made from a provider directly: asked for it, so its explicit probe speaks
    assert prov["device"] == "emulated" and prov["device_kind"] == "cpu"
    assert "rmsnorm_quant" in prov["kernels"] and "rmsnorm" not in prov["kernels"]
    assert prov["fallbacks"] == ["step replay unavailable: test"]
    validate(r, strict=False)
    with pytest.raises(StrictModeError, match="fell back"):
        validate(r, strict=True)
    monkeypatch.setenv("BITNET_STRICT_MODE", "1")
    with pytest.raises(StrictModeError, match="replay"):
        provider.trace.fallback("graph replay failed")


def test_validation_of_old_and_broken_receipts(model_file, clean_registry):
    r = _generated("cpu-reference", model_file)
    old = json.loads(json.dumps(r))
    for k in ("fallbacks", "submissions", "host_ops", "host_calls"):
        del old["provider"][k]  # a receipt written before these fields
    validate(old, strict=True)
    for broken in (
        {**r["provider"], "kernels": []},  # nothing ran anywhere
        {**r["provider"], "kernels": "matmul_i2s"},
        {**r["provider"], "fallbacks": [1]},
    ):
        with pytest.raises(ValidationError):
            validate({**r, "provider": broken})
    # everything on the host (a partial provider of memory ops only) is a valid run
    validate({**r, "provider": {**r["provider"], "kernels": [], "host_calls": {"rmsnorm": 3}}})


def test_receipt_build_keeps_extra_fields(model_file, clean_registry):
    from bitnet_core.model.api import load

    model = load(model_file, "cpu-reference")
    model.generate_ids([1], max_tokens=1, temperature=0)
    r = build_receipt(model, model.last_stats, parity={"ok": True})
    assert r["parity"] == {"ok": True}


@pytest.mark.parametrize("device", ["cpu-reference", "cpu"])
def test_bench_profile_reports_per_step_figures(model_file, capsys, clean_registry, device):
    argv = ["bench", "-m", str(model_file), "-p", "4", "-n", "3", "--no-progress"]
    assert main([*argv, "--device", device, "--profile", "--json"]) == 0
    prof = json.loads(capsys.readouterr().out)["profile"]
    assert prof["decode_steps"] == 3
    assert prof["wall_ms_per_step"] > 0 and prof["host_ms_per_step"] >= 0
    assert prof["submissions_per_step"] in (0.0, 1.0)  # fused CPU: one native call a step
    assert prof["launches_per_step"] > 1  # the kernels of a decode step, each counted
    assert main([*argv, "--device", device, "--profile"]) == 0
    out = capsys.readouterr().out
    assert "decode step: host " in out and " wall " in out and "submissions " in out
    assert " launches " in out
    assert main([*argv, "--device", device, "--json"]) == 0
    assert "profile" not in json.loads(capsys.readouterr().out)


def test_bench_profile_times_the_fused_cpu_ops(model_file, capsys, clean_registry):
    """On the fused CPU engine --profile splits a decode step by op: every op's ms, the
    GB/s of the ops that read weights (their bytes recounted here) or the KV cache."""
    from bitnet_core.model.api import load

    argv = ["bench", "-m", str(model_file), "-p", "4", "-n", "3", "--no-progress"]
    assert main([*argv, "--device", "cpu", "--profile", "--json"]) == 0
    prof = json.loads(capsys.readouterr().out)["profile"]
    ops = prof["ops"]
    assert set(ops) == {
        "norms_quant", "ternary_qkv", "rope_kv_store", "attention", "ternary_o",
        "ternary_gate_up", "gated", "ternary_down", "head", "other",
    }  # fmt: skip
    assert all(t["ms"] >= 0 for t in ops.values())
    assert 0 < sum(t["ms"] for t in ops.values()) <= prof["wall_ms_per_step"]
    runner = load(model_file, "cpu").runner
    nbytes = runner.op_bytes()
    layers = runner.weights.layers
    assert nbytes["ternary_qkv"] == sum(
        int(getattr(lw, n).nbytes)
        + 4 * int(getattr(lw, n).rows) * (getattr(lw, n).layout != "tq2_0")
        for lw in layers
        for n in ("q", "k", "v")
    )
    for op in ("ternary_qkv", "ternary_o", "ternary_gate_up", "ternary_down", "head", "attention"):
        assert ops[op]["gb_per_s"] > 0
    assert "gb_per_s" not in ops["norms_quant"]
    # off by default; on, it counts the passes; off again, it stops (totals restarted)
    runner.logits([1, 2])
    assert runner.op_times()["passes"] == 0
    assert runner.time_ops(True)
    runner.logits([1, 2])
    assert runner.op_times()["passes"] == 1 and runner.op_times()["ternary_qkv"] > 0
    runner.time_ops(False)
    runner.logits([1, 2])
    assert runner.op_times()["passes"] == 0
    assert main([*argv, "--device", "cpu", "--profile"]) == 0
    out = capsys.readouterr().out
    assert "ternary_gate_up" in out
    # this model's head is small: the exact head, no check to report
    assert "head_rows_recomputed_per_token" not in prof and "checked head" not in out


def test_bench_profile_counts_the_checked_heads_rows(
    model_file, capsys, clean_registry, monkeypatch
):
    """With the checked int8 head --profile reports the rows it recomputed exactly a
    decode token: at least one (the maximum's), at most the vocabulary."""
    from bitnet_core.model.api import load

    monkeypatch.setenv("BITNET_CPU_INT8_HEAD", "checked")
    argv = ["bench", "-m", str(model_file), "-p", "4", "-n", "5", "-r", "2", "--no-progress"]
    assert main([*argv, "--device", "cpu", "--profile", "--json"]) == 0
    rows = json.loads(capsys.readouterr().out)["profile"]["head_rows_recomputed_per_token"]
    vocab = load(model_file, "cpu").config.vocab_size
    assert 1 <= rows <= vocab
    assert main([*argv, "--device", "cpu", "--profile"]) == 0
    assert f"checked head: {rows:.1f} rows recomputed exactly a token" in capsys.readouterr().out


def test_a_receipt_lists_what_its_model_ran_not_what_ran_before_on_the_provider():
    provider = ReferenceProvider()
    relu = Model(GenericRunner(provider, random_weights(strict_config("relu2"), seed=1)))
    relu.generate_ids([1, 2], max_tokens=2, temperature=0)
    provider.trace.fallback("an earlier model's fallback")
    silu = Model(GenericRunner(provider, random_weights(strict_config("silu"), seed=1)))
    silu.generate_ids([1, 2], max_tokens=2, temperature=0)
    assert "relu2_mul" in provider.trace.kernels  # the provider's whole life
    prov = silu.receipt()["provider"]
    assert "silu_mul" in prov["kernels"] and "relu2_mul" not in prov["kernels"]
    assert prov["fallbacks"] == []
    assert "relu2_mul" in relu.receipt()["provider"]["kernels"]
    provider.trace.fallback("an earlier model's fallback")  # taken again: this run's too
    assert silu.receipt()["provider"]["fallbacks"] == ["an earlier model's fallback"]
