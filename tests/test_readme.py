"""Every README code block that runs offline is executed by a test; the others pass the config dry run.

- The Python quick start runs as it is.
- The two set-up commands are CI's (`.ci/run` runs the test command verbatim); `python train.py`, the main job, is run
  by tests/test_main_job.py (4 steps here, as shipped in the slow test).
- Every other shell command runs in README order in one folder holding `configs/` and `train.py`, so later commands
  see what earlier ones wrote: `python train.py` and `healtrl ...` commands run (in the default suite training is
  capped at 3 steps; `-m slow` runs them as written), `--dry_run` commands run as written, `accelerate launch`
  (multi-GPU) becomes the dry run of the same config with the launcher's number of processes, and `torchrun` on the
  CPU runs under `-m slow` and is dry-run otherwise. A README command that fits none of these fails the test.
"""

from __future__ import annotations

import os
import re
import shlex
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


@pytest.mark.slow  # an end-to-end training run (~45 s)
def test_python_quick_start_runs(tmp_path):
    (code,) = blocks("python")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'reward':" in result.stdout and "'entropy':" in result.stdout and "'aer/alpha':" in result.stdout
    out = tmp_path / "outputs" / "quickstart"
    card = (out / "README.md").read_text()
    assert "AER" in card and "Revisiting Entropy Regularization" in card and "| `tau` | `0.4` |" in card
    assert (out / "curves.png").read_bytes()[:4] == b"\x89PNG" and (out / "model.safetensors").is_file()


def test_setup_commands_match_ci():
    setup = [b.strip() for b in blocks("bash") if "scripts/install.sh" in b]
    assert setup == ["bash scripts/install.sh && python train.py", "bash scripts/install.sh && python3 -m pytest"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert setup[1] in ci  # CI runs the README's test command verbatim


def test_command_line_examples_name_existing_files():
    for block in blocks("bash"):
        for path in re.findall(r"(configs/\S+\.yaml|scripts/\S+\.sh|train\.py)", block):
            assert (ROOT / path).exists(), path


SETUP = ("bash scripts/install.sh", "python3 -m pytest")


def readme_commands() -> list[str]:
    """Every shell command of the README except the set-up ones, in order, without trailing comments."""
    commands = []
    for block in blocks("bash"):
        for line in block.splitlines():
            words = shlex.split(line, comments=True)
            if words and not line.startswith(SETUP):
                commands.append(shlex.join(words))
    return commands


def _dry_run(words: list[str], num_processes: int) -> list[str]:
    rest = words[words.index("train.py") + 1 :]
    return [sys.executable, "train.py", *rest, "--dry_run", "--num_processes", str(num_processes)]


def plan(command: str, slow: bool) -> tuple[str, list[str]]:
    """(how, argv) for one README command; see the module docstring."""
    words = shlex.split(command)
    if words[:2] == ["python", "train.py"]:
        if "--dry_run" in words:
            return "dry run", [sys.executable, *words[1:]]
        return "run", [sys.executable, *words[1:], *([] if slow else ["--max_steps", "3"])]
    if words[0] == "healtrl":
        return "run", [shutil.which("healtrl") or "healtrl", *words[1:]]
    if words[:2] == ["accelerate", "launch"]:
        config = yaml.safe_load((ROOT / words[words.index("--config_file") + 1]).read_text())
        return "dry run", _dry_run(words, int(config["num_processes"]))
    if words[0] == "torchrun":
        nproc = int(words[words.index("--nproc_per_node") + 1])
        if slow:
            return "run", [sys.executable, "-m", "torch.distributed.run", *words[1:]]
        return "dry run", _dry_run(words, nproc)
    raise AssertionError(f"README command not covered by tests/test_readme.py: {command!r}")


def test_every_readme_command_is_covered():
    kinds = [plan(c, slow=False)[0] for c in readme_commands()]
    assert kinds.count("run") >= 4 and kinds.count("dry run") >= 3, kinds


def _run_readme_commands(tmp_path, slow: bool) -> None:
    assert shutil.which("healtrl"), "the healtrl console script is not installed (pip install -e .)"
    (tmp_path / "configs").symlink_to(ROOT / "configs")
    (tmp_path / "train.py").symlink_to(ROOT / "train.py")
    env = dict(os.environ, PYTHONUNBUFFERED="1", OMP_NUM_THREADS="1")
    for command in readme_commands():
        how, argv = plan(command, slow)
        result = subprocess.run(argv, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=1200)
        assert result.returncode == 0, f"{how}: {command}\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    # what the commands wrote: the toy GRPO model, the selection, HEAL and the evaluations
    outputs = tmp_path / "outputs"
    assert (outputs / "toy_grpo" / "README.md").is_file() and (outputs / "select_toy" / "selected").is_dir()
    assert (outputs / "heal_toy" / "config.yaml").is_file()
    results = list(outputs.glob("eval/*/results.json"))
    assert len(results) == 2, results


@pytest.mark.slow  # every README command in a subprocess (~160 s); the static checks above stay default
def test_readme_commands_run(tmp_path):
    _run_readme_commands(tmp_path, slow=False)


@pytest.mark.slow
def test_readme_commands_run_as_written(tmp_path):
    _run_readme_commands(tmp_path, slow=True)
