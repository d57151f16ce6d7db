"""Positive-Advantage Reweighting (arXiv:2511.05993, §7.3, Appendix E.2): token weights and the schedules of lambda.

The formulas follow the published paper (Jin et al., "Revisiting Entropy in Reinforcement Learning for Large Reasoning
Models", arXiv:2511.05993): the per-token weight and the stage, epoch-wise and entropy-guided schedules of §7.3 (eq. 5,
with the paper's delta = 0.2, Delta = 0.05, lambda_0 = 0) and the Rand-Pos-Clip baseline of Appendix E.2. The authors'
verl code is github.com/cordercorder/EntropyRL. The comments below cite these sections.
"""

from __future__ import annotations

import torch


def posadv_token_weights(
    advantages: torch.Tensor, positive_weight: float, negative_weight: float = 1.0
) -> torch.Tensor:
    """Per-token loss weights of Pos-Adv-Reweight (arXiv:2511.05993, §7.3): lambda on A > 0 tokens, `negative_weight` on
    A <= 0 tokens (1 in the method; 0 for the paper's "A > 0 tokens only" ablation, Appendix E.2 / Figure 5).

    Tokens with A = 0 carry no gradient, so their weight is irrelevant; they get `negative_weight`.
    """
    pos = advantages > 0
    return torch.where(pos, positive_weight, negative_weight).to(
        advantages.dtype if advantages.is_floating_point() else torch.float32
    )


def stage_lambda(step: int, total_steps: int) -> float:
    """Stage-based lambda (PosAdv §7.3): 0 during the first half of training, then linear from 0 to 1.

    With step s in [0, T-1] (0-based optimizer step) and progress p = s / (T - 1): lambda = clip(2p - 1, 0, 1), which
    is 0 for s <= (T - 1) / 2 and reaches exactly 1 at the last step.
    """
    if total_steps < 2:
        raise ValueError(f"The stage schedule needs at least 2 training steps, got total_steps={total_steps}.")
    p = min(max(step, 0), total_steps - 1) / (total_steps - 1)
    return min(1.0, max(0.0, 2.0 * p - 1.0))


def epoch_lambda(epoch: int, num_epochs: int) -> float:
    """Epoch-wise lambda (PosAdv §7.3): lambda = (e - 1) / (E - 1) for epoch e = 1..E of E >= 2."""
    if num_epochs < 2:
        raise ValueError(f"The epoch schedule needs num_epochs >= 2 (lambda = (e - 1) / (E - 1)), got {num_epochs}.")
    e = min(max(int(epoch), 1), num_epochs)
    return (e - 1) / (num_epochs - 1)


def entropy_guided_lambda(lam: float, entropy: float, threshold: float = 0.2, step_size: float = 0.05) -> float:
    """Entropy-guided lambda update (PosAdv §7.3, eq. 5):

        lambda_{k+1} = clip(lambda_k + Delta, 0, 1) if H_k > delta else clip(lambda_k - Delta, 0, 1)

    Paper values: delta = 0.2 (`threshold`), Delta = 0.05 (`step_size`), lambda_0 = 0. More weight on A > 0 tokens
    lowers the entropy, less weight raises it.
    """
    new = lam + step_size if entropy > threshold else lam - step_size
    return min(1.0, max(0.0, new))


def rand_pos_clip_mask(
    advantages: torch.Tensor, mask: torch.Tensor, ratio: float, generator: torch.Generator | None = None
) -> torch.Tensor:
    """Rand-Pos-Clip (PosAdv Appendix E.2): a random subset of the positive-advantage tokens to zero.

    Selects k = max(1, int(ratio * N)) tokens (N = valid tokens, the same count rule as Clip-Cov, so that both zero
    the same share of tokens) uniformly among the valid tokens with A > 0 (fewer if there are fewer candidates).

    Args:
        advantages: (B, T) per-token advantages (or (B,), broadcast over T).
        mask: (B, T) 1 on tokens that enter the loss.
        ratio: Share of the valid tokens to zero.
        generator: Random generator (for reproducibility).

    Returns:
        A (B, T) bool tensor, True on the selected tokens.
    """
    adv = advantages.unsqueeze(1).expand_as(mask) if advantages.dim() == 1 else advantages
    valid = mask.bool()
    candidates = (valid & (adv > 0)).flatten().nonzero().squeeze(1)
    selected = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
    n_valid = int(valid.sum())
    if n_valid == 0 or candidates.numel() == 0 or ratio <= 0:
        return selected.view_as(mask)
    k = min(max(1, int(ratio * n_valid)), candidates.numel())
    perm = torch.randperm(candidates.numel(), generator=generator, device="cpu")[:k].to(candidates.device)
    selected[candidates[perm]] = True
    return selected.view_as(mask)
