"""``bitnet run`` / ``bench`` / ``chat`` end to end (in-process, through cli.main)."""

from __future__ import annotations

import io
import json

import pytest
from formats_testlib import TEXT_MODEL

from bitnet_core.cli.main import main
from bitnet_core.model.receipt import read_receipt

CFG = TEXT_MODEL


def error_lines(err: str) -> list[str]:
    return [line for line in err.splitlines() if line.strip()]


def test_run_on_cuda_without_cuda_is_one_clear_line(tmp_path, capsys, clean_registry):
    model = tmp_path / "m.gguf"
    model.write_bytes(b"GGUF")  # never read: the device fails first
    rc = main(["run", "--model", str(model), "--prompt", "hi", "--device", "cuda"])
    err = capsys.readouterr().err
    assert rc != 0
    lines = error_lines(err)
    assert len(lines) == 1 and lines[0].startswith("error:") and "cuda" in lines[0]
    assert "Traceback" not in err


def test_run_without_model_or_demo_says_so(capsys, clean_registry, monkeypatch):
    from bitnet_core.model import api

    monkeypatch.setattr(api, "demo_model_path", lambda: None)
    rc = main(["run", "--prompt", "hi", "--device", "cpu-reference"])
    err = capsys.readouterr().err
    assert rc == 3 and "demo model" in err and len(error_lines(err)) == 1


def test_bad_sampling_flag_is_an_error(tmp_path, capsys, clean_registry):
    rc = main(["run", "--model", "x.gguf", "--prompt", "hi", "--top-p", "2"])
    assert rc != 0 and "top_p" in capsys.readouterr().err


@pytest.fixture(scope="module")
def model_file(tmp_path_factory):
    from bitnet_core.model import random_model_file

    return random_model_file(tmp_path_factory.mktemp("m") / "tiny.gguf", CFG, seed=1)


def test_run_streams_and_writes_a_valid_receipt(model_file, tmp_path, capsys, clean_registry):
    receipt = tmp_path / "out" / "r.json"
    argv = ["run", "-m", str(model_file), "-p", "hello", "-n", "8", "--seed", "3"]
    rc = main([*argv, "--device", "cpu", "--receipt", str(receipt)])
    out, err = capsys.readouterr()
    assert rc == 0, err
    assert "requested=cpu" in err and "selected=" in err
    r = read_receipt(receipt, strict=True)
    assert r["compute_path"] == "real" and r["tokens"]["prompt"] > 0
    assert len(r["model"]["sha256"]) == 64
    rc = main([*argv, "--device", "cpu"])
    assert rc == 0 and capsys.readouterr().out == out  # same seed, same text


def test_bench_prints_tokens_per_second(model_file, capsys, clean_registry):
    rc = main(["bench", "-m", str(model_file), "-p", "8", "-n", "4", "--json", "--no-progress"])
    out = capsys.readouterr().out
    assert rc == 0
    result = json.loads(out)
    assert result["prompt_tokens_per_s"] > 0 and result["decode_tokens_per_s"] > 0


def test_chat_answers_each_line(model_file, capsys, clean_registry, monkeypatch):
    monkeypatch.setattr("sys.stdin", io.StringIO("hi\nagain\n\n"))
    rc = main(["chat", "-m", str(model_file), "-n", "4", "--temperature", "0"])
    assert rc == 0
    assert len(capsys.readouterr().out.splitlines()) == 2


@pytest.mark.parametrize("kv_type,want", [("f32", "float32"), ("f16", "float16")])
def test_bench_kv_type_flag(model_file, capsys, clean_registry, kv_type, want):
    argv = ["bench", "-m", str(model_file), "-p", "4", "-n", "2", "--json", "--no-progress"]
    rc = main([*argv, "--device", "cpu-reference", "--kv-type", kv_type])
    assert rc == 0
    assert json.loads(capsys.readouterr().out)["kv_cache_dtype"] == want


def test_bench_reports_the_devices_kv_type(model_file, capsys, clean_registry):
    argv = ["bench", "-m", str(model_file), "-p", "4", "-n", "2", "--json", "--no-progress"]
    assert main([*argv, "--device", "cpu-reference"]) == 0
    assert json.loads(capsys.readouterr().out)["kv_cache_dtype"] == "float32"  # the spec's default


def test_python_m_bitnet_core_is_the_bitnet_command():
    """``python -m bitnet_core`` runs the CLI (where the ``bitnet`` script is not on
    PATH) and passes its exit status through."""
    import subprocess
    import sys

    from bitnet_core import __version__

    ok = subprocess.run([sys.executable, "-m", "bitnet_core", "--version"],
                        capture_output=True, text=True, timeout=120)  # fmt: skip
    assert ok.returncode == 0 and ok.stdout.strip() == f"bitnet {__version__}"
    bad = subprocess.run([sys.executable, "-m", "bitnet_core", "run", "-p", "x", "--device", "nosuch"],
                         capture_output=True, text=True, timeout=120)  # fmt: skip
    assert bad.returncode != 0 and "unknown device 'nosuch'" in bad.stderr
