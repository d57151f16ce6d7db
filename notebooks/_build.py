"""Builds the notebooks of this folder from their sources and stores their outputs from a small offline run.

Sources: `NN_name.py` next to each `NN_name.ipynb`, in jupytext's percent format (`# %%` starts a code cell,
`# %% [markdown]` a markdown cell, `# %% tags=["plot"]` sets cell tags, which tests/test_notebooks.py finds cells by).
They are ordinary Python files: ruff lints and formats them with the rest of the repository (pyproject.toml lets
their imports sit in later cells, E402). Edit the source, never the .ipynb.

    python notebooks/_build.py                 # build every notebook and execute it, storing the outputs
    python notebooks/_build.py 02_aer          # only these notebooks
    python notebooks/_build.py --check         # exit 1 naming each notebook that is stale (what the tests check)

Executing runs each notebook top to bottom on the small path (`HEALTRL_NOTEBOOK_SMALL=1`: the offline toy world, a few
dozen CPU steps, about a minute each) in a fresh `python3` kernel in a temporary folder, with this checkout first on
`PYTHONPATH`. The outputs are stored in the .ipynb so that a reader on GitHub or the Hub sees the curves, the entropy
view and the evaluation table without running anything. What cells write to stderr (progress bars, library warnings
that name this machine's paths) is dropped; everything else a cell prints or displays is kept.

Freshness: the notebook's metadata `healtrl.outputs` records a fingerprint (SHA-256) of what the outputs depend on,
the notebook's source plus every file of the `healtrl` package plus pyproject.toml, with the date and the versions of
the run. A notebook is stale when its cells differ from its source or its fingerprint differs from the current one;
the default test suite fails on a stale notebook, naming this command. It also re-executes every notebook and checks
that each cell displays the same kinds of output (images, tables, the entropy page) as the stored ones.
"""

from __future__ import annotations

import argparse
import datetime
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
from pathlib import Path

import jupytext
import nbformat

HERE = Path(__file__).resolve().parent
REPO = HERE.parent
NAMES = sorted(p.stem for p in HERE.glob("[0-9][0-9]_*.py"))
KERNELSPEC = {"display_name": "Python 3", "language": "python", "name": "python3"}
SMALL_ENV = {"HEALTRL_NOTEBOOK_SMALL": "1", "HF_HUB_OFFLINE": "1", "OMP_NUM_THREADS": "1"}
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


def _package_files() -> list[Path]:
    """The files of the `healtrl` package that git tracks (in a checkout), else every file but caches: files that a
    test or an install writes into the package folder do not make the notebooks stale."""
    try:
        out = subprocess.run(
            ["git", "ls-files", "-z", "--", "healtrl"], cwd=REPO, capture_output=True, check=True, text=True
        ).stdout
    except (OSError, subprocess.CalledProcessError):
        out = ""
    tracked = [REPO / f for f in out.split("\0") if f]
    if tracked:
        return [p for p in tracked if p.is_file()]
    return [
        p for p in (REPO / "healtrl").rglob("*") if p.is_file() and "__pycache__" not in p.parts and p.suffix != ".pyc"
    ]


def fingerprint(name: str) -> str:
    """SHA-256 of the notebook's source, every file of the `healtrl` package (caches excluded) and pyproject.toml."""
    files = [(f"notebooks/{name}.py", source_path(name)), ("pyproject.toml", REPO / "pyproject.toml")]
    files += sorted((p.relative_to(REPO).as_posix(), p) for p in _package_files())
    digest = hashlib.sha256()
    for label, path in files:
        digest.update(label.encode() + b"\0")
        digest.update(path.read_bytes().replace(b"\r\n", b"\n") + b"\0")
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


def execute(nb: nbformat.NotebookNode, workdir: str) -> nbformat.NotebookNode:
    """Run `nb` top to bottom on the small path in `workdir` (raises nbclient's CellExecutionError on a failing
    cell); returns it with its outputs."""
    from nbclient import NotebookClient

    env = dict(SMALL_ENV, PYTHONPATH=os.pathsep.join(p for p in (str(REPO), os.environ.get("PYTHONPATH")) if p))
    saved = {key: os.environ.get(key) for key in env}
    os.environ.update(env)  # the kernel inherits this process's environment
    try:
        client = NotebookClient(
            nb,
            kernel_name="python3",
            timeout=CELL_TIMEOUT,
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


def build(name: str) -> nbformat.NotebookNode:
    """Build `name` from its source and execute it on the small path; returns the notebook with outputs and the
    `healtrl.outputs` metadata."""
    import torch
    import transformers
    import trl

    nb = cells_from_source(name)
    with tempfile.TemporaryDirectory(prefix=f"healtrl-{name}-") as workdir:
        execute(nb, workdir)
        _clean(nb, workdir)
    nb.metadata["healtrl"] = {
        "outputs": {
            "fingerprint": fingerprint(name),
            "command": COMMAND,
            "path": "small (HEALTRL_NOTEBOOK_SMALL=1): the offline toy world on the CPU",
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
        return f"{path.name}'s outputs are from other code (its source, the healtrl package or pyproject.toml changed)"
    if any(c.cell_type == "code" and c.execution_count is None for c in stored.cells):
        return f"{path.name} has cells that were not executed"
    return None


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("names", nargs="*", help=f"notebooks to build (default: all of {', '.join(NAMES)})")
    parser.add_argument("--check", action="store_true", help="only check that the notebooks are current")
    args = parser.parse_args(argv)
    unknown = [n for n in args.names if n not in NAMES]
    if unknown:
        parser.error(f"unknown notebook(s) {unknown}; the notebooks are {NAMES}")
    names = args.names or NAMES
    if args.check:
        stale = [(n, why) for n in names if (why := staleness(n))]
        for name, why in stale:
            print(f"stale: {why}; run `{COMMAND} {name}`", file=sys.stderr)
        return 1 if stale else 0
    for name in names:
        print(f"building {name} (executing on the small path)...", flush=True)
        write(name, build(name))
        outputs = sum(len(c.get("outputs", [])) for c in nbformat.read(notebook_path(name), as_version=4).cells)
        print(f"wrote {notebook_path(name).relative_to(REPO)} ({outputs} outputs)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
