"""Per-tensor fallback of ``bitnet convert``: rows a ternary type cannot hold go in F16, and run."""

from __future__ import annotations

import numpy as np
import pytest
from hf_layouts import bitnet_checkpoint

import bitnet_core
from bitnet_core.cli.main import main
from bitnet_core.convert import convert_checkpoint
from bitnet_core.gguf import open_model_file

LAYER = ("attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up", "ffn_down")
IN_HIDDEN = {"attn_q", "attn_k", "attn_v", "attn_output", "ffn_gate", "ffn_up"}  # cols = hidden
CPU = ("cpu-avx512", "cpu-avx2", "cpu-neon", "cpu-scalar", "cpu-reference")


def _available_cpu() -> list[str]:
    return [r.name for r in bitnet_core.list_providers() if r.name in CPU and r.probe().available]


def _types(path) -> dict[str, str]:
    mf = open_model_file(path)
    return {
        name: mf.tensor_info(name).type_name
        for name in mf.tensors
        if name.startswith("blk.") and name.split(".")[2] in LAYER
    }


@pytest.mark.parametrize(
    "hidden, inter, ttype, fallen",
    [
        (256, 320, "tq2_0", {"ffn_down"}),  # 320 % 256
        (256, 320, "i2_s", {"ffn_down"}),  # 320 % 128
        (384, 512, "tq1_0", IN_HIDDEN),  # 384 % 256
        (384, 512, "i2_s", set()),  # 384 = 3 x 128
    ],
)
def test_rows_that_do_not_fit_fall_back_to_f16(tmp_path, capsys, hidden, inter, ttype, fallen):
    src = bitnet_checkpoint(
        tmp_path / "hf", hidden_size=hidden, intermediate_size=inter, num_layers=2, seed=3
    )
    out = tmp_path / f"m-{ttype}.gguf"
    assert main(["convert", str(src), str(out), "--type", ttype, "--no-progress"]) == 0
    stdout = capsys.readouterr().out
    types = _types(out)
    want = {n: ("F16" if n.split(".")[2] in fallen else ttype.upper()) for n in types}
    assert types == want
    if fallen:
        assert f"in f16 instead of {ttype}" in stdout and "not a multiple of" in stdout
        assert f"blk.0.{sorted(fallen)[0]}.weight" in stdout
    else:
        assert "fallback" not in stdout
    # the same ternary model as an all-f32 conversion: same codes, same logits
    ref = convert_checkpoint(src, tmp_path / "ref.gguf", ternary_type="f32")
    a, b = open_model_file(out), open_model_file(ref)
    for name in types:
        ca, sa = a.ternary(name).unpack()
        cb, sb = b.ternary(name).unpack()
        np.testing.assert_array_equal(ca, cb, err_msg=name)
        np.testing.assert_allclose(sa, sb, rtol=1e-6, err_msg=name)
    _same_logits_on_every_cpu_provider(out, ref, [0, 5, 17, 42, 99, 7, 3])


def _same_logits_on_every_cpu_provider(path, ref, ids) -> None:
    """Each CPU provider runs ``path`` (mixed types) as it runs ``ref`` (all f32)."""
    for provider in _available_cpu():
        got = bitnet_core.load(path, provider, progress=False).logits(ids)
        want = bitnet_core.load(ref, provider, progress=False).logits(ids)
        assert np.isfinite(got).all()
        err = np.abs(got - want).max() / np.abs(want).max()
        assert err < 1e-5, (provider, err)


@pytest.mark.slow
def test_3200_wide_checkpoint_converts_to_tq2_0_and_runs(tmp_path, capsys):
    """bitnet_b1_58-3B's hidden size, 3200 = 12.5 x 256: the hidden-input layers go in F16."""
    src = bitnet_checkpoint(
        tmp_path / "hf",
        hidden_size=3200,
        intermediate_size=512,
        num_layers=1,
        num_heads=32,
        num_kv_heads=8,
        bf16=True,
    )
    out = tmp_path / "m.gguf"
    assert main(["convert", str(src), str(out), "--type", "tq2_0", "--no-progress"]) == 0
    stdout = capsys.readouterr().out
    assert "6 tensor(s) in f16 instead of tq2_0: rows of 3200 weights" in stdout
    types = _types(out)
    assert types["blk.0.ffn_down.weight"] == "TQ2_0" and types["blk.0.attn_q.weight"] == "F16"
    rc = main(["run", "-m", str(out), "-p", "hello", "-n", "4", "--device", "cpu", "--temp", "0"])
    assert rc == 0, capsys.readouterr().err
    ref = convert_checkpoint(src, tmp_path / "ref.gguf", ternary_type="f32")
    _same_logits_on_every_cpu_provider(out, ref, [0, 9, 77, 3])
