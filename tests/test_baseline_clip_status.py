"""Clip-Cov's "already clipped" exclusion is TRL's clipping rule (`clip_status`), at token and at sequence level.

Before, `baselines.py` computed a per-token ratio itself, so with `importance_sampling_level="sequence"` it excluded
tokens TRL does not clip and kept tokens TRL does. The token-level decision must stay bit for bit what it was.
"""

from __future__ import annotations

import math

import pytest
import torch

import healtrl.trainers.baselines as baselines
from healtrl import GRPOBaselineConfig, GRPOBaselineTrainer
from healtrl.trainers._trl import clip_status
from tests.helpers import build_trainer, loss_and_grads, next_inputs

DTYPES = (torch.float32, torch.float64, torch.bfloat16, torch.float16)


def old_baseline_exclusion(per_token_logps, old_per_token_logps, advantages, mask, epsilon_low, epsilon_high):
    """The exclusion `GRPOBaselineTrainer.shape_advantages` computed before it called `clip_status` (verbatim)."""
    adv = advantages.unsqueeze(1).expand_as(mask).to(per_token_logps.dtype)
    ratio = torch.exp(per_token_logps.detach() - old_per_token_logps)
    return ((adv > 0) & (ratio > 1 + epsilon_high)) | ((adv < 0) & (ratio < 1 - epsilon_low))


def trl_clipped(per_token_logps, old_per_token_logps, advantages, mask, epsilon_low, epsilon_high, level):
    """(high, low) clipped masks, (B, T), written out from TRL 1.16's `GRPOTrainer._compute_loss` line by line."""
    advantages = advantages.unsqueeze(1) if advantages.dim() == 1 else advantages
    log_ratio = per_token_logps - old_per_token_logps
    if level == "token":
        log_importance_weights = log_ratio
    else:
        log_importance_weights = (log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)
        log_importance_weights = log_importance_weights.unsqueeze(-1)
    coef_1 = torch.exp(log_importance_weights)
    is_low_clipped = (coef_1 < 1 - epsilon_low) & (advantages < 0)
    is_high_clipped = (coef_1 > 1 + epsilon_high) & (advantages > 0)
    return is_high_clipped.expand_as(mask), is_low_clipped.expand_as(mask)


def random_batch(seed: int, dtype: torch.dtype, batch: int = 16, length: int = 24):
    """Log-probs, old log-probs with log-ratios around the clip bounds, advantages with exact zeros, a ragged mask
    (one row fully masked)."""
    g = torch.Generator().manual_seed(seed)
    logps = (-torch.rand(batch, length, generator=g, dtype=torch.float64) * 3).to(dtype)
    old = (logps.double() - torch.randn(batch, length, generator=g, dtype=torch.float64) * 0.3).to(dtype)
    adv = torch.randn(batch, generator=g)
    adv[::5] = 0.0
    lengths = torch.randint(0, length + 1, (batch,), generator=g)
    lengths[0] = 0
    mask = (torch.arange(length) < lengths.unsqueeze(1)).long()
    return logps, old, adv, mask


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
def test_token_level_exclusion_is_bit_identical_to_before(dtype):
    for seed in range(20):
        logps, old, adv, mask = random_batch(seed, dtype)
        for eps_low, eps_high in ((0.2, 0.2), (0.2, 0.28), (1.0, 1.0), (1e4, 1e4)):
            before = old_baseline_exclusion(logps, old, adv, mask, eps_low, eps_high)
            upper, lower = clip_status(logps, old, adv, mask, eps_low, eps_high)
            assert torch.equal(upper | lower, before), (dtype, seed, eps_low, eps_high)
            assert not (upper & lower).any()
    # The random batches reach the bounds on both sides (the comparison is not between two all-False masks).
    upper, lower = clip_status(logps, old, adv, mask, 0.2, 0.2)
    assert upper.any() and lower.any()


@pytest.mark.parametrize("dtype", DTYPES, ids=str)
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_clip_status_is_trls_rule(level, dtype):
    differs = 0
    for seed in range(20):
        logps, old, adv, mask = random_batch(seed, dtype)
        upper, lower = clip_status(logps, old, adv, mask, 0.2, 0.28, level)
        high, low = trl_clipped(logps, old, adv, mask, 0.2, 0.28, level)
        assert torch.equal(upper, high) and torch.equal(lower, low), (seed, level, dtype)
        # Per-token (B, T) advantages, as TRL accepts them.
        upper2, lower2 = clip_status(logps, old, adv.unsqueeze(1).expand_as(mask), mask, 0.2, 0.28, level)
        assert torch.equal(upper2, upper) and torch.equal(lower2, lower)
        differs += int(not torch.equal(upper | lower, old_baseline_exclusion(logps, old, adv, mask, 0.2, 0.28)))
    if level == "sequence":
        assert differs == 20  # the per-token rule the baselines used before disagrees with TRL on every batch


def test_sequence_level_by_hand():
    # One sequence, A > 0, token ratios 1.5 and 0.7: TRL's sequence ratio is exp(mean log ratio) = sqrt(1.05) ~ 1.025,
    # not clipped; the old per-token rule called token 0 clipped (1.5 > 1.2) and kept it out of Clip-Cov's candidates.
    logps = torch.zeros(1, 2)
    old = -torch.log(torch.tensor([[1.5, 0.7]]))
    adv, mask = torch.tensor([1.0]), torch.ones(1, 2)
    assert old_baseline_exclusion(logps, old, adv, mask, 0.2, 0.2).tolist() == [[True, False]]
    upper, lower = clip_status(logps, old, adv, mask, 0.2, 0.2, "sequence")
    assert not upper.any() and not lower.any()
    # Ratios 1.27, 1.27, 1.5 (eps_high 0.28): per token only the last is clipped; the sequence ratio
    # (1.27 * 1.27 * 1.5) ** (1 / 3) ~ 1.342 clips all three, which TRL gives no gradient through the ratio.
    logps = torch.zeros(1, 3)
    old = -torch.log(torch.tensor([[1.27, 1.27, 1.5]]))
    assert math.isclose(math.exp(-old.mean().item()), (1.27 * 1.27 * 1.5) ** (1 / 3), rel_tol=1e-6)
    assert old_baseline_exclusion(logps, old, adv, torch.ones(1, 3), 0.2, 0.28).tolist() == [[False, False, True]]
    upper, _ = clip_status(logps, old, adv, torch.ones(1, 3), 0.2, 0.28, "sequence")
    assert upper.tolist() == [[True, True, True]]


def test_unknown_importance_sampling_level_raises():
    logps = torch.zeros(1, 2)
    with pytest.raises(ValueError, match="importance_sampling_level 'group'"):
        clip_status(logps, logps, torch.tensor([1.0]), torch.ones(1, 2), 0.2, 0.2, "group")


@pytest.mark.parametrize("level", ["token", "sequence"])
def test_clip_cov_excludes_what_trl_clips(tmp_path, monkeypatch, level):
    """In a training micro-batch, the tokens Clip-Cov keeps out of its candidates are exactly those TRL's loss clips,
    as TRL's own `clip_ratio/*` metrics of the same call count them."""
    trainer = build_trainer(
        GRPOBaselineTrainer, GRPOBaselineConfig, tmp_path, entropy_method="clip_cov", epsilon=0.2, epsilon_high=0.28,
        importance_sampling_level=level, num_iterations=2, loss_type="grpo", clip_cov_lb=1e8, clip_cov_ub=1e9,
    )  # fmt: skip
    # No token has 1e8 < cov < 1e9, so lever 1 zeroes no advantage and TRL's metrics see the advantages we do.
    inputs = next_inputs(trainer)
    g = torch.Generator().manual_seed(0)
    old = inputs["old_per_token_logps"]
    rows = old.size(0)
    # Off-policy, with log-ratios = a per-sequence offset in [-0.5, 0.5] + N(0, 0.3) per token, and nonzero
    # advantages of both signs (the toy rewards leave most groups at A = 0), so both rules clip some tokens.
    offsets = torch.linspace(-0.5, 0.5, rows).unsqueeze(1)
    inputs["old_per_token_logps"] = old - offsets - torch.randn(old.shape, generator=g) * 0.3
    inputs["advantages"] = torch.randn(rows, generator=g)
    captured = {}
    original_shape, original_select = trainer.shape_advantages, baselines.clip_cov_select

    def shape_spy(advantages, batch):
        captured["batch"] = batch
        return original_shape(advantages, batch)

    def select_spy(*args, exclude=None, **kwargs):
        captured["exclude"] = exclude
        return original_select(*args, exclude=exclude, **kwargs)

    trainer.shape_advantages = shape_spy
    monkeypatch.setattr(baselines, "clip_cov_select", select_spy)
    loss_and_grads(trainer, inputs)

    batch, exclude = captured["batch"], captured["exclude"]
    logps, mask = batch.per_token_logps.detach(), batch.mask
    high, low = trl_clipped(logps, inputs["old_per_token_logps"], inputs["advantages"], mask, 0.2, 0.28, level)
    assert torch.equal(exclude, high | low)
    assert (exclude & mask.bool()).any()  # some tokens are clipped: the check is not vacuous
    # TRL's own decision in the same `_compute_loss` call (its metrics: token-weighted means over `mask`).
    metrics = trainer._metrics["train"]
    n = mask.sum().item()
    assert metrics["clip_ratio/high_mean"][-1] == pytest.approx((high * mask).sum().item() / n, abs=1e-6)
    assert metrics["clip_ratio/low_mean"][-1] == pytest.approx((low * mask).sum().item() / n, abs=1e-6)
    before = old_baseline_exclusion(logps, inputs["old_per_token_logps"], inputs["advantages"], mask, 0.2, 0.28)
    if level == "token":
        assert torch.equal(exclude, before)
    else:
        assert not torch.equal(exclude & mask.bool(), before & mask.bool())  # the per-token rule would have diverged
