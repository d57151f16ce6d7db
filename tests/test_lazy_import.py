"""`import healtrl` is cheap and the command line's `--version` and `--help` answer without torch (issue #41 item 8).

The trainers (`healtrl.trainers`: TRL's trainer stack, transformers, torch) are imported on the first access of one
of their names (PEP 562 `__getattr__` in `healtrl/__init__.py`). The checks of what a fresh interpreter imports run in
subprocesses, since this test process has imported everything long before.

CPU time, not wall time, is measured (`resource.getrusage(RUSAGE_CHILDREN)`, user + system, around each subprocess):
a busy machine stretches the wall time of a command, not much its CPU time. The command runs as
`python -m healtrl ...`, the `main` the `healtrl` console script calls, so that the check does not depend on how the
package was installed.

`healtrl train --help` lists every field of the selected trainer's config (a subclass of TRL's `GRPOConfig` and so of
transformers' `TrainingArguments`, whose import pulls in torch and peft): it prints the text shipped in
`healtrl/cli/help/` for the installed versions (`healtrl.cli.help_text`; `tests/test_cli_help_text.py` keeps it
current), so it is among the fast commands too.
"""

from __future__ import annotations

import json
import os
import resource
import subprocess
import sys
from pathlib import Path

import pytest

import healtrl
import healtrl.trainers

REPO = Path(__file__).resolve().parents[1]
CPU_LIMIT_S = 1.0  # the bound, per command
# Modules a cheap command must not import: torch, transformers, and TRL's trainers (`trl` itself is imported by the
# TRL version check at `import healtrl`; its `__init__` is lazy and imports none of these).
HEAVY = ("torch", "transformers", "peft", "datasets", "trl.trainer")
FAST_COMMANDS = [
    ["--version"],
    ["-V"],
    ["--help"],
    [],
    *[[command, "--help"] for command in ("train", "select", "eval", "inspect")],
    ["train", "--config", "configs/aer_toy.yaml", "--help"],
    ["train", "--dry_run", "--help"],
    ["study", "--help"],
    ["study", "--claims", "--help"],
    ["study", "--version"],
    *[[command, "--version"] for command in ("train", "select", "eval", "inspect")],
]


def _env() -> dict[str, str]:
    return dict(os.environ, PYTHONPATH=os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")])))


def _run(args: list[str], env: dict[str, str] | None = None) -> tuple[subprocess.CompletedProcess, float]:
    """Run `args` in a subprocess from the repository root; return it and the CPU seconds (user + system) it used."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    done = subprocess.run(args, capture_output=True, text=True, env=env or _env(), cwd=REPO, timeout=300)
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return done, cpu


def _python(code: str) -> dict:
    """Run `code` in a fresh interpreter; it prints one JSON object as its last line, which is returned."""
    done, _ = _run([sys.executable, "-c", code])
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout.strip().splitlines()[-1])


def _imported(importtime_log: str) -> set[str]:
    """The modules named in a `-X importtime` log (`import time: self | cumulative | name`)."""
    return {line.rsplit("|", 1)[1].strip() for line in importtime_log.splitlines() if line.startswith("import time:")}


def test_import_healtrl_does_not_import_the_trainer_stack():
    out = _python(
        "import json, sys, healtrl\n"
        f"heavy = {HEAVY!r}\n"
        "print(json.dumps({'heavy': sorted(m for m in sys.modules if m in heavy or m.split('.')[0] in heavy[:-1]),"
        " 'trainers': 'healtrl.trainers' in sys.modules, 'trl': 'trl' in sys.modules,"
        " 'version': healtrl.TRL_VERSION}))"
    )
    assert out["heavy"] == [] and not out["trainers"]
    assert out["trl"] and out["version"] == __import__("trl").__version__  # the version check ran at import


def test_first_access_imports_the_trainers():
    out = _python(
        "import json, sys, healtrl\n"
        "before = 'healtrl.trainers' in sys.modules\n"
        "config = healtrl.GRPOBaselineConfig\n"
        "from healtrl.trainers import GRPOBaselineConfig\n"
        "print(json.dumps({'before': before, 'after': 'healtrl.trainers' in sys.modules,"
        " 'same': config is GRPOBaselineConfig, 'bound': 'GRPOBaselineConfig' in vars(healtrl)}))"
    )
    assert out == {"before": False, "after": True, "same": True, "bound": True}


def test_dir_lists_the_public_names_without_importing_them():
    out = _python(
        "import json, sys, healtrl\n"
        "print(json.dumps({'dir': dir(healtrl), 'all': healtrl.__all__,"
        " 'trainers': 'healtrl.trainers' in sys.modules}))"
    )
    assert set(out["all"]) <= set(out["dir"]) and "trainers" in out["dir"]
    assert not out["trainers"]


def test_public_names_are_the_trainers_names():
    """The static list in `healtrl/__init__.py` is `healtrl.trainers.__all__`, and every name is the same object."""
    assert healtrl.__all__ == [*healtrl.trainers.__all__, "__version__"]
    for name in healtrl.trainers.__all__:
        assert getattr(healtrl, name) is getattr(healtrl.trainers, name), name
    assert healtrl.trainers is sys.modules["healtrl.trainers"]


def test_star_import_gives_the_public_names():
    namespace: dict = {}
    exec("from healtrl import *", namespace)
    assert set(healtrl.__all__) <= set(namespace)
    assert namespace["HEALTrainer"] is healtrl.trainers.HEALTrainer


def test_unknown_attribute_is_an_attribute_error():
    with pytest.raises(AttributeError, match="has no attribute 'NoSuchTrainer'"):
        healtrl.NoSuchTrainer  # noqa: B018
    assert not hasattr(healtrl, "no_such_name")


@pytest.mark.parametrize("args", FAST_COMMANDS, ids=lambda args: " ".join(args) or "no-args")
def test_command_answers_in_under_a_second_of_cpu_without_torch(args):
    done, cpu = _run([sys.executable, "-X", "importtime", "-m", "healtrl", *args])
    assert done.returncode == 0, done.stderr[-2000:]
    assert done.stdout.startswith("usage: healtrl") or done.stdout.strip() == f"healtrl {healtrl.__version__}"
    imported = _imported(done.stderr)
    assert "healtrl.cli" in imported  # the log is read correctly
    assert not [m for m in HEAVY if m in imported], sorted(m for m in imported if m.split(".")[0] in HEAVY)
    assert cpu < CPU_LIMIT_S, f"`healtrl {' '.join(args)}` used {cpu:.2f} s of CPU (limit {CPU_LIMIT_S} s)"
