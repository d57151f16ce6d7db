"""Adaptive Entropy Regularization (AER), AER (arXiv:2510.10959) §4.2: the two controller formulas as pure functions.

- `aer_coefficients`: C1, the difficulty-aware per-prompt entropy coefficient (AER eq. 9) from the group accuracy
  g(q) (eq. 8).
- `aer_update_alpha`: C3, the sign update of the global scale alpha towards the target entropy H* = tau * H0
  (eq. 11; H* is eq. 10).
- `sequence_entropies`: eq. 4, the sequence-level entropy of each response (mean token entropy over its positions).
- `aer_entropy_term`: the regulariser E_q[lambda_t(q) H(pi_theta(. | q))] of eq. 7, normalised per sequence (the
  paper's eq. 4 then the mean over prompts) or per token (TRL's `entropy_coef` bonus).
"""

from __future__ import annotations

import math

import torch

ENTROPY_NORMALIZATIONS = ("sequence", "token")


def aer_coefficients(group_accuracy: torch.Tensor, alpha: float, rho: float, eps: float = 1e-8) -> torch.Tensor:
    """Per-prompt entropy coefficients lambda_t(q) of AER (arXiv:2510.10959, §4.2, C1, eq. 9).

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
    """One step of AER's global-scale controller (AER §4.2, C3, eq. 11).

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


def sequence_entropies(entropies: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """Sequence-level entropy of each response (AER eq. 4): H(pi(. | q)) = (1 / L) sum_{l=1}^{L} H_l.

    Args:
        entropies: (B, T) per-token entropies H_l (eq. 3); gradients flow through.
        mask: (B, T) 1 on the response positions that count (L = the row's sum).

    Returns:
        (B,) the mean token entropy of each row; 0 for a row without any counted position.
    """
    m = mask.to(entropies.dtype)
    return (entropies * m).sum(-1) / m.sum(-1).clamp(min=1.0)


def aer_entropy_term(
    entropies: torch.Tensor,
    mask: torch.Tensor,
    coef: torch.Tensor,
    normalization: str = "sequence",
    num_sequences: int | None = None,
) -> torch.Tensor:
    """AER's entropy regulariser (AER eq. 7), E_q[lambda_t(q) H(pi_theta(. | q))], on a batch of responses.

    - `sequence` (eq. 4 then eq. 7): every response contributes its own mean token entropy (`sequence_entropies`),
      weighted by its prompt's coefficient, and the batch averages over responses:

          term = (1 / num_sequences) * sum_i lambda(q_i) * (1 / L_i) sum_l H_{i,l}

      Every prompt has the same number m of responses, so the mean over responses is the mean over prompts of each
      prompt's mean over its m responses: eq. 7's E_q of H(pi(. | q)) estimated by q's responses. Long and short
      responses weigh the same. The sum is linear in the rows: splitting a batch into micro-batches and passing the
      whole batch's `num_sequences` to each, the micro-batch terms add up to the batch's term exactly. A row without
      any counted position contributes 0 and still counts in `num_sequences` (as in TRL's `grpo` loss).
    - `token`: the token mean over the batch, sum_{i,l} lambda(q_i) H_{i,l} / sum_{i,l} 1: each prompt weighs by its
      number of tokens, as TRL's `entropy_coef` bonus (with one lambda for every prompt the two are equal).
      `num_sequences` is not used.

    Args:
        entropies: (B, T) per-token entropies, with gradients.
        mask: (B, T) 1 on the positions that enter the loss.
        coef: (B,) lambda_t(q) of each row's prompt (eq. 9).
        normalization: `sequence` (the paper's) or `token`.
        num_sequences: the number of responses the batch objective averages over, for `sequence`; defaults to B.
            Pass the number of responses of the whole optimizer step when the rows are one micro-batch of it.

    Returns:
        The scalar term to maximise (a loss adds its negative).
    """
    if normalization not in ENTROPY_NORMALIZATIONS:
        raise ValueError(f"normalization must be one of {', '.join(ENTROPY_NORMALIZATIONS)}, got {normalization!r}.")
    coef = coef.to(entropies.dtype)
    if normalization == "token":
        m = mask.to(entropies.dtype)
        return (coef.unsqueeze(1) * entropies * m).sum() / m.sum().clamp(min=1.0)
    n = entropies.size(0) if num_sequences is None else int(num_sequences)
    if n <= 0:
        raise ValueError(f"num_sequences must be > 0, got {num_sequences}.")
    return (coef * sequence_entropies(entropies, mask)).sum() / n
