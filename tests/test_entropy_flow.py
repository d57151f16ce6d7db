"""Entropy-flow diagnostics (healtrl.diagnostics, OPEFO Figure 2): by hand, in a trainer, no extra forward, off = nothing."""

from __future__ import annotations

import pytest
import torch
from transformers import set_seed

from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer, OPEFOConfig, OPEFOTrainer
from healtrl.diagnostics import METRIC_NAMES, EntropyFlowDiagnostics, entropy_flow_sums
from healtrl.functional import token_entropy_change
from healtrl.trainers._trl import clip_status
from tests.helpers import build_trainer, loss_and_grads, next_inputs


def test_clip_status_by_hand():
    logp = torch.zeros(1, 4)
    old = torch.log(torch.tensor([[1 / 1.3, 1 / 1.3, 1 / 0.7, 1 / 0.7]]))  # ratios 1.3, 1.3, 0.7, 0.7
    adv = torch.tensor([[1.0, -1.0, -1.0, 1.0]])
    upper, lower = clip_status(logp, old, adv, torch.ones(1, 4), 0.2, 0.28)
    assert upper.tolist() == [[True, False, False, False]]  # 1.3 > 1.28 with A > 0
    assert lower.tolist() == [[False, False, True, False]]  # 0.7 < 0.8 with A < 0
    # Sequence level: the masked mean log-ratio of each sequence.
    upper, lower = clip_status(logp, old, torch.tensor([1.0]), torch.tensor([[1, 1, 0, 0]]), 0.2, 0.2, "sequence")
    assert upper.tolist() == [[True] * 4] and not lower.any()


def test_entropy_flow_sums_by_hand():
    dh = torch.tensor([[0.3, -0.2, 0.1], [-0.4, 0.5, 9.0]])
    mask = torch.tensor([[1, 1, 1], [1, 1, 0]])
    adv = torch.tensor([1.0, -1.0])
    upper = torch.tensor([[True, False, False], [False, False, False]])
    lower = torch.tensor([[False, False, False], [False, True, False]])
    got = dict(zip(METRIC_NAMES, entropy_flow_sums(dh, mask, adv, upper, lower).tolist()))
    expected = {
        "entropy_flow/increase": 0.9,
        "entropy_flow/decrease": -0.6,
        "entropy_flow/increase/adv_pos": 0.4,
        "entropy_flow/increase/adv_neg": 0.5,
        "entropy_flow/increase/upper_clipped": 0.3,
        "entropy_flow/increase/lower_clipped": 0.5,
        "entropy_flow/increase/unclipped": 0.1,
        "entropy_flow/decrease/adv_pos": -0.2,
        "entropy_flow/decrease/adv_neg": -0.4,
        "entropy_flow/decrease/upper_clipped": 0.0,
        "entropy_flow/decrease/lower_clipped": 0.0,
        "entropy_flow/decrease/unclipped": -0.6,
    }
    assert got == pytest.approx(expected)


class FlowTrainer(EntropyGRPOTrainer):
    """Records the loss forward's batch; the diagnostics themselves are the base trainer's (config switch)."""

    seen = None

    def shape_advantages(self, advantages, batch):
        type(self).seen = batch
        return None


def FlowConfig(**kwargs):  # noqa: N802 - reads like the config class it builds
    kwargs.setdefault("entropy_flow_diagnostics", True)
    return EntropyGRPOConfig(**kwargs)


def test_off_policy_grpo_breakdown_matches_hand_and_costs_no_forward(tmp_path):
    """num_iterations=2 with perturbed old log-probs: tokens of every clipping status, checked against a hand split."""
    trainer = build_trainer(FlowTrainer, FlowConfig, tmp_path, num_iterations=2, epsilon=0.2, epsilon_high=0.28)
    set_seed(1)
    inputs = next_inputs(trainer)
    gen = torch.Generator().manual_seed(0)
    inputs["old_per_token_logps"] = inputs["old_per_token_logps"] + 0.5 * torch.randn(
        inputs["old_per_token_logps"].shape, generator=gen
    )
    calls = []
    handle = trainer.model.register_forward_hook(lambda *a: calls.append(1))
    loss_and_grads(trainer, inputs)
    handle.remove()
    assert len(calls) == 1  # the diagnostics reuse the loss forward

    batch = FlowTrainer.seen
    lr = trainer.args.learning_rate
    dh = token_entropy_change(batch.per_token_logps, batch.entropies, inputs["advantages"], lr=lr).double()
    ratio = torch.exp(batch.per_token_logps.detach() - inputs["old_per_token_logps"])
    adv = inputs["advantages"].unsqueeze(1).expand_as(dh)
    mask = inputs["completion_mask"].bool()
    upper, lower = (ratio > 1.28) & (adv > 0) & mask, (ratio < 0.8) & (adv < 0) & mask
    assert upper.any() and lower.any()
    metrics = {k: v[0] for k, v in trainer._metrics["train"].items() if k.startswith("entropy_flow/")}
    for direction, sign in [("increase", dh > 0), ("decrease", dh < 0)]:
        sel = sign & mask
        assert metrics[f"entropy_flow/{direction}"] == pytest.approx(dh[sel].sum().item(), rel=1e-5, abs=1e-12)
        for group, gmask in [
            ("adv_pos", adv > 0),
            ("adv_neg", adv < 0),
            ("upper_clipped", upper),
            ("lower_clipped", lower),
            ("unclipped", ~(upper | lower)),
        ]:
            want = dh[sel & gmask].sum().item()
            assert metrics[f"entropy_flow/{direction}/{group}"] == pytest.approx(want, rel=1e-5, abs=1e-12), group
    assert metrics["entropy_flow/net"] == pytest.approx(dh[mask].sum().item(), rel=1e-5, abs=1e-12)


def test_accumulates_over_micro_batches_and_logs_once_per_step(tmp_path):
    trainer = build_trainer(
        FlowTrainer, FlowConfig, tmp_path, gradient_accumulation_steps=2, per_device_train_batch_size=8
    )
    set_seed(1)
    inputs = next_inputs(trainer)
    totals = 0.0
    for last in (False, True):
        trainer.accelerator.gradient_state._set_sync_gradients(last)
        loss_and_grads(trainer, inputs)
        batch = FlowTrainer.seen
        dh = token_entropy_change(
            batch.per_token_logps, batch.entropies, inputs["advantages"], lr=trainer.args.learning_rate
        )
        totals += dh[inputs["completion_mask"].bool()].sum().item()
    trainer.accelerator.gradient_state._set_sync_gradients(True)
    assert trainer._metrics["train"]["entropy_flow/net"] == [pytest.approx(totals, rel=1e-5)]


def test_off_means_nothing(tmp_path, monkeypatch):
    called = []
    monkeypatch.setattr(EntropyFlowDiagnostics, "update", lambda *a: called.append(1))
    trainer = build_trainer(FlowTrainer, FlowConfig, tmp_path, entropy_flow_diagnostics=False)
    inputs = next_inputs(trainer)
    loss_and_grads(trainer, inputs)
    assert not called and not any(k.startswith("entropy_flow/") for k in trainer._metrics["train"])


def test_opefo_on_policy_everything_unclipped(tmp_path):
    trainer = build_trainer(
        OPEFOTrainer, OPEFOConfig, tmp_path, entropy_flow_diagnostics=True, entropy_flow_estimator="exact"
    )
    loss_and_grads(trainer, next_inputs(trainer))
    m = {k: v[0] for k, v in trainer._metrics["train"].items()}
    for direction in ("increase", "decrease"):
        assert m[f"entropy_flow/{direction}/upper_clipped"] == 0 and m[f"entropy_flow/{direction}/lower_clipped"] == 0
        assert m[f"entropy_flow/{direction}/unclipped"] == pytest.approx(m[f"entropy_flow/{direction}"])


def test_exact_estimator_gets_power_sums_from_the_loss_forward(tmp_path):
    """The base trainer asks the kernel for the power sums when the diagnostics' estimator is 'exact'."""
    trainer = build_trainer(FlowTrainer, FlowConfig, tmp_path, entropy_flow_estimator="exact")
    inputs = next_inputs(trainer)
    loss_and_grads(trainer, inputs)
    batch = FlowTrainer.seen
    assert batch.sum_p2 is not None
    dh = token_entropy_change(
        batch.per_token_logps,
        batch.entropies,
        inputs["advantages"],
        estimator="exact",
        sum_p2=batch.sum_p2,
        sum_p2_logp=batch.sum_p2_logp,
        lr=trainer.args.learning_rate,
    ).double()
    mask = inputs["completion_mask"].bool()
    net = trainer._metrics["train"]["entropy_flow/net"][0]
    assert net == pytest.approx(dh[mask].sum().item(), rel=1e-5, abs=1e-12)
    with pytest.raises(ValueError, match="entropy_flow_estimator"):
        EntropyFlowDiagnostics("magic")
