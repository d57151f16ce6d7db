"""Per-token first-order entropy change of a policy-gradient step on the sampled token.

Setting: at one position the policy is a softmax over logits z, p = softmax(z), H = -sum_v p_v log p_v. A
policy-gradient step with learning rate lr on the sampled token a with advantage A moves the logits by
    Delta z = lr * A * d log p_a / dz = lr * A * (e_a - p)        (tabular softmax: the logits are the parameters)
and, with dH/dz_j = -p_j (log p_j + H), changes the entropy to first order by
    Delta H = sum_j dH/dz_j Delta z_j = -lr * A * [p_a (log p_a + H) - sum_j p_j^2 (log p_j + H)].

Three estimators of Delta H per token, from the sampled token's log-prob logp = log p_a and the entropy H:
- "opefo": -lr * A * (1 - p_a)^2 * (logp + H), OPEFO paper eq. 6 (OPEFO, arXiv:2605.11491, §4).
- "steer": -lr * A * (1 - p_a) * (logp + H), the single-(1 - p) form of the STEER code that eq. 6 derives from.
- "exact": -lr * A * [p_a (logp + H) - (sum_p2_logp + H * sum_p2)], the exact first-order change above, with the
  power sums sum_p2 = sum_v p_v^2 and sum_p2_logp = sum_v p_v^2 log p_v (healtrl.kernels computes them in the same
  pass as logp and H). The STEER code is Hao et al. 2025 (arXiv:2510.10150, github.com/zz-haooo/STEER).
The heuristic forms keep the sign structure of the exact one when p_a is small (sum_v p_v^2 (log p_v + H) is then
dominated by other tokens), and are what the paper trains with.
"""

from __future__ import annotations

import torch

ESTIMATORS = ("opefo", "steer", "exact")


def token_entropy_change(
    logp: torch.Tensor,
    entropy: torch.Tensor,
    advantages: torch.Tensor,
    *,
    estimator: str = "opefo",
    sum_p2: torch.Tensor | None = None,
    sum_p2_logp: torch.Tensor | None = None,
    lr: float = 1.0,
) -> torch.Tensor:
    """First-order entropy change of each token's distribution under a policy-gradient step on that token.

    Args:
        logp: Log-probability of the sampled token, any shape (e.g. (B, T)).
        entropy: Full-vocabulary entropy at the same positions.
        advantages: Advantage of each token, broadcastable to `logp` (e.g. (B,) per sequence as (B, 1), or (B, T)).
        estimator: "opefo" (OPEFO eq. 6, default), "steer" or "exact" (see the module docstring).
        sum_p2: sum_v p_v^2 at each position; required by "exact".
        sum_p2_logp: sum_v p_v^2 log p_v at each position; required by "exact".
        lr: Step size eta of the update.

    Returns:
        Delta H per position (float32, or float64 for float64 inputs), without gradient (inputs are detached): positive means the update raises the
        entropy at that position.
    """
    if estimator not in ESTIMATORS:
        raise ValueError(f"Unknown entropy-change estimator {estimator!r}; choose one of {ESTIMATORS}.")
    dtype = torch.promote_types(torch.promote_types(logp.dtype, entropy.dtype), torch.float32)
    logp, entropy, advantages = (t.detach().to(dtype) for t in (logp, entropy, advantages))
    if advantages.dim() == 1 and logp.dim() == 2 and advantages.size(0) == logp.size(0):
        advantages = advantages.unsqueeze(1)  # one advantage per sequence, as TRL stores it
    p = logp.exp()
    surprise_gap = logp + entropy  # log p_a + H: > 0 when the sampled token is more likely than "typical"
    if estimator == "opefo":
        return -lr * advantages * (1.0 - p).square() * surprise_gap  # OPEFO eq. 6
    if estimator == "steer":
        return -lr * advantages * (1.0 - p) * surprise_gap
    if sum_p2 is None or sum_p2_logp is None:
        raise ValueError(
            "estimator='exact' needs sum_p2 and sum_p2_logp (sum_v p_v^2 and sum_v p_v^2 log p_v): compute them with "
            "healtrl.kernels.fused_logprob_entropy(..., power_sums=True)."
        )
    second_moment = sum_p2_logp.detach().to(dtype) + entropy * sum_p2.detach().to(dtype)
    return -lr * advantages * (p * surprise_gap - second_moment)
