"""A fifth method is one file (issue #41, item 4): a config and a trainer that implements contract hooks, registered
with `healtrl.trainers.register_trainer`, runs through every path a shipped method runs through, and every list of
methods either derives from the registry or names itself when the new method is missing from it.

The throwaway method defined here, a constant entropy bonus (`ConstantBonusTrainer`: loss - bonus_coef x the
micro-batch's mean token entropy, through the `extra_loss` lever), is registered as `const_bonus` for the tests that
use the `registered` fixture, which restores the registry afterwards.

- `test_register_trainer_checks_what_it_registers`: the registry refuses a duplicate name, a non-identifier, a class
  that is no healtrl trainer / config, and a trainer whose `config_class` is another config.
- `test_the_dry_run_accepts_a_config_naming_it`: `trainer: const_bonus` in a toy YAML passes `healtrl train
  --dry_run`, which names the trainer and its `bonus_coef`.
- `test_one_training_step_adds_its_loss_term_and_writes_its_card`: one optimizer step on the tiny model; the bonus
  it logs is -bonus_coef x the step's entropy (TRL's own log of it) and nonzero; the model card names the method, its
  paper and its field.
- `test_the_study_runs_it_beside_grpo`: `healtrl study --trainer tests.test_fifth_method:ConstantBonusTrainer
  --config fields.yaml`, 2 steps in the add world, caches its run with its trainer and fields.
- `test_every_per_method_table_covers_the_registry` / `test_a_new_method_is_named_by_every_table_it_is_missing_from`:
  the tables that must stay explicit (settings chosen per method: `PER_METHOD_TABLES`, the study's `METHODS`,
  ARCHITECTURE.md's Papers table) cover every registered method, and with `const_bonus` registered each of them
  names it.
"""

from __future__ import annotations

import ast
import json
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from healtrl.trainers import TRAINERS, EntropyGRPOConfig, EntropyGRPOTrainer, register_trainer
from healtrl.trainers.contract import CardDescription, LossBatch

REPO = Path(__file__).resolve().parents[1]
NAME = "const_bonus"
BONUS_PAPER = {
    "title": "A constant entropy bonus (a test's throwaway method)",
    "id": None,
    "citation": "@misc{const_bonus,\n    title = {{A constant entropy bonus}},\n    note  = {healtrl's tests},\n}",
}


@dataclass
class ConstantBonusConfig(EntropyGRPOConfig):
    """`EntropyGRPOConfig` plus the bonus's coefficient."""

    bonus_coef: float = field(default=0.01, metadata={"help": "Coefficient of the constant entropy bonus (>= 0)."})


class ConstantBonusTrainer(EntropyGRPOTrainer):
    """GRPO plus a constant entropy bonus: loss - bonus_coef x the micro-batch's mean token entropy (lever 2).

    Logged: `bonus/term` (the term added to the loss)."""

    config_class = ConstantBonusConfig
    card = CardDescription(
        name="Constant entropy bonus",
        paper=BONUS_PAPER,
        description="GRPO plus a constant coefficient times the mean token entropy of each micro-batch.",
        tags=("const-bonus",),
    )

    def extra_loss(self, batch: LossBatch):
        mask = batch.mask.to(batch.entropies.dtype)
        term = -self.args.bonus_coef * (batch.entropies * mask).sum() / mask.sum().clamp(min=1.0)
        self.log_metric("bonus/term", term.item())
        return term


@pytest.fixture
def registered():
    """`const_bonus` in the registry for one test; the registry as it was afterwards."""
    before = dict(TRAINERS)
    register_trainer(NAME, ConstantBonusTrainer, ConstantBonusConfig)
    yield TRAINERS
    TRAINERS.clear()
    TRAINERS.update(before)


def test_register_trainer_checks_what_it_registers(registered):
    assert registered[NAME] == (ConstantBonusTrainer, ConstantBonusConfig)
    with pytest.raises(ValueError, match="'const_bonus' is registered already"):
        register_trainer(NAME, ConstantBonusTrainer, ConstantBonusConfig)
    with pytest.raises(ValueError, match="must be an identifier"):
        register_trainer("const bonus", ConstantBonusTrainer, ConstantBonusConfig)
    with pytest.raises(ValueError, match="not a subclass of EntropyGRPOTrainer"):
        register_trainer("other", ConstantBonusConfig, ConstantBonusConfig)
    with pytest.raises(ValueError, match="not a subclass of EntropyGRPOConfig"):
        register_trainer("other", ConstantBonusTrainer, dict)
    with pytest.raises(ValueError, match="config_class is ConstantBonusConfig, not EntropyGRPOConfig"):
        register_trainer("other", ConstantBonusTrainer, EntropyGRPOConfig)
    assert "other" not in registered


def test_the_dry_run_accepts_a_config_naming_it(registered, tmp_path, capsys):
    from healtrl.cli import dry_run

    config = yaml.safe_load((REPO / "configs" / "aer_toy.yaml").read_text())
    for key in ("rho", "tau", "eta", "alpha_init", "controller_update", "entropy_normalization"):  # AER's fields
        del config[key]
    config.update(trainer=NAME, bonus_coef=0.02, max_steps=2, output_dir=str(tmp_path / "out"))
    path = tmp_path / "const_bonus_toy.yaml"
    path.write_text(yaml.safe_dump(config))
    assert dry_run(["--config", str(path)]) == 0, capsys.readouterr().err
    out = capsys.readouterr().out
    assert f"{NAME}: ConstantBonusTrainer with ConstantBonusConfig (built and valid)" in out
    (method,) = [line for line in out.splitlines() if line.startswith("method:")]
    assert "bonus_coef" in method and "0.02" in method, method
    # a field the method does not have is refused, as for any registered trainer
    path.write_text(yaml.safe_dump({**config, "bonus_coeff": 0.02}))
    assert dry_run(["--config", str(path)]) == 2
    assert "bonus_coeff" in capsys.readouterr().err


def test_one_training_step_adds_its_loss_term_and_writes_its_card(registered, tmp_path):
    from tests.helpers import build_trainer

    trainer = build_trainer(ConstantBonusTrainer, ConstantBonusConfig, tmp_path / "run", max_steps=1, bonus_coef=0.05)
    trainer.train()
    (logged,) = [e for e in trainer.state.log_history if "bonus/term" in e]
    # one micro-batch per step: the term is -bonus_coef x the token entropy TRL logs for the same forward
    assert logged["bonus/term"] != 0.0
    assert logged["bonus/term"] == pytest.approx(-0.05 * logged["entropy"], rel=1e-4)
    trainer.save_model(str(tmp_path / "final"))
    card = (tmp_path / "final" / "README.md").read_text()
    assert "## Method: Constant entropy bonus\n" in card
    assert "trained with **Constant entropy bonus** by the `ConstantBonusTrainer` of healtrl" in card
    assert "| `bonus_coef` | `0.05` |" in card and "@misc{const_bonus," in card
    assert "const-bonus" in card.split("---")[1]  # the Hub tag, in the front matter


def test_the_study_runs_it_beside_grpo(registered, tmp_path, monkeypatch):
    """The study's smoke path (`tests/test_toy_study.py::test_user_trainer_trains_through_the_study`) with it: 2 steps
    of GRPO and of the method in the add world, in this process."""
    from healtrl.study import command, methods

    (tmp_path / "fields.yaml").write_text("bonus_coef: 0.02\n")
    monkeypatch.chdir(REPO)  # `--trainer` imports `tests.test_fifth_method` from the current folder
    before = dict(methods.METHODS)
    try:
        argv = ["--steps", "2", "--seeds", "0", "--regimes", "few_shot", "--jobs", "1", "--window", "2"]
        argv += ["--trainer", "tests.test_fifth_method:ConstantBonusTrainer", "--config", str(tmp_path / "fields.yaml")]
        argv += ["--output-dir", str(tmp_path), "--work-dir", str(tmp_path / "work")]
        result = command.main(argv, prog="healtrl study", command="healtrl study")
    finally:
        for key in set(methods.METHODS) - set(before):
            del methods.METHODS[key]
    key = next(m for m, _ in result["records"] if m != "grpo")
    assert key.startswith("ConstantBonusTrainer-")
    assert sorted(result["trained"]) == sorted([("grpo", "few_shot", 0), (key, "few_shot", 0)])
    record = json.loads((tmp_path / "toy_study_runs" / f"{key}-few_shot-seed0-2steps.json").read_text())
    assert record["trainer"] == "ConstantBonusTrainer" and record["user"]["fields"] == {"bonus_coef": 0.02}
    assert all(v is not None for v in record["series"]["entropy_target"])
    assert "ConstantBonusTrainer" in Path(result["markdown"]).read_text()


# ---------------------------------------------------------------------------------------------------------------
# The lists of methods that stay explicit
# ---------------------------------------------------------------------------------------------------------------
#: Tables of per-method settings that cannot derive from the registry (each method's settings are chosen by hand):
#: (file, the module-level variable, registered names it leaves out on purpose). Each must mention every other
#: registered method, by its registry name or its trainer class's name.
PER_METHOD_TABLES: tuple[tuple[str, str, tuple[str, ...]], ...] = (
    ("tests/test_trl_compat.py", "TRAINERS", ()),  # the TRL compatibility matrix's columns (and README's table)
    ("tests/test_liger_path.py", "CASES", ()),
    ("tests/test_model_card.py", "CASES", ()),
    ("tests/test_kill_resume.py", "TRAINERS", ()),
    ("tests/dist_sharded_worker.py", "ZERO3_RUNS", ()),
    ("benchmarks/overhead.py", "CASES", ()),
    # its `base` is the `grpo` trainer at `entropy_method: none` (EntropyGRPOTrainer): the baselines are not timed
    ("benchmarks/step_smollm2.py", "TRAINERS", ("grpo",)),
)


def mentioned(path: Path, variable: str) -> set[str]:
    """The names and strings in the value of the module-level assignment to `variable` in `path`."""
    for node in ast.parse(path.read_text(encoding="utf-8")).body:
        targets = (
            node.targets if isinstance(node, ast.Assign) else [node.target] if isinstance(node, ast.AnnAssign) else []
        )
        if any(isinstance(t, ast.Name) and t.id == variable for t in targets) and node.value is not None:
            names = set()
            for sub in ast.walk(node.value):
                if isinstance(sub, ast.Constant) and isinstance(sub.value, str):
                    names.add(sub.value)
                elif isinstance(sub, ast.Name):
                    names.add(sub.id)
                elif isinstance(sub, ast.Attribute):
                    names.add(sub.attr)
            return names
    raise AssertionError(f"{path.relative_to(REPO)} has no module-level {variable}")


def missing_from_tables(registry) -> list[str]:
    """`<table>: <registered names missing from it>` for each explicit list of methods that lacks one."""
    from healtrl.study import methods
    from tests.test_paper_configs import methods_missing_from_papers_table

    found = []
    for file, variable, left_out in PER_METHOD_TABLES:
        names = mentioned(REPO / file, variable)
        missing = [
            name
            for name, (trainer, _) in registry.items()
            if name not in left_out and name not in names and trainer.__name__ not in names
        ]
        if missing:
            found.append(f"{file} {variable}: {', '.join(sorted(missing))}")
    unstudied = methods.unstudied_trainers(registry)
    if unstudied:
        found.append(f"healtrl/study/methods.py METHODS (and RUN_CONFIGS): {', '.join(unstudied)}")
    no_row = methods_missing_from_papers_table(registry)
    if no_row:
        found.append(f"ARCHITECTURE.md Papers table: {', '.join(no_row)}")
    return found


def test_every_per_method_table_covers_the_registry():
    missing = missing_from_tables(TRAINERS)
    assert not missing, "registered methods missing from an explicit list of methods:\n" + "\n".join(missing)


def test_a_new_method_is_named_by_every_table_it_is_missing_from(registered):
    missing = missing_from_tables(registered)
    tables = [f"{file} {variable}" for file, variable, _ in PER_METHOD_TABLES]
    tables += ["healtrl/study/methods.py METHODS (and RUN_CONFIGS)", "ARCHITECTURE.md Papers table"]
    assert missing == [f"{table}: {NAME}" for table in tables]
