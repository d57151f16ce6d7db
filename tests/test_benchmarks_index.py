"""`benchmarks/README.md` indexes `benchmarks/`: the file names in its tables match the folder (issue #41 item 6).

Checked as data, not prose: the code spans (`...`) of the index table's first column are the scripts, those of its
fourth column the results files (paths under `benchmarks/results/`, a trailing `/` for a folder); the table of results
that no script writes names files by their first column; and any `benchmarks/<script>.py|.sh` or
`benchmarks/results/<path>` written anywhere in the index (commands included) exists.
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
INDEX = BENCHMARKS / "README.md"
INDEX_HEADING = "## Index"
UNSCRIPTED_HEADING = "## Results that no script writes"
KINDS = {"suite", "helper", "one-off"}
DEVICES = {"CPU", "H100", "H200", "none"}
# A script or a results path written out in full (in prose or a command); `benchmarks/archive/` (planned) is neither.
FULL_PATH = re.compile(r"benchmarks/(?:results/[\w./+-]*|[\w-]+\.(?:py|sh)\b)")


# The results cell of a GPU-only script that no lent GPU has run yet
AWAITS_GPU = "none yet: needs a GPU"


def _table(heading: str) -> list[list[str]]:
    """The body rows (cells stripped) of the first Markdown table after the line `heading` of the index."""
    lines = INDEX.read_text().splitlines()
    assert lines.count(heading) == 1, f"{INDEX.name} has {lines.count(heading)} lines {heading!r}"
    rows: list[list[str]] = []
    for line in lines[lines.index(heading) + 1 :]:
        if line.startswith("|"):
            rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
        elif rows:
            break
    assert len(rows) > 2, f"no table after {heading!r}"
    return rows[2:]  # after the header and the |---| line


def _spans(cell: str) -> list[str]:
    return re.findall(r"`([^`]+)`", cell)


def _exists(relative: str) -> bool:
    # under benchmarks/results/, or written from benchmarks/ (`results/...`, the form a Markdown link there resolves)
    path = RESULTS / relative.removeprefix("results/")
    return path.is_dir() if relative.endswith("/") else path.is_file()


def test_every_script_is_indexed_once():
    on_disk = sorted(p.name for p in BENCHMARKS.iterdir() if p.is_file() and p.suffix in (".py", ".sh"))
    indexed = [name for row in _table(INDEX_HEADING) for name in _spans(row[0])]
    assert len(indexed) == len(set(indexed)), sorted({n for n in indexed if indexed.count(n) > 1})
    assert sorted(set(on_disk) - set(indexed)) == [], "scripts missing from benchmarks/README.md"
    assert sorted(set(indexed) - set(on_disk)) == [], "benchmarks/README.md names scripts that do not exist"


def test_each_row_has_a_kind_and_devices():
    for row in _table(INDEX_HEADING):
        assert len(row) == 4, row
        assert row[1] in KINDS, row
        devices = [d.strip() for d in row[2].split(",")]
        assert devices and set(devices) <= DEVICES, row


def test_results_named_by_the_index_exist():
    for row in _table(INDEX_HEADING):
        if row[3] == AWAITS_GPU:  # a GPU-only script that has not had a GPU yet: honest, but only for GPU devices
            assert {d.strip() for d in row[2].split(",")} <= {"H100", "H200"}, row
            continue
        named = _spans(row[3])
        assert named, f"{row[0]}: no results file"
        missing = [r for r in named if not _exists(r)]
        assert missing == [], f"{row[0]}: missing under benchmarks/results/: {missing}"


def test_results_no_script_writes_exist():
    rows = _table(UNSCRIPTED_HEADING)
    missing = [name for row in rows for name in _spans(row[0]) if not _exists(name)]
    assert missing == [], f"missing under benchmarks/results/: {missing}"


def test_full_paths_in_the_index_exist():
    found = sorted({m.rstrip(".,;:") for m in FULL_PATH.findall(INDEX.read_text())})
    assert any(p.startswith("benchmarks/results/") for p in found) and any(p.endswith(".py") for p in found)
    missing = [p for p in found if not (ROOT / p).exists()]
    assert missing == [], missing
