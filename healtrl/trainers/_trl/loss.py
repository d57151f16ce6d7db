"""The loss: TRL 1.16 `GRPOTrainer._compute_loss`, never copied, with levers 1 and 2 hooked into its policy forward.

`_compute_loss` does two things in a fixed order: it calls `_get_per_token_logps_and_entropies` once for the policy,
then reads `inputs["advantages"]`. `LossCalls._compute_loss` states the call (`TRLCall.LOSS`) and hands TRL a shallow
copy of the micro-batch; the policy forward (`_loss_policy_forward`, dispatched by `TRLBoundary`) builds the
`LossBatch`, updates the entropy-flow diagnostics and replaces the advantages with `shape_advantages`' (lever 1); after
TRL's loss, `extra_loss` (lever 2) is added. A second forward inside the call (a TRL release that adds one) is an error,
not a silent change of what the levers see.

Also here, the logic that mirrors TRL's loss: `clip_status` (its clipping rule) and `aggregate_like_policy_loss` (its
normaliser per `loss_type`; an unknown `loss_type` raises).
"""

from __future__ import annotations

import torch

from .batches import LossBatch
from .hooks import LossCall
from .lm_head import LMHeadForwards

#: `loss_type`s whose normaliser `aggregate_like_policy_loss` mirrors (all of TRL 1.16's).
LOSS_TYPES = ("grpo", "sapo", "bnpo", "dr_grpo", "cispo", "dapo", "vespo", "luspo")


def clip_status(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    importance_sampling_level: str = "token",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(upper_clipped, lower_clipped) boolean (B, T) masks, as TRL 1.16's `GRPOTrainer._compute_loss` defines them.

    The one place healtrl decides which tokens TRL's surrogate clips: the entropy-flow diagnostics and Clip-Cov's
    candidate exclusion (`baselines.py`) both call it. log_ratio = logp - old_logp (detached); coef =
    exp(log_ratio) per token when `importance_sampling_level="token"`, or, when `"sequence"`, exp of each sequence's
    masked mean sum_t(log_ratio_t * mask_t) / max(sum_t mask_t, 1), shared by all its tokens. Upper-clipped:
    coef > 1 + epsilon_high and A > 0; lower-clipped: coef < 1 - epsilon_low and A < 0. `advantages` is (B,) or
    (B, T). Computed in the dtype of the inputs with TRL's expressions (no upcast), so a half-precision run gets TRL's
    decision bit for bit. Another `importance_sampling_level` raises ValueError, as TRL does.
    """
    log_ratio = per_token_logps.detach() - old_per_token_logps.detach()
    if importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    elif importance_sampling_level != "token":
        raise ValueError(
            f"importance_sampling_level {importance_sampling_level!r} is not one of TRL 1.16's ('token', 'sequence'); "
            "healtrl's clip_status (healtrl/trainers/_trl/loss.py) follows TRL's `_compute_loss` and needs updating."
        )
    coef = torch.exp(log_ratio)
    adv = advantages.detach()
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    upper = (coef > 1 + epsilon_high) & (adv > 0)
    lower = (coef < 1 - epsilon_low) & (adv < 0)
    shape = per_token_logps.shape
    return upper.expand(shape), lower.expand(shape)


def aggregate_like_policy_loss(trainer, per_token: torch.Tensor, mask: torch.Tensor, batch: LossBatch):
    """Aggregate a per-token term with the normaliser TRL 1.16's `GRPOTrainer._compute_loss` applies to its policy loss
    for `loss_type`, before the division by the gradient-accumulation steps (which the base trainer applies to
    `extra_loss`). A `loss_type` outside `LOSS_TYPES` (a newer TRL's) raises ValueError naming it."""
    mask = mask.to(per_token.dtype)
    loss_type = trainer.loss_type
    if loss_type in ("grpo", "sapo"):
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return (per_token * mask).sum() / (per_token.size(0) * trainer.max_completion_length)
    if loss_type in ("cispo", "dapo", "vespo"):
        normalizer = batch.inputs["num_items_in_batch"].clamp(min=1.0) / trainer.accelerator.num_processes
        if batch.mode == "train":
            normalizer = normalizer / trainer.args.steps_per_generation
        return (per_token * mask).sum() / normalizer
    if loss_type == "luspo":
        return (per_token * mask).sum(-1).mean()
    raise ValueError(
        f"loss_type {loss_type!r} is not one healtrl knows how TRL normalises (known: {', '.join(LOSS_TYPES)}); "
        "a term aggregated like the policy loss (KL-Cov) would be scaled wrongly. Add it to "
        "healtrl/trainers/_trl/loss.py (`aggregate_like_policy_loss`) following TRL's `_compute_loss`."
    )


class LossCalls(LMHeadForwards):
    """`GRPOTrainer._compute_loss` with the levers (a part of `TRLBoundary`)."""

    def _compute_loss(self, model, inputs):
        # `defer_trl_entropy`: TRL 1.16 updates its adaptive entropy coefficient (and logs `entropy_coef`) inside
        # `_compute_loss` when `accelerator.sync_gradients` is true. On a micro-batch that ends an optimizer step but
        # not the rollout batch, report sync false to TRL's loss code after the policy forward (every healtrl lever
        # and diagnostic has seen the true state by then) and restore it before the backward pass.
        deferring = (
            self.defer_trl_entropy
            and self.model.training
            and self.accelerator.sync_gradients
            and (self._step + 1) % self.micro_steps_per_rollout_batch
            != 0  # this micro-batch does not end the rollout batch
        )
        if not deferring:
            return self._compute_loss_with_levers(model, inputs, deferring=False)
        state = self.accelerator.gradient_state
        try:
            loss = self._compute_loss_with_levers(model, inputs, deferring=True)
        finally:
            state._set_sync_gradients(True)
        # TRL logs the coefficient at the end of every optimizer step; it skipped this one.
        self._metrics["train"]["entropy_coef"].append(self.entropy_coef)
        return loss

    def _compute_loss_with_levers(self, model, inputs, deferring: bool):
        # TRL reads `inputs["advantages"]` after its policy forward; a shallow copy lets lever 1 replace them there
        # without touching the buffered generation batch (reused across `num_iterations`).
        inputs = dict(inputs)
        with self._inside(LossCall(inputs, defer_trl_entropy=deferring)) as call:
            loss = super()._compute_loss(model, inputs)
        batch = call.batch
        extra = self.extra_loss(batch) if batch is not None else None
        if extra is not None:
            normalizer = self.current_gradient_accumulation_steps if batch.mode == "train" else 1.0
            loss = loss + extra / normalizer
        if self._guard is not None and self.mode == "train":
            self._guard.record(batch, loss)
        return loss

    def _loss_policy_forward(self, call: LossCall, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """The policy forward of the training loss, the only model call TRL 1.16 makes inside `_compute_loss`."""
        if call.batch is not None:
            raise RuntimeError(
                "TRL ran a second forward inside GRPOTrainer._compute_loss; healtrl's levers follow TRL 1.16, whose "
                "loss runs one policy forward. Read healtrl/trainers/_trl/loss.py against this TRL release."
            )
        flow = self._entropy_flow
        power_sums = self.needs_power_sums or (flow is not None and flow.estimator == "exact")
        logps, entropies, aux, sum_p2, sum_p2_logp = self._trl_forward(
            model, input_ids, attention_mask, logits_to_keep, *args, power_sums=power_sums, **kwargs
        )
        inputs = call.inputs
        mask = inputs["completion_mask"]
        if "tool_mask" in inputs:
            mask = mask * inputs["tool_mask"]
        batch = LossBatch(
            per_token_logps=logps,
            entropies=entropies,
            mask=mask,
            advantages=inputs["advantages"],
            inputs=inputs,
            mode=self.mode,
            sum_p2=sum_p2,
            sum_p2_logp=sum_p2_logp,
        )
        call.batch = batch
        if flow is not None:
            flow.update(self, batch)
        shaped = self.shape_advantages(inputs["advantages"], batch)
        if shaped is not None:
            inputs["advantages"] = shaped
        if call.defer_trl_entropy:
            # The policy forward of the loss has run (and with it every healtrl lever and diagnostic, which see the
            # true sync state); from here to the end of TRL's loss code, only TRL's adaptive entropy update and its
            # `entropy_coef` log read `sync_gradients`: hold them until the rollout batch ends.
            self.accelerator.gradient_state._set_sync_gradients(False)
        return logps, entropies, aux

    def clip_status(self, batch: LossBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(upper_clipped, lower_clipped) masks of a loss batch under this trainer's clipping (`clip_status`)."""
        return clip_status(
            batch.per_token_logps,
            batch.old_per_token_logps,
            batch.advantages,
            batch.mask,
            self.epsilon_low,
            self.epsilon_high,
            self.importance_sampling_level,
        )
