"""The `grpo` trainer on target + general rows (HEAL Table 7: the entropy baselines train on the same 32 target +
384 general rows as HEAL): the general rows join the training pool, each keeps its own reward, and training runs."""

from __future__ import annotations

import pytest

from healtrl import GRPOBaselineConfig, GRPOBaselineTrainer, HEALConfig
from healtrl.toy.tasks import make_dataset
from tests.helpers import build_trainer


def test_general_rows_join_the_pool_and_train(tmp_path):
    target = make_dataset("add", 16, seed=0)
    trainer = build_trainer(
        GRPOBaselineTrainer,
        GRPOBaselineConfig,
        tmp_path / "run",
        train_dataset=target,
        entropy_method="kl_cov",
        steps_per_generation=2,  # two updates per rollout batch: KL-Cov's penalty is not 0
        general_dataset_name="healtrl-toy/compare",
        num_general_samples=8,
    )
    data = trainer.train_dataset
    assert len(data) == 24
    assert data["domain"].count("target") == 16 and data["domain"].count("general") == 8
    # The target rows are the given ones, in order; the general rows are compare problems.
    assert data["prompt"][:16] == target["prompt"]
    assert all(p not in target["prompt"] for p in data["prompt"][16:])  # conversational prompts: lists
    before = {n: p.detach().clone() for n, p in trainer.model.named_parameters()}
    trainer.train()
    changed = [n for n, p in trainer.model.named_parameters() if not (p.detach() == before[n]).all()]
    assert changed, "no parameter moved"
    assert "healtrl-toy/compare" in trainer._model_card_datasets(None)


def test_same_general_subset_as_heal(tmp_path):
    """HEAL and the baselines draw the same general rows for the same seed (one loader)."""
    from healtrl.trainers._mixing import load_general_dataset

    kw = dict(output_dir=str(tmp_path), general_dataset_name="healtrl-toy/compare", num_general_samples=8, seed=3)
    heal_rows = load_general_dataset(HEALConfig(**kw, use_cpu=True, report_to="none"))
    grpo_rows = load_general_dataset(GRPOBaselineConfig(**kw, use_cpu=True, report_to="none"))
    assert heal_rows["prompt"] == grpo_rows["prompt"]


def test_num_general_samples_checked(tmp_path):
    with pytest.raises(ValueError, match="num_general_samples"):
        GRPOBaselineConfig(output_dir=str(tmp_path), num_general_samples=0, use_cpu=True, report_to="none")
