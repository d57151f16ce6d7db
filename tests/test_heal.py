"""HEALTrainer: hybrid data (three mixing modes), the EDA reward wired before advantages, logging, resume, bad input."""

from __future__ import annotations

import math
import os
from collections import Counter

import pytest
import torch
from datasets import Dataset
from transformers import set_seed

from healtrl import HEALConfig, HEALTrainer
from healtrl.functional import eda_rewards
from healtrl.toy.tasks import toy_reward
from healtrl.toy.tokenizer import build_tokenizer
from healtrl.trainers import get_trainer_classes
from healtrl.trainers._mixing import DomainShareSampler, combine_domains, interleave_order
from tests.helpers import digit_reward, grpo_kwargs, run_two_processes, tiny_dataset, tiny_model

HERE = os.path.dirname(os.path.abspath(__file__))


class RecordingHEAL(HEALTrainer):
    """Keeps what every `augment_rewards` call saw and returned."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.records = []

    def augment_rewards(self, rollouts):
        out = super().augment_rewards(rollouts)
        self.records.append(
            dict(
                entropies=rollouts.entropies.clone(),
                mask=rollouts.entropy_mask.clone(),
                domains=rollouts.column("domain"),
                prompts=[p[-1]["content"] for p in rollouts.prompts],
                rewards=rollouts.rewards_per_func.clone(),
                eda=out["eda"].clone(),
            )
        )
        return out


def heal_trainer(output_dir, *, target=None, general=None, cls=RecordingHEAL, **cfg):
    """A HEAL trainer on the tiny model: 16 target `add` rows + 16 general `compare` rows by default.

    `general=False`: no separate general dataset (the target dataset must carry both domains)."""
    target = tiny_dataset(16, family="add") if target is None else target
    general = tiny_dataset(16, family="compare", seed=1) if general is None else general
    set_seed(0)
    return cls(
        model=tiny_model(),
        reward_funcs=[toy_reward, digit_reward],
        args=HEALConfig(**grpo_kwargs(output_dir, **cfg)),
        train_dataset=target,
        general_dataset=None if general is False else general,
        processing_class=build_tokenizer(),
    )


def steps_of(history, key):
    return {e["step"]: e[key] for e in history if key in e}


# ---------------------------------------------------------------------------------------------------------------
# Data mixing
# ---------------------------------------------------------------------------------------------------------------
def test_combine_domains_aligns_columns_and_sets_domain():
    target = Dataset.from_dict({"prompt": ["a", "b"], "answer": ["1", "2"], "domain": ["math", "math"]})
    general = Dataset.from_dict({"prompt": ["c"], "answer": ["3"], "choices": [["x", "y"]], "score": [0.5]})
    mixed = combine_domains(target, general, "domain", "target", "general")
    assert mixed["domain"] == ["target", "target", "general"]
    assert mixed["choices"] == [None, None, ["x", "y"]] and mixed["score"] == [None, None, 0.5]
    assert mixed["prompt"] == ["a", "b", "c"]

    conversational = Dataset.from_dict({"prompt": [[{"role": "user", "content": "c"}]], "answer": ["3"]})
    with pytest.raises(ValueError, match="'prompt'"):
        combine_domains(target, conversational, "domain", "target", "general")


def test_interleave_order_matches_chunks():
    # 4 target rows (0-3), 8 general rows (4-11), 2 chunks per domain: T1 G1 T2 G2.
    assert interleave_order(4, 8, 2) == [0, 1, 4, 5, 6, 7, 2, 3, 8, 9, 10, 11]
    order = interleave_order(32, 384, 4)  # the authors' layout: 8 target then 96 general rows, four times
    assert sorted(order) == list(range(416))
    assert order[:8] == list(range(8)) and min(order[8:104]) == 32 and order[104:112] == list(range(8, 16))


def test_domain_share_sampler_fixed_composition_and_determinism():
    target, general = list(range(10)), list(range(10, 40))
    sampler = DomainShareSampler(target, general, batch_size=8, num_general=3, mini_repeat_count=2, repeat_count=2)
    assert sampler.batches_per_epoch == 2  # ceil(10 target rows / 5 per batch)
    indices = list(sampler)
    assert len(indices) == len(sampler) == 2 * 8 * 2 * 2
    per_batch = [indices[i * 32 : i * 32 + 16 : 2] for i in range(2)]  # distinct prompts of each generation batch
    for batch in per_batch:
        assert sum(i >= 10 for i in batch) == 3 and len(set(batch)) == 8
    # Both epochs together read every target row exactly twice (streams are shuffled passes), same batches again.
    sampler.set_epoch(1)
    second = list(sampler)
    counts = Counter(i for i in per_batch[0] + per_batch[1] + second[:16:2] + second[32:48:2] if i < 10)
    assert set(counts.values()) == {2} and len(counts) == 10
    again = DomainShareSampler(target, general, batch_size=8, num_general=3, mini_repeat_count=2, repeat_count=2)
    again.set_epoch(1)
    assert list(again) == second


def test_shuffle_mode_trains_on_both_domains(tmp_path):
    trainer = heal_trainer(tmp_path, max_steps=2)
    assert len(trainer.train_dataset) == 32
    trainer.train()
    hist = trainer.state.log_history
    keys = {"heal/entropy_target", "heal/entropy_general", "heal/eda_rate", "rewards/eda/mean", "heal/general_share"}
    assert keys <= set(hist[0]), keys - set(hist[0])
    for rec in trainer.records:
        assert rec["entropies"].shape[0] == 16  # the whole generation batch (8 prompts x 4 generations... gathered)


def test_fixed_share_puts_general_prompts_in_every_batch(tmp_path):
    trainer = heal_trainer(tmp_path, max_steps=3, mixing="fixed_share", general_share=0.25)
    trainer.train()
    for rec in trainer.records:
        assert Counter(rec["domains"]) == {"target": 12, "general": 4}  # 1 of 4 prompts x 4 generations


def test_interleave_mode_reads_chunks_in_order(tmp_path):
    # 8 target + 8 general rows, 2 chunks: batches of 4 prompts read T T T T | G G G G | T T T T | G G G G.
    trainer = heal_trainer(
        tmp_path, target=tiny_dataset(8), general=tiny_dataset(8, family="compare"), max_steps=2,
        mixing="interleave", interleave_chunks=2,
    )  # fmt: skip
    trainer.train()
    assert [Counter(r["domains"]) for r in trainer.records] == [{"target": 16}, {"general": 16}]
    # A batch without general trajectories: no EDA reward, no NaN in the logs (S_inter undefined -> not logged).
    assert trainer.records[0]["eda"].sum() == 0
    first = trainer.state.log_history[0]
    assert first["heal/eda_rate"] == 0 and "heal/s_inter" not in first
    for value in first.values():
        assert not (isinstance(value, float) and math.isnan(value))


# ---------------------------------------------------------------------------------------------------------------
# The EDA reward
# ---------------------------------------------------------------------------------------------------------------
# kl-paper runs in the default suite; the other similarities and the reference mode are marked slow.
@pytest.mark.parametrize(
    "similarity,mode",
    [
        ("kl", "paper"),
        *(
            pytest.param(s, m, marks=pytest.mark.slow)
            for s, m in [("hti", "paper"), ("pl", "paper"), ("kl", "reference")]
        ),
    ],
)
def test_eda_column_is_the_functional_on_rollout_entropies(tmp_path, similarity, mode):
    trainer = heal_trainer(tmp_path, max_steps=2, eda_similarity=similarity, eda_mode=mode, eda_min_length=1)
    trainer.train()
    for rec in trainer.records:
        lengths = rec["mask"].sum(1).long()
        seqs = [rec["entropies"][i, : lengths[i]] for i in range(len(lengths))]
        is_target = torch.tensor([d == "target" for d in rec["domains"]])
        expected = eda_rewards(seqs, is_target, similarity=similarity, mode=mode, min_length=1)
        torch.testing.assert_close(rec["eda"].float(), expected.float())
        if mode == "paper":
            assert rec["eda"][~is_target].sum() == 0  # eq. 4 rewards target trajectories only


def test_eda_reward_is_added_with_its_weight(tmp_path):
    trainer = heal_trainer(tmp_path / "a", max_steps=2)
    trainer.train()
    for entry in trainer.state.log_history[:-1]:
        total = entry["rewards/toy_reward/mean"] + entry["rewards/digit_reward/mean"] + entry["rewards/eda/mean"]
        assert entry["reward"] == pytest.approx(total, abs=1e-6)

    hybrid = heal_trainer(tmp_path / "b", max_steps=2, eda_weight=0.0)  # the paper's Hybrid baseline
    hybrid.train()
    for entry in hybrid.state.log_history[:-1]:
        assert "rewards/eda/mean" in entry  # still computed and logged ...
        total = entry["rewards/toy_reward/mean"] + entry["rewards/digit_reward/mean"]
        assert entry["reward"] == pytest.approx(total, abs=1e-6)  # ... but not rewarded


def test_per_domain_entropy_logged_matches_rollouts(tmp_path):
    trainer = heal_trainer(tmp_path, max_steps=1, logging_steps=1)
    trainer.train()
    rec, entry = trainer.records[0], trainer.state.log_history[0]
    for domain in ("target", "general"):
        rows = torch.tensor([d == domain for d in rec["domains"]])
        mask = rec["mask"][rows].float()
        expected = (rec["entropies"][rows] * mask).sum() / mask.sum()
        assert entry[f"heal/entropy_{domain}"] == pytest.approx(expected.item(), rel=1e-5)


# ---------------------------------------------------------------------------------------------------------------
# Resume, registry, several processes
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.slow  # a training run saved at every step, then resumed (~30 s); test_checkpoint_safety.py and test_controller_cadence.py keep resumes in the default suite
def test_resume_sees_the_same_batches(tmp_path):
    cfg = dict(max_steps=3, mixing="fixed_share", general_share=0.5)
    full = heal_trainer(tmp_path / "full", save_strategy="steps", save_steps=1, **cfg)
    full.train()
    resumed = heal_trainer(tmp_path / "resumed", save_strategy="no", **cfg)
    resumed.train(resume_from_checkpoint=os.path.join(tmp_path / "full", "checkpoint-2"))
    assert [r["prompts"] for r in resumed.records] == [full.records[2]["prompts"]]


def test_registered_and_in_top_level_namespace():
    assert get_trainer_classes("heal") == (HEALTrainer, HEALConfig)


@pytest.mark.slow  # a two-process launch (~25 s); test_distributed.py keeps one in the default suite
def test_two_processes_compute_eda_on_the_global_batch(tmp_path):
    ranks = run_two_processes(os.path.join(HERE, "dist_heal_worker.py"), tmp_path)
    assert ranks[0] == ranks[1]  # every rank saw the same gathered batch and computed the same rewards
    for rec in ranks[0]["records"]:
        assert len(rec["domains"]) == 16  # 2 processes x 8 completions: the global batch
        seqs = [torch.tensor(e, dtype=torch.float32) for e in rec["entropies"]]
        is_target = torch.tensor([d == "target" for d in rec["domains"]])
        assert rec["eda"] == eda_rewards(seqs, is_target).tolist()  # a single-process computation on that batch
        assert 0 < sum(is_target.tolist()) < 16


# ---------------------------------------------------------------------------------------------------------------
# Bad input
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field,value,match",
    [
        ("eda_similarity", "cosine", "eda_similarity must be one of kl, hti, pl"),
        ("eda_mode", "verl", "eda_mode must be one of paper, reference"),
        ("mixing", "zip", "mixing must be one of shuffle, interleave, fixed_share"),
        ("general_share", 1.0, "general_share must be in"),
        ("eda_weight", -1.0, "eda_weight must be >= 0"),
        ("interleave_chunks", 0, "interleave_chunks must be >= 1"),
        ("general_domain", "target", "must differ"),
    ],
)
def test_invalid_settings(tmp_path, field, value, match):
    with pytest.raises(ValueError, match=match):
        HEALConfig(output_dir=str(tmp_path), **{field: value})


def test_missing_domain_column_and_unknown_domain_values(tmp_path):
    no_domain = tiny_dataset(8).remove_columns("domain")
    with pytest.raises(ValueError, match="HEAL needs general-domain data.*'domain' column"):
        heal_trainer(tmp_path / "a", target=no_domain, general=False)
    with pytest.raises(ValueError, match="no general-domain row"):
        heal_trainer(tmp_path / "b", target=tiny_dataset(8), general=False)  # only target rows
    odd = tiny_dataset(8).map(lambda row, i: {"domain": "math" if i % 2 else "target"}, with_indices=True)
    with pytest.raises(ValueError, match=r"\['math'\].*match neither target_domain"):
        heal_trainer(tmp_path / "c", target=odd, general=False)


def test_one_dataset_with_a_domain_column_works(tmp_path):
    both = tiny_dataset(16, family=["add", "compare"])
    trainer = heal_trainer(tmp_path, target=both, general=False, max_steps=1)
    trainer.train()
    assert set(trainer.records[0]["domains"]) <= {"target", "general"}


def test_fixed_share_too_small_batch(tmp_path):
    trainer = heal_trainer(tmp_path, max_steps=1, mixing="fixed_share", general_share=0.05)
    with pytest.raises(ValueError, match="general_share 0.05 gives 0 general prompt"):
        trainer.train()


def test_model_card_cites_heal(tmp_path):
    trainer = heal_trainer(tmp_path, max_steps=1)
    trainer.create_model_card(model_name="toy-heal")
    card = (tmp_path / "README.md").read_text()
    assert "HEAL" in card and "@misc{liu_heal" in card
    assert (
        "HEALing Entropy Collapse" in card
        and "Zhanyu Liu" in card
        and "\\url{https://github.com/XMUDeepLIT/HEAL}" in card
    )
