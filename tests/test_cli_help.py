"""Every command's `--help` exits 0 and prints its usage; `--version` prints the package version (issue #28 item 7).

In-process where the entry point is a function of argv (`healtrl.cli.main`, `train_main`, the benchmark and script
parsers run as `__main__` with `runpy`); the real `healtrl` console script once, in a subprocess.
"""

from __future__ import annotations

import os
import runpy
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

import healtrl
from healtrl.cli import SUBCOMMANDS, main, train_main

REPO = Path(__file__).resolve().parents[1]
VERSION_LINE = f"healtrl {healtrl.__version__}"
# The scripts with an argparse command line
SCRIPTS = sorted(
    str(p.relative_to(REPO))
    for p in [*REPO.glob("benchmarks/*.py"), *REPO.glob("benchmarks/archive/*.py"), *REPO.glob("scripts/*.py")]
    if "argparse" in p.read_text()
)


def _code(entry, argv, **kwargs) -> int:
    """The exit code of a command function: its return value, or the code of the SystemExit it raises (the training
    config parser exits on `--help`, as argparse does; the console script turns either into the process's code)."""
    try:
        return entry(argv, **kwargs)
    except SystemExit as exc:
        return 0 if exc.code is None else exc.code


def test_scripts_found():
    assert {"benchmarks/kernel.py", "benchmarks/archive/generation_ab.py", "scripts/fetch_offline_data.py"} <= set(
        SCRIPTS
    )


def test_top_level_help(capsys):
    for argv in ([], ["--help"], ["-h"]):
        assert main(argv) == 0
        out = capsys.readouterr().out
        assert out.startswith("usage: healtrl <command>")
        assert all(name in out for name in SUBCOMMANDS) and "--version" in out


@pytest.mark.parametrize("flag", ["--version", "-V"])
def test_top_level_version(flag, capsys):
    assert main([flag]) == 0
    assert capsys.readouterr().out.strip() == VERSION_LINE


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_subcommand_help(command, capsys):
    assert _code(main, [command, "--help"]) == 0
    captured = capsys.readouterr()
    assert f"usage: healtrl {command}" in captured.out, captured.err
    assert "Traceback" not in captured.err


def test_inspect_help_shows_percent_sign(capsys):
    """The help string that crashed argparse's formatting (`ValueError: unsupported format character`)."""
    assert main(["inspect", "--help"]) == 0
    assert "the top 20% tokens" in " ".join(capsys.readouterr().out.split())


@pytest.mark.parametrize("command", list(SUBCOMMANDS))
def test_subcommand_version(command, capsys):
    assert main([command, "--version"]) == 0
    assert capsys.readouterr().out.strip() == VERSION_LINE


def test_train_py_help_and_version(capsys):
    """`python train.py` is `train_main(sys.argv[1:])`."""
    assert _code(train_main, ["--help"], prog="train.py") == 0
    out = capsys.readouterr().out
    assert out.startswith("usage: train.py") and "--version" in out
    assert train_main(["--version"], prog="train.py") == 0
    assert capsys.readouterr().out.strip() == VERSION_LINE
    assert _code(train_main, ["--config", str(REPO / "configs" / "toy_grpo.yaml"), "--help"], prog="train.py") == 0
    assert capsys.readouterr().out.startswith("usage: train.py")


def test_vllm_serve_help(capsys):
    from healtrl.vllm_serve import build_command

    with pytest.raises(SystemExit) as exc:
        build_command(["--help"])
    assert exc.value.code in (0, None)
    assert "usage: python -m healtrl.vllm_serve" in capsys.readouterr().out


@pytest.mark.parametrize("script", SCRIPTS)
def test_script_help(script, monkeypatch, capsys):
    """`python <script> --help`, run in this process as `__main__`: the parser is built before any work starts."""
    monkeypatch.setattr(sys, "argv", [str(REPO / script), "--help"])
    # `python <script>` puts the script's folder first on sys.path (benchmarks/ scripts import `_bench` from there)
    monkeypatch.setattr(sys, "path", [str((REPO / script).parent), *sys.path])
    with pytest.raises(SystemExit) as exc:
        runpy.run_path(str(REPO / script), run_name="__main__")
    assert exc.value.code in (0, None)
    assert capsys.readouterr().out.startswith("usage: ")


def _console(*args: str) -> subprocess.CompletedProcess:
    exe = shutil.which("healtrl")
    if exe is None:
        pytest.skip("the healtrl console script is not installed (pip install -e .)")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))
    return subprocess.run([exe, *args], capture_output=True, text=True, env=env, timeout=600, cwd=REPO)


@pytest.mark.slow  # ~15 s, nearly all of it `import healtrl` (TRL, transformers); .ci/release runs it
def test_console_script_version():
    """The installed `healtrl` script (one subprocess: it imports torch and TRL; the `--help` paths run in-process
    above through the same `main`)."""
    done = _console("--version")
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == VERSION_LINE
