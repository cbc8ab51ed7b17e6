"""Models by name: ``bitnet pull`` / ``--model ORG/NAME`` against a hub on loopback (``HF_ENDPOINT``)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
from formats_testlib import TEXT_MODEL
from hf_layouts import bitnet_checkpoint
from local_hub import LocalHub

import bitnet_core
from bitnet_core.cli.main import main
from bitnet_core.errors import HubError
from bitnet_core.hub import HubRef, choose_gguf, parse_model_ref
from bitnet_core.model import random_model_file

CFG = TEXT_MODEL


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    d = tmp_path_factory.mktemp("hubfiles")
    out = {}
    for i, t in enumerate(("tq1_0", "tq2_0", "i2_s")):
        out[t] = random_model_file(d / f"tiny-{t}.gguf", CFG, seed=i).read_bytes()
    ck = bitnet_checkpoint(d / "ck", hidden_size=256, intermediate_size=256, vocab_size=300)
    out["ckpt"] = {p.name: p.read_bytes() for p in ck.iterdir()}
    return out


@pytest.fixture(scope="module")
def hub(files):
    with LocalHub() as h:
        h.add(
            "bitnet-test/tiny",
            {
                "README.md": b"# tiny\n",
                "tiny-tq1_0.gguf": files["tq1_0"],
                "tiny-tq2_0.gguf": files["tq2_0"],
                "gguf/tiny-i2_s.gguf": files["i2_s"],
            },
        )
        h.add("bitnet-test/versions", {"m.gguf": files["tq1_0"]}, tags=("v1",))
        h.add("bitnet-test/versions", {"m.gguf": files["tq2_0"]})
        h.add("bitnet-test/ckpt", files["ckpt"])
        h.add("bitnet-test/private", {"m.gguf": files["tq2_0"]}, token="hf_secret")
        h.add("bitnet-test/empty", {"README.md": b"nothing\n"})
        yield h


@pytest.fixture
def env(hub, tmp_path, monkeypatch):
    """A fresh cache, the loopback hub as HF_ENDPOINT, no token, online."""
    monkeypatch.setenv("HF_ENDPOINT", hub.url)
    monkeypatch.setenv("HF_HOME", str(tmp_path / "hf"))
    monkeypatch.delenv("HF_HUB_CACHE", raising=False)
    for var in ("HF_TOKEN", "HF_HUB_OFFLINE", "TRANSFORMERS_OFFLINE"):
        monkeypatch.delenv(var, raising=False)
    monkeypatch.setenv("HF_HUB_DISABLE_TELEMETRY", "1")
    return dict(os.environ)


def _bitnet(argv: list[str], env: dict[str, str]) -> subprocess.CompletedProcess:
    """The ``bitnet`` CLI in a fresh process (huggingface_hub reads some settings at import)."""
    return subprocess.run(
        [sys.executable, "-m", "bitnet_core.cli.main", *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )


def _closed_port() -> str:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return f"http://127.0.0.1:{s.getsockname()[1]}"


def test_parse_model_ref(tmp_path, monkeypatch):
    assert parse_model_ref("org/name") == HubRef("org/name")
    assert parse_model_ref("org/name@v1.2:sub/f.gguf") == HubRef("org/name", "v1.2", "sub/f.gguf")
    assert parse_model_ref("hf://org/name/sub/f.gguf") == HubRef("org/name", None, "sub/f.gguf")
    assert parse_model_ref("hf://org/name@abc/f.gguf") == HubRef("org/name", "abc", "f.gguf")
    for local in ("m.gguf", "dir/m.gguf", "./org/name", "/org/name", "a/b/c", "name"):
        assert parse_model_ref(local) is None, local
    monkeypatch.chdir(tmp_path)
    (tmp_path / "org").mkdir()
    (tmp_path / "org" / "name").write_bytes(b"x")
    assert parse_model_ref("org/name") is None  # a local path that exists wins
    for bad in ("hf://org", "hf://org/na--me/f.gguf", "org/name:../x.gguf", "hf://o/n/a//b"):
        with pytest.raises(HubError):
            parse_model_ref(bad)


def test_choose_gguf_prefers_i2s_then_tq2():
    files = ["b-q4.gguf", "x-TQ1_0.gguf", "a/x-tq2_0.gguf", "x-I2_S.gguf", "c.gguf-00002-of-00002"]
    assert choose_gguf(files)[:3] == ["x-I2_S.gguf", "a/x-tq2_0.gguf", "x-TQ1_0.gguf"]
    assert choose_gguf(["m-00001-of-00002.gguf", "m-00002-of-00002.gguf"]) == [
        "m-00001-of-00002.gguf"
    ]


def test_run_by_name_downloads_once_then_runs_offline(hub, env, files, tmp_path):
    argv = ["run", "-m", "bitnet-test/tiny", "-p", "hello", "-n", "6", "--seed", "2"]
    argv += ["--device", "cpu", "--temp", "0"]
    before = hub.count("GET", "/resolve/")
    first = _bitnet(argv, env)
    assert first.returncode == 0, first.stderr
    assert "using gguf/tiny-i2_s.gguf" in first.stderr and "tiny-tq2_0.gguf" in first.stderr
    assert hub.count("GET", "/resolve/") == before + 1  # one file body downloaded
    cached = list((tmp_path / "hf" / "hub").rglob("tiny-i2_s.gguf"))
    assert len(cached) == 1 and cached[0].read_bytes() == files["i2_s"]

    again = _bitnet(argv, env)  # online again: metadata only, no second download
    assert again.returncode == 0 and again.stdout == first.stdout
    assert hub.count("GET", "/resolve/") == before + 1

    n = len(hub.requests)
    offline = dict(env, HF_HUB_OFFLINE="1", HF_ENDPOINT=_closed_port())
    third = _bitnet(argv, offline)
    assert third.returncode == 0, third.stderr
    assert third.stdout == first.stdout and len(hub.requests) == n


def test_pull_file_revision_url_and_load(hub, env, files, capsys):
    assert main(["pull", "bitnet-test/tiny:tiny-tq1_0.gguf", "--no-progress"]) == 0
    path = Path(capsys.readouterr().out.strip())
    assert path.read_bytes() == files["tq1_0"]
    assert main(["pull", "hf://bitnet-test/tiny/tiny-tq2_0.gguf", "--no-progress"]) == 0
    assert Path(capsys.readouterr().out.strip()).read_bytes() == files["tq2_0"]
    assert main(["pull", "bitnet-test/versions@v1", "--no-progress"]) == 0
    assert Path(capsys.readouterr().out.strip()).read_bytes() == files["tq1_0"]
    assert main(["pull", "bitnet-test/versions", "--no-progress"]) == 0
    assert Path(capsys.readouterr().out.strip()).read_bytes() == files["tq2_0"]
    model = bitnet_core.load("bitnet-test/versions@v1", "cpu", progress=False)
    assert model.path.read_bytes() == files["tq1_0"] and model.config == CFG
    assert main(["inspect", "bitnet-test/versions", "--no-stats"]) == 0
    assert "tq2_0" in capsys.readouterr().out.lower()


def test_checkpoint_repo_is_converted_once_into_the_cache(hub, env, tmp_path, capsys, monkeypatch):
    assert main(["pull", "bitnet-test/ckpt", "--no-progress"]) == 0
    captured = capsys.readouterr()
    path = Path(captured.out.strip())
    assert "has no GGUF file; converting" in captured.err
    assert path.is_file() and (tmp_path / "hf" / "hub") in path.parents
    assert path.parent.parent.name == "bitnet-converted"
    mtime = path.stat().st_mtime_ns
    assert main(["pull", "bitnet-test/ckpt", "--no-progress"]) == 0
    captured = capsys.readouterr()
    assert "converting" not in captured.err and Path(captured.out.strip()) == path
    assert path.stat().st_mtime_ns == mtime
    rc = main(["run", "-m", "bitnet-test/ckpt", "-p", "ab", "-n", "3", "--device", "cpu"])
    assert rc == 0
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")  # offline: the conversion in the cache
    monkeypatch.setenv("HF_ENDPOINT", _closed_port())
    capsys.readouterr()
    assert main(["pull", "bitnet-test/ckpt", "--no-progress"]) == 0
    assert Path(capsys.readouterr().out.strip()) == path


def test_token_is_sent(hub, env, monkeypatch, capsys):
    assert main(["pull", "bitnet-test/private", "--no-progress"]) == 3
    assert "no such repository" in capsys.readouterr().err
    monkeypatch.setenv("HF_TOKEN", "hf_secret")
    assert main(["pull", "bitnet-test/private", "--no-progress"]) == 0
    seen = [r.headers.get("authorization") for r in hub.requests if "private" in r.path]
    assert "Bearer hf_secret" in seen


def test_dropped_download_resumes_with_range(hub, env, capsys):
    """A connection lost mid-file is resumed where the written data stops (a Range request).

    huggingface_hub writes in 10 MiB chunks, so the file is 24 MiB and the
    connection drops after 12 MiB: the retry asks for ``bytes=10485760-``.
    """
    data = np.random.default_rng(0).integers(0, 256, 24 << 20, dtype=np.uint8).tobytes()
    hub.add("bitnet-test/big", {"big.gguf": data})
    hub.drop_once["big.gguf"] = 12 << 20
    assert main(["pull", "bitnet-test/big:big.gguf", "--no-progress"]) == 0
    assert Path(capsys.readouterr().out.strip()).read_bytes() == data
    gets = [r.headers.get("range") for r in hub.requests if r.path.endswith("/big.gguf")]
    assert gets[-1] == f"bytes={10 << 20}-" and "big.gguf" not in hub.drop_once


@pytest.mark.parametrize(
    "name, needle",
    [
        ("bitnet-test/missing", "no such repository"),
        ("bitnet-test/tiny@nope", "no revision 'nope'"),
        ("bitnet-test/tiny:absent.gguf", "no file 'absent.gguf'"),
        ("bitnet-test/tiny:README.md", "not a .gguf file"),
        ("bitnet-test/empty", "no GGUF file and no safetensors checkpoint"),
        ("hf://bitnet", "not a hub URL"),
    ],
)
def test_bad_names_are_one_clear_line(hub, env, capsys, name, needle):
    rc = main(["run", "-m", name, "-p", "x", "-n", "1", "--device", "cpu"])
    err = capsys.readouterr().err
    assert rc == 3 and needle in err and err.startswith("error: "), err
    assert "Traceback" not in err


def test_unreachable_hub_and_offline_miss(env, monkeypatch, capsys):
    monkeypatch.setenv("HF_ENDPOINT", _closed_port())
    assert main(["pull", "bitnet-test/tiny", "--no-progress"]) == 3
    err = capsys.readouterr().err
    assert "not in the local cache" in err and err.count("\n") == 1, err
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    assert main(["pull", "bitnet-test/tiny", "--no-progress"]) == 3
    assert "HF_HUB_OFFLINE is set" in capsys.readouterr().err


def test_local_path_wins_over_hub_name(env, files, tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "bitnet-test").mkdir()
    (tmp_path / "bitnet-test" / "tiny").write_bytes(files["tq1_0"])
    model = bitnet_core.load("bitnet-test/tiny", "cpu", progress=False)
    assert model.path == Path("bitnet-test/tiny")
    assert main(["pull", "bitnet-test/tiny"]) == 3
    assert "local path" in capsys.readouterr().err
