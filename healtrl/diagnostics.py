"""Entropy-flow diagnostics for any healtrl trainer: OPEFO's Figure 2 analysis, logged while training.

Per optimizer step, the summed predicted entropy change (`healtrl.functional.token_entropy_change`, estimator of
choice) of the update batch's tokens, split into entropy-increasing (Delta H > 0) and entropy-decreasing
(Delta H < 0) tokens, and each of those split by advantage sign and by clipping status (OPEFO, arXiv:2605.11491, §4,
Figure 2 (b)-(c)).

Clipping status follows TRL's `GRPOTrainer._compute_loss` exactly (the trainer's `clip_status`, in the TRL
boundary `healtrl/trainers/_trl/`): with coef = exp(logp - old_logp) (per token,
or the masked sequence mean of the log-ratio when `importance_sampling_level="sequence"`), a token is upper-clipped when
coef > 1 + epsilon_high and A > 0, lower-clipped when coef < 1 - epsilon_low and A < 0, and unclipped otherwise. Strictly
on-policy (one update per generation batch) coef is exactly 1 and every token is unclipped.

Metrics (summed over all micro-batches of the step and all processes; Delta H in units of the current learning rate
times eq. 6, see `token_entropy_change`):
    entropy_flow/increase, entropy_flow/decrease, entropy_flow/net,
    entropy_flow/{increase,decrease}/{adv_pos,adv_neg,upper_clipped,lower_clipped,unclipped}.

Cost: computed from the `LossBatch` of the loss forward (no extra forward pass); a handful of element-wise operations per
micro-batch and one all-reduce of 13 numbers per optimizer step. Off, nothing runs.

Wiring (a trainer that does not call it yet): create an `EntropyFlowDiagnostics` when the config switch is on and call
`update(trainer, batch)` with each `LossBatch` of the loss forward; with estimator "exact" the trainer's loss forward
must compute the power sums (`needs_power_sums`).
"""

from __future__ import annotations

import torch

from .functional.entropy_change import ESTIMATORS, token_entropy_change

DIRECTIONS = ("increase", "decrease")
GROUPS = ("adv_pos", "adv_neg", "upper_clipped", "lower_clipped", "unclipped")
METRIC_NAMES = (
    "entropy_flow/increase",
    "entropy_flow/decrease",
    *(f"entropy_flow/{d}/{g}" for d in DIRECTIONS for g in GROUPS),
)


def entropy_flow_sums(
    delta_h: torch.Tensor,
    mask: torch.Tensor,
    advantages: torch.Tensor,
    upper_clipped: torch.Tensor,
    lower_clipped: torch.Tensor,
) -> torch.Tensor:
    """Local sums of Delta H in the order of `METRIC_NAMES` (a (12,) float64 tensor), over the tokens in `mask`."""
    delta_h = delta_h.detach().double()
    valid = mask.to(torch.bool).expand_as(delta_h)
    adv = advantages.detach()
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    adv = adv.expand_as(delta_h)
    unclipped = ~(upper_clipped | lower_clipped)
    groups = (adv > 0, adv < 0, upper_clipped, lower_clipped, unclipped)
    out = []
    directions = (valid & (delta_h > 0), valid & (delta_h < 0))
    for direction in directions:
        out.append(torch.where(direction, delta_h, 0.0).sum())
    for direction in directions:
        for group in groups:
            out.append(torch.where(direction & group, delta_h, 0.0).sum())
    return torch.stack(out)


class EntropyFlowDiagnostics:
    """Accumulates the entropy-flow sums of the micro-batches of one optimizer step and logs them at its end.

    Args:
        estimator: "opefo" (eq. 6), "steer" or "exact" (needs the power sums in the `LossBatch`).
    """

    def __init__(self, estimator: str = "opefo"):
        if estimator not in ESTIMATORS:
            raise ValueError(f"entropy_flow_estimator must be one of {ESTIMATORS}, got {estimator!r}.")
        self.estimator = estimator

    def update(self, trainer, batch) -> dict[str, float] | None:
        """Add one micro-batch; at the end of an optimizer step (or for an eval batch) log and return the step's sums."""
        if self.estimator == "exact" and batch.sum_p2 is None:
            raise ValueError(
                "entropy_flow_estimator='exact' needs the power sums sum_v p^2 and sum_v p^2 log p in the loss forward: "
                "the trainer's `needs_power_sums` must be true (and `logprob_kernel: healtrl`)."
            )
        lr = current_learning_rate(trainer)
        delta_h = token_entropy_change(
            batch.per_token_logps,
            batch.entropies,
            batch.advantages,
            estimator=self.estimator,
            sum_p2=batch.sum_p2,
            sum_p2_logp=batch.sum_p2_logp,
            lr=lr,
        )
        upper, lower = trainer.clip_status(batch)  # TRL's clipping rule (`healtrl.trainers._trl.clip_status`)
        sums = entropy_flow_sums(delta_h, batch.mask, batch.advantages, upper, lower)
        if batch.mode != "train":
            return self._log(trainer, trainer.accelerator.reduce(sums.to(trainer.accelerator.device), reduction="sum"))
        total = trainer.step_sums("entropy_flow", sums)  # summed over the step's micro-batches and all processes
        return None if total is None else self._log(trainer, total)

    @staticmethod
    def _log(trainer, total_sums: torch.Tensor) -> dict[str, float]:
        total = total_sums.tolist()
        values = dict(zip(METRIC_NAMES, total))
        values["entropy_flow/net"] = values["entropy_flow/increase"] + values["entropy_flow/decrease"]
        for name, value in values.items():
            trainer.log_metric(name, value)
        return values


def current_learning_rate(trainer) -> float:
    """The learning rate of the optimizer step being computed (the scheduler steps after the optimizer)."""
    scheduler = getattr(trainer, "lr_scheduler", None)
    if scheduler is not None:
        try:
            return float(scheduler.get_last_lr()[0])
        except (AttributeError, IndexError):  # pragma: no cover - exotic schedulers
            pass
    return float(trainer.args.learning_rate)
