"""Entropy baselines of the papers, selectable on the `grpo` trainer: `GRPOBaselineTrainer` / `GRPOBaselineConfig`.

`entropy_method`:
- `none`: exactly `EntropyGRPOTrainer` (TRL's GRPO); no lever runs (tests/test_baselines.py checks parity).
- `clip_cov` (Cui et al. 2025, Clip-Cov): among valid tokens with `clip_cov_lb` < cov_t < `clip_cov_ub` that TRL's
  surrogate does not already clip (the boundary's `clip_status`, TRL's rule at its `importance_sampling_level`, token
  or sequence), k = max(1, int(clip_cov_ratio * N)) drawn uniformly get their loss zeroed (their advantage set to
  0 by lever 1: a zero advantage is a zero surrogate; they still count in the loss normaliser, as in the reference code).
  The reference scripts set both clip ratios to 1: `epsilon: 1.0`, `epsilon_high: 1.0` (configs/baseline_clip_cov*.yaml).
- `kl_cov` (Cui et al. 2025, KL-Cov): the top k valid tokens by cov get the extra loss beta * |logp - logp_old|
  (lever 2, aggregated with the same normaliser as TRL's policy loss for the `loss_type`), k = max(1,
  int(kl_cov_ratio * N)) as in the reference code (PRIME-RL, verl) or int(kl_cov_ratio * N) with
  `kl_cov_k_rounding: floor` (0 on micro-batches of fewer than 1 / kl_cov_ratio tokens). N = the valid tokens of the
  micro-batch on this process, as the reference code counts them per micro-batch.
  KL-Cov uses no PPO clipping; TRL's surrogate always clips, so the example config sets `epsilon` and `epsilon_high`
  to 1e4, which makes the clip bounds [0, 1e4 + 1], i.e. inactive for any ratio that occurs. With TRL's default
  epsilon (0.2) the surrogate is clipped as in GRPO and KL-Cov acts as a penalty on top. On-policy (one update per
  rollout batch, no old-log-prob pass) logp_old = logp and the penalty and its gradient are 0: a warning says so.
- `entropy_adv` (Cheng et al. 2025): A'_t = A_t + min(alpha * H_t.detach(), |A_t| / kappa) (lever 1).

cov_t = (A_t - mean A)(logp_t - mean logp) over the valid tokens of the micro-batch; the means are reduced over all
processes (identical on every rank). Random draws use a generator seeded from (seed, rank, call counter), checkpointed.

The other baselines of the papers are TRL's own fields, set by example configs: fixed entropy loss (`entropy_coef`),
Skywork-OR1 adaptive entropy (`use_adaptive_entropy`, `entropy_target`, `entropy_coef_delta/min/max`), Clip-Higher
(`epsilon_high`) and 80/20 (`top_entropy_quantile: 0.2`).

Cadence of TRL's adaptive entropy coefficient (`controller_update`). TRL moves `entropy_coef` by
+-`entropy_coef_delta` at the end of every optimizer step, from the token-weighted entropy of that step's
micro-batches over all processes; the coefficient applied during a step is the one set at the end of the previous
step. The papers' verl workflows (Skywork-OR1's rule as the PosAdv paper's Ada-Ent-Reg baseline runs it) update it once
per iteration, i.e. per rollout batch. With `controller_update: rollout_batch` (default) this trainer lets TRL update
only at the last optimizer step of each rollout batch, from the token-weighted entropy of all the rollout batch's
micro-batches (TRL's own window, which then spans the rollout batch), so the coefficient moves once per rollout batch;
`optimizer_step` is TRL's behaviour. How: TRL updates when `accelerator.sync_gradients` is true; during the loss
computation of the last micro-batch of an optimizer step that does not end a rollout batch, after the policy forward,
this trainer reports `sync_gradients` false to TRL's loss code (and restores it before the backward pass, which is
where accelerate reads it), and logs `entropy_coef` itself for that step (`defer_trl_entropy`, implemented in the TRL
boundary `_trl/loss.py`). TRL's code is not copied. With
`optimizer_step`, or with one optimizer step per rollout batch (`steps_per_generation * num_iterations ==
gradient_accumulation_steps`, TRL's default), the two are the same.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass, field

import torch

from ..functional.cov import KL_COV_K_ROUNDINGS, clip_cov_select, entropy_advantage, kl_cov_select, token_covariance
from ._card import CardDescription
from ._control import CONTROLLER_UPDATES, RandomStreamMixin, check_controller_update
from ._general_data import DOMAIN_COLUMN, GENERAL_DOMAIN, TARGET_DOMAIN, GeneralDataConfig
from ._mixing import combine_domains, load_general_dataset
from ._papers import COV_PAPER, ENTROPY_ADV_PAPER
from .base import EntropyGRPOTrainer, LossBatch
from .contract import aggregate_like_policy_loss

ENTROPY_METHODS = ("none", "clip_cov", "kl_cov", "entropy_adv")


@dataclass
class GRPOBaselineConfig(GeneralDataConfig):
    r"""
    Configuration of the `grpo` trainer ([`GRPOBaselineTrainer`]): every field of [`GeneralDataConfig`]
    ([`EntropyGRPOConfig`] plus the general-domain rows HEAL's Table 7 trains its baselines on) plus the entropy
    baselines that TRL does not have. With `entropy_method: none` and no general data it is exactly
    `EntropyGRPOConfig`.

    Parameters:
        entropy_method (`str`, *optional*, defaults to `"none"`):
            `none` (TRL's GRPO), `clip_cov`, `kl_cov` (Cui et al. 2025) or `entropy_adv` (Cheng et al. 2025).
        clip_cov_ratio (`float`, *optional*, defaults to `0.0002`):
            Clip-Cov: share of valid tokens whose loss is zeroed (reference scripts: 2e-4). In (0, 1].
        clip_cov_lb (`float`, *optional*, defaults to `1.0`):
            Clip-Cov: lower covariance bound of the candidates (reference: 1).
        clip_cov_ub (`float`, *optional*, defaults to `5.0`):
            Clip-Cov: upper covariance bound of the candidates (reference: 5), > `clip_cov_lb`.
        kl_cov_ratio (`float`, *optional*, defaults to `0.002`):
            KL-Cov: share of valid tokens (top by covariance) that get the KL penalty (2e-3 for 7B models, 2e-4 for
            32B). In (0, 1].
        kl_cov_coef (`float`, *optional*, defaults to `1.0`):
            KL-Cov: coefficient beta of |logp - logp_old| (reference: 1), >= 0.
        kl_cov_k_rounding (`str`, *optional*, defaults to `"at_least_one"`):
            KL-Cov: number k of penalised tokens among the N valid tokens of a micro-batch. `at_least_one`:
            k = max(1, int(kl_cov_ratio * N)), as the reference code (PRIME-RL's Entropy-Mechanism-of-RL and verl).
            `floor`: k = int(kl_cov_ratio * N), the formula taken literally (no token on micro-batches of fewer than
            1 / kl_cov_ratio tokens). (Clip-Cov's count is max(1, int(clip_cov_ratio * N)), as its reference code.)
        entropy_adv_alpha (`float`, *optional*, defaults to `0.4`):
            Entropy-Adv: scale alpha of the entropy bonus (paper: 0.4), >= 0.
        entropy_adv_kappa (`float`, *optional*, defaults to `2.0`):
            Entropy-Adv: the bonus is clipped at |A| / kappa (paper: 2), > 0.
        controller_update (`str`, *optional*, defaults to `"rollout_batch"`):
            When TRL's adaptive entropy coefficient (`use_adaptive_entropy`) moves: `rollout_batch`, once per rollout
            (generation) batch, from the token-weighted entropy of all its micro-batches over all processes (the
            papers' once-per-iteration verl workflow); or `optimizer_step`, after every optimizer step (TRL's own
            behaviour). See the module docstring for how. Used only with `use_adaptive_entropy`; `rollout_batch` then
            needs `steps_per_generation * num_iterations` to be a multiple of `gradient_accumulation_steps`. Either
            way, with one optimizer step per rollout batch the coefficient moves once per rollout batch.
    """

    entropy_method: str = field(
        default="none",
        metadata={
            "help": "Entropy baseline: none (exactly EntropyGRPOConfig/EntropyGRPOTrainer, TRL's GRPO), clip_cov, "
            "kl_cov (Cui et al. 2025) or entropy_adv (Cheng et al. 2025).",
            "choices": list(ENTROPY_METHODS),
        },
    )
    clip_cov_ratio: float = field(
        default=2e-4, metadata={"help": "Clip-Cov: share of valid tokens whose loss is zeroed, in (0, 1]. Ref: 2e-4."}
    )
    clip_cov_lb: float = field(
        default=1.0, metadata={"help": "Clip-Cov: lower covariance bound of candidates. Ref: 1."}
    )
    clip_cov_ub: float = field(
        default=5.0, metadata={"help": "Clip-Cov: upper covariance bound of candidates. Ref: 5."}
    )
    kl_cov_ratio: float = field(
        default=2e-3,
        metadata={"help": "KL-Cov: share of valid tokens (top covariance) penalised, in (0, 1]. Ref: 2e-3 (7B)."},
    )
    kl_cov_coef: float = field(default=1.0, metadata={"help": "KL-Cov: beta of |logp - logp_old|, >= 0. Ref: 1."})
    kl_cov_k_rounding: str = field(
        default="at_least_one",
        metadata={
            "help": "KL-Cov: tokens penalised among N: at_least_one (k = max(1, int(kl_cov_ratio * N)), the reference "
            "code's) or floor (k = int(kl_cov_ratio * N), 0 on small micro-batches).",
            "choices": list(KL_COV_K_ROUNDINGS),
        },
    )
    entropy_adv_alpha: float = field(
        default=0.4, metadata={"help": "Entropy-Adv: alpha of min(alpha * H, |A| / kappa), >= 0. Paper: 0.4."}
    )
    entropy_adv_kappa: float = field(
        default=2.0, metadata={"help": "Entropy-Adv: kappa of min(alpha * H, |A| / kappa), > 0. Paper: 2."}
    )
    controller_update: str = field(
        default="rollout_batch",
        metadata={
            "help": "When TRL's adaptive entropy coefficient (use_adaptive_entropy) moves: rollout_batch (once per "
            "rollout batch, entropy over all its micro-batches: the papers' workflow) or optimizer_step (TRL's).",
            "choices": list(CONTROLLER_UPDATES),
        },
    )

    def on_policy_inert(self) -> list[str]:
        """Settings of this config that do nothing with one update per rollout batch (logp_old = logp), for the dry
        run's equivalence warning (`healtrl.trainers.on_policy_inert`)."""
        if self.entropy_method == "kl_cov":
            return ["entropy_method kl_cov: its penalty |logp - logp_old| and the penalty's gradient are 0"]
        return []

    def __post_init__(self):
        if not (0.0 < self.clip_cov_ratio <= 1.0):
            raise ValueError(f"clip_cov_ratio must be in (0, 1], got {self.clip_cov_ratio}.")
        if not (self.clip_cov_ub > self.clip_cov_lb):
            raise ValueError(
                f"clip_cov_ub must be > clip_cov_lb, got clip_cov_lb={self.clip_cov_lb}, clip_cov_ub={self.clip_cov_ub}."
            )
        if not (0.0 < self.kl_cov_ratio <= 1.0):
            raise ValueError(f"kl_cov_ratio must be in (0, 1], got {self.kl_cov_ratio}.")
        if not (self.kl_cov_coef >= 0):
            raise ValueError(f"kl_cov_coef must be >= 0, got {self.kl_cov_coef}.")
        if not (self.entropy_adv_alpha >= 0):
            raise ValueError(f"entropy_adv_alpha must be >= 0, got {self.entropy_adv_alpha}.")
        if not (self.entropy_adv_kappa > 0):
            raise ValueError(f"entropy_adv_kappa must be > 0, got {self.entropy_adv_kappa}.")
        super().__post_init__()
        check_controller_update(self, active=bool(self.use_adaptive_entropy))


class GRPOBaselineTrainer(RandomStreamMixin, EntropyGRPOTrainer):
    """The `grpo` trainer: TRL's GRPO, optionally with Clip-Cov, KL-Cov or Entropy-Adv (`entropy_method`).

    Logged: `cov/selected_tokens` (Clip-Cov, KL-Cov), `cov/kl_penalty` (KL-Cov), `entropy_adv/bonus` (mean bonus).
    """

    config_class = GRPOBaselineConfig
    # The method of the card follows `entropy_method`.
    card_variant_field = "entropy_method"
    card_variants = {
        "none": EntropyGRPOTrainer.card,
        "clip_cov": CardDescription(
            name="Clip-Cov",
            paper=COV_PAPER,
            description=(
                "GRPO in which a few randomly drawn tokens (a share clip_cov_ratio) among those whose covariance "
                "between log-probability and advantage lies in (clip_cov_lb, clip_cov_ub) are left out of the "
                "policy-gradient loss, so that the high-covariance tokens that drive entropy collapse stop doing so."
            ),
            summary_keys=("cov/selected_tokens",),
            tags=("clip-cov",),
        ),
        "kl_cov": CardDescription(
            name="KL-Cov",
            paper=COV_PAPER,
            description=(
                "GRPO with a KL penalty kl_cov_coef * |log p - log p_old| on the tokens (a share kl_cov_ratio) with "
                "the largest covariance between log-probability and advantage, the tokens that drive entropy collapse."
            ),
            summary_keys=("cov/kl_penalty",),
            tags=("kl-cov",),
        ),
        "entropy_adv": CardDescription(
            name="Entropy-Adv",
            paper=ENTROPY_ADV_PAPER,
            description=(
                "GRPO whose per-token advantage gets an entropy bonus min(alpha * H_t, |A_t| / kappa) (H_t detached), "
                "so that high-entropy, exploratory tokens are reinforced more; the cap keeps the sign of A_t when "
                "kappa > 1."
            ),
            summary_keys=("entropy_adv/bonus",),
            tags=("entropy-adv",),
        ),
    }

    def __init__(self, model, reward_funcs=None, args: GRPOBaselineConfig | None = None, train_dataset=None, **kwargs):
        # A plain EntropyGRPOConfig or GRPOConfig is converted by the base trainer (entropy_method: none).
        super().__init__(model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset, **kwargs)
        self.entropy_method = getattr(self.args, "entropy_method", "none")
        # No healtrl controller follows the entropy here (TRL's adaptive coefficient has its own window): only the
        # random streams of Clip-Cov (`RandomStreamMixin`).
        # A plain EntropyGRPOConfig (entropy_method none) has no controller_update: TRL's per-step behaviour.
        self.defer_trl_entropy = bool(self.use_adaptive_entropy) and (
            getattr(self.args, "controller_update", "optimizer_step") == "rollout_batch"
        )
        if self.entropy_method == "kl_cov" and not self.trl_computes_old_logps():
            warnings.warn(
                "KL-Cov on-policy: with one update per rollout batch (num_iterations=1 and steps_per_generation equal "
                "to gradient_accumulation_steps) logp_old = logp, so the penalty beta * |logp - logp_old| and its "
                "gradient are 0 and KL-Cov is plain GRPO. Use num_iterations > 1 or steps_per_generation > "
                "gradient_accumulation_steps.",
                UserWarning,
                stacklevel=2,
            )
        epsilon_high = getattr(self.args, "epsilon_high", None)
        if epsilon_high is not None and epsilon_high != self.args.epsilon and not self.trl_computes_old_logps():
            warnings.warn(
                f"Clip-Higher on-policy: with one update per rollout batch the importance ratio is 1, so epsilon_high "
                f"{epsilon_high:g} != epsilon {self.args.epsilon:g} has no effect (the clip never acts) and the run "
                "is GRPO. Use num_iterations > 1 or steps_per_generation > gradient_accumulation_steps.",
                UserWarning,
                stacklevel=2,
            )

    # -- lever 4: the same target + general rows as HEAL, for HEAL's Table 7 baselines ------------------------------
    def mix_datasets(self, train_dataset, args):
        general = load_general_dataset(args) if getattr(args, "general_dataset_name", None) is not None else None
        if general is None:
            return train_dataset
        if not hasattr(train_dataset, "__len__"):
            raise ValueError(
                "general_dataset_name mixes general rows into the training rows, which needs a map-style "
                f"datasets.Dataset; train_dataset is a {type(train_dataset).__name__} (streaming). Load it without "
                "streaming=True, or leave general_dataset_name unset."
            )
        # One pool, shuffled by TRL's sampler: HEAL's `mixing: shuffle` without the EDA reward.
        return combine_domains(train_dataset, general, DOMAIN_COLUMN, TARGET_DOMAIN, GENERAL_DOMAIN)

    def _global_cov(self, batch: LossBatch, adv: torch.Tensor) -> torch.Tensor:
        mask = batch.mask.to(torch.float32)
        logp = batch.per_token_logps.detach().float()
        sums = torch.stack([(adv.float() * mask).sum(), (logp * mask).sum(), mask.sum()])
        if self.accelerator.num_processes > 1:
            sums = self.accelerator.reduce(sums, reduction="sum")
        n = sums[2].clamp(min=1.0)
        return token_covariance(logp, adv, batch.mask, means=(sums[0] / n, sums[1] / n))

    def shape_advantages(self, advantages: torch.Tensor, batch: LossBatch):
        method = self.entropy_method
        if method == "none":
            return None
        adv = advantages.unsqueeze(1).expand_as(batch.mask).to(batch.per_token_logps.dtype)
        if method == "entropy_adv":
            # Cheng et al. 2025: A'_t = A_t + min(alpha * H_t.detach(), |A_t| / kappa).
            shaped = entropy_advantage(adv, batch.entropies, self.args.entropy_adv_alpha, self.args.entropy_adv_kappa)
            if batch.mode == "train":
                self.log_metric("entropy_adv/bonus", self.global_masked_mean(shaped - adv, batch.mask))
            return shaped
        if method != "clip_cov" or batch.mode != "train":
            return None  # KL-Cov selects and penalises in `extra_loss`, from the same batch
        # Cui et al. 2025, Clip-Cov: cov_t = (A_t - mean A)(logp_t - mean logp). Tokens TRL's surrogate already clips
        # are not candidates, as in the reference code: TRL's own rule (`clip_status`: the importance ratio, per token
        # or per sequence as `importance_sampling_level` sets, outside [1 - eps_low, 1 + eps_high] in the direction of
        # the advantage before lever 1).
        upper, lower = self.clip_status(batch)
        selected = clip_cov_select(
            self._global_cov(batch, adv),
            batch.mask,
            self.args.clip_cov_ratio,
            self.args.clip_cov_lb,
            self.args.clip_cov_ub,
            exclude=upper | lower,
            generator=self.next_generator(),
        )
        self.log_metric("cov/selected_tokens", selected.sum())
        return adv.masked_fill(selected, 0.0)

    def extra_loss(self, batch: LossBatch):
        if self.entropy_method != "kl_cov" or batch.mode != "train":
            return None
        # Cui et al. 2025, KL-Cov: the top-k tokens by cov_t = (A_t - mean A)(logp_t - mean logp), A the advantages
        # TRL's loss used (KL-Cov shapes none), get + beta * |logp - logp_old|.
        adv = batch.advantages.unsqueeze(1).expand_as(batch.mask).to(batch.per_token_logps.dtype)
        cov = self._global_cov(batch, adv)
        selected = kl_cov_select(cov, batch.mask, self.args.kl_cov_ratio, self.args.kl_cov_k_rounding)
        self.log_metric("cov/selected_tokens", selected.sum())
        penalty = self.args.kl_cov_coef * (batch.per_token_logps - batch.old_per_token_logps).abs()
        term = aggregate_like_policy_loss(self, penalty * selected, batch.mask, batch)
        self.log_metric("cov/kl_penalty", term.detach())
        return term
