"""Citations a reader can open: the papers by short name and arXiv id (ARCHITECTURE.md, "Papers"), never a paper's
extracted text file or a notes file that is not in the repository (issue #28 item 6)."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
PAPERS = {"HEAL": "2604.17928", "AER": "2510.10959", "PosAdv": "2511.05993", "OPEFO": "2605.11491"}
# "<paper>.txt" of one of the papers (spelled in two parts so this file does not cite one itself).
PAPER_TEXT = re.compile(r"\b(?:aer|heal|posadv|opefo)" + r"\.txt\b", re.IGNORECASE)
# A path in backticks with a folder and a documentation suffix, e.g. `benchmarks/results/overhead.md`.
DOC_PATH = re.compile(r"`(\.{0,2}/?[\w.-]+(?:/[\w.-]+)+\.(?:md|txt|rst|ipynb))`")
SUFFIXES = (".py", ".yaml", ".yml", ".md", ".toml", ".cff", ".cfg", ".txt", ".ipynb")


def _documented_files() -> list[Path]:
    tracked = subprocess.run(["git", "ls-files"], cwd=ROOT, capture_output=True, text=True, check=False).stdout.split()
    if tracked:
        files = [ROOT / f for f in tracked]
    else:  # not a git checkout (an sdist): the files on disk
        files = [p for p in ROOT.rglob("*") if ".git" not in p.parts]
    roots = ("healtrl", "benchmarks", "notebooks", "scripts", "tests")
    return sorted(
        p
        for p in files
        if p.is_file() and p.suffix in SUFFIXES and (p.parent == ROOT or p.relative_to(ROOT).parts[0] in roots)
    )


FILES = _documented_files()


def test_the_files_are_found():
    names = {p.relative_to(ROOT).as_posix() for p in FILES}
    assert {"README.md", "ARCHITECTURE.md", "healtrl/trainers/aer.py", "healtrl/configs/aer_toy.yaml"} <= names


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.relative_to(ROOT).as_posix())
def test_no_citation_of_a_file_that_is_not_in_the_repository(path):
    text = path.read_text(errors="replace")
    bad = [m.group(0) for m in PAPER_TEXT.finditer(text)]
    assert not bad, f"{path.name} cites a paper's text file ({bad[0]}): cite the paper (ARCHITECTURE.md, 'Papers')"
    for m in DOC_PATH.finditer(text):
        ref = m.group(1)
        assert (ROOT / ref.lstrip("./")).exists() or (path.parent / ref).exists(), f"{path.name} cites {ref}"


def test_the_papers_are_defined_once_with_their_arxiv_ids():
    architecture = (ROOT / "ARCHITECTURE.md").read_text()
    section = architecture[architecture.index("## Papers") :]
    for name, arxiv in PAPERS.items():
        assert re.search(rf"^\| {name} \| .+ \| \[{arxiv}\]\(https://arxiv.org/abs/{arxiv}\) \|$", section, re.M)
    # every arXiv id given for a paper by its short name is that paper's
    for path in FILES:
        for name, arxiv in re.findall(r"\b(HEAL|AER|PosAdv|OPEFO),? \(?arXiv:(\d{4}\.\d{4,5})", path.read_text()):
            assert arxiv == PAPERS[name], f"{path.name}: {name} is arXiv:{PAPERS[name]}, not {arxiv}"
