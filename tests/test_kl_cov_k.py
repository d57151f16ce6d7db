"""KL-Cov's token count (Cui et al. 2025): k = max(1, int(r * N)) as the reference code (PRIME-RL, verl) by default,
the literal floor int(r * N) with `kl_cov_k_rounding: floor`; the selected tokens are the top-k by covariance."""

from __future__ import annotations

import warnings

import pytest
import torch

from healtrl import GRPOBaselineConfig, GRPOBaselineTrainer
from healtrl.functional import kl_cov_count, kl_cov_select
from tests.helpers import build_trainer, loss_and_grads, next_inputs


@pytest.mark.parametrize(
    "num_valid, ratio, at_least_one, floor",
    [
        (250, 0.002, 1, 0),  # a small batch: the paper's 7B ratio selects 1 token with the reference count, 0 floored
        (499, 0.002, 1, 0),
        (500, 0.002, 1, 1),
        (1999, 0.002, 3, 3),
        (100_000, 0.0002, 20, 20),
        (0, 0.002, 0, 0),  # no valid token: nothing to select either way
        (5, 1.0, 5, 5),
    ],
)
def test_count_rule(num_valid, ratio, at_least_one, floor):
    assert kl_cov_count(num_valid, ratio) == at_least_one
    assert kl_cov_count(num_valid, ratio, "at_least_one") == at_least_one
    assert kl_cov_count(num_valid, ratio, "floor") == floor


def test_count_rejects_unknown_rounding():
    with pytest.raises(ValueError, match="rounding must be one of at_least_one, floor"):
        kl_cov_count(10, 0.1, "ceil")


def test_small_batch_selects_the_top_covariance_token_by_default_and_none_floored():
    cov = torch.tensor([[0.3, -1.0, 2.5, 9.0], [1.2, 2.6, -0.4, 0.0]])
    mask = torch.tensor([[1, 1, 1, 0], [1, 1, 1, 1]])  # 9.0 is padding: never selected
    # N = 7 valid tokens, r = 0.1: int(0.7) = 0.
    assert kl_cov_select(cov, mask, 0.1).nonzero().tolist() == [[1, 1]]  # 2.6, the largest valid covariance
    assert kl_cov_select(cov, mask, 0.1, rounding="floor").sum() == 0
    # r = 0.5: k = int(3.5) = 3 either way: 2.6, 2.5, 1.2.
    for rounding in ("at_least_one", "floor"):
        assert kl_cov_select(cov, mask, 0.5, rounding=rounding).nonzero().tolist() == [[0, 2], [1, 0], [1, 1]]


def test_selection_is_the_top_k_on_a_random_batch():
    gen = torch.Generator().manual_seed(0)
    cov = torch.randn(6, 50, generator=gen)
    mask = (torch.rand(6, 50, generator=gen) < 0.7).long()
    n = int(mask.sum())
    for ratio in (1e-3, 0.05, 0.2):
        k = max(1, int(ratio * n))
        selected = kl_cov_select(cov, mask, ratio)
        assert int(selected.sum()) == k and bool((selected <= mask.bool()).all())
        threshold = cov[selected].min()
        assert bool((cov[mask.bool() & ~selected] <= threshold).all())  # nothing left out beats a selected token


def test_ties_are_broken_by_position():
    cov = torch.tensor([[1.0, 3.0, 3.0], [3.0, 0.0, 3.0]])
    mask = torch.ones_like(cov)
    assert kl_cov_select(cov, mask, 0.4).nonzero().tolist() == [[0, 1], [0, 2]]  # k = int(2.4) = 2


@pytest.mark.parametrize("rounding, expected", [("at_least_one", 1), ("floor", 0)])
def test_trainer_counts_per_micro_batch(tmp_path, rounding, expected):
    """The toy micro-batch has at most 16 x 4 = 64 tokens: r = 1e-3 selects max(1, 0) = 1 token, or 0 floored."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer = build_trainer(
            GRPOBaselineTrainer,
            GRPOBaselineConfig,
            tmp_path,
            entropy_method="kl_cov",
            kl_cov_ratio=1e-3,
            kl_cov_k_rounding=rounding,
            num_iterations=2,
        )
    torch.manual_seed(1)
    inputs = next_inputs(trainer)
    assert 0 < int(inputs["completion_mask"].sum()) < 1000
    loss_and_grads(trainer, inputs)
    assert trainer._metrics["train"]["cov/selected_tokens"] == [expected]


def test_config_rejects_unknown_rounding(tmp_path):
    with pytest.raises(ValueError, match="kl_cov_k_rounding must be one of at_least_one, floor"):
        GRPOBaselineConfig(output_dir=str(tmp_path), use_cpu=True, kl_cov_k_rounding="round")
    assert GRPOBaselineConfig(output_dir=str(tmp_path), use_cpu=True).kl_cov_k_rounding == "at_least_one"
