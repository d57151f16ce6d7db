"""Adaptive Entropy Regularization (AER), aer.txt §4.2: the two controller formulas as pure functions.

- `aer_coefficients`: C1, the difficulty-aware per-prompt entropy coefficient (aer.txt eq. 9) from the group accuracy
  g(q) (eq. 8).
- `aer_update_alpha`: C3, the sign update of the global scale alpha towards the target entropy H* = tau * H0
  (eq. 11; H* is eq. 10).
"""

from __future__ import annotations

import math

import torch


def aer_coefficients(group_accuracy: torch.Tensor, alpha: float, rho: float, eps: float = 1e-8) -> torch.Tensor:
    """Per-prompt entropy coefficients lambda_t(q) of AER (aer.txt §4.2, C1, eq. 9).

        lambda_t(q) = alpha_t * max(0, rho - g(q)) / (rho + eps) + alpha_t * 1[rho = 0 and g(q) = 0]

    Args:
        group_accuracy: g(q) in [0, 1], one value per prompt (eq. 8: the share of the prompt's m responses that are
            correct), any shape.
        alpha: The global scale alpha_t >= 0 (updated by `aer_update_alpha`).
        rho: The pivot accuracy in [0, 1]; prompts with g(q) < rho get a positive coefficient.
        eps: The small constant of eq. 9 (paper: 1e-8).

    Returns:
        A tensor shaped like `group_accuracy`: lambda_t(q) per prompt (float32 or the input's float dtype).
    """
    g = group_accuracy if group_accuracy.is_floating_point() else group_accuracy.float()
    # eq. 9, first term: linear in the accuracy gap below the pivot, alpha at g = 0.
    coef = alpha * torch.clamp(rho - g, min=0.0) / (rho + eps)
    if rho == 0:
        # eq. 9, second term: with rho = 0 only the prompts no response solves get alpha.
        coef = coef + alpha * (g == 0).to(g.dtype)
    return coef


def aer_update_alpha(alpha: float, eta: float, target_entropy: float, entropy: float) -> float:
    """One step of AER's global-scale controller (aer.txt §4.2, C3, eq. 11).

        alpha_{t+1} = max(0, alpha_t + eta * sign(H* - H_t))

    `sign(0) = 0`: alpha is unchanged when the entropy sits exactly on the target.

    Args:
        alpha: alpha_t.
        eta: Step size eta > 0 (paper: 0.005).
        target_entropy: H* = tau * H0 (eq. 10).
        entropy: H_t, the policy entropy measured at step t.
    """
    diff = float(target_entropy) - float(entropy)
    sign = 0.0 if diff == 0 or math.isnan(diff) else math.copysign(1.0, diff)
    return max(0.0, float(alpha) + float(eta) * sign)
