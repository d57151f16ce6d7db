"""The package's layers (issue #15): the import-linter contract in pyproject.toml, no import cycle anywhere in
`healtrl`, and no module over 600 lines unless its docstring says why.

The layers, top to bottom (a module may import only from layers below its own; `:` separates modules of one layer
that may import each other, `|` modules that must not):

    cli : __main__ : vllm_serve : notebook         command lines, config parsing (cli/config.py), the notebooks' cells
    evaluation : selection : inspect_view : ...    what the commands run, beside the trainers
    trainers                                       the trainers and their wiring
    data : tasks : toy : models : rewards : ...    data, tasks, models, model cards, plots
    functional | kernels                           the math and the fused LM head
    _compat : _prompts : _distributed : ...        small helpers every layer may use

The root `healtrl/__init__.py` (the public API) imports the trainers and is in no layer; every other top-level module
and subpackage is in one (import-linter checks nothing about a module the contract does not name). Imports inside
functions count: grimp, which import-linter uses, reads every import statement of a module.
"""

from __future__ import annotations

import ast
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

grimp = pytest.importorskip("grimp")
importlinter = pytest.importorskip("importlinter")

REPO = Path(__file__).resolve().parents[1]
PACKAGE = REPO / "healtrl"
MAX_LINES = 600
LONG_MODULE_MARK = "Why this module is long:"


def import_cycles(package: str) -> list[list[str]]:
    """Every set of modules of `package` that import each other in a cycle (strongly connected components of the
    import graph with more than one module), each sorted."""
    graph = grimp.build_graph(package, include_external_packages=False)
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    counter = 0
    for root in sorted(graph.modules):
        if root in index:
            continue
        # Tarjan's algorithm, iteratively (the import graph can be deep)
        work = [(root, iter(sorted(graph.find_modules_directly_imported_by(root))))]
        index[root] = low[root] = counter
        counter += 1
        stack.append(root)
        on_stack.add(root)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.find_modules_directly_imported_by(child)))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    found.append(sorted(component))
    return found


def test_no_import_cycles():
    cycles = import_cycles("healtrl")
    assert not cycles, "modules that import each other in a cycle: " + "; ".join(" <-> ".join(c) for c in cycles)


def test_cycle_finder_finds_a_cycle(tmp_path, monkeypatch):
    pkg = tmp_path / "cyclepkg"
    (pkg / "sub").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "a.py").write_text("def f():\n    from cyclepkg import b\n")  # inside a function: still an import
    (pkg / "b.py").write_text("import cyclepkg.sub.c\n")
    (pkg / "sub" / "__init__.py").write_text("")
    (pkg / "sub" / "c.py").write_text("from cyclepkg.a import f\n")
    (pkg / "d.py").write_text("import cyclepkg.a\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    assert import_cycles("cyclepkg") == [["cyclepkg.a", "cyclepkg.b", "cyclepkg.sub.c"]]
    sys.modules.pop("cyclepkg", None)


def _lint_imports(config: Path) -> tuple[int, str]:
    run = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())",
         "--config", str(config), "--no-cache"],
        cwd=REPO, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    return run.returncode, run.stdout + run.stderr


def test_layers_contract_is_kept():
    code, output = _lint_imports(REPO / "pyproject.toml")
    assert code == 0, output
    assert "1 kept, 0 broken" in output


def _importlinter_config() -> dict:
    """The `[tool.importlinter]` table of pyproject.toml."""
    try:
        import tomllib
    except ImportError:  # Python 3.10
        tomllib = pytest.importorskip("tomli")
    return tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["importlinter"]


def layer_names(contracts: list[dict]) -> set[str]:
    """Every module name the layers contracts list (`views.entropy` for a module named one by one)."""
    return {name.strip() for contract in contracts for layer in contract["layers"] for name in re.split(r"[:|]", layer)}


def modules_outside_layers(package: Path, contracts: list[dict]) -> list[str]:
    """The top-level modules and subpackages of `package` (its root `__init__.py` aside) that no layers contract names:
    import-linter checks nothing about them, so a module left out of every layer may import any layer. A subpackage
    whose modules sit in different layers (`views.entropy`, `views.inspection`) is named module by module: then each of
    its modules must be named, and its `__init__.py` may import only the bottom layer (`healtrl.utils`), which
    `test_split_package_inits_import_only_utils` checks."""
    named = layer_names(contracts)
    top = [path.stem for path in package.glob("*.py") if path.name != "__init__.py"]
    top += [path.name for path in package.iterdir() if (path / "__init__.py").is_file()]
    outside = []
    for name in top:
        if name in named:
            continue
        parts = [n for n in named if n.startswith(name + ".")]
        if not parts:
            outside.append(name)
            continue
        subs = [f"{name}.{path.stem}" for path in (package / name).glob("*.py") if path.name != "__init__.py"]
        subs += [f"{name}.{path.name}" for path in (package / name).iterdir() if (path / "__init__.py").is_file()]
        outside += [sub for sub in subs if sub not in named]
    return sorted(outside)


def split_packages(contracts: list[dict]) -> list[str]:
    """The subpackages the layers name module by module (`views` for `views.entropy`)."""
    named = layer_names(contracts)
    return sorted({n.split(".")[0] for n in named if "." in n} - named)


def test_split_package_inits_import_only_utils():
    """A package split over layers has an `__init__.py` in no layer: it may import `healtrl.utils` only (its lazy
    re-exports), so that importing one of its modules imports no module of another layer."""
    import ast

    packages = split_packages(_importlinter_config()["contracts"])
    assert packages, "no split package: this test checks nothing; delete it with the split"
    for name in packages:
        tree = ast.parse((PACKAGE / name / "__init__.py").read_text())
        imported = [
            node.module if isinstance(node, ast.ImportFrom) else alias.name
            for node in ast.walk(tree) if isinstance(node, (ast.Import, ast.ImportFrom))
            for alias in node.names
        ]  # fmt: skip
        bad = [m for m in imported if m and m.startswith("healtrl") and not m.startswith("healtrl.utils")]
        assert not bad, f"healtrl/{name}/__init__.py imports {bad}: only healtrl.utils"


def test_every_module_is_in_a_layer():
    outside = modules_outside_layers(PACKAGE, _importlinter_config()["contracts"])
    assert not outside, "modules in no layer of pyproject.toml's [tool.importlinter] contract: " + ", ".join(outside)


def test_module_outside_the_layers_is_found(tmp_path):
    (tmp_path / "sub").mkdir()
    for name in ("__init__.py", "a.py", "b.py", "sub/__init__.py"):
        (tmp_path / name).write_text("")
    (tmp_path / "data").mkdir()  # a folder without __init__.py (package data) is no module
    contracts = [{"layers": ["a", "sub | other"]}]
    assert modules_outside_layers(tmp_path, contracts) == ["b"]
    assert modules_outside_layers(tmp_path, [{"layers": ["a : b", "sub"]}]) == []
    (tmp_path / "sub" / "x.py").write_text("")
    (tmp_path / "sub" / "y.py").write_text("")
    assert modules_outside_layers(tmp_path, [{"layers": ["a : b", "sub.x"]}]) == ["sub.y"]  # split: each module named
    assert modules_outside_layers(tmp_path, [{"layers": ["a : b : sub.y", "sub.x"]}]) == []


def test_layers_contract_catches_an_upward_import(tmp_path):
    """The contract, pointed at a copy of the package in which a trainer imports the evaluation layer, breaks."""
    import shutil

    copy = tmp_path / "healtrl"
    shutil.copytree(PACKAGE, copy, ignore=shutil.ignore_patterns("__pycache__"))
    target = copy / "trainers" / "posadv.py"
    target.write_text(target.read_text() + "\n\ndef _upward():\n    from healtrl import evaluation  # noqa\n")
    config = _importlinter_config()
    lines = ["[importlinter]", f"root_package = {config['root_package']}"]
    for i, contract in enumerate(config["contracts"]):
        lines.append(f"[importlinter:contract:{i}]")
        for key, value in contract.items():
            lines.append(f"{key} = " + ("\n    " + "\n    ".join(value) if isinstance(value, list) else str(value)))
    ini = tmp_path / ".importlinter"
    ini.write_text("\n".join(lines) + "\n")
    run = subprocess.run(
        [sys.executable, "-c", "import sys; sys.path.insert(0, sys.argv[1]); from importlinter.cli import "
         "lint_imports_command; sys.argv[1:2] = []; sys.exit(lint_imports_command())", str(tmp_path),
         "--config", str(ini), "--no-cache"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert run.returncode != 0
    assert "healtrl.trainers.posadv -> healtrl.evaluation" in run.stdout, run.stdout + run.stderr


def _docstring(path: Path) -> str:
    return ast.get_docstring(ast.parse(path.read_text())) or ""


def test_modules_are_short_or_say_why():
    long = []
    for path in sorted(PACKAGE.rglob("*.py")):
        lines = len(path.read_text().splitlines())
        if lines > MAX_LINES and LONG_MODULE_MARK not in _docstring(path):
            long.append(f"{path.relative_to(REPO)} ({lines} lines)")
    assert not long, (
        f"modules over {MAX_LINES} lines whose docstring does not say why ('{LONG_MODULE_MARK} ...'): "
        + ", ".join(long)
    )


def test_long_module_check_can_fail(tmp_path):
    module = tmp_path / "m.py"
    module.write_text('"""A module."""\n' + "x = 1\n" * (MAX_LINES + 1))
    assert LONG_MODULE_MARK not in _docstring(module)
    module.write_text(
        textwrap.dedent(f'''\
        """A module.

        {LONG_MODULE_MARK} one algorithm, read top to bottom.
        """
        ''')
        + "x = 1\n" * (MAX_LINES + 1)
    )
    assert LONG_MODULE_MARK in _docstring(module)
