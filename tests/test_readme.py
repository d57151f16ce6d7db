"""Every README code block that runs offline is executed; the others must refer to files that exist."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
README = (ROOT / "README.md").read_text()


def blocks(lang: str) -> list[str]:
    return re.findall(rf"```{lang}\n(.*?)```", README, flags=re.S)


def test_python_quick_start_runs(tmp_path):
    (code,) = blocks("python")
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    result = subprocess.run(
        [sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    assert "'reward':" in result.stdout and "'entropy':" in result.stdout
    assert (tmp_path / "outputs" / "quickstart").is_dir()


def test_setup_commands_match_ci():
    setup = [b.strip() for b in blocks("bash") if "scripts/install.sh" in b]
    assert setup == ["bash scripts/install.sh && python train.py", "bash scripts/install.sh && python3 -m pytest"]
    ci = (ROOT / ".ci" / "run").read_text()
    assert setup[1] in ci  # CI runs the README's test command verbatim


def test_command_line_examples_name_existing_files():
    for block in blocks("bash"):
        for path in re.findall(r"(configs/\S+\.yaml|scripts/\S+\.sh|train\.py)", block):
            assert (ROOT / path).exists(), path
