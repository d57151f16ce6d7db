"""`benchmarks/README.md` indexes `benchmarks/`: the file names in its tables match the folder (issue #41 item 6).

Checked as data, not prose: the code spans (`...`) of the index table's first column are the scripts, those of its
fourth column the results files (paths under `benchmarks/results/`, a trailing `/` for a folder); the table of results
that no script writes names files by their first column; and any `benchmarks/<script>.py|.sh` or
`benchmarks/results/<path>` written anywhere in the index (commands included) exists. The scripts are those of
`benchmarks/` and `benchmarks/archive/` (named `archive/<script>` in the index), less the shared module `_bench.py`.

And the suite's import rules, read from each script's syntax tree: no script touches `sys.path`, and none imports
another script but `_bench` (a script run as `python benchmarks/x.py` finds `_bench` on `sys.path[0]`).
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
BENCHMARKS = ROOT / "benchmarks"
ARCHIVE = BENCHMARKS / "archive"
SHARED = "_bench.py"  # the shared helper: a module, not a script, so it has no row in the index
RESULTS = BENCHMARKS / "results"
INDEX = BENCHMARKS / "README.md"
INDEX_HEADING = "## Index"
UNSCRIPTED_HEADING = "## Results that no script writes"
KINDS = {"suite", "helper", "one-off"}
DEVICES = {"CPU", "H100", "H200", "none"}
# A script or a results path written out in full (in prose or a command)
FULL_PATH = re.compile(r"benchmarks/(?:results/[\w./+-]*|(?:archive/)?[\w-]+\.(?:py|sh)\b)")


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


def _scripts() -> list[Path]:
    """The scripts of `benchmarks/` and `benchmarks/archive/` (Python and shell), less the shared helper."""
    found = [p for folder in (BENCHMARKS, ARCHIVE) for p in folder.iterdir() if p.suffix in (".py", ".sh")]
    return sorted(p for p in found if p.is_file() and p.name != SHARED)


def test_every_script_is_indexed_once():
    on_disk = sorted(str(p.relative_to(BENCHMARKS)) for p in _scripts())
    assert "gpu_check.sh" in on_disk and any(name.startswith("archive/") for name in on_disk)
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


def _violations(path: Path) -> set[tuple[str, str]]:
    """(script, "sys.path") for any use of `sys.path`, and (script, module) for each import of another script
    (`import x`, `from x import ...` or `from benchmarks[.x] import ...`, at any depth of the file)."""
    scripts = {p.stem for p in _scripts() if p.suffix == ".py"}
    found: set[tuple[str, str]] = set()
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Attribute) and node.attr == "path" and getattr(node.value, "id", None) == "sys":
            found.add((path.name, "sys.path"))
        modules = []
        if isinstance(node, ast.Import):
            modules = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            # `from benchmarks import x` imports the script x
            modules = [f"benchmarks.{a.name}" for a in node.names] if node.module == "benchmarks" else [node.module]
        for module in modules:
            parts = module.split(".")
            name = parts[1] if parts[0] == "benchmarks" and len(parts) > 1 else parts[0]
            if name == "benchmarks" or (name in scripts and name != Path(SHARED).stem):
                found.add((path.name, name))
    return found


def test_the_import_rule_reads_what_it_should(tmp_path):
    """The scanner on a file that breaks both rules, and on one that keeps them."""
    bad = tmp_path / "bad.py"
    bad.write_text("import sys\nsys.path.insert(0, '.')\nfrom benchmarks.overhead import build\n\ndef f():\n"
                   "    import kernel\n    from benchmarks import heal_toy\n")  # fmt: skip
    assert _violations(bad) == {("bad.py", "sys.path"), ("bad.py", "overhead"), ("bad.py", "kernel"),
                                ("bad.py", "heal_toy")}  # fmt: skip
    good = tmp_path / "good.py"
    good.write_text("import os\nimport _bench\nfrom _bench import rotation\nfrom healtrl.kernels import api\n")
    assert _violations(good) == set()


def test_no_sys_path_edits_and_no_imports_between_scripts():
    found = set().union(*(_violations(p) for p in _scripts() + [BENCHMARKS / SHARED] if p.suffix == ".py"))
    assert sorted(found) == [], "benchmarks/ may import only _bench and must not edit sys.path"
