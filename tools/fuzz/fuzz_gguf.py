"""Atheris fuzz target: the GGUF reader and every ternary unpacker.

Run: ``python tools/fuzz/fuzz_gguf.py -runs=10000`` (or ``-max_total_time=60``),
optionally followed by corpus directories; without one, a seed corpus of
small valid GGUF files (written by ``write_gguf``) is made in a temp dir.

Property: any input either opens (and every ternary tensor unpacks to codes
in {-1, 0, +1}) or raises a ``bitnet_core.errors.BitnetError``. Anything else
(an IndexError, a MemoryError, a crash, a hang) is a bug.
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris
import gguf  # noqa: F401  (imported before instrumenting: only bitnet's code is)
import numpy as np

with atheris.instrument_imports(include=["bitnet_core"]):
    from bitnet_core.config import BitNetConfig
    from bitnet_core.errors import BitnetError
    from bitnet_core.formats import CODEC_NAMES, get_codec
    from bitnet_core.gguf import GGUFFile, open_model_file, write_gguf

_WORK = tempfile.mkdtemp(prefix="bitnet-fuzz-")
_PATH = os.path.join(_WORK, "input.gguf")


def _check_codes(codes: np.ndarray, scales: np.ndarray, rows: int, cols: int) -> None:
    assert codes.shape == (rows, cols), (codes.shape, rows, cols)
    assert scales.shape == (rows,), scales.shape
    assert codes.dtype == np.int8
    assert codes.size == 0 or (codes.min() >= -1 and codes.max() <= 1)


def fuzz_file(data: bytes) -> None:
    with open(_PATH, "wb") as f:
        f.write(data)
    try:
        try:
            m = open_model_file(_PATH)
        except BitnetError:
            m = None
            GGUFFile(_PATH)  # the container alone may still open
        if m is None:
            return
        for name in m.tensor_names:
            info = m.tensor_info(name)
            if info.codec and len(info.shape) == 2:
                try:
                    codes, scales = m.ternary(name).unpack()
                except BitnetError:
                    continue
                _check_codes(codes, scales, *info.shape)
    except BitnetError:
        pass


def fuzz_codec(data: bytes) -> None:
    fdp = atheris.FuzzedDataProvider(data)
    codec = get_codec(CODEC_NAMES[fdp.ConsumeIntInRange(0, len(CODEC_NAMES) - 1)])
    rows = fdp.ConsumeIntInRange(0, 8)
    cols = fdp.ConsumeIntInRange(1, 3) * max(codec.col_multiple, 1) * fdp.ConsumeIntInRange(1, 2)
    if codec.col_multiple == 1:
        cols = fdp.ConsumeIntInRange(1, 70)
    raw = np.frombuffer(fdp.ConsumeBytes(codec.nbytes(rows, cols) + 4), dtype=np.uint8)
    if codec.name == "qk256":
        codec = codec.with_scales(1.0)  # type: ignore[attr-defined]
    try:
        codes, scales = codec.unpack(raw, rows, cols)
    except BitnetError:
        return
    _check_codes(codes, scales, rows, cols)


def test_one_input(data: bytes) -> None:
    if data[:1] == b"\x00":
        fuzz_codec(data[1:])
    else:
        fuzz_file(data)


def seed_corpus() -> str:
    """A directory with a few small valid model files and codec inputs."""
    d = tempfile.mkdtemp(prefix="bitnet-fuzz-seeds-")
    cfg = BitNetConfig(
        vocab_size=8,
        hidden_size=8,
        num_layers=1,
        num_heads=2,
        num_kv_heads=1,
        intermediate_size=16,
        context_length=16,
    )
    rng = np.random.default_rng(0)
    from bitnet_core.gguf import expected_shapes

    tensors = {
        n: rng.standard_normal(s).astype(np.float32) for n, s in expected_shapes(cfg).items()
    }
    tok = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.tokens": [f"t{i}" for i in range(8)]}
    for t in ("f16", "bitnet32", "qk256"):
        write_gguf(
            os.path.join(d, f"tiny-{t}.gguf"), cfg, tensors, ternary_type=t, tokenizer_metadata=tok
        )
    for i in range(4):
        with open(os.path.join(d, f"codec-{i}"), "wb") as f:
            f.write(b"\x00" + bytes([i]) + rng.integers(0, 256, 300, dtype=np.uint8).tobytes())
    return d


def main() -> None:
    argv = list(sys.argv)
    if not any(os.path.isdir(a) for a in argv[1:] if not a.startswith("-")):
        argv.append(seed_corpus())
    atheris.Setup(argv, test_one_input)
    atheris.Fuzz()


if __name__ == "__main__":
    main()
