"""Builds the notebooks of this folder from their sources and stores their outputs from a small offline run.

Sources: `NN_name.py` next to each `NN_name.ipynb`, in jupytext's percent format (`# %%` starts a code cell,
`# %% [markdown]` a markdown cell, `# %% tags=["plot"]` sets cell tags, which tests/test_notebooks.py finds cells by).
They are ordinary Python files: ruff lints and formats them with the rest of the repository (pyproject.toml lets
their imports sit in later cells, E402). Edit the source, never the .ipynb.

    python notebooks/_build.py                 # build every notebook and execute it, storing the outputs
    python notebooks/_build.py 02_aer          # only these notebooks
    python notebooks/_build.py --check         # exit 1 naming each notebook that is stale (what the tests check)
    python notebooks/_build.py --full 06_reasoning_world   # the notebooks stored from their full path (FULL_PATH
                                                           # below; a plain build takes that path for them too)

Executing runs each notebook top to bottom on the small path (`HEALTRL_NOTEBOOK_SMALL=1`: the offline toy world, a few
dozen CPU steps, about a minute each) in a fresh `python3` kernel in a temporary folder, with this checkout first on
`PYTHONPATH`. The outputs are stored in the .ipynb so that a reader on GitHub or the Hub sees the curves, the entropy
view and the evaluation table without running anything. What cells write to stderr (progress bars, library warnings
that name this machine's paths) is dropped; everything else a cell prints or displays is kept.

Freshness: the notebook's metadata `healtrl.outputs` records a fingerprint (SHA-256) of what the notebook shows, with
the date and the versions of the run: the notebook's source, `healtrl.__version__`, the source of healtrl/notebook.py
(the cells every notebook shares) and the public API the notebook calls. That API is read from the source's imports
(`ast`): for every name imported from healtrl, and every attribute the notebook reads on an imported healtrl module,
a function's `inspect.signature`, a config dataclass's fields that healtrl declares with their defaults, a trainer's
healtrl `__init__` signature, or a constant's repr. A docstring, comment or function-body edit elsewhere in the
package leaves the fingerprint alone (those are not what the notebook shows, and `healtrl.__version__` changes with
a release); TRL's and transformers' own fields are left out so that the fingerprint does not depend on the installed
versions. A notebook is stale when its cells differ from its source or its fingerprint differs from the current one;
the default test suite fails on a stale notebook, naming this command. It also re-executes every notebook and checks
that each cell displays the same kinds of output (images, tables, the entropy page) as the stored ones.
"""

from __future__ import annotations

import argparse
import ast
import datetime
import hashlib
import os
import platform
import re
import sys
import tempfile
import types
from pathlib import Path

import jupytext
import nbformat

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NAMES = sorted(p.stem for p in HERE.glob("[0-9][0-9]_*.py"))
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
SMALL_ENV = {"HEALTRL_NOTEBOOK_SMALL": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
FULL_ENV = {"HEALTRL_NOTEBOOK_SMALL": "0", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
# Notebooks whose stored outputs come from their full path: a run worth reading on GitHub, where the full path needs
# no network and fits a CPU (06: the cached reasoning world, 200 steps per run, about 10 minutes on 2 cores). The
# others' full paths train a Hub or offline language model (hours on a CPU), so they store the small path's outputs.
# CI re-executes every notebook on the small path either way (tests/test_notebooks.py).
FULL_PATH = ("06_reasoning_world",)
CELL_TIMEOUT = 600  # one cell, seconds: a hung kernel fails instead of blocking
COMMAND = "python notebooks/_build.py"


def source_path(name: str) -> Path:
    return HERE / f"{name}.py"


def notebook_path(name: str) -> Path:
    return HERE / f"{name}.ipynb"


def cells_from_source(name: str) -> nbformat.NotebookNode:
    """The notebook of `name`'s source, without outputs: cells, tags and the python3 kernelspec."""
    nb = jupytext.reads(source_path(name).read_text(encoding="utf-8"), fmt="py:percent")
    nb.metadata = nbformat.from_dict({"kernelspec": KERNELSPEC, "language_info": {"name": "python"}})
    for i, cell in enumerate(nb.cells):
        tags = list(cell.metadata.get("tags", []))
        cell.metadata = nbformat.from_dict({"tags": tags} if tags else {})
        cell.id = f"{name[:2]}-{i:02d}"  # stable ids: a rebuild that changes nothing changes no byte
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    return nb


def cell_signature(nb: nbformat.NotebookNode) -> list[tuple[str, str, tuple[str, ...]]]:
    """(kind, source, tags) of every cell: what must equal the source's."""
    return [(c.cell_type, c.source, tuple(c.metadata.get("tags", []))) for c in nb.cells]


HELPER = REPO / "healtrl" / "notebook.py"  # the notebooks' shared cells: what they show depends on all of it
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]+")  # a default's repr may name its memory address


def _healtrl_imports(source: str) -> list[tuple[str, str, set[str]]]:
    """(module, name, attributes) for every name a notebook imports from healtrl; `attributes` are those the
    notebook reads on the name (`nb.setup` for `from healtrl import notebook as nb`)."""
    tree = ast.parse(source)
    imported: dict[str, tuple[str, str]] = {}  # local name -> (module, name)
    for node in ast.walk(tree):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] == "healtrl":
            for alias in node.names:
                imported[alias.asname or alias.name] = (node.module, alias.name)
        elif isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] == "healtrl" and alias.asname:
                    module, _, name = alias.name.rpartition(".")
                    imported[alias.asname] = (module or alias.name, name if module else "")
    read: dict[str, set[str]] = {local: set() for local in imported}
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in read:
            read[node.value.id].add(node.attr)
    return sorted(((module, name, read[local]) for local, (module, name) in imported.items()), key=lambda t: t[:2])


def _resolve(module: str, name: str):
    import importlib

    if not name:
        return importlib.import_module(module)
    try:
        return getattr(importlib.import_module(module), name)
    except AttributeError:
        return importlib.import_module(f"{module}.{name}")


def _own_init(cls: type):
    """The `__init__` a class runs, when healtrl defines it (None when it comes from TRL or transformers: their
    signatures vary with the installed versions, which the fingerprint leaves out)."""
    for klass in cls.__mro__:
        if "__init__" in vars(klass):
            return vars(klass)["__init__"] if klass.__module__.split(".")[0] == "healtrl" else None
    return None


def describe(obj) -> str:
    """What a notebook relies on of a healtrl object, as text: a config dataclass's fields that healtrl declares,
    with their defaults; a class's healtrl `__init__` signature; a function's signature; any other value's repr.
    Docstrings, comments and function bodies are left out."""
    import dataclasses
    import inspect

    if inspect.ismodule(obj):
        return "module"
    if isinstance(obj, type) and dataclasses.is_dataclass(obj):
        own = {
            key
            for klass in obj.__mro__
            if klass.__module__.split(".")[0] == "healtrl"
            for key in vars(klass).get("__annotations__", {})
        }
        fields = []
        for field in dataclasses.fields(obj):
            if field.name not in own:
                continue
            if field.default is not dataclasses.MISSING:
                default = repr(field.default)
            elif field.default_factory is not dataclasses.MISSING:
                default = repr(field.default_factory())
            else:
                default = "required"
            fields.append(f"{field.name}={default}")
        text = f"dataclass({', '.join(fields)})"
    elif isinstance(obj, type):
        init = _own_init(obj)
        text = f"class{inspect.signature(init)}" if init is not None else "class"
    elif callable(obj):
        text = f"callable{inspect.signature(obj)}"
    else:
        text = repr(obj)
    return _ADDRESS.sub("", text)


def api(name: str) -> list[str]:
    """One line per healtrl name the notebook imports, and per attribute it reads on an imported module: the name and
    `describe` of it."""
    lines = []
    for module, name_, attributes in _healtrl_imports(source_path(name).read_text(encoding="utf-8")):
        obj = _resolve(module, name_)
        lines.append(f"{module}.{name_}: {describe(obj)}")
        if isinstance(obj, types.ModuleType):
            lines += [f"{module}.{name_}.{attr}: {describe(getattr(obj, attr))}" for attr in sorted(attributes)]
    return lines


def fingerprint(name: str) -> str:
    """SHA-256 of what the notebook shows depends on: its source, `healtrl.__version__`, the source of
    healtrl/notebook.py and the public API the notebook calls (`api`). An edit elsewhere in the package that leaves
    these alone (a docstring, a comment, the body of a function) does not change it."""
    import healtrl

    parts = [
        ("source", source_path(name).read_bytes().replace(b"\r\n", b"\n")),
        ("version", healtrl.__version__.encode()),
        ("healtrl/notebook.py", HELPER.read_bytes().replace(b"\r\n", b"\n")),
        ("api", "\n".join(api(name)).encode()),
    ]
    digest = hashlib.sha256()
    for label, data in parts:
        digest.update(label.encode() + b"\0" + data + b"\0")
    return digest.hexdigest()


def _is_stderr(output) -> bool:
    return output.get("output_type") == "stream" and output.get("name") == "stderr"


def _clean(nb: nbformat.NotebookNode, workdir: str) -> None:
    """Drop stderr (progress bars, library warnings naming this machine's paths) and timing metadata; write the
    temporary working folder as `.`."""
    for cell in nb.cells:
        cell.metadata.pop("execution", None)
        if cell.cell_type != "code":
            continue
        cell.outputs = [o for o in cell.outputs if not _is_stderr(o)]
        for output in cell.outputs:
            if output.get("output_type") == "stream":
                output["text"] = output["text"].replace(workdir, ".")
            for mime, value in output.get("data", {}).items():
                if isinstance(value, str) and not mime.startswith("image/"):
                    output["data"][mime] = value.replace(workdir, ".")


def execute(nb: nbformat.NotebookNode, workdir: str, full: bool = False) -> nbformat.NotebookNode:
    """Run `nb` top to bottom on the small path (`full`: the full path) in `workdir` (raises nbclient's
    CellExecutionError on a failing cell); returns it with its outputs."""
    from nbclient import NotebookClient

    env = dict(
        FULL_ENV if full else SMALL_ENV,
        PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p),
    )
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client = NotebookClient(
            nb,
            kernel_name="python3",
            timeout=None if full else CELL_TIMEOUT,
            record_timing=False,
            resources={"metadata": {"path": workdir}},
        )
        client.execute()
    finally:
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
    return nb


def build(name: str, full: bool = False) -> nbformat.NotebookNode:
    """Build `name` from its source and execute it on the small path (`full`: the full path); returns the notebook
    with outputs and the `healtrl.outputs` metadata."""
    import torch
    import transformers
    import trl

    nb = cells_from_source(name)
    with tempfile.TemporaryDirectory(prefix=f"healtrl-{name}-") as workdir:
        execute(nb, workdir, full=full)
        _clean(nb, workdir)
    nb.metadata["healtrl"] = {
        "outputs": {
            "fingerprint": fingerprint(name),
            "command": f"{COMMAND} --full {name}" if full else COMMAND,
            "path": (
                "full (HEALTRL_NOTEBOOK_SMALL=0) on the CPU, offline"
                if full
                else "small (HEALTRL_NOTEBOOK_SMALL=1): the offline toy world on the CPU"
            ),
            "date": datetime.date.today().isoformat(),
            "versions": {
                "python": platform.python_version(),
                "torch": torch.__version__,
                "trl": trl.__version__,
                "transformers": transformers.__version__,
            },
        }
    }
    return nb


def write(name: str, nb: nbformat.NotebookNode) -> None:
    nbformat.validate(nb)
    notebook_path(name).write_text(nbformat.writes(nb) + "\n", encoding="utf-8")


def staleness(name: str) -> str | None:
    """Why `name`'s .ipynb is stale (None when it is current): cells unlike its source, outputs missing, or outputs
    from other code."""
    path = notebook_path(name)
    if not path.is_file():
        return f"{path.name} is missing"
    stored = nbformat.read(path, as_version=4)
    if cell_signature(stored) != cell_signature(cells_from_source(name)):
        return f"{path.name}'s cells differ from {source_path(name).name}"
    recorded = stored.metadata.get("healtrl", {}).get("outputs", {}).get("fingerprint")
    if recorded is None:
        return f"{path.name} has no stored outputs"
    if recorded != fingerprint(name):
        return (
            f"{path.name}'s outputs are from other code (its source, healtrl's version, healtrl/notebook.py or the"
            " healtrl API it calls changed)"
        )
    if any(c.cell_type == "code" and c.execution_count is None for c in stored.cells):
        return f"{path.name} has cells that were not executed"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"notebooks to build (default: all of {', '.join(NAMES)})")
    parser.add_argument("--check", action="store_true", help="only check that the notebooks are current")
    parser.add_argument(
        "--full",
        action="store_true",
        help=f"only the notebooks built on their full path ({', '.join(FULL_PATH)}, see FULL_PATH; they always are)",
    )
    args = parser.parse_args(argv)
    # The fingerprint reads the API of this checkout's healtrl, the one the notebooks run with (`execute`).
    sys.path.insert(0, str(REPO))
    unknown = [n for n in args.names if n not in NAMES]
    if unknown:
        parser.error(f"unknown notebook(s) {unknown}; the notebooks are {NAMES}")
    names = args.names or (list(FULL_PATH) if args.full else NAMES)
    if args.full and set(names) - set(FULL_PATH):
        parser.error(f"--full builds only {list(FULL_PATH)} (the others' full paths train a Hub or offline model)")
    if args.check:
        stale = [(n, why) for n in names if (why := staleness(n))]
        for name, why in stale:
            print(f"stale: {why}; run `{COMMAND}{' --full' if name in FULL_PATH else ''} {name}`", file=sys.stderr)
        return 1 if stale else 0
    for name in names:
        full = name in FULL_PATH  # always: its stored outputs are the full path's (`--full` says so explicitly)
        print(f"building {name} (executing on the {'full' if full else 'small'} path)...", flush=True)
        write(name, build(name, full=full))
        outputs = sum(len(c.get("outputs", [])) for c in nbformat.read(notebook_path(name), as_version=4).cells)
        print(f"wrote {notebook_path(name).relative_to(REPO)} ({outputs} outputs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
