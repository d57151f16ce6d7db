"""Every paper config states, as data, what a researcher needs to compare a run with the paper: its data, its budget
(`max_steps`; tests/test_dry_run.py checks that every run of a paper's comparison gets the same rollout batches), its
best-checkpoint rule, and the paper's numbers with their protocol."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from healtrl.recipes.recipe import parse_best_checkpoint, parse_paper_protocol, parse_paper_results
from healtrl.tasks import get_task

REPO = Path(__file__).resolve().parent.parent
CONFIGS = REPO / "configs"
# A paper config is one that states the paper's numbers (`paper_results`): data, not a file name.
PAPER_CONFIGS = sorted(p for p in CONFIGS.glob("*.yaml") if "paper_results" in (yaml.safe_load(p.read_text()) or {}))


def papers_table() -> dict[str, str]:
    """ARCHITECTURE.md's "Papers" table: arXiv id -> the paper's short name (`AER`, `PosAdv`, ...)."""
    text = (REPO / "ARCHITECTURE.md").read_text(encoding="utf-8")
    section = text.split("\n## Papers\n", 1)[1].split("\n## ", 1)[0]
    rows = re.findall(r"^\| ([^|]+?) \|.*\[(\d{4}\.\d{4,5})\]\(https://arxiv\.org/abs/\2\)", section, re.M)
    return {arxiv_id: short for short, arxiv_id in rows}


def paper_names() -> dict[str, str]:
    """Registered method (`healtrl.trainers.TRAINERS`) -> the short name of its paper in ARCHITECTURE.md's "Papers"
    table (looked up by the arXiv id of its card's paper). The `grpo` trainer, whose card cites GRPO (the algorithm
    every trainer builds on), is no method of a paper here."""
    from healtrl.trainers import TRAINERS

    table = papers_table()
    return {name: table[paper["id"]] for name, paper in method_papers(TRAINERS).items() if paper.get("id") in table}


def method_papers(registry) -> dict[str, dict]:
    """Registered name -> its card's paper, for each trainer whose card cites a paper of its own (not GRPO's)."""
    from healtrl.model_card import GRPO_PAPER

    return {
        name: dict(trainer.card.paper)
        for name, (trainer, _) in registry.items()
        if trainer.card is not None and trainer.card.paper.get("id") != GRPO_PAPER["id"]
    }


def methods_missing_from_papers_table(registry) -> list[str]:
    """Registered methods whose card's paper has no row in ARCHITECTURE.md's "Papers" table."""
    table = papers_table()
    return sorted(name for name, paper in method_papers(registry).items() if paper.get("id") not in table)


def test_every_method_paper_is_in_the_papers_table():
    from healtrl.trainers import TRAINERS

    table = papers_table()
    assert table and all(re.fullmatch(r"\d{4}\.\d{4,5}", arxiv_id) for arxiv_id in table), table  # the table parses
    missing = methods_missing_from_papers_table(TRAINERS)
    assert not missing, f"ARCHITECTURE.md's Papers table has no row for the paper of {missing} (arXiv id, short name)"


def test_every_paper_config_is_listed():
    """The paper configs are those with `paper_results`; each is named `<method>_...` for a registered method with a
    paper, and every other non-toy config named so states its paper's numbers too (none is left out of the checks
    below)."""
    names = paper_names()
    by_paper = {}
    for path in PAPER_CONFIGS:
        by_paper.setdefault(path.stem.split("_")[0], []).append(path.name)
    assert set(by_paper) <= set(names), f"paper configs named for no registered method with a paper: {by_paper}"
    named = {p for p in CONFIGS.glob("*.yaml") if p.stem.split("_")[0] in names and "toy" not in p.stem}
    assert named == set(PAPER_CONFIGS), f"without paper_results: {sorted(p.name for p in named - set(PAPER_CONFIGS))}"
    assert PAPER_CONFIGS


@pytest.mark.parametrize("path", PAPER_CONFIGS, ids=lambda p: p.stem)
def test_paper_config_states_data_budget_rule_and_numbers(path):
    config = yaml.safe_load(path.read_text())
    paper = paper_names()[path.stem.split("_")[0]]
    # Data: a dataset and rewards.
    assert config.get("dataset_name") and config.get("reward_funcs"), "data"
    # Budget: a fixed number of optimizer steps (epochs converted), not a length that follows from the data's size.
    assert isinstance(config.get("max_steps"), int) and config["max_steps"] > 0 and "num_train_epochs" not in config
    # The paper's numbers, with the protocol they were measured under.
    protocol = parse_paper_protocol(config.get("paper_protocol"))
    results = parse_paper_results(config.get("paper_results"), protocol)
    assert results and protocol is not None and protocol.source
    for entry in results:
        get_task(entry.benchmark)  # a task healtrl can evaluate
        assert entry.table.startswith(paper + " ")  # cites the paper's own table
    # Best checkpoint: the paper's rule, saved at its interval. HEAL selects none (it reports the trained model), so
    # exactly its configs have no rule.
    rule = parse_best_checkpoint(config.get("best_checkpoint"))
    assert (rule is None) == (paper == "HEAL"), rule
    if rule is not None:
        assert config["save_strategy"] == "steps"
        assert rule.every_steps % config["save_steps"] == 0
        assert rule.source


@pytest.mark.parametrize("path", [p for p in PAPER_CONFIGS if "dapo-math-17k" in p.read_text()], ids=lambda p: p.stem)
def test_dapo_trained_recipes_evaluate_in_their_training_format(path):
    """PosAdv and OPEFO train on DAPO's "Answer:" prompt: they are validated and evaluated in that format."""
    config = yaml.safe_load(path.read_text())
    tasks = [e["benchmark"] for e in config["paper_results"]] + list(config["best_checkpoint"]["tasks"])
    assert all(get_task(t).answer_format == "answer_line" for t in tasks), tasks


def test_aer_amc_is_the_83_problem_set():
    for path in CONFIGS.glob("aer_*q*.yaml"):
        benchmarks = {e["benchmark"] for e in yaml.safe_load(path.read_text())["paper_results"]}
        assert "aimo-validation-amc" in benchmarks and "amc23" not in benchmarks, path.name


def test_heal_medicine_recipes_train_and_test_on_disjoint_splits():
    for path in CONFIGS.glob("heal*medicine.yaml"):
        config = yaml.safe_load(path.read_text())
        assert config["dataset_name"] == "task:medicine"
        assert config.get("dataset_train_split", "train") == "train"
        benchmarks = {e["benchmark"] for e in config["paper_results"]}
        assert benchmarks == {"medicine-medbullets", "medicine-medxpertqa"}
        assert all(get_task(b).split == "test" for b in benchmarks)


def test_heal_table_runs_have_the_same_budget_and_batch():
    """HEAL's Medicine table (Tables 1, 2, 7) compares runs at equal compute: 200 optimizer steps of 128 prompts."""
    for path in CONFIGS.glob("heal*medicine.yaml"):
        config = yaml.safe_load(path.read_text())
        prompts = config["per_device_train_batch_size"] * 8 * config["gradient_accumulation_steps"]
        assert (config["max_steps"], prompts // config["num_generations"]) == (200, 128), path.name
        if "few_shot" in path.name:
            assert config["train_repeats"] == "auto"
        if any(m in path.name for m in ("80_20", "clip_higher", "entropy_loss", "kl_cov")):  # Table 7: target + general
            assert config["general_dataset_name"].endswith("/selected")


@pytest.mark.parametrize(
    "path", [p for p in PAPER_CONFIGS if p.name.startswith(("opefo_", "posadv_"))], ids=lambda p: p.stem
)
def test_settings_the_paper_does_not_state_are_ours(path):
    """OPEFO and PosAdv state no evaluation length: null in paper_protocol, our choice (the training length) in
    `ours`."""
    config = yaml.safe_load(path.read_text())
    protocol = parse_paper_protocol(config["paper_protocol"])
    assert protocol.max_new_tokens is None and protocol.ours == {"max_new_tokens": config["max_completion_length"]}
