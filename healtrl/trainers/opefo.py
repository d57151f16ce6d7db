"""`OPEFOTrainer`: On-Policy Entropy Flow Optimization (OPEFO, arXiv:2605.11491, §5), on healtrl's lever 1
(`shape_advantages`).

What it does, per optimizer step:

1. Strict on-policy training (§5.2, §6.1): one optimizer update per rollout batch, no reuse of rollouts. `OPEFOConfig`
   rejects configurations under which TRL would update on samples of an older policy. TRL then computes no old
   log-probs and uses `old_per_token_logps = per_token_logps.detach()`, so the importance ratio is exactly 1 and the
   clipped and unclipped surrogates coincide: clipping (`epsilon`, `epsilon_high`, `delta`) is inert. Under vLLM, TRL
   still computes old log-probs to correct the sampler/trainer mismatch (`vllm_importance_sampling_correction`, TRL's
   default True); that correction stays available and multiplies the per-token loss as in TRL.
2. The predicted entropy change Delta H_t of every token (`healtrl.functional.token_entropy_change`, estimator
   `entropy_change_estimator`: "opefo" = eq. 6, "steer", or "exact" with the power sums of healtrl's kernel), from the
   log-probs and entropies of the policy that takes the update.
3. lambda* of eq. 9 over the whole update batch and all processes (identical on every rank), then per-token weights
   (1 + lambda*) on S+ and (1 - lambda*) on S- (eq. 7) multiply the advantages.

Where the whole-batch statistics come from:

- `gradient_accumulation_steps == 1` (the toy configs): the micro-batch is the whole local update batch, so lambda* is
  computed inside the loss forward from the `LossBatch` (log-probs and entropies of that forward) and all-reduced
  across processes before the advantages are shaped. No extra forward pass.
- `gradient_accumulation_steps > 1`: an optimizer step spans several micro-batches, and the first one's loss needs
  lambda* of all of them. Strictly on-policy, the policy at generation time *is* the policy that takes the update (no
  optimizer step happens between generation and the last micro-batch), so the log-prob and entropy of every sampled
  token (and, for `exact`, sum_v p^2 and sum_v p^2 log p) under p = softmax(z / T), the distribution the loss trains
  (not the sampling distribution after generate's logits processors), are known once the batch is generated. OPEFO
  asks the TRL boundary for them (`rollout_stats_needed`), which provides them from the cheapest source and names it
  (`RolloutStats.source`): TRL's old-log-prob pass where it runs (vLLM with `vllm_importance_sampling_correction`),
  else the generation's own LM-head logits (transformers `generate`; equal to the loss forward's numbers within
  float32 rounding for models without dropout whose output does not depend on the absolute position of left padding),
  else one no-grad forward (vLLM without the correction, paged generation, tools, `rollout_entropy_source: forward`).
  `opefo/extra_forward` is 1 on steps that took that forward, else 0. Delta H per token and lambda* (all-reduced over
  processes) are stored in the buffered batch (`opefo_delta_h`, `opefo_lambda`), which TRL shuffles and splits with
  the rest; each micro-batch then weights its tokens with them.
- Evaluation: every eval batch is its own update batch; computed in its loss forward.

Logged every step (train and eval): `opefo/lambda`, `opefo/flow_pos` (sum of Delta H over S+), `opefo/flow_neg` (sum
over S-, <= 0), `opefo/net_flow` (their sum, before reweighting), `opefo/pos_share` (share of tokens in S+). Delta H is
reported in units of the current learning rate times eq. 6 (lambda* and the sets do not depend on that scale).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from ..diagnostics import current_learning_rate
from ..functional.entropy_change import ESTIMATORS, token_entropy_change
from ..functional.opefo import SIDES, opefo_flow_sums, opefo_lambda_from_sums, opefo_token_weights
from ._card import CardDescription
from ._papers import OPEFO_PAPER
from .base import EntropyGRPOConfig, EntropyGRPOTrainer, LossBatch
from .contract import RolloutStats

LAMBDA_MODES = ("adaptive", "static")


@dataclass
class OPEFOConfig(EntropyGRPOConfig):
    r"""
    Configuration for [`OPEFOTrainer`]: every field of [`EntropyGRPOConfig`] (TRL's [`~trl.GRPOConfig`]), plus OPEFO's.
    Defaults follow the paper (OPEFO §5, §6.1, Table 2).

    Training is strictly on-policy: `num_iterations` must be 1 and each optimizer step must consume exactly one
    generation batch (`steps_per_generation == gradient_accumulation_steps`, TRL's default when neither
    `steps_per_generation` nor `generation_batch_size` is set). Other settings are rejected with the fields to change.

    Parameters:
        entropy_change_estimator (`str`, *optional*, defaults to `"opefo"`):
            Per-token entropy-change estimator that splits tokens into S+ and S- and gives lambda*: `"opefo"` (paper eq.
            6, -eta A (1 - p)^2 (log p + H)), `"steer"` (single (1 - p) factor, the STEER code eq. 6 derives from) or
            `"exact"` (exact first-order change of a tabular softmax; needs `logprob_kernel="healtrl"`).
        lambda_mode (`str`, *optional*, defaults to `"adaptive"`):
            `"adaptive"`: lambda* of eq. 9 per update batch (OPEFO). `"static"`: the fixed `static_lambda` (Table 2,
            "Static Scaling").
        static_lambda (`float`, *optional*, defaults to `0.001`):
            The fixed lambda of `lambda_mode="static"`; the paper's value is the average lambda* it observed.
        balance_sides (`str`, *optional*, defaults to `"both"`):
            Which tokens lambda rescales: `"both"` (OPEFO, eq. 7), `"pos"` (S+ only) or `"neg"` (S- only), the
            one-sided ablations of Table 2.
        lambda_eps (`float`, *optional*, defaults to `1e-12`):
            Lower bound of the denominator of eq. 9 (paper's Figure 3): a batch without entropy flow gets lambda* = 0.
    """

    entropy_change_estimator: str = field(
        default="opefo",
        metadata={
            "help": "Entropy-change estimator: 'opefo' (paper eq. 6), 'steer' (single (1 - p) factor) or 'exact' (exact "
            "first-order change; needs logprob_kernel 'healtrl').",
            "choices": list(ESTIMATORS),
        },
    )
    lambda_mode: str = field(
        default="adaptive",
        metadata={
            "help": "'adaptive': lambda* of eq. 9 per update batch (OPEFO); 'static': the fixed static_lambda (Table 2).",
            "choices": list(LAMBDA_MODES),
        },
    )
    static_lambda: float = field(
        default=0.001, metadata={"help": "Fixed lambda of lambda_mode 'static' (paper's Table 2: 0.001)."}
    )
    balance_sides: str = field(
        default="both",
        metadata={
            "help": "Tokens lambda rescales: 'both' (OPEFO eq. 7), 'pos' (S+ only) or 'neg' (S- only), the one-sided "
            "ablations of Table 2.",
            "choices": list(SIDES),
        },
    )
    lambda_eps: float = field(
        default=1e-12, metadata={"help": "Lower bound of the denominator of eq. 9 (paper's Figure 3: 1e-12)."}
    )

    def __post_init__(self):
        if not -1.0 <= self.static_lambda <= 1.0:
            raise ValueError(
                f"static_lambda must lie in [-1, 1] (eq. 7 weights 1 +- lambda); got {self.static_lambda}."
            )
        super().__post_init__()  # resolves steps_per_generation / generation_batch_size
        problems = []
        if self.num_iterations != 1:
            problems.append(f"num_iterations={self.num_iterations} (set num_iterations: 1)")
        if self.steps_per_generation != self.gradient_accumulation_steps:
            problems.append(
                f"steps_per_generation={self.steps_per_generation} with gradient_accumulation_steps="
                f"{self.gradient_accumulation_steps} (one generation batch per optimizer step: leave steps_per_generation"
                " and generation_batch_size unset, or set steps_per_generation equal to gradient_accumulation_steps)"
            )
        if problems:
            raise ValueError(
                "OPEFO trains strictly on-policy: one optimizer update per rollout batch, no importance ratio, no "
                "clipping. This config would update on samples of an older policy: " + "; ".join(problems) + "."
            )


class OPEFOTrainer(EntropyGRPOTrainer):
    """On-Policy Entropy Flow Optimization (OPEFO §5): GRPO strictly on-policy, tokens reweighted by lambda*.

    Constructor: the same as `trl.GRPOTrainer`, with an [`OPEFOConfig`]. Stateless across steps (lambda* is recomputed
    from every update batch), so nothing beyond TRL's checkpoint is saved.
    """

    config_class = OPEFOConfig
    card = CardDescription(
        name="OPEFO",
        paper=OPEFO_PAPER,
        description=(
            "On-Policy Entropy Flow Optimization: strictly on-policy GRPO in which every token's predicted entropy change "
            "(eq. 6) puts it among the entropy-increasing or -decreasing tokens; their updates are scaled by (1 + lambda) "
            "and (1 - lambda) (eq. 7), with lambda (eq. 9) chosen so the entropy flow of each update batch balances."
        ),
        summary_keys=("opefo/lambda",),
        tags=("opefo",),
    )

    @property
    def needs_power_sums(self) -> bool:
        """The loss forward computes the power sums only where lambda* is computed from it (no accumulation, or
        evaluation); with accumulation they come with the rollout statistics."""
        return self._estimator_needs_power_sums and not self._whole_batch_stats_at_generation

    @property
    def _estimator_needs_power_sums(self) -> bool:
        return self.args.entropy_change_estimator == "exact"

    @property
    def _whole_batch_stats_at_generation(self) -> bool:
        """With gradient accumulation in training, lambda* needs the whole update batch before its first micro-batch."""
        return self.model.training and self.config_value("gradient_accumulation_steps") > 1

    # ------------------------------------------------------------------------------------------------------------
    # Whole-update-batch statistics at generation time (gradient accumulation)
    # ------------------------------------------------------------------------------------------------------------
    def rollout_stats_needed(self) -> frozenset[str]:
        keys = set(super().rollout_stats_needed())
        if self._whole_batch_stats_at_generation:
            keys |= {"logp", "entropy"} | ({"sum_p2", "sum_p2_logp"} if self._estimator_needs_power_sums else set())
        return frozenset(keys)

    def finish_generation_batch(self, output: dict[str, Any], stats: RolloutStats | None) -> None:
        if not self._whole_batch_stats_at_generation:
            return
        delta_h = token_entropy_change(
            stats["logp"],
            stats["entropy"],
            output["advantages"],
            estimator=self.args.entropy_change_estimator,
            sum_p2=stats.get("sum_p2"),
            sum_p2_logp=stats.get("sum_p2_logp"),
        )
        self.log_metric("opefo/extra_forward", float(stats.source == "forward"))
        output["opefo_delta_h"] = delta_h
        if self.args.lambda_mode == "adaptive":
            mask = self._token_mask(output)
            pos, neg = opefo_flow_sums(delta_h, mask)
            pos, neg = self.accelerator.reduce(torch.stack([pos, neg]), reduction="sum")  # all processes' tokens
            output["opefo_lambda"] = opefo_lambda_from_sums(pos, neg, eps=self.args.lambda_eps)

    @staticmethod
    def _token_mask(inputs: dict[str, Any]) -> torch.Tensor:
        mask = inputs["completion_mask"]
        return mask * inputs["tool_mask"] if "tool_mask" in inputs else mask

    # ------------------------------------------------------------------------------------------------------------
    # Lever 1
    # ------------------------------------------------------------------------------------------------------------
    def shape_advantages(self, advantages: torch.Tensor, batch: LossBatch) -> torch.Tensor:
        inputs = batch.inputs
        delta_h = inputs.get("opefo_delta_h")
        if delta_h is None:
            # The micro-batch is the whole local update batch: the stats of this very forward (OPEFO eq. 6).
            delta_h = token_entropy_change(
                batch.per_token_logps,
                batch.entropies,
                advantages,
                estimator=self.args.entropy_change_estimator,
                sum_p2=batch.sum_p2,
                sum_p2_logp=batch.sum_p2_logp,
            )
        mask = batch.mask.to(torch.bool)
        pos, neg = opefo_flow_sums(delta_h, mask)
        stats = torch.stack([pos, neg, (mask & (delta_h > 0)).sum().to(pos.dtype), mask.sum().to(pos.dtype)])

        whole_batch_here = "opefo_delta_h" not in inputs
        if self.args.lambda_mode == "static":
            lam = torch.tensor(self.args.static_lambda, dtype=delta_h.dtype, device=delta_h.device)
        elif whole_batch_here:
            stats = self.accelerator.reduce(stats, reduction="sum")  # eq. 9 over all processes' tokens
            lam = opefo_lambda_from_sums(stats[0], stats[1], eps=self.args.lambda_eps)
        else:
            lam = inputs["opefo_lambda"]  # computed over the whole update batch at generation time
        self._record_flow(stats, lam, reduced=whole_batch_here and self.args.lambda_mode == "adaptive", batch=batch)

        weights = opefo_token_weights(delta_h, mask, lam, sides=self.args.balance_sides)  # OPEFO eq. 7
        if advantages.dim() == 1:
            advantages = advantages.unsqueeze(1)
        return advantages * weights.to(advantages.dtype)

    def _record_flow(self, stats: torch.Tensor, lam: torch.Tensor, *, reduced: bool, batch: LossBatch) -> None:
        """Log the step's flow statistics once per optimizer step (once per batch in evaluation)."""
        if batch.mode == "train" and not reduced:
            stats = self.step_sums("opefo_flow", stats)  # [sum S+, sum |S-|, n S+, n tokens] over the step
            if stats is None:
                return
        elif not reduced:
            stats = self.accelerator.reduce(stats, reduction="sum")
        lr = current_learning_rate(self)
        pos, neg, n_pos, n_tokens = stats.tolist()
        self.log_metric("opefo/lambda", float(lam))
        self.log_metric("opefo/flow_pos", lr * pos)
        self.log_metric("opefo/flow_neg", -lr * neg)
        self.log_metric("opefo/net_flow", lr * (pos - neg))
        self.log_metric("opefo/pos_share", n_pos / max(n_tokens, 1.0))
