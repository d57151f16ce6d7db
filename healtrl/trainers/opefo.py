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

Where the whole-batch statistics come from (the choice this implementation makes):

- `gradient_accumulation_steps == 1` (the toy configs): the micro-batch is the whole local update batch, so lambda* is
  computed inside the loss forward from the `LossBatch` (log-probs and entropies of that forward) and all-reduced
  across processes before the advantages are shaped. No extra forward pass.
- `gradient_accumulation_steps > 1`: an optimizer step spans several micro-batches, and the first one's loss needs
  lambda* of all of them. Strictly on-policy, the policy at generation time *is* the policy that takes the update (no
  optimizer step happens between generation and the last micro-batch), so the log-prob and entropy of every sampled
  token (and, for `exact`, sum_v p^2 and sum_v p^2 log p) are known once the batch is generated, with no extra
  forward. Eq. 6 needs them under the policy the loss trains: p = softmax(z / T) of the LM head's logits z at the
  training temperature T (TRL's loss divides by the same T), *not* the sampling distribution after generate's logits
  processors (top-p, top-k, min-p, repetition penalty). They come from, in this order:
  1. TRL's old-log-prob pass, where it runs (vLLM with `vllm_importance_sampling_correction`): that no-grad forward
     of the policy also returns the entropies (and power sums);
  2. the generation's own LM-head calls (transformers `generate`, no vLLM, paged generation or tools, and
     `rollout_entropy_source: auto`): hooks on the LM head and input embeddings read softmax(z / T) of every step and
     the token sampled from it (`_generation_stats.GenerationStats`); equal to the loss forward's numbers within
     float32 rounding for models without dropout whose output does not depend on the absolute position of left
     padding (RoPE: all current decoder LLMs);
  3. otherwise (vLLM without the correction, paged generation, tools, `rollout_entropy_source: forward`), one no-grad
     forward over the local generation batch right after it is scored: the fallback, one extra forward per step.
  A one-time info log names the source; `opefo/extra_forward` is 1 on steps that took the fallback forward, else 0.
  Delta H per token and lambda* (all-reduced over processes) are stored in the buffered batch (`opefo_delta_h`,
  `opefo_lambda`), which TRL shuffles and splits with the rest; each micro-batch then weights its tokens with them.
- Evaluation: every eval batch is its own update batch; computed in its loss forward.

Logged every step (train and eval): `opefo/lambda`, `opefo/flow_pos` (sum of Delta H over S+), `opefo/flow_neg` (sum
over S-, <= 0), `opefo/net_flow` (their sum, before reweighting), `opefo/pos_share` (share of tokens in S+). Delta H is
reported in units of the current learning rate times eq. 6 (lambda* and the sets do not depend on that scale).
"""

from __future__ import annotations

import logging
import warnings
from dataclasses import dataclass, field
from typing import Any

import torch

from ..diagnostics import current_learning_rate
from ..functional.entropy_change import ESTIMATORS, token_entropy_change
from ..functional.opefo import SIDES, opefo_flow_sums, opefo_lambda_from_sums, opefo_token_weights
from ._card import CardDescription
from ._generation_stats import GenerationStats
from ._papers import OPEFO_PAPER
from .base import EntropyGRPOConfig, EntropyGRPOTrainer, LossBatch

logger = logging.getLogger(__name__)

LAMBDA_MODES = ("adaptive", "static")
STATS_SOURCES = {
    "generation": "read off the generation's own LM-head logits (no extra forward)",
    "old_logps": "taken from TRL's old-log-prob pass (no extra forward)",
    "forward": "computed with one extra no-grad forward per optimizer step (generation logits not available)",
}


def _to_width(values: torch.Tensor, width: int) -> torch.Tensor:
    """(B, T) statistics cut or zero-padded on the right to `width` completion positions."""
    if values.size(1) < width:
        return torch.nn.functional.pad(values, (0, width - values.size(1)))
    return values[:, :width]


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

    def __init__(self, model, reward_funcs=None, args: OPEFOConfig | None = None, train_dataset=None, **kwargs):
        super().__init__(model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset, **kwargs)
        self._opefo_stats: dict[str, torch.Tensor] | None = None  # per-token stats of the last generation batch
        self._opefo_capture_old_logps = False
        self._warned_generation_stats = False
        self._stats_sources_logged: set[str] = set()

    @property
    def needs_power_sums(self) -> bool:
        """The loss forward computes the power sums only where lambda* is computed from it (no accumulation, or
        evaluation); with accumulation they come with the rollout statistics (`_estimator_needs_power_sums`)."""
        return self._estimator_needs_power_sums and self._rollout_stats_source() is None

    @property
    def _estimator_needs_power_sums(self) -> bool:
        return self.args.entropy_change_estimator == "exact"

    # ------------------------------------------------------------------------------------------------------------
    # Whole-update-batch statistics at generation time (gradient accumulation)
    # ------------------------------------------------------------------------------------------------------------
    def _rollout_stats_source(self) -> str | None:
        """Where this generation batch's per-token statistics come from; None when lambda* needs none from it."""
        if not (self.model.training and self._arg("gradient_accumulation_steps") > 1):
            return None  # computed in the loss forward of the whole update batch
        if self._trl_computes_old_logps():
            return "old_logps"  # vLLM with importance-sampling correction: TRL's no-grad forward runs anyway
        if self._entropies_from_generation():
            return "generation"
        return "forward"

    def generate_rollouts(self, generate, prompts: list):
        self._opefo_stats = None
        source = self._rollout_stats_source()
        self._opefo_capture_old_logps = source == "old_logps"
        if source != "generation":
            return generate(prompts)
        model = self.accelerator.unwrap_model(self.model)
        with GenerationStats(model, self.temperature, power_sums=self._estimator_needs_power_sums) as recorder:
            outputs = generate(prompts)
        self._opefo_stats = recorder.per_token(outputs[1])
        if self._opefo_stats is None and not self._warned_generation_stats:
            self._warned_generation_stats = True
            warnings.warn(
                f"The LM head was called {len(recorder.steps)} times while generating completions that do not line up "
                "with them, so OPEFO's per-token statistics cannot be read off the generation logits; computing them "
                "with a no-grad forward instead (one extra forward per optimizer step; set rollout_entropy_source: "
                "forward to skip this attempt).",
                RuntimeWarning,
                stacklevel=2,
            )
        return outputs

    def old_logps_pass_request(self):
        if not self._opefo_capture_old_logps:
            return None
        # TRL's old-log-prob pass over the fresh rollouts (no grad, the policy that takes the update): the entropies
        # (and power sums) of the same forward.
        self._opefo_capture_old_logps = False
        return {"power_sums": self._estimator_needs_power_sums}

    def receive_old_logps_stats(self, stats: dict[str, torch.Tensor]) -> None:
        self._opefo_stats = stats

    def finish_generation_batch(self, output: dict[str, Any]) -> None:
        source = self._rollout_stats_source()
        if source is None:
            return
        stats, self._opefo_stats = self._opefo_stats, None
        if stats is None:
            source = "forward"
            delta_h = self._forward_delta_h(output)
        else:
            width = output["completion_ids"].size(1)
            stats = {key: _to_width(value.to(output["advantages"].device), width) for key, value in stats.items()}
            delta_h = token_entropy_change(
                stats["logp"],
                stats["entropy"],
                output["advantages"],
                estimator=self.args.entropy_change_estimator,
                sum_p2=stats.get("sum_p2"),
                sum_p2_logp=stats.get("sum_p2_logp"),
            )
        if source not in self._stats_sources_logged:
            self._stats_sources_logged.add(source)
            logger.info("OPEFO: whole-update-batch statistics for lambda* %s.", STATS_SOURCES[source])
        self.log_metric("opefo/extra_forward", float(source == "forward"))
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

    def _forward_delta_h(self, output: dict[str, Any]) -> torch.Tensor:
        """Delta H (lr = 1) of every token of the local generation batch, from one no-grad forward of the policy.

        The fallback where neither the generation logits nor TRL's old-log-prob pass are available (vLLM without
        importance-sampling correction, paged generation, tools, `rollout_entropy_source: forward`).
        """
        forward = self.policy_forward(
            torch.cat([output["prompt_ids"], output["completion_ids"]], dim=1),
            torch.cat([output["prompt_mask"], output["completion_mask"]], dim=1),
            output["completion_ids"].size(1),
            batch_size=self.args.per_device_train_batch_size,
            power_sums=self._estimator_needs_power_sums,
        )
        return token_entropy_change(
            forward.logps,
            forward.entropies,
            output["advantages"],
            estimator=self.args.entropy_change_estimator,
            sum_p2=forward.sum_p2,
            sum_p2_logp=forward.sum_p2_logp,
        )

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
