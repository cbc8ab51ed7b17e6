"""Files written through a temporary file get the mode of an ordinary file under the umask."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import tempfile
from pathlib import Path

import pytest
from formats_testlib import TINY, random_tensors

from bitnet_core.atomic_file import temp_beside, umask_mode
from bitnet_core.gguf import write_gguf
from bitnet_core.model.receipt import write_receipt
from bitnet_core.testing.__main__ import main as conformance_main


@pytest.fixture
def umask():
    def set_(value: int) -> None:
        os.umask(value)

    old = os.umask(0o022)
    yield set_
    os.umask(old)


def _mode(path) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


@pytest.mark.parametrize("mask, want", [(0o022, 0o644), (0o077, 0o600), (0o002, 0o664)])
def test_written_gguf_honours_umask(tmp_path, umask, mask, want):
    umask(mask)
    assert umask_mode() == want
    path = write_gguf(tmp_path / "m.gguf", TINY, random_tensors(TINY, seed=1))
    assert _mode(path) == want
    overwritten = write_gguf(path, TINY, random_tensors(TINY, seed=2), overwrite=True)
    assert _mode(overwritten) == want


def test_gguf_readable_by_another_user(umask):
    """Under umask 022 another user (uid/gid 65534, ``nobody``) can read the written file."""
    directory = Path(tempfile.mkdtemp(prefix="bitnet-mode-"))  # /tmp: searchable by all
    try:
        directory.chmod(0o755)
        path = write_gguf(directory / "m.gguf", TINY, random_tensors(TINY, seed=1))
        assert _mode(path) & stat.S_IROTH
        if os.geteuid() != 0:
            return  # only root can become another user; the mode bit above is the check
        res = subprocess.run(
            ["head", "-c", "4", str(path)], user=65534, group=65534, capture_output=True
        )
        assert res.returncode == 0 and res.stdout == b"GGUF", res.stderr
    finally:
        shutil.rmtree(directory)


def test_receipt_and_conformance_report_modes(tmp_path, umask):
    umask(0o027)
    assert _mode(temp_beside(tmp_path / "x")) == 0o640
    path = tmp_path / "r.json"
    write_receipt(path, {"schema": "x"})
    assert _mode(path) == 0o640 and json.loads(path.read_text()) == {"schema": "x"}
    report = tmp_path / "conf.json"
    conformance_main(["cpu-reference", "--no-large", "--only", "rms_norm", "--json", str(report)])
    assert _mode(report) == 0o640
