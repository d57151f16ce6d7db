"""PosAdvTrainer (PosAdv, arXiv:2511.05993, §7.3, App. E.2): schedules and weights against hand-computed cases, the
shaped loss against TRL with per-token advantages, Rand-Pos-Clip reproducibility, resume, and invalid settings."""

from __future__ import annotations

import json
import os

import pytest
import torch
from transformers import set_seed
from trl import GRPOConfig, GRPOTrainer

from healtrl import PosAdvConfig, PosAdvTrainer
from healtrl.functional import (
    entropy_guided_lambda,
    epoch_lambda,
    posadv_token_weights,
    rand_pos_clip_mask,
    stage_lambda,
)
from tests.helpers import build_trainer, loss_and_grads, next_inputs


def steps_of(history, key):
    return {e["step"]: e[key] for e in history if key in e}


# ---------------------------------------------------------------------------------------------------------------
# Pure functions
# ---------------------------------------------------------------------------------------------------------------
def test_schedules_hand_computed():
    # stage, T = 5 steps (0..4): 0 for the first half, then linear to 1 at the last step.
    assert [stage_lambda(s, 5) for s in range(5)] == pytest.approx([0.0, 0.0, 0.0, 0.5, 1.0])
    # epoch: (e - 1) / (E - 1)
    assert [epoch_lambda(e, 3) for e in (1, 2, 3)] == pytest.approx([0.0, 0.5, 1.0])
    with pytest.raises(ValueError, match="num_epochs >= 2"):
        epoch_lambda(1, 1)
    # entropy-guided, eq. 5: +Delta above the threshold, -Delta below, clipped to [0, 1].
    assert entropy_guided_lambda(0.0, 0.3) == pytest.approx(0.05)
    assert entropy_guided_lambda(0.5, 0.1) == pytest.approx(0.45)
    assert entropy_guided_lambda(0.0, 0.1) == 0.0
    assert entropy_guided_lambda(0.98, 0.3) == 1.0
    assert entropy_guided_lambda(0.5, 0.2) == pytest.approx(0.45)  # not above the threshold: decrease


def test_token_weights_and_rand_pos_clip_hand_computed():
    adv = torch.tensor([[1.0, -1.0, 0.0]])
    torch.testing.assert_close(posadv_token_weights(adv, 0.3), torch.tensor([[0.3, 1.0, 1.0]]))
    torch.testing.assert_close(posadv_token_weights(adv, 1.0, 0.0), torch.tensor([[1.0, 0.0, 0.0]]))
    adv = torch.tensor([2.0, 2.0, -1.0, 2.0]).unsqueeze(1).expand(4, 5)
    mask = torch.ones(4, 5)
    mask[0, 3:] = 0
    sel = rand_pos_clip_mask(adv, mask, ratio=0.2, generator=torch.Generator().manual_seed(0))
    assert sel.sum() == int(0.2 * 18)  # k = int(ratio * N valid) = 3
    assert not sel[2].any() and not (sel & ~mask.bool()).any()  # only valid A > 0 tokens
    again = rand_pos_clip_mask(adv, mask, ratio=0.2, generator=torch.Generator().manual_seed(0))
    assert torch.equal(sel, again)
    assert rand_pos_clip_mask(adv, mask, ratio=1e-6).sum() == 1  # at least one


# ---------------------------------------------------------------------------------------------------------------
# The shaped loss
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "schedule, lam, neg", [("constant", 0.3, 1.0), ("positive_only", 1.0, 0.0), ("negative_only", 0.0, 1.0)]
)
def test_shaped_loss_equals_trl_with_weighted_advantages(tmp_path, schedule, lam, neg):
    ours = build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path / "ours", schedule=schedule, lambda_init=lam)
    trl_trainer = build_trainer(GRPOTrainer, GRPOConfig, tmp_path / "trl")
    set_seed(1)
    inputs = next_inputs(ours)
    assert (inputs["advantages"] > 0).any() and (inputs["advantages"] < 0).any()
    loss_ours, grads_ours = loss_and_grads(ours, inputs)
    adv = inputs["advantages"]
    weighted = torch.where(adv > 0, lam * adv, neg * adv).unsqueeze(1).expand_as(inputs["completion_mask"])
    loss_trl, grads_trl = loss_and_grads(trl_trainer, dict(inputs, advantages=weighted.contiguous()))
    torch.testing.assert_close(loss_ours, loss_trl, rtol=1e-5, atol=1e-7)
    for name, grad in grads_trl.items():
        torch.testing.assert_close(grads_ours[name], grad, rtol=1e-4, atol=1e-7, msg=name)


def test_entropy_schedule_updates_lambda_and_logs(tmp_path):
    # Threshold 0: the entropy is above it, lambda rises by Delta each step from lambda_0.
    trainer = build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path, max_steps=3, entropy_threshold=0.0, lambda_step=0.1)
    trainer.train()
    hist = trainer.state.log_history
    assert steps_of(hist, "posadv/lambda") == pytest.approx({1: 0.0, 2: 0.1, 3: 0.2})
    assert steps_of(hist, "posadv/entropy")[1] == pytest.approx(steps_of(hist, "entropy")[1], rel=1e-4)
    assert 0 < steps_of(hist, "posadv/pos_token_frac")[1] < 1


def test_stage_and_epoch_schedules_in_training(tmp_path):
    stage = build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path / "s", max_steps=5, schedule="stage")
    stage.train()
    assert list(steps_of(stage.state.log_history, "posadv/lambda").values()) == pytest.approx([0, 0, 0, 0.5, 1.0])
    # 32 prompts x 4 generations, 4 prompts per step: 8 steps per epoch; 16 steps = 2 epochs, lambda 0 then 1.
    epoch = build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path / "e", max_steps=16, schedule="epoch", logging_steps=8)
    epoch.train()
    lam = steps_of(epoch.state.log_history, "posadv/lambda")
    assert lam == pytest.approx({8: 0.0, 16: 1.0})


# ~15 s (three trainings); slow for the suite's 10-minute budget, .ci/release runs it
@pytest.mark.slow
def test_rand_pos_clip_reproducible_and_resumable(tmp_path):
    def run(out, **kw):
        trainer = build_trainer(
            PosAdvTrainer, PosAdvConfig, out, schedule="rand_pos_clip", rand_pos_clip_ratio=0.05, **kw
        )
        return trainer

    cfg = dict(max_steps=4, learning_rate=5e-2)
    a = run(tmp_path / "a", save_strategy="steps", save_steps=2, **cfg)
    a.train()
    b = run(tmp_path / "b", **cfg)
    b.train()
    clipped_a = steps_of(a.state.log_history, "posadv/clipped_tokens")
    assert clipped_a == steps_of(b.state.log_history, "posadv/clipped_tokens") and clipped_a[1] >= 1
    assert a.state.log_history[-2]["loss"] == pytest.approx(b.state.log_history[-2]["loss"])
    with open(os.path.join(tmp_path / "a", "checkpoint-2", "healtrl_state.json")) as f:
        assert json.load(f)["rng_calls"] == 2
    resumed = run(tmp_path / "r", **cfg)
    resumed.train(resume_from_checkpoint=os.path.join(tmp_path / "a", "checkpoint-2"))
    assert resumed._rng_calls == a._rng_calls == 4
    assert resumed.state.log_history[-2]["loss"] == pytest.approx(a.state.log_history[-2]["loss"], rel=1e-4)


@pytest.mark.slow  # ~5 s; the default suite resumes PosAdv's lambda mid rollout batch (test_controller_cadence.py)
def test_entropy_lambda_resumes(tmp_path):
    cfg = dict(max_steps=4, entropy_threshold=0.0, lambda_step=0.1)
    a = build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path / "a", save_strategy="steps", save_steps=2, **cfg)
    a.train()
    with open(os.path.join(tmp_path / "a", "checkpoint-2", "healtrl_state.json")) as f:
        assert json.load(f)["lambda"] == pytest.approx(0.2)
    r = build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path / "r", **cfg)
    r.train(resume_from_checkpoint=os.path.join(tmp_path / "a", "checkpoint-2"))
    lam = steps_of(r.state.log_history, "posadv/lambda")
    assert [lam[3], lam[4]] == pytest.approx([0.2, 0.3])
    assert r.lam == pytest.approx(a.lam)


# ---------------------------------------------------------------------------------------------------------------
# Invalid settings
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "kw, match",
    [
        (dict(schedule="cosine"), "schedule must be one of"),
        (dict(lambda_init=1.5), r"lambda_init must be in \[0, 1\]"),
        (dict(lambda_step=0.0), r"lambda_step must be in \(0, 1\]"),
        (dict(entropy_threshold=-1.0), "entropy_threshold must be >= 0"),
        (dict(rand_pos_clip_ratio=0.0), r"rand_pos_clip_ratio must be in \(0, 1\]"),
        (dict(schedule="epoch", num_train_epochs=1), "num_train_epochs >= 2"),
    ],
)
def test_invalid_settings(tmp_path, kw, match):
    with pytest.raises(ValueError, match=match):
        PosAdvConfig(output_dir=str(tmp_path), use_cpu=True, **kw)


def test_stage_without_max_steps_or_length(tmp_path):
    from datasets import IterableDataset

    data = IterableDataset.from_generator(lambda: iter([{"prompt": "1+1=", "answer": "2"}]))
    # transformers' own check (it needs max_steps for any dataset without a length) comes first, as under TRL.
    with pytest.raises(ValueError, match="does not implement __len__.*max_steps has to be specified"):
        build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path, schedule="stage", max_steps=-1, train_dataset=data)


def test_epoch_schedule_with_one_epoch_of_steps(tmp_path):
    trainer = build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path, schedule="epoch", max_steps=2)
    with pytest.raises(ValueError, match="needs at least 2 epochs"):
        trainer.train()
