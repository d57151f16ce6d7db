"""`train --help` prints a shipped text (`healtrl/cli/help/`), and that text is what the live configs would print."""

from __future__ import annotations

import pytest

from healtrl.cli import help_text
from healtrl.cli.config import format_help, resolve


def test_shipped_texts_are_current():
    """Regenerated from the live config classes, every shipped text is unchanged (else: python
    scripts/write_help_texts.py, and commit the texts)."""
    from healtrl.trainers import TRAINERS

    shipped = sorted(p.stem for p in help_text.HELP_DIR.glob("*.txt"))
    assert shipped == sorted([help_text.NO_TRAINER, *TRAINERS])
    for name in [None, *TRAINERS]:
        header, _, text = help_text.help_path(name).read_text(encoding="utf-8").partition("\n")
        assert header == help_text.versions_line(), name
        assert text == format_help(name, prog=help_text.PROG) + "\n", f"{name}: stale help text"


def test_help_prints_the_shipped_text(monkeypatch, capsys):
    import sys

    # As in a fresh `healtrl train --help` (tests/test_lazy_import.py runs that one): the trainers not imported yet
    monkeypatch.delitem(sys.modules, "healtrl.trainers")
    with pytest.raises(SystemExit) as exc:
        resolve(["--trainer", "aer", "--help"], prog="healtrl train")
    assert exc.value.code == 0
    out = capsys.readouterr().out
    assert out == help_text.shipped_help("aer", "healtrl train")
    assert out.startswith("usage: healtrl train ") and "aer: AERTrainer with AERConfig (selected)" in out
    assert "{prog}" not in out


def test_a_stale_or_foreign_text_is_never_shown(monkeypatch, capsys):
    assert help_text.shipped_help("no_such_trainer", "x") is None
    assert help_text.shipped_help("../heal", "x") is None
    assert help_text.shipped_help("grpo", "x") is not None
    # Other installed versions than the text's: the live text instead
    monkeypatch.setattr(help_text, "versions_line", lambda: "# generated with something else")
    assert help_text.shipped_help("grpo", "x") is None
    with pytest.raises(SystemExit):
        resolve(["--trainer", "grpo", "--help"], prog="train.py")
    assert capsys.readouterr().out.rstrip("\n") == format_help("grpo", prog="train.py")


def test_a_custom_registry_gets_its_own_text(capsys):
    from healtrl.trainers import TRAINERS

    registry = {"mine": TRAINERS["grpo"]}
    with pytest.raises(SystemExit):
        resolve(["--trainer", "mine", "--help"], registry=registry, prog="train.py")
    out = capsys.readouterr().out
    assert "mine: GRPOBaselineTrainer with GRPOBaselineConfig (selected)" in out and "heal:" not in out


def test_a_process_that_imported_the_trainers_gets_the_live_text(monkeypatch, capsys):
    """After `register_trainer` (or any import of the trainers) the help lists what the registry holds now."""
    import healtrl.cli.config as config
    from healtrl.trainers import TRAINERS

    monkeypatch.setattr(config, "shipped_help", lambda *a: pytest.fail("the shipped text was read"))
    monkeypatch.setitem(TRAINERS, "mine", TRAINERS["grpo"])
    with pytest.raises(SystemExit):
        resolve(["--help"], prog="train.py")
    assert "  mine: GRPOBaselineTrainer with GRPOBaselineConfig" in capsys.readouterr().out
