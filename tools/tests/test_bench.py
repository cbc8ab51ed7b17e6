"""The CPU benchmark scripts of tools/bench run end to end and write what they promise.

Smoke runs on small shapes and a tiny model: the figures are not judged here
(speed is measured by running the scripts, docs/CPU_KERNELS.md), only that
the scripts work, cover what they say and refuse bad arguments.
"""

from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


def load_script(name: str):
    path = ROOT / "tools" / "bench" / f"{name}.py"
    spec = importlib.util.spec_from_file_location(f"bench_{name}", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_gemv_bandwidth_small_run(tmp_path):
    gemv = load_script("gemv_bandwidth")
    out = tmp_path / "gemv.json"
    argv = ["--threads", "2", "1", "--shapes", "640x2560", "48x512", "--working-set-mb", "4"]
    assert gemv.main([*argv, "--reps", "2", "--no-head", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    got = {(r["threads"], r["model"], r["rows"], r["cols"], r["layout"]) for r in report["results"]}
    want = {
        (t, model, rows, cols, layout)
        for t in (2, 1)
        for model, rows, cols in (("BitNet-b1.58-2B-4T", 640, 2560), ("custom", 48, 512))
        for layout in ("tq2_0", "i2_128", "tq1_160")
    }
    assert got == want
    for r in report["results"]:
        # a row's blocks: 66 bytes a 256 (TQ2_0), 32 a 128 (i2_128), 32 a 160 (tq1_160, padded)
        per, nbytes = {"tq2_0": (256, 66), "i2_128": (128, 32), "tq1_160": (160, 32)}[r["layout"]]
        assert r["weight_bytes"] == r["rows"] * -(-r["cols"] // per) * nbytes
        assert r["median_us"] > 0 and r["read_gbps_median"] > 0
        assert r["frac_of_read"] == pytest.approx(
            r["weight_bytes"] / r["median_us"] / 1e3 / r["read_gbps_median"]
        )
    assert report["probe_bytes"] == 4 << 20


def test_gemv_bandwidth_times_several_tokens(tmp_path):
    gemv = load_script("gemv_bandwidth")
    out = tmp_path / "gemm.json"
    argv = ["--threads", "1", "--shapes", "48x512", "--working-set-mb", "2", "--tokens", "8"]
    assert (
        gemv.main([*argv, "--reps", "2", "--no-head", "--layouts", "tq2_0", "--out", str(out)]) == 0
    )
    (r,) = json.loads(out.read_text())["results"]
    assert r["tokens"] == 8
    assert r["gmacs"] == pytest.approx(48 * 512 * 8 / r["median_us"] / 1e3, rel=1e-6)


@pytest.mark.parametrize("shape", ["12y", "48x300", "0x512"])
def test_gemv_bandwidth_refuses_bad_shapes(shape, capsys):
    gemv = load_script("gemv_bandwidth")
    with pytest.raises(SystemExit) as exc:
        gemv.main(["--shapes", shape])
    assert exc.value.code == 2
    assert "--shapes" in capsys.readouterr().err


def test_gemv_bandwidth_refuses_an_unknown_layout(capsys):
    gemv = load_script("gemv_bandwidth")
    with pytest.raises(SystemExit) as exc:
        gemv.main(["--layouts", "i2_s"])
    assert exc.value.code == 2
    assert "--layouts" in capsys.readouterr().err


def test_attention_bandwidth_small_run(tmp_path):
    bench = load_script("attention_bandwidth")
    out = tmp_path / "attention.json"
    argv = ["--threads", "2", "1", "--contexts", "40", "100", "--heads", "8", "2"]
    argv += ["--head-dim", "20", "--working-set-mb", "2", "--reps", "2", "--out", str(out)]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    got = {(r["threads"], r["context"]) for r in report["results"]}
    assert got == {(t, c) for t in (2, 1) for c in (40, 100)}
    for r in report["results"]:
        assert (r["heads"], r["kv_heads"], r["head_dim"]) == (8, 2, 20)
        assert r["cache_bytes"] == 2 * r["context"] * 2 * 20 * 2  # K and V, float16
        assert r["copies"] == max(2, (2 << 20) // (4 * r["context"] * 2 * 20))
        for kind in ("dram", "hot", "read"):
            assert r[f"{kind}_us"] > 0
            assert r[f"{kind}_gbps"] == pytest.approx(r["cache_bytes"] / r[f"{kind}_us"] / 1e3)
        assert r["frac_of_read"] == pytest.approx(r["read_us"] / r["dram_us"])
        lo, hi = sorted((r["hot_us"], r["read_us"]))
        assert r["serial"] == pytest.approx((r["dram_us"] - hi) / lo)


@pytest.mark.parametrize(
    "script,argv",
    [
        ("attention_bandwidth", ["--contexts", "0"]),
        ("attention_bandwidth", ["--heads", "6", "4"]),
        ("attention_bandwidth", ["--head-dim", "0"]),
        ("attention_bandwidth", ["--reps", "0"]),
        ("prompt_attention", ["--tokens", "1"]),
        ("prompt_attention", ["--start", "-1"]),
        ("prompt_attention", ["--heads", "6", "4"]),
        ("prompt_attention", ["--head-dim", "0"]),
    ],
)
def test_attention_benches_refuse_bad_arguments(script, argv, capsys):
    bench = load_script(script)
    with pytest.raises(SystemExit) as exc:
        bench.main(argv)
    assert exc.value.code == 2
    assert argv[0] in capsys.readouterr().err


def test_prompt_attention_small_run(tmp_path):
    bench = load_script("prompt_attention")
    out = tmp_path / "prompt.json"
    argv = ["--threads", "2", "1", "--tokens", "9", "40", "--start", "3", "--heads", "8", "2"]
    argv += ["--head-dim", "20", "--reps", "2", "--out", str(out)]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    got = {(r["threads"], r["tokens"]) for r in report["results"]}
    assert got == {(t, n) for t in (2, 1) for n in (9, 40)}
    for r in report["results"]:
        assert (r["heads"], r["kv_heads"], r["head_dim"], r["start"]) == (8, 2, 20, 3)
        n = r["tokens"]
        visible = sum(3 + t + 1 for t in range(n))  # query t sees start + t + 1 rows
        assert r["flops"] == 4 * visible * 8 * 20
        assert r["gflops"] == pytest.approx(r["flops"] / r["ms"] / 1e6)
        assert r["fma_peak_gflops"] > 0
        assert r["frac_of_fma_peak"] == pytest.approx(r["gflops"] / r["fma_peak_gflops"])


def test_model_vs_llamacpp_small_run(tmp_path):
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import random_model_file
    from bitnet_core.testing.model import FILE_CONFIG

    bench = load_script("model_vs_llamacpp")
    cfg = BitNetConfig(**FILE_CONFIG)  # the conformance kit's GGUF-sized model
    model = random_model_file(tmp_path / "tiny.gguf", cfg, seed=2, ternary_type="tq2_0")
    out = tmp_path / "model.json"
    argv = ["--model", str(model), "--threads", "1", "--runs", "2", "--n-prompt", "8"]
    argv += ["--probe-mib", "16", "--variant", "int8head:BITNET_CPU_INT8_HEAD=1"]
    assert bench.main([*argv, "--n-gen", "4", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["ours"]["info"]["provider"].startswith("cpu-")
    assert report["llama"]["info"]["provider"] == "llama-cpp-python"
    for engine in ("ours", "llama"):
        for key in ("pp", "tg"):
            runs = report[engine][key]["runs"]
            assert len(runs) == 2 and min(runs) > 0
    ratio = report["ours"]["tg"]["median"] / report["llama"]["tg"]["median"]
    assert report["ratio_tg"] == pytest.approx(ratio)
    # the machine probes ran between the rounds; the fractions are of their medians
    machine = report["machine"]
    assert len(machine["read_gbps"]["runs"]) == 4 and machine["read_gbps"]["min"] > 0
    assert machine["int8_peak_gmacs"]["median"] > 0
    ours, int8head = report["ours"], report["variants"]["int8head"]
    # the tiny model's head is below the size where auto checks it: the float table
    assert int8head["info"]["head_mode"] == "int8" and ours["info"]["head_mode"] == "exact"
    # the bytes a decode token reads: the f16 head is the tied table, the int8 copy + scales
    head = cfg.vocab_size * cfg.hidden_size
    assert ours["info"]["head_bytes"] == 2 * head
    assert int8head["info"]["head_bytes"] >= head + 4 * cfg.vocab_size
    mean_ctx = 8 + (4 + 1) / 2
    kv_row = 2 * cfg.num_layers * cfg.num_kv_heads * cfg.head_dim * 2  # K and V, float16
    step = ours["info"]["weight_bytes_per_token"] + kv_row * mean_ctx
    assert ours["bytes_per_decode_token"] == pytest.approx(step)
    assert ours["decode_frac_of_read"] == pytest.approx(
        ours["tg"]["median"] * step / 1e9 / machine["read_gbps"]["median"]
    )
    macs = (
        cfg.num_layers
        * cfg.hidden_size
        * (
            (cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim  # q, k, v
            + cfg.num_heads * cfg.head_dim  # o
            + 3 * cfg.intermediate_size  # gate, up, down
        )
    )
    assert ours["info"]["int8_macs_per_token"] == macs
    # the KV cache our run holds: 8 + 4 + 1 tokens, K and V, every layer's KV heads, float16
    kv_width = cfg.num_layers * cfg.num_kv_heads * cfg.head_dim
    assert report["kv_cache_bytes"] == 13 * 2 * kv_width * 2
    assert report["gguf_bytes"] == model.stat().st_size
    assert report["peak_rss_bytes"] > report["rss_before_load_bytes"] > 0
    assert report["rss_over_gguf_plus_kv"] == pytest.approx(
        report["peak_rss_bytes"] / (report["gguf_bytes"] + report["kv_cache_bytes"])
    )


@pytest.mark.parametrize("device", ["cpu", "cpu-avx2"])
def test_model_bench_without_llama(tmp_path, device):
    """--no-llama: our engine and the probes only; the fractions are still there, no ratios.
    The AVX2 table's prompt is judged against the AVX2 loop's peak, whatever the CPU has."""
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import random_model_file
    from bitnet_core.testing.model import FILE_CONFIG

    bench = load_script("model_vs_llamacpp")
    model = random_model_file(
        tmp_path / "tiny.gguf", BitNetConfig(**FILE_CONFIG), seed=2, ternary_type="tq2_0"
    )
    out = tmp_path / "model.json"
    argv = ["--model", str(model), "--threads", "1", "--runs", "1", "--n-prompt", "8"]
    argv += ["--n-gen", "2", "--probe-mib", "16", "--no-llama", "--out", str(out)]
    assert bench.main([*argv, "--device", device]) == 0
    report = json.loads(out.read_text())
    assert report["llama"] is None and report["ratio_tg"] is None
    assert report["ours"]["decode_frac_of_read"] > 0
    assert report["ours"]["prompt_frac_of_int8_peak"] > 0
    if device == "cpu-avx2":
        assert report["machine"]["int8_instruction"] == "avx2 pmaddubsw+paddw"


def test_model_vs_llamacpp_prompt_longer_than_llamas_batch(tmp_path):
    """A prompt over llama-cpp-python's 512-token batch (its ``scores`` have 512 rows
    unless every token's logits are kept, so the bench reads the last logits itself)."""
    pytest.importorskip("llama_cpp", reason="llama-cpp-python is not installed")
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import random_model_file
    from bitnet_core.testing.model import FILE_CONFIG

    bench = load_script("model_vs_llamacpp")
    cfg = BitNetConfig(**{**FILE_CONFIG, "context_length": 1024})
    model = random_model_file(tmp_path / "long.gguf", cfg, seed=2, ternary_type="tq2_0")
    out = tmp_path / "model.json"
    argv = ["--model", str(model), "--threads", "1", "--runs", "1", "--n-prompt", "600"]
    assert bench.main([*argv, "--n-gen", "2", "--no-probe", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    for engine in ("ours", "llama"):
        assert report[engine]["pp"]["median"] > 0 and report[engine]["tg"]["median"] > 0


def test_machine_probe_measures_the_int8_loop_it_is_asked_for():
    from bitnet_core import _native

    probe = load_script("machine_probe")
    avx2 = probe.int8_peak(1, ms=20, loop="pmaddubsw")
    assert avx2["instruction"] == "avx2 pmaddubsw+paddw" and avx2["gmacs"] > 0
    assert probe.loop_for("cpu-avx2") == "pmaddubsw" and probe.loop_for("cpu-avx512") == "auto"
    if not _native.cpu_features()["avxvnni"]:
        assert "avx-vnni" in probe.int8_peak(1, ms=20, loop="avx-vnni")["error"]
    with pytest.raises(probe.ProbeError, match="unknown int8 loop"):
        probe.int8_peak(1, loop="sse2")
    fma = probe.fma_peak(1, ms=20)
    assert fma["instruction"] == "fma vfmadd231ps ymm" and fma["gflops"] > 0


def test_pytest_benchmark_kernels_run_once():
    """bitnet-core's pytest-benchmark file, each benchmark run once (``--benchmark-disable``)."""
    bench = ROOT / "packages" / "bitnet-core" / "benchmarks" / "bench_cpu_kernels.py"
    run = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(bench)]
        + ["--benchmark-disable"],
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    assert run.returncode == 0, run.stdout[-3000:] + run.stderr[-2000:]
    assert " passed" in run.stdout.splitlines()[-1]


def test_layout_parity_small_run(tmp_path):
    """tq1_160 is exact (the same integer dots): every greedy token and logit equal; the
    int8 head's logits differ by a bounded amount; the checked int8 head's greedy tokens
    are the exact path's."""
    bench = load_script("layout_parity")
    out = tmp_path / "parity.json"
    assert bench.main(["--steps", "3", "--out", str(out)]) == 0
    report = json.loads(out.read_text())
    assert report["provider"].startswith("cpu-")
    assert len(report["models"]) >= 3
    for m in report["models"]:
        assert len(m["exact_tokens"]) == 3
        assert m["tq1_160"]["equal_tokens"] and m["tq1_160"]["max_rel_logit_diff"] == 0.0
        assert 0.0 < m["int8_head"]["max_rel_logit_diff"] < 0.05
        assert m["int8_checked"]["equal_tokens"]


def test_batched_step_small_run(capsys, tmp_path):
    """The batched step against decode and prefill, and against the int8 peak: the MACs a
    token, the GEMM floor and the ratio ceiling follow from the round's own figures."""
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model import random_model_file
    from bitnet_core.testing.model import FILE_CONFIG

    bench = load_script("batched_step")
    cfg = BitNetConfig(**FILE_CONFIG)
    model = random_model_file(tmp_path / "tiny.gguf", cfg, seed=3, ternary_type="tq2_0")
    argv = [
        "--model",
        str(model),
        "--threads",
        "1",
        "--streams",
        "3",
        "--steps",
        "2",
        "--context",
        "4",
    ]
    assert bench.main([*argv, "--rounds", "2"]) == 0
    report = json.loads(capsys.readouterr().out)
    macs = (
        cfg.num_layers
        * cfg.hidden_size
        * (
            (2 * cfg.num_heads + 2 * cfg.num_kv_heads) * cfg.head_dim  # q, k, v, o
            + 3 * cfg.intermediate_size  # gate, up, down
        )
    )
    assert report["int8_macs_per_token"] == macs and report["streams"] == 3
    assert len(report["rounds"]) == 2
    for r in report["rounds"]:
        assert r["int8_peak_gmacs"] > 0 and r["load_average"] >= 0
        floor = 3 * macs / (r["int8_peak_gmacs"] * 1e9)
        assert r["gemm_floor_ms"] == pytest.approx(floor * 1e3)
        assert r["decode_step_ms"] == pytest.approx(1e3 / r["decode_tok_s"])
        assert r["batch_step_ms"] == pytest.approx(3e3 / r["batch_aggregate_tok_s"])
        assert r["ratio_ceiling"] == pytest.approx(3 * r["decode_step_ms"] / 1e3 / floor)
        assert r["batch_gemm_frac_of_peak"] == pytest.approx(floor * 1e3 / r["batch_step_ms"])
        assert r["batch_vs_decode"] == pytest.approx(r["batch_aggregate_tok_s"] / r["decode_tok_s"])
        # the fused CPU runner times its ops: their sum is within the step's wall time
        for kind, step_ms in (("decode", r["decode_step_ms"]), ("batch", r["batch_step_ms"])):
            ops = r[f"{kind}_ops_ms"]
            assert {"ternary_qkv", "attention", "ternary_down", "head"} <= set(ops)
            assert ops["ternary_gate_up"] > 0 and 0 < sum(ops.values()) <= step_ms
    assert set(report["median"]["batch_ops_ms"]) == set(report["rounds"][0]["batch_ops_ms"])
    assert bench.main([*argv, "--rounds", "1", "--no-probe"]) == 0
    (plain,) = json.loads(capsys.readouterr().out)["rounds"]
    assert "ratio_ceiling" not in plain and plain["batch_aggregate_tok_s"] > 0


# A stand-in for a bitnet.cpp checkout: ggml-bitnet-mad.cpp's two functions with
# their names, signature and #if structure, the dot written plainly (the I2_S
# layout of bitnetcpp_gemm_harness.cpp); BIAS added to every dot plants a fault.
STAND_IN_MAD = """
#if defined(__AVX2__)
static inline int hsum_i32_8(const __m256i a) {
    return 0;
}
#endif

void ggml_vec_dot_i2_i8_s_Nx1(int n, float * s, size_t bs, const void * vx, size_t bx, const void * vy, size_t by, int nrc) {
#if defined(__AVX2__)
    const uint8_t *x = (const uint8_t *)vx;
    const int8_t *y = (const int8_t *)vy;
    for (int col = 0; col < nrc; ++col) {
        int acc = BIAS;
        for (int b = 0; b < n / QK_I2_S; ++b)
            for (int j = 0; j < 32; ++j)
                for (int g = 0; g < 4; ++g)
                    acc += ((x[b * 32 + j] >> (6 - 2 * g)) & 3) * y[col * by + b * 128 + 32 * g + j];
        s[col * bs] = (float)acc;
    }
#elif defined(__ARM_NEON)
#endif
}
"""


def stand_in_checkout(root: Path, bias: int) -> Path:
    (root / "src").mkdir(parents=True)
    (root / "include").mkdir()
    (root / "src" / "ggml-bitnet-mad.cpp").write_text(STAND_IN_MAD.replace("BIAS", str(bias)))
    (root / "include" / "gemm-config.h").write_text(
        "#define ACT_PARALLEL\n#define PARALLEL_SIZE 4\n"
    )
    return root


def test_bitnetcpp_gemm_runs_a_checkouts_kernel_beside_ours(tmp_path):
    bench = load_script("bitnetcpp_gemm")
    src = stand_in_checkout(tmp_path / "BitNet", bias=0)
    out = tmp_path / "gemm.json"
    argv = ["--bitnet-src", str(src), "--threads", "1", "2", "--shapes", "64x256", "40x512"]
    argv += ["--tokens", "8", "--reps", "1", "--rounds", "2", "--out", str(out)]
    assert bench.main(argv) == 0
    report = json.loads(out.read_text())
    assert report["tokens"] == 8
    assert {(r["threads"], tuple(r["shape"])) for r in report["rows"]} == {
        (t, s) for t in (1, 2) for s in ((64, 256), (40, 512))
    }
    for r in report["rows"]:
        rows, cols = r["shape"]
        assert r["bitnet_cpp"]["wrong_rows"] == 0
        for side in (r["bitnet_cpp"], *r["ours"].values()):
            assert side["gmacs"] == pytest.approx(rows * cols * 8 / side["us"] / 1e3, rel=1e-3)
        assert "avx2" in r["ours"]


def test_bitnetcpp_gemm_refuses_a_kernel_with_wrong_dots(tmp_path, capsys):
    bench = load_script("bitnetcpp_gemm")
    src = stand_in_checkout(tmp_path / "BitNet", bias=1)
    argv = ["--bitnet-src", str(src), "--threads", "1", "--shapes", "8x256", "--tokens", "4"]
    assert bench.main(argv + ["--reps", "1", "--rounds", "1"]) == 1
    assert "wrong dots" in capsys.readouterr().err


def test_bitnetcpp_gemm_refuses_what_is_not_a_checkout(tmp_path, capsys):
    bench = load_script("bitnetcpp_gemm")
    assert bench.main(["--bitnet-src", str(tmp_path), "--shapes", "8x256", "--tokens", "4"]) == 1
    assert "not a bitnet.cpp checkout" in capsys.readouterr().err
    with pytest.raises(SystemExit) as exc:
        bench.main(["--bitnet-src", str(tmp_path), "--shapes", "8x128"])
    assert exc.value.code == 2


def test_step_profile_variants_side_by_side(tmp_path, monkeypatch, capsys):
    """tools/bench/step_profile.py: bitnet bench --profile's figures a variant, each variant
    loaded in its own environment (the fused CPU engine against the op-by-op one)."""
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))  # the preset's random file
    sp = load_script("step_profile")
    out = tmp_path / "steps.json"
    argv = ["--preset", "host-bound", "--layers", "2", "--device", "cpu", "--steps", "3"]
    argv += ["--prompt", "4", "6", "--rounds", "2", "--json", str(out)]
    argv += ["--variant", "fused:BITNET_CPU_FUSED=1", "--variant", "opbyop:BITNET_CPU_FUSED=0"]
    assert sp.main(argv) == 0
    got = json.loads(out.read_text())
    assert list(got["variants"]) == ["fused", "opbyop"] and got["rounds"] == 2
    assert Path(got["model"]).parent == tmp_path
    for name, variant in got["variants"].items():
        assert variant["provider"].startswith("cpu-")
        assert [r["prompt"] for r in variant["runs"]] == [4, 6]
        for r in variant["runs"]:
            assert r["decode_steps"] == 6  # 3 steps, 2 rounds
            assert r["host_ms_per_step"] > 0 and r["wall_ms_per_step"] > 0
            assert r["decode_tokens_per_s"] > 0 and r["keys_per_split"] is None
            # the per-op table only where the fused engine times its ops
            assert ("ops" in r) == (name == "fused"), r
    assert "opbyop (cpu-" in capsys.readouterr().out  # a row a variant
    assert "BITNET_CPU_FUSED" not in os.environ  # each load's environment undone


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["--variant", "nocolon"], "expected NAME:VAR=VALUE"),
        (["--variant", "x:NOEQUALS"], "expected NAME:VAR=VALUE"),
        (["--kernels"], "no kernel timer"),
        (["--keys-per-split", "16"], "no attention split size"),
        (["--steps", "0"], "--steps must be positive"),
    ],
)
def test_step_profile_refuses_bad_arguments(argv, message, tmp_path, monkeypatch, capsys):
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    sp = load_script("step_profile")
    base = ["--preset", "host-bound", "--layers", "1", "--device", "cpu", "--steps", "1"]
    assert sp.main([*base, *argv]) != 0
    err = capsys.readouterr().err
    assert err.startswith("error: ") and message in err, err


def test_load_vs_llamacpp_reads_our_startup_line(tmp_path):
    """The start-up bench's own half on a tiny model: our process's wall, CPU, peak RSS
    and the ``load=`` stages parsed from its start-up line (llama-cli is not built here)."""
    from bitnet_core.config import BitNetConfig
    from bitnet_core.model.random import random_model_file

    bench = load_script("load_vs_llamacpp")
    path = tmp_path / "tiny.gguf"
    random_model_file(path, BitNetConfig(vocab_size=300, hidden_size=256, num_layers=2,
                                         num_heads=2, num_kv_heads=1, intermediate_size=256,
                                         context_length=64), seed=1)  # fmt: skip
    got = bench.ours(str(path), 1)
    assert got["wall_s"] >= got["load_s"] > 0 and got["cpu_s"] > 0
    assert 0.01 < got["peak_rss_gb"] < 4
    assert "read" in got["stages"] and "repack" in got["stages"]
    with pytest.raises(SystemExit, match="failed"):
        bench.timed([sys.executable, "-c", "raise SystemExit(3)"])
