"""Covariance-based entropy baselines (Cui et al. 2025, "The Entropy Mechanism of RL for Reasoning LMs", §4; their
code github.com/PRIME-RL/Entropy-Mechanism-of-RL) and Entropy-Adv (Cheng et al. 2025, "Reasoning with Exploration:
An Entropy Perspective", eq. for the entropy-based advantage). Formulas from the papers: Cui et al. arXiv:2505.22617
§4; Cheng et al. arXiv:2506.14758.
"""

from __future__ import annotations

import torch


def token_covariance(
    logp: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    means: tuple[float, float] | None = None,
) -> torch.Tensor:
    """Per-token centred product of Clip-Cov / KL-Cov (Cui et al. 2025, eq. of Cov(log pi, A) per token):

        cov_t = (A_t - mean A) * (logp_t - mean logp)

    with both means over the valid tokens (mask = 1) only. No gradient. Invalid tokens get 0.

    Args:
        logp: (B, T) log-probs of the sampled tokens.
        advantages: (B, T) per-token advantages, or (B,) broadcast over T.
        mask: (B, T) 1 on valid tokens.
        means: (mean A, mean logp) to centre with, e.g. means over the valid tokens of every process; by default the
            means over the valid tokens of `mask`.
    """
    logp = logp.detach().float()
    adv = advantages.detach().float()
    if adv.dim() == 1:
        adv = adv.unsqueeze(1).expand_as(logp)
    m = mask.to(logp.dtype)
    if means is None:
        n = m.sum().clamp(min=1.0)
        mean_a, mean_lp = (adv * m).sum() / n, (logp * m).sum() / n
    else:
        mean_a, mean_lp = means
    return (adv - mean_a) * (logp - mean_lp) * m


def clip_cov_select(
    cov: torch.Tensor,
    mask: torch.Tensor,
    ratio: float = 2e-4,
    lower: float = 1.0,
    upper: float = 5.0,
    exclude: torch.Tensor | None = None,
    generator: torch.Generator | None = None,
) -> torch.Tensor:
    """Clip-Cov token selection (Cui et al. 2025, Clip-Cov; methods.md): among valid tokens with lower < cov < upper
    that are not already clipped (`exclude`), sample uniformly k = max(1, int(ratio * N)) tokens, N = valid tokens
    (the reference code's count, verl's `clip_num = max(int(ratio * N), 1)`; fewer when there are fewer candidates).

    Returns a (B, T) bool tensor, True on the tokens whose loss is zeroed.
    """
    valid = mask.bool()
    cand = valid & (cov > lower) & (cov < upper)
    if exclude is not None:
        cand = cand & ~exclude.bool()
    idx = cand.flatten().nonzero().squeeze(1)
    selected = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
    n_valid = int(valid.sum())
    if idx.numel() == 0 or n_valid == 0:
        return selected.view_as(mask)
    k = min(max(1, int(ratio * n_valid)), idx.numel())
    perm = torch.randperm(idx.numel(), generator=generator, device="cpu")[:k].to(idx.device)
    selected[idx[perm]] = True
    return selected.view_as(mask)


KL_COV_K_ROUNDINGS = ("at_least_one", "floor")


def kl_cov_count(num_valid: int, ratio: float, rounding: str = "at_least_one") -> int:
    """How many tokens KL-Cov penalises among `num_valid` valid tokens (Cui et al. 2025, KL-Cov; methods.md).

    - `at_least_one` (the reference code: PRIME-RL's Entropy-Mechanism-of-RL and verl's `kl_cov` policy loss):
      k = max(1, int(ratio * N)) whenever N > 0, so a small batch still gets one penalised token.
    - `floor`: k = int(ratio * N), the paper's "top ratio of tokens" taken literally: 0 when ratio * N < 1.

    k = 0 when N = 0.
    """
    if rounding not in KL_COV_K_ROUNDINGS:
        raise ValueError(f"rounding must be one of {', '.join(KL_COV_K_ROUNDINGS)}, got {rounding!r}.")
    if num_valid <= 0:
        return 0
    k = int(ratio * num_valid)
    return max(1, k) if rounding == "at_least_one" else k


def kl_cov_select(
    cov: torch.Tensor, mask: torch.Tensor, ratio: float = 2e-3, rounding: str = "at_least_one"
) -> torch.Tensor:
    """KL-Cov token selection (Cui et al. 2025, KL-Cov; methods.md): the top-k valid tokens by cov, k from
    `kl_cov_count` (N = valid tokens of `mask`): k = max(1, int(ratio * N)) by default, as the reference code, or
    int(ratio * N) with `rounding="floor"` (0 on small batches). Ties are broken by position (the first in row-major
    order wins), so the selection is deterministic.

    Returns a (B, T) bool tensor, True on the tokens that get the penalty beta * |logp - logp_old|.
    """
    valid = mask.bool()
    k = kl_cov_count(int(valid.sum()), ratio, rounding)
    selected = torch.zeros(mask.numel(), dtype=torch.bool, device=mask.device)
    if k <= 0:
        return selected.view_as(mask)
    flat = cov.flatten().masked_fill(~valid.flatten(), float("-inf"))
    order = torch.sort(flat, descending=True, stable=True).indices  # stable: equal covariances keep their order
    selected[order[:k]] = True
    return selected.view_as(mask)


def entropy_advantage(
    advantages: torch.Tensor, entropy: torch.Tensor, alpha: float = 0.4, kappa: float = 2.0
) -> torch.Tensor:
    """Entropy-based advantage of Entropy-Adv (Cheng et al. 2025, eq. of psi(H_t); methods.md):

        A'_t = A_t + min(alpha * H_t.detach(), |A_t| / kappa)

    The bonus is clipped by |A_t| / kappa so that it never flips the sign of a negative advantage.

    Args:
        advantages: (B, T) or (B,) advantages (broadcast over T).
        entropy: (B, T) per-token entropies (detached here).
        alpha: Scale of the entropy bonus (paper: 0.4).
        kappa: Clipping ratio (paper: 2).
    """
    ent = entropy.detach()
    adv = advantages.unsqueeze(1).expand_as(ent) if advantages.dim() == 1 else advantages
    return adv + torch.minimum(alpha * ent, adv.abs() / kappa)
