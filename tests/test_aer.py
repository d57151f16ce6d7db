"""AERTrainer (AER, arXiv:2510.10959, §4.2): pure functions against hand-computed cases, the entropy term against TRL's
entropy bonus, the controller (C2, C3), checkpoint/resume, and invalid settings."""

from __future__ import annotations

import json
import os

import pytest
import torch
from transformers import set_seed
from trl import GRPOConfig, GRPOTrainer

from healtrl import AERConfig, AERTrainer, EntropyGRPOConfig, EntropyGRPOTrainer
from healtrl.functional import aer_coefficients, aer_update_alpha
from healtrl.trainers.aer import GROUP_ACCURACY_KEY
from tests.helpers import build_trainer, loss_and_grads, next_inputs


# ---------------------------------------------------------------------------------------------------------------
# Pure functions
# ---------------------------------------------------------------------------------------------------------------
def test_aer_coefficients_hand_computed():
    g = torch.tensor([0.0, 0.1, 0.2, 0.5, 1.0])
    # eq. 9 with alpha 0.5, rho 0.2: 0.5 * max(0, 0.2 - g) / 0.2
    expected = torch.tensor([0.5, 0.25, 0.0, 0.0, 0.0])
    torch.testing.assert_close(aer_coefficients(g, 0.5, 0.2, eps=0.0), expected)
    torch.testing.assert_close(aer_coefficients(g, 0.5, 0.2), expected, rtol=1e-7, atol=1e-8)
    # rho = 0: only unsolved prompts (g = 0) get alpha (second term of eq. 9).
    torch.testing.assert_close(aer_coefficients(g, 0.3, 0.0), torch.tensor([0.3, 0.0, 0.0, 0.0, 0.0]))
    # rho = 1: linear in 1 - g.
    torch.testing.assert_close(aer_coefficients(g, 1.0, 1.0, eps=0.0), 1.0 - g)


def test_aer_update_alpha_hand_computed():
    assert aer_update_alpha(0.01, 0.005, target_entropy=0.4, entropy=0.3) == pytest.approx(0.015)  # below target
    assert aer_update_alpha(0.01, 0.005, target_entropy=0.4, entropy=0.5) == pytest.approx(0.005)  # above target
    assert aer_update_alpha(0.002, 0.005, target_entropy=0.4, entropy=0.5) == 0.0  # clipped at 0
    assert aer_update_alpha(0.01, 0.005, target_entropy=0.4, entropy=0.4) == 0.01  # sign(0) = 0


# ---------------------------------------------------------------------------------------------------------------
# The entropy term (eq. 7) from the loss forward
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize("accum", [1, 2])
def test_uniform_coefficient_equals_trl_entropy_bonus(tmp_path, accum):
    """With every prompt at lambda = alpha (rho = 1, g = 0), AER's token-normalised term is TRL's entropy_coef = alpha
    bonus. (The default, the paper's per-sequence normalisation, is checked in tests/test_controller_cadence.py.)"""
    cfg = dict(gradient_accumulation_steps=accum, per_device_train_batch_size=16 // accum)
    aer = build_trainer(
        AERTrainer, AERConfig, tmp_path / "aer", rho=1.0, eps=0.0, alpha_init=0.05, entropy_normalization="token", **cfg
    )
    trl_trainer = build_trainer(GRPOTrainer, GRPOConfig, tmp_path / "trl", entropy_coef=0.05, **cfg)
    set_seed(1)
    inputs = next_inputs(aer)
    inputs = dict(inputs, **{GROUP_ACCURACY_KEY: torch.zeros_like(inputs["advantages"])})
    loss_aer, grads_aer = loss_and_grads(aer, inputs)
    loss_trl, grads_trl = loss_and_grads(trl_trainer, inputs)
    torch.testing.assert_close(loss_aer, loss_trl, rtol=1e-5, atol=1e-7)
    for name, grad in grads_trl.items():
        torch.testing.assert_close(grads_aer[name], grad, rtol=1e-4, atol=1e-7, msg=name)


def test_per_prompt_coefficients_weight_token_entropies(tmp_path):
    aer = build_trainer(AERTrainer, AERConfig, tmp_path / "aer", alpha_init=0.3, rho=0.5, entropy_normalization="token")
    base = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "base")
    set_seed(1)
    inputs = next_inputs(aer)
    acc = torch.tensor([0.0, 0.25, 0.5, 0.75] * 4)
    inputs = dict(inputs, **{GROUP_ACCURACY_KEY: acc})
    loss_aer, _ = loss_and_grads(aer, inputs)
    loss_base, _ = loss_and_grads(base, inputs)
    # Entropies of the same (unchanged) policy on the same batch, from plain logits.
    ids = torch.cat([inputs["prompt_ids"], inputs["completion_ids"]], dim=1)
    attn = torch.cat([inputs["prompt_mask"], inputs["completion_mask"]], dim=1)
    with torch.no_grad():
        logits = aer.model(input_ids=ids, attention_mask=attn).logits[:, inputs["prompt_ids"].size(1) - 1 : -1]
    logp = torch.log_softmax(logits.double() / aer.temperature, dim=-1)
    ent = -(logp.exp() * logp).sum(-1)
    mask = inputs["completion_mask"].double()
    coef = 0.3 * torch.clamp(0.5 - acc.double(), min=0) / (0.5 + 1e-8)  # eq. 9 by hand: [0.3, 0.15, 0, 0]
    expected = -(coef.unsqueeze(1) * ent * mask).sum() / mask.sum()
    assert (loss_aer - loss_base).item() == pytest.approx(expected.item(), rel=1e-4, abs=1e-7)


def test_group_accuracy_from_rewards(tmp_path):
    aer = build_trainer(AERTrainer, AERConfig, tmp_path, accuracy_reward="toy_reward")
    rewards = torch.tensor([[1.0, 0.3], [0.0, 0.9], [0.0, 0.2], [1.0, 1.0]])
    torch.testing.assert_close(aer._group_accuracy(rewards, 2), torch.tensor([0.5, 0.5, 0.5, 0.5]))
    aer.args.accuracy_reward = None  # weighted sum (weights 1, 1) >= 0.5
    torch.testing.assert_close(aer._group_accuracy(rewards, 2), torch.tensor([1.0, 1.0, 0.5, 0.5]))
    set_seed(1)
    inputs = next_inputs(aer)
    acc = inputs[GROUP_ACCURACY_KEY]
    assert acc.shape == inputs["advantages"].shape
    assert set((acc * 4).round().tolist()) <= {0.0, 1.0, 2.0, 3.0, 4.0}


# ---------------------------------------------------------------------------------------------------------------
# Controller: C2 (H0, H*) and C3 (alpha), logged, checkpointed
# ---------------------------------------------------------------------------------------------------------------
def steps_of(history, key):
    return {e["step"]: e[key] for e in history if key in e}


def test_controller_measures_h0_and_updates_alpha(tmp_path):
    # Token normalisation: H_t is then the token mean that TRL logs as `entropy` (compared below).
    trainer = build_trainer(
        AERTrainer, AERConfig, tmp_path / "a", max_steps=3, alpha_init=0.02, tau=0.4, entropy_normalization="token"
    )
    trainer.train()
    hist = trainer.state.log_history
    h0 = steps_of(hist, "aer/initial_entropy")
    ent = steps_of(hist, "aer/entropy")
    assert h0[1] == pytest.approx(ent[1]) and h0[1] == h0[3]  # H0 = entropy of the first step, then fixed
    assert steps_of(hist, "aer/target_entropy")[2] == pytest.approx(0.4 * h0[1])
    assert ent[1] == pytest.approx(steps_of(hist, "entropy")[1], rel=1e-4)  # the same entropy TRL logs
    # Entropy stays above H* = 0.4 H0 in 3 steps: alpha goes down by eta per step (eq. 11), floored at 0.
    assert steps_of(hist, "aer/alpha") == pytest.approx({1: 0.02, 2: 0.015, 3: 0.01})
    assert {"aer/positive_coef_frac", "aer/hard_frac"} <= set(hist[0])

    # Explicit H0 far above the entropy: H* > H, alpha rises by eta per step.
    up = build_trainer(AERTrainer, AERConfig, tmp_path / "b", max_steps=3, initial_entropy=10.0, tau=0.5)
    up.train()
    assert steps_of(up.state.log_history, "aer/alpha") == pytest.approx({1: 0.0, 2: 0.005, 3: 0.01})
    assert steps_of(up.state.log_history, "aer/target_entropy")[1] == 5.0


def test_checkpoint_resume_gives_same_coefficients(tmp_path):
    out = tmp_path / "run"
    cfg = dict(max_steps=4, initial_entropy=0.9, tau=1.0, alpha_init=0.01, learning_rate=5e-2)
    full = build_trainer(AERTrainer, AERConfig, out, save_strategy="steps", save_steps=2, **cfg)
    full.train()
    with open(os.path.join(out, "checkpoint-2", "healtrl_state.json")) as f:
        state = json.load(f)
    assert state["initial_entropy"] == 0.9 and state["alpha"] >= 0
    resumed = build_trainer(AERTrainer, AERConfig, tmp_path / "resumed", save_strategy="no", **cfg)
    resumed.train(resume_from_checkpoint=os.path.join(out, "checkpoint-2"))
    a_full = steps_of(full.state.log_history, "aer/alpha")
    a_res = steps_of(resumed.state.log_history, "aer/alpha")
    assert a_res[3] == pytest.approx(a_full[3]) and a_res[4] == pytest.approx(a_full[4])
    assert resumed.alpha == pytest.approx(full.alpha)


def test_initial_entropy_estimated_before_training(tmp_path):
    trainer = build_trainer(AERTrainer, AERConfig, tmp_path, max_steps=1, initial_entropy_prompts=8)
    h0 = trainer.estimate_initial_entropy(8)
    assert 0 < h0 < 10
    assert not trainer._metrics["train"]  # the estimate logs nothing
    trainer.train()
    hist = trainer.state.log_history
    assert steps_of(hist, "aer/initial_entropy")[1] == pytest.approx(trainer.initial_entropy)
    assert trainer.initial_entropy != pytest.approx(steps_of(hist, "aer/entropy")[1], rel=1e-9)


# ~15 s (a fresh run and a resume); slow for the suite's 10-minute budget, .ci/release runs it
@pytest.mark.slow
def test_initial_entropy_estimated_before_a_fresh_run_only(tmp_path, monkeypatch):
    """The base trainer's `before_training` hook (AER overrides no TRL method) estimates H0 once, before TRL's training
    loop of a fresh run; a resumed run takes H0 from the checkpoint's method state instead."""
    calls = []
    estimate = AERTrainer.estimate_initial_entropy

    def recording(self, num_prompts):
        calls.append((self, self.state.global_step, len(self.state.log_history)))
        return estimate(self, num_prompts)

    monkeypatch.setattr(AERTrainer, "estimate_initial_entropy", recording)
    cfg = dict(max_steps=2, initial_entropy_prompts=8)
    full = build_trainer(AERTrainer, AERConfig, tmp_path / "full", save_strategy="steps", save_steps=1, **cfg)
    full.train()
    assert calls == [(full, 0, 0)] and full.initial_entropy is not None
    resumed = build_trainer(AERTrainer, AERConfig, tmp_path / "resumed", save_strategy="no", **cfg)
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-1"))
    assert len(calls) == 1 and resumed.initial_entropy == full.initial_entropy
    # `false` names no checkpoint (healtrl.checkpoints.NO_RESUME): a fresh run, which estimates H0
    fresh = build_trainer(AERTrainer, AERConfig, tmp_path / "fresh", save_strategy="no", **dict(cfg, max_steps=1))
    fresh.train(resume_from_checkpoint="false")
    assert calls[1:] == [(fresh, 0, 0)] and fresh.initial_entropy == pytest.approx(full.initial_entropy)


# ---------------------------------------------------------------------------------------------------------------
# Invalid settings
# ---------------------------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "field, value, match",
    [
        ("rho", 1.5, r"rho must be in \[0, 1\]"),
        ("rho", -0.1, r"rho must be in \[0, 1\]"),
        ("tau", 0.0, "tau must be > 0"),
        ("eta", 0.0, "eta must be > 0"),
        ("alpha_init", -1.0, "alpha_init must be >= 0"),
        ("initial_entropy", 0.0, "initial_entropy must be > 0"),
        ("initial_entropy_prompts", -1, "initial_entropy_prompts must be >= 0"),
    ],
)
def test_invalid_settings(tmp_path, field, value, match):
    with pytest.raises(ValueError, match=match):
        AERConfig(output_dir=str(tmp_path), use_cpu=True, **{field: value})


def test_unknown_accuracy_reward(tmp_path):
    with pytest.raises(ValueError, match="accuracy_reward 'nope'"):
        build_trainer(AERTrainer, AERConfig, tmp_path, accuracy_reward="nope")


def test_table_2_ablation_switches(tmp_path):
    """AER Table 2: difficulty_aware off gives every prompt alpha; adaptive_alpha off keeps alpha at alpha_init."""
    fixed = build_trainer(
        AERTrainer, AERConfig, tmp_path / "fixed", max_steps=2, alpha_init=0.02, difficulty_aware=False,
        adaptive_alpha=False, entropy_normalization="token",
    )  # fmt: skip
    accuracy = torch.tensor([0.0, 0.1, 0.5, 1.0])
    assert torch.equal(fixed._coefficients(accuracy, 0.02), torch.full((4,), 0.02))
    fixed.train()
    assert steps_of(fixed.state.log_history, "aer/alpha") == pytest.approx({1: 0.02, 2: 0.02})  # no C3 step
    assert steps_of(fixed.state.log_history, "aer/positive_coef_frac") == pytest.approx({1: 1.0, 2: 1.0})
    c1 = build_trainer(AERTrainer, AERConfig, tmp_path / "c1", alpha_init=0.02, adaptive_alpha=False, rho=0.2)
    assert torch.allclose(c1._coefficients(accuracy, 0.02), aer_coefficients(accuracy, 0.02, 0.2))
    with pytest.raises(ValueError, match="adaptive_alpha false keeps alpha at alpha_init, which is 0"):
        AERConfig(output_dir=str(tmp_path / "x"), adaptive_alpha=False, alpha_init=0.0)
