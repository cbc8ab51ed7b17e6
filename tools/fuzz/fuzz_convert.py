"""Atheris fuzz target: a Hugging Face checkpoint's config.json and safetensors file, as converted.

Run: ``python tools/fuzz/fuzz_convert.py -max_total_time=60`` (see ``harness.py``).
An input is ``config.json`` bytes, the separator ``SEP``, then the bytes of
``model.safetensors`` (the seeds: small BitNetForCausalLM checkpoints in
f32 and bf16). They are written to a directory and read as ``bitnet convert``
reads them: ``read_hf_config``, then ``load_tensors`` (names, dtypes,
shapes, the ternary weights and their scales).

Property: either every tensor loads (ternary weights unpack to codes in
{-1, 0, +1}) or a ``BitnetError`` is raised.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path

import numpy as np

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import harness  # noqa: E402

from bitnet_core.convert.checkpoint import load_tensors  # noqa: E402
from bitnet_core.convert.hf_config import read_hf_config  # noqa: E402
from bitnet_core.errors import BitnetError  # noqa: E402
from bitnet_core.hal.weights import TernaryWeight  # noqa: E402

SEP = b"\n--model.safetensors--\n"
_DIR = Path(tempfile.mkdtemp(prefix="bitnet-fuzz-convert-"))


def test_one_input(data: bytes) -> None:
    config, _, weights = data.partition(SEP)
    (_DIR / "config.json").write_bytes(config)
    (_DIR / "model.safetensors").write_bytes(weights)
    try:
        info = read_hf_config(_DIR)
        tensors = load_tensors(_DIR, info, progress=False)
        for value in tensors.values():
            if isinstance(value, TernaryWeight):
                codes, scales = value.unpack()
                assert codes.shape == (value.rows, value.cols)
                assert codes.size == 0 or (codes.min() >= -1 and codes.max() <= 1)
            else:
                assert isinstance(value, np.ndarray)
    except BitnetError:
        pass


if __name__ == "__main__":
    harness.run("convert", test_one_input)
