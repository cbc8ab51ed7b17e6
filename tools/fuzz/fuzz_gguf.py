"""Atheris fuzz target: the GGUF reader and every ternary unpacker.

Run: ``python tools/fuzz/fuzz_gguf.py -max_total_time=60`` (libFuzzer options;
seeds from ``corpus/gguf``, dictionary ``gguf.dict``; see ``harness.py``).
An input starting with a zero byte drives one codec's ``unpack`` directly
(``FuzzedDataProvider``: codec, rows, cols, raw bytes); any other input is
written to a file and opened as a model.

Property: any input either opens (and every ternary tensor unpacks to codes
in {-1, 0, +1} and one scale per row) or raises a
``bitnet_core.errors.BitnetError``. Anything else (an IndexError, a
MemoryError, a crash, a hang) is a bug.
"""

from __future__ import annotations

import os
import sys
import tempfile

import atheris
import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

from bitnet_core.errors import BitnetError  # noqa: E402
from bitnet_core.formats import CODEC_NAMES, get_codec  # noqa: E402
from bitnet_core.gguf import GGUFFile, open_model_file  # noqa: E402

_WORK = tempfile.mkdtemp(prefix="bitnet-fuzz-gguf-")
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
            with GGUFFile(_PATH) as g:  # the container alone may still open
                for name in g.tensor_names:
                    g.tensor_info(name).as_dict()
            return
        with m:
            harness.planted(m.metadata.get("general.name"))
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


if __name__ == "__main__":
    harness.run("gguf", test_one_input)
