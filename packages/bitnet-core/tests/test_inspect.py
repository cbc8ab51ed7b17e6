"""``bitnet inspect``: text and JSON reports, errors as one line with a non-zero exit."""

from __future__ import annotations

import json

import numpy as np
import pytest
from formats_testlib import TINY, gpt2_vocab, one_tensor_blob, random_tensors

from bitnet_core.cli.main import main
from bitnet_core.formats import ternarize_rows
from bitnet_core.gguf import write_gguf


@pytest.fixture(scope="module")
def model(tmp_path_factory):
    t = random_tensors(TINY, seed=4)
    p = tmp_path_factory.mktemp("i") / "m.gguf"
    write_gguf(p, TINY, t, ternary_type="qk256", tokenizer_metadata=gpt2_vocab(TINY.vocab_size))
    return p, t


def test_json_report(model, capsys):
    path, tensors = model
    assert main(["inspect", str(path), "--json"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["architecture"] == "bitnet"
    assert r["config"]["hidden_size"] == 256 and r["config"]["ffn_activation"] == "silu"
    assert r["tokenizer"]["model"] == "gpt2" and r["tokenizer"]["tokens"] == TINY.vocab_size
    info = {t["name"]: t for t in r["tensors"]}
    assert info["blk.0.ffn_down.weight"] == {
        "name": "blk.0.ffn_down.weight",
        "shape": [256, 512],
        "type": "I2_S",
        "nbytes": 256 * 2 * 64,
        "offset": info["blk.0.ffn_down.weight"]["offset"],
        "codec": "qk256",
    }
    assert info["output_norm.weight"]["type"] == "F32"
    assert len(r["ternary_shares"]) == 14
    codes, _ = ternarize_rows(tensors["blk.1.attn_v.weight"], per_row=False)
    share = r["ternary_shares"]["blk.1.attn_v.weight"]
    assert share["-1"] == pytest.approx(np.mean(codes == -1))
    assert share["0"] == pytest.approx(np.mean(codes == 0))
    assert share["+1"] == pytest.approx(np.mean(codes == 1))


def test_text_report(model, capsys):
    path, _ = model
    assert main(["inspect", str(path)]) == 0
    out = capsys.readouterr().out
    assert "architecture  bitnet" in out
    assert "tokenizer     model=gpt2" in out
    line = next(x for x in out.splitlines() if "blk.0.attn_q.weight" in x)
    assert "I2_S (qk256)" in line and "256x256" in line and "-1" in line and "+1" in line


def test_no_stats_and_other_architectures(tmp_path, capsys):
    p = tmp_path / "x.gguf"
    p.write_bytes(one_tensor_blob())
    assert main(["inspect", str(p), "--json", "--no-stats"]) == 0
    r = json.loads(capsys.readouterr().out)
    assert r["config"] is None and "not a BitNet model" in r["config_error"]
    assert r["ternary_shares"] == {} and r["tensors"][0]["shape"] == [2, 4]


def test_errors_are_one_line(tmp_path, capsys):
    p = tmp_path / "bad.gguf"
    p.write_bytes(b"GGUF" + bytes(3))
    assert main(["inspect", str(p)]) == 3
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("error: ") and "too small" in err
    assert main(["inspect", str(tmp_path / "none.gguf")]) == 3
    assert "no such file" in capsys.readouterr().err
