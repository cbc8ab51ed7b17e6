"""The docs stay a design record a clone can read on its own.

- every docs/*.md outside docs/journal/ has at most 400 lines (dated lab entries go to
  docs/journal/);
- no tracked file points to the notes outside the repository the project started from
  (what a reader needs of them is written into docs/ARCHITECTURE.md and docs/FORMATS.md);
- relative links in docs/, README.md, CONTRIBUTING.md and tools/bench/ resolve;
- tools/bench/results/README.md names every result file there.
"""

from __future__ import annotations

import fnmatch
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
MAX_LINES = 400
#: what a file outside the repository would be cited as (built so this file does not match)
OUTSIDE = re.compile(r"\.\./" + "shared" + r"|\bshared/(DESIGN|REFERENCE)\.md|\bshared/seeds\b")
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def tracked_files() -> list[Path]:
    out = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True)
    return [ROOT / p for p in out.stdout.decode().split("\0") if p]


def design_docs() -> list[Path]:
    return sorted((ROOT / "docs").glob("*.md"))


def long_docs(docs: list[Path]) -> list[str]:
    """``name: N lines`` of each doc over ``MAX_LINES``."""
    counts = {p: len(p.read_text(encoding="utf-8").splitlines()) for p in docs}
    return [f"{p.name}: {n} lines" for p, n in counts.items() if n > MAX_LINES]


def outside_mentions(files: list[Path]) -> list[str]:
    """``path:line`` of each mention of a file outside the repository."""
    hits = []
    for path in files:
        try:
            text = path.read_text(encoding="utf-8")
        except (UnicodeDecodeError, IsADirectoryError, FileNotFoundError):
            continue  # binary files, submodules
        for i, line in enumerate(text.splitlines(), 1):
            if OUTSIDE.search(line):
                hits.append(f"{path.relative_to(ROOT)}:{i}: {line.strip()}")
    return hits


def test_every_design_doc_is_at_most_400_lines():
    assert design_docs(), "no docs/*.md found"
    assert long_docs(design_docs()) == []


def test_a_long_doc_is_reported(tmp_path):
    planted = tmp_path / "LONG.md"
    planted.write_text("line\n" * (MAX_LINES + 1))
    assert long_docs([planted]) == [f"LONG.md: {MAX_LINES + 1} lines"]


def test_no_tracked_file_points_outside_the_repository():
    assert outside_mentions(tracked_files()) == []


@pytest.mark.parametrize(
    "line",
    ["see ../" + "shared/" + "DESIGN.md", "(shared/" + "REFERENCE.md)", "the shared/" + "seeds/"],
)
def test_a_pointer_outside_is_found(line, tmp_path, monkeypatch):
    monkeypatch.setattr(sys.modules[__name__], "ROOT", tmp_path)
    planted = tmp_path / "x.py"
    planted.write_text(f"# fine\n# {line}\n")
    assert outside_mentions([planted]) == [f"x.py:2: # {line}"]


def test_relative_links_resolve():
    pages = [*design_docs(), *(ROOT / "docs" / "journal").glob("*.md")]
    pages += [
        ROOT / "README.md",
        ROOT / "CONTRIBUTING.md",
        *(ROOT / "tools" / "bench").rglob("*.md"),
    ]
    broken = []
    for page in pages:
        for target in LINK.findall(page.read_text(encoding="utf-8")):
            if "://" in target or target.startswith("mailto:"):
                continue
            if not (page.parent / target).exists():
                broken.append(f"{page.relative_to(ROOT)}: {target}")
    assert broken == []


def test_the_results_index_names_every_result_file():
    results = ROOT / "tools" / "bench" / "results"
    named = set(re.findall(r"`([^`\s]+)`", (results / "README.md").read_text(encoding="utf-8")))
    patterns = [n for n in named if "*" in n]
    missing = [
        str(p.relative_to(results))
        for p in sorted(results.rglob("*"))
        if p.is_file()
        and p.name != "README.md"
        and p.name not in named
        and not any(fnmatch.fnmatch(p.name, pat) for pat in patterns)
    ]
    assert missing == []
