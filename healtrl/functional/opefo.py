"""OPEFO's entropy-flow balancing (On-Policy Entropy Flow Optimization, OPEFO (arXiv:2605.11491) §5.1-5.3, Figure 3).

Given the predicted entropy change Delta H_t of every token of an update batch (`token_entropy_change`), OPEFO splits
the tokens by sign into S+ = {Delta H_t > 0} (entropy-increasing) and S- = {Delta H_t < 0} (entropy-decreasing) (§5.1),
weights the policy-gradient term of S+ tokens by (1 + lambda) and of S- tokens by (1 - lambda) (eq. 7), and chooses
lambda so that the reweighted entropy flow is zero (eq. 8), which gives the closed form of eq. 9:

    lambda* = (sum_{S-} |Delta H_t| - sum_{S+} Delta H_t) / (sum_{S-} |Delta H_t| + sum_{S+} Delta H_t).

|lambda*| <= 1 always; lambda* = 1 when S+ is empty (all S- tokens get weight 0) and -1 when S- is empty. The
denominator is clamped at `eps` as in the paper's Figure 3, so an empty or all-zero batch gives lambda* = 0.

The statistics are sums, so a distributed trainer reduces `opefo_flow_sums` across processes and calls
`opefo_lambda_from_sums`; `opefo_lambda` is the single-process composition of the two.
"""

from __future__ import annotations

import torch

SIDES = ("both", "pos", "neg")


def _as_bool(mask: torch.Tensor, like: torch.Tensor) -> torch.Tensor:
    return mask.to(torch.bool).expand_as(like) if mask.dim() else mask.to(torch.bool)


def opefo_flow_sums(delta_h: torch.Tensor, mask: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sum of Delta H over S+ and sum of |Delta H| over S- of the tokens in `mask` (OPEFO §5.1).

    Args:
        delta_h: Predicted entropy change per token, e.g. (B, T).
        mask: 1 (or True) on tokens of the update batch, same shape as `delta_h`.

    Returns:
        (pos, neg_abs): two 0-dim tensors (float32 at least), both >= 0.
    """
    delta_h = delta_h.detach().to(torch.promote_types(delta_h.dtype, torch.float32))
    mask = _as_bool(mask, delta_h)
    pos = torch.where(mask & (delta_h > 0), delta_h, torch.zeros_like(delta_h)).sum()
    neg_abs = torch.where(mask & (delta_h < 0), -delta_h, torch.zeros_like(delta_h)).sum()
    return pos, neg_abs


def opefo_lambda_from_sums(pos: torch.Tensor, neg_abs: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """OPEFO eq. 9 from the two flow sums: (neg_abs - pos) / max(neg_abs + pos, eps)."""
    pos, neg_abs = torch.as_tensor(pos), torch.as_tensor(neg_abs)
    return (neg_abs - pos) / (neg_abs + pos).clamp_min(eps)  # OPEFO eq. 9, denominator guarded as in Figure 3


def opefo_lambda(delta_h: torch.Tensor, mask: torch.Tensor, eps: float = 1e-12) -> torch.Tensor:
    """The balancing coefficient lambda* of OPEFO eq. 9 over the tokens in `mask`.

    Args:
        delta_h: Predicted entropy change per token (OPEFO eq. 6, or another estimator), e.g. (B, T).
        mask: 1 (or True) on the tokens of the update batch.
        eps: Lower bound of the denominator (paper's Figure 3: 1e-12); an all-zero batch gives 0.

    Returns:
        0-dim tensor in [-1, 1].
    """
    return opefo_lambda_from_sums(*opefo_flow_sums(delta_h, mask), eps=eps)


def opefo_token_weights(
    delta_h: torch.Tensor, mask: torch.Tensor, lam: float | torch.Tensor, sides: str = "both"
) -> torch.Tensor:
    """Per-token gradient weights of OPEFO eq. 7: (1 + lam) on S+, (1 - lam) on S-, 1 elsewhere.

    Args:
        delta_h: Predicted entropy change per token.
        mask: Tokens of the update batch; tokens outside it (padding) and tokens with Delta H = 0 get weight 1.
        lam: The balancing coefficient (lambda* of eq. 9, or a static value).
        sides: "both" (OPEFO), "pos" (rescale S+ only) or "neg" (rescale S- only): the one-sided ablations of
            OPEFO Table 2.

    Returns:
        Weights with the shape of `delta_h`, float32 at least, no gradient.
    """
    if sides not in SIDES:
        raise ValueError(f"sides must be one of {SIDES}, got {sides!r}.")
    delta_h = delta_h.detach().to(torch.promote_types(delta_h.dtype, torch.float32))
    lam = torch.as_tensor(lam, dtype=delta_h.dtype, device=delta_h.device).detach()
    mask = _as_bool(mask, delta_h)
    weights = torch.ones_like(delta_h)
    if sides in ("both", "pos"):
        weights = torch.where(mask & (delta_h > 0), 1.0 + lam, weights)  # OPEFO eq. 7, S+ term
    if sides in ("both", "neg"):
        weights = torch.where(mask & (delta_h < 0), 1.0 - lam, weights)  # OPEFO eq. 7, S- term
    return weights
