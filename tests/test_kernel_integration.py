"""The trainers' forward passes go through healtrl's kernel, which hands the power sums to the levers."""

from __future__ import annotations

import pytest
import torch
import trl.trainer.utils as trl_utils
from transformers import set_seed

import healtrl.trainers._trl.lm_head as boundary
import healtrl.trainers._trl.lm_head as bridge
from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer
from healtrl.trainers._trl import healtrl_lm_head
from healtrl.trainers._trl.lm_head import HealtrlLogProbFunction
from tests.helpers import build_trainer, loss_and_grads, next_inputs, reference_stats


class PowerSumProbe(EntropyGRPOTrainer):
    seen = None

    @property
    def needs_power_sums(self):
        return True

    def shape_advantages(self, advantages, batch):
        type(self).seen = batch
        return None


@pytest.mark.parametrize("compact", [False, True])
def test_loss_forward_uses_kernel_and_hands_over_power_sums(tmp_path, monkeypatch, compact):
    """compact=True takes TRL's Triton-device layout (only valid positions scored), here on the CPU."""
    if compact:
        monkeypatch.setattr(trl_utils, "_use_triton", lambda device: True)
        monkeypatch.setattr(boundary, "_use_triton", lambda device: True)
    calls = []
    real = bridge.fused_logprob_entropy
    monkeypatch.setattr(bridge, "fused_logprob_entropy", lambda *a, **k: calls.append(k) or real(*a, **k))

    trainer = build_trainer(PowerSumProbe, EntropyGRPOConfig, tmp_path, per_device_train_batch_size=16)
    set_seed(1)
    inputs = next_inputs(trainer)
    calls.clear()
    loss_and_grads(trainer, inputs)
    assert calls and all(k["power_sums"] for k in calls)

    batch = PowerSumProbe.seen
    mask = inputs["completion_mask"].bool()
    logp, entropy, sum_p2, sum_p2_logp = reference_stats(trainer, inputs)
    for got, want in [
        (batch.per_token_logps, logp),
        (batch.entropies, entropy),
        (batch.sum_p2, sum_p2),
        (batch.sum_p2_logp, sum_p2_logp),
    ]:
        assert got.shape == mask.shape
        torch.testing.assert_close(got.detach().double()[mask], want[mask], rtol=1e-5, atol=1e-5)
    assert batch.sum_p2[~mask].abs().sum() == 0
    assert not batch.sum_p2.requires_grad


def test_trl_kernel_has_no_power_sums(tmp_path):
    trainer = build_trainer(PowerSumProbe, EntropyGRPOConfig, tmp_path, logprob_kernel="trl")
    set_seed(1)
    inputs = next_inputs(trainer)
    with pytest.raises(ValueError, match="logprob_kernel: healtrl"):
        loss_and_grads(trainer, inputs)


def test_generation_passes_use_kernel(tmp_path, monkeypatch):
    calls = []
    real = bridge.fused_logprob_entropy
    monkeypatch.setattr(bridge, "fused_logprob_entropy", lambda *a, **k: calls.append(1) or real(*a, **k))
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path, num_iterations=2, beta=0.04)
    set_seed(1)
    next_inputs(trainer)  # old log-probs and reference log-probs are computed here
    assert len(calls) >= 2


def test_unservable_heads_fall_back_to_trl():
    """Soft-capping, a logit scale or TRL's extra outputs: TRL's own function computes, unless power sums are needed."""
    torch.manual_seed(0)
    hidden, weight = torch.randn(5, 8), torch.randn(11, 8)
    labels = torch.randint(0, 11, (5,))
    original = trl_utils._ChunkedLogProbFunction
    args = (hidden, weight, None, labels, 0.7, 4096)
    outputs = ("log_probs", "entropy")
    for softcap, scale, outs in [(30.0, 1.0, outputs), (None, 0.5, outputs), (None, 1.0, (*outputs, "is_top1"))]:
        function = HealtrlLogProbFunction(original=original)
        got = function.apply(*args, softcap, scale, outs)
        want = original.apply(*args, softcap, scale, outs)
        assert function.fallbacks == 1 and function.calls == 0
        torch.testing.assert_close(got[0], want[0])
        with pytest.raises(NotImplementedError, match="power sums"):
            HealtrlLogProbFunction(original=original, power_sums=True).apply(*args, softcap, scale, outs)
    # Served: same numbers as TRL's function, and log sum p^2 when asked for.
    function = HealtrlLogProbFunction(original=original)
    outs = ("log_probs", "entropy", "log_sum_sq_probs")
    got, want = function.apply(*args, None, 1.0, outs), original.apply(*args, None, 1.0, outs)
    assert function.calls == 1
    for a, b in zip(got[:3], want[:3]):
        torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-6)


def test_context_restores_trl_function():
    original = trl_utils._ChunkedLogProbFunction
    with healtrl_lm_head() as function:
        assert trl_utils._ChunkedLogProbFunction is function
        with healtrl_lm_head() as inner:
            assert inner is function
    assert trl_utils._ChunkedLogProbFunction is original
    with pytest.raises(RuntimeError), healtrl_lm_head():
        raise RuntimeError
    assert trl_utils._ChunkedLogProbFunction is original


def test_mixed_precision_head_matches_trl_function():
    """Under autocast the backbone hands bf16 hidden states to an fp32 head: the bridge computes in the autocast dtype,
    like the autocast projection, and agrees with TRL's function to bf16 precision (values and gradients)."""
    torch.manual_seed(0)
    hidden = torch.randn(37, 64).bfloat16().requires_grad_()
    weight = (torch.randn(301, 64) * 0.3).requires_grad_()
    labels = torch.randint(0, 301, (37,))
    original = trl_utils._ChunkedLogProbFunction
    results = []
    for function in (HealtrlLogProbFunction(original=original), original):
        with torch.autocast("cpu", dtype=torch.bfloat16):
            logp, entropy, *_ = function.apply(
                hidden, weight, None, labels, 0.8, 4096, None, 1.0, ("log_probs", "entropy")
            )
        grads = torch.autograd.grad((logp.float().sum() + entropy.float().sum()), (hidden, weight))
        results.append([logp.float(), entropy.float(), *(g.float() for g in grads)])
    for ours, theirs in zip(*results):
        assert ours.dtype == theirs.dtype and ours.shape == theirs.shape
        torch.testing.assert_close(ours, theirs, rtol=2e-2, atol=2e-2 * theirs.abs().max().item())
