"""`AERTrainer`: Adaptive Entropy Regularization (Zhang et al., AER (arXiv:2510.10959) §4.2, Appendix A.2) on top of
TRL's GRPO.

Objective (AER eq. 7): J_AER = J_GRPO + E_q[lambda_t(q) * H(pi_theta(. | q))], with
- C1 (eq. 8-9): lambda_t(q) = alpha_t * max(0, rho - g(q)) / (rho + eps) + alpha_t * 1[rho = 0, g(q) = 0], g(q) the
  group accuracy of prompt q's m responses;
- C2 (eq. 10): target entropy H* = tau * H0, H0 the policy entropy at the first training iteration (or given, or
  estimated before training);
- C3 (eq. 11): alpha_{t+1} = max(0, alpha_t + eta * sign(H* - H_t)), once per iteration t.

Where the pieces live:
- g(q) is computed once per generation batch from the gathered rewards (identical on every rank; the hook
  `rollout_columns`) and travels with the batch as the column `aer_group_accuracy`, so that it is split, shuffled and
  buffered with the rest of the batch.
- The entropy term uses the per-token entropies of the loss forward (lever 2, `extra_loss`), with gradients: no
  second forward. It does not depend on `loss_type` (TRL's entropy bonus does not either).
- Normalisation (`entropy_normalization`, `healtrl.functional.aer_entropy_term`):
  - `sequence` (default, the paper's): H(pi(. | q)) is eq. 4's sequence-level entropy, the mean token entropy of one
    response, and eq. 7 averages lambda(q) H over the prompts, each estimated by its m responses. Every prompt has m
    responses, so this is the mean over the step's responses of lambda(q_i) * (mean token entropy of response i). The
    term of one micro-batch is that sum over its B responses divided by B; the base trainer divides it by the
    gradient-accumulation steps and DDP averages the gradients over the processes. TRL cuts every rollout batch into
    micro-batches of exactly `per_device_train_batch_size` responses, so B * accumulation steps * processes is the
    number of responses of the optimizer step: the micro-batch terms add up to eq. 7's mean over the whole step (not
    a mean of per-micro-batch means that would weigh micro-batches unequally).
  - `token`: the token mean over the micro-batch, -sum_t lambda(q_t) H_t / sum_t 1, divided by the accumulation steps,
    exactly like TRL's `entropy_coef` bonus: with the same lambda for every prompt it is TRL's `entropy_coef = lambda`
    bonus (the tests check it). Each prompt weighs by its number of tokens, as a token-level loss (DAPO) does.
- H_t of C3 (and H0 of C2) are measured the same way as the objective's entropy, over all processes: with `sequence`,
  the mean over the window's responses of their mean token entropy (eq. 4, averaged over prompts as eq. 5 does: the
  paper's "policy entropy" is this sequence-level quantity); with `token`, the token-weighted mean entropy. H0 is the
  first H_t (eq. 10: "the policy entropy at initialization, obtained in the first training step"), so H* and every
  later H_t measure the same quantity over the same kind of window.
- Cadence (`controller_update`, healtrl.trainers._control): `rollout_batch` (default) updates alpha once per rollout
  batch, as the paper's workflow (i)-(iv) does once per iteration; the window of H_t is then every micro-batch of the
  rollout batch (all its optimizer steps and `num_iterations` passes). `optimizer_step` updates after every optimizer
  step, H_t over that step's micro-batches. With one optimizer step per rollout batch the two are the same.

The alpha update, step by step: `extra_loss` (every training micro-batch) calls `record_entropy(batch)`, which adds
the micro-batch's entropy [sum, count], over all processes, to the controller's window (`EntropyControlMixin`, the one
accumulator); after the optimizer step that ends the window, the mixin calls `update_controller(entropy)` here with
H_t = sum / count, which sets H0 the first time (C2) and moves alpha by eq. 11 (C3). alpha, H0 and the partial window
are the checkpointed method state (`method_state`); nothing else of the update is kept between steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..functional.aer import (
    ENTROPY_NORMALIZATIONS,
    aer_coefficients,
    aer_entropy_term,
    aer_update_alpha,
    sequence_entropies,
)
from ._card import CardDescription
from ._control import CONTROLLER_UPDATES, EntropyControlMixin, check_controller_update
from ._papers import AER_PAPER
from .base import EntropyGRPOConfig, EntropyGRPOTrainer, LossBatch

GROUP_ACCURACY_KEY = "aer_group_accuracy"


@dataclass
class AERConfig(EntropyGRPOConfig):
    r"""
    Configuration for [`AERTrainer`]: every field of [`EntropyGRPOConfig`] plus AER's (AER §4.2, Table 3).

    Parameters:
        rho (`float`, *optional*, defaults to `0.2`):
            Pivot accuracy rho in [0, 1] of C1 (eq. 9): prompts whose group accuracy is below rho get a positive
            entropy coefficient, growing linearly to alpha at accuracy 0.
        difficulty_aware (`bool`, *optional*, defaults to `True`):
            C1 on (eq. 9). Off: every prompt gets the coefficient alpha (AER Table 2's ablations "w/ Fixed Coeff."
            and "w/ Adaptive Coeff. (C2&C3)").
        adaptive_alpha (`bool`, *optional*, defaults to `True`):
            C2 and C3 on (eq. 10-11: alpha steered towards the target entropy). Off: alpha stays `alpha_init`, a fixed
            coefficient (Table 2's "w/ Fixed Coeff." and "w/ Difficulty-Aware. (C1)").
        tau (`float`, *optional*, defaults to `0.4`):
            Reduction ratio of C2 (eq. 10): target entropy H* = tau * H0. The paper states tau in (0, 1) and ablates
            up to 1.2, so any tau > 0 is accepted.
        eta (`float`, *optional*, defaults to `0.005`):
            Step size of the sign update of alpha (C3, eq. 11), > 0.
        alpha_init (`float`, *optional*, defaults to `0.0`):
            alpha_0, the initial global scale. Not stated in the paper. 0 is chosen because (i) it makes the first
            steps exactly GRPO, the regime in which H0 is measured, (ii) eq. 11 then only raises alpha once the entropy
            has fallen below H*, as the paper describes ("prevent the policy entropy from falling below this target"),
            and (iii) it mirrors the Skywork-OR1 adaptive entropy controller AER's C3 follows (He et al. 2025), whose
            coefficient starts at 0. With eta = 0.005 alpha reaches the magnitude of common fixed coefficients
            (0.001-0.01) within a few steps of the entropy crossing H*.
        initial_entropy (`float` or `None`, *optional*, defaults to `None`):
            H0 given explicitly (nats per token). `None`: measured (see `initial_entropy_prompts`).
        initial_entropy_prompts (`int`, *optional*, defaults to `0`):
            0: H0 is the global policy entropy of the first training step (the paper's choice). N > 0: H0 is estimated
            before training from `num_generations` responses to each of N training prompts (the PosAdv paper's
            Appendix E.2 setting uses 1,000 prompts).
        eps (`float`, *optional*, defaults to `1e-8`):
            The constant epsilon of eq. 9.
        accuracy_reward (`str` or `None`, *optional*, defaults to `None`):
            Name of the reward function whose value is the correctness r(q, o) of eq. 8. `None`: TRL's weighted sum
            of all reward functions.
        correct_threshold (`float`, *optional*, defaults to `0.5`):
            A response counts as correct (r = 1 in eq. 8) when that reward is >= this threshold (0.5 reads a {0, 1}
            reward exactly).
        controller_update (`str`, *optional*, defaults to `"rollout_batch"`):
            When C3 (eq. 11) moves alpha: `rollout_batch`, once per rollout (generation) batch, after its last
            optimizer step, with H_t the entropy of all the batch's micro-batches (the paper's workflow: one update
            per iteration; its configs take 4 optimizer steps per rollout batch, 128 prompts in mini-batches of 32);
            or `optimizer_step`, after every optimizer step, with H_t that step's entropy. `rollout_batch` needs
            `steps_per_generation * num_iterations` to be a multiple of `gradient_accumulation_steps`.
        entropy_normalization (`str`, *optional*, defaults to `"sequence"`):
            How eq. 7's entropy averages, and so H_t and H0: `sequence` (the paper's eq. 4 then eq. 7: each response's
            mean token entropy, averaged over responses) or `token` (the token mean, as TRL's `entropy_coef` bonus).
            See the module docstring for how it splits over micro-batches.
    """

    difficulty_aware: bool = field(
        default=True,
        metadata={"help": "C1 (AER eq. 9) on; off: every prompt's coefficient is alpha (Table 2 ablations)."},
    )
    adaptive_alpha: bool = field(
        default=True,
        metadata={"help": "C2 and C3 (eq. 10-11) on; off: alpha stays alpha_init (Table 2 ablations)."},
    )
    rho: float = field(
        default=0.2,
        metadata={
            "help": "Pivot accuracy rho in [0, 1] of AER's difficulty-aware coefficients (AER eq. 9). Paper: 0.2."
        },
    )
    tau: float = field(
        default=0.4,
        metadata={"help": "Reduction ratio of the target entropy H* = tau * H0 (AER eq. 10), > 0. Paper: 0.4."},
    )
    eta: float = field(
        default=0.005,
        metadata={"help": "Step size of the sign update of alpha (AER eq. 11), > 0. Paper: 0.005."},
    )
    alpha_init: float = field(
        default=0.0,
        metadata={
            "help": "alpha_0, initial global scale of the entropy coefficients (>= 0). Not stated in the paper; 0 keeps "
            "the first steps pure GRPO and lets eq. 11 raise alpha once the entropy falls below H* (as Skywork-OR1's "
            "adaptive entropy control, which AER's C3 follows)."
        },
    )
    initial_entropy: float | None = field(
        default=None,
        metadata={"help": "H0 given explicitly (nats/token, > 0). None: measured (see initial_entropy_prompts)."},
    )
    initial_entropy_prompts: int = field(
        default=0,
        metadata={
            "help": "0: H0 = global policy entropy of the first training step (paper). N > 0: H0 estimated before "
            "training from num_generations responses to N training prompts."
        },
    )
    eps: float = field(
        default=1e-8, metadata={"help": "Constant epsilon of AER eq. 9 (>= 0; > 0 when rho = 0). Paper: 1e-8."}
    )
    accuracy_reward: str | None = field(
        default=None,
        metadata={
            "help": "Reward function giving the correctness r(q, o) of AER eq. 8. None: the weighted sum of all "
            "reward functions."
        },
    )
    correct_threshold: float = field(
        default=0.5,
        metadata={"help": "A response is correct (r = 1 in AER eq. 8) when its accuracy reward is >= this value."},
    )
    controller_update: str = field(
        default="rollout_batch",
        metadata={
            "help": "When alpha moves (AER eq. 11): rollout_batch (once per rollout batch, H_t over all its "
            "micro-batches: the paper's once-per-iteration workflow) or optimizer_step (after every optimizer step).",
            "choices": list(CONTROLLER_UPDATES),
        },
    )
    entropy_normalization: str = field(
        default="sequence",
        metadata={
            "help": "Averaging of the entropy term (AER eq. 4, 7) and of H_t, H0: sequence (mean token entropy per "
            "response, then mean over responses: the paper's) or token (token mean, as TRL's entropy_coef bonus).",
            "choices": list(ENTROPY_NORMALIZATIONS),
        },
    )

    def __post_init__(self):
        if not self.adaptive_alpha and not self.alpha_init > 0:
            raise ValueError(
                "adaptive_alpha false keeps alpha at alpha_init, which is 0: the run would be GRPO. Set alpha_init to "
                "the fixed coefficient (> 0)."
            )
        if not (0.0 <= self.rho <= 1.0):
            raise ValueError(f"rho must be in [0, 1] (AER pivot accuracy, AER eq. 9), got {self.rho}.")
        if not (self.tau > 0) or math.isinf(self.tau):
            raise ValueError(f"tau must be > 0 (target entropy H* = tau * H0, AER eq. 10), got {self.tau}.")
        if not (self.eta > 0) or math.isinf(self.eta):
            raise ValueError(f"eta must be > 0 (step size of alpha, AER eq. 11), got {self.eta}.")
        if not (self.alpha_init >= 0) or math.isinf(self.alpha_init):
            raise ValueError(f"alpha_init must be >= 0 (alpha_0 of AER eq. 11), got {self.alpha_init}.")
        if self.initial_entropy is not None and not (0 < self.initial_entropy < math.inf):
            raise ValueError(f"initial_entropy must be > 0 (H0 of AER eq. 10) or null, got {self.initial_entropy}.")
        if self.initial_entropy_prompts < 0:
            raise ValueError(f"initial_entropy_prompts must be >= 0, got {self.initial_entropy_prompts}.")
        if self.initial_entropy is not None and self.initial_entropy_prompts > 0:
            raise ValueError("Set either initial_entropy or initial_entropy_prompts > 0, not both (both give H0).")
        if not (self.eps >= 0) or (self.rho == 0 and self.eps == 0):
            raise ValueError(f"eps must be >= 0, and > 0 when rho = 0 (AER eq. 9), got {self.eps}.")
        super().__post_init__()
        check_controller_update(self)


class AERTrainer(EntropyControlMixin, EntropyGRPOTrainer):
    """GRPO with Adaptive Entropy Regularization (AER §4.2). Constructor: the same as `EntropyGRPOTrainer`.

    Logged metrics (TRL's buffer): `aer/alpha` (the alpha of the step), `aer/positive_coef_frac` (share of the batch's
    prompts with lambda > 0), `aer/hard_frac`, `aer/mean_coef` (mean lambda over prompts); at every update of alpha
    (once per rollout batch or per optimizer step, `controller_update`): `aer/entropy` (H_t, measured as
    `entropy_normalization` says), `aer/target_entropy` (H*), `aer/initial_entropy` (H0).
    """

    config_class = AERConfig
    card = CardDescription(
        name="AER",
        paper=AER_PAPER,
        description=(
            "Adaptive Entropy Regularization: GRPO plus an entropy bonus whose per-prompt coefficient grows as the "
            "prompt's group accuracy falls below rho (eq. 8-9), scaled by a global alpha that a sign rule (eq. 11) steers "
            "so the policy entropy settles at tau times its initial value (eq. 10)."
        ),
        summary_keys=("aer/alpha", "aer/target_entropy"),
        tags=("aer",),
    )

    def __init__(self, model, reward_funcs=None, args: AERConfig | None = None, train_dataset=None, **kwargs):
        super().__init__(model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset, **kwargs)
        if self.args.initial_entropy_prompts > 0 and not hasattr(self.train_dataset, "__len__"):
            raise ValueError(
                "initial_entropy_prompts > 0 estimates H0 from prompts drawn from the training set, which a streaming "
                "IterableDataset cannot shuffle or index. Set initial_entropy_prompts: 0 (H0 from the first step, the "
                "paper's choice), give initial_entropy, or use a map-style datasets.Dataset."
            )
        if self.args.accuracy_reward is not None and self.args.accuracy_reward not in self.reward_func_names:
            raise ValueError(
                f"accuracy_reward '{self.args.accuracy_reward}' is not a reward function of this trainer; choose one "
                f"of {self.reward_func_names}."
            )
        self.init_entropy_control(self.args.controller_update, measure=self.args.entropy_normalization)
        self.alpha = float(self.args.alpha_init)
        self.initial_entropy: float | None = self.args.initial_entropy

    @property
    def target_entropy(self) -> float | None:
        """H* = tau * H0 (AER eq. 10), None until H0 is known."""
        return None if self.initial_entropy is None else self.args.tau * self.initial_entropy

    # -- C1: group accuracy from the gathered rewards --------------------------------------------------------------
    def _group_accuracy(self, rewards_per_func: torch.Tensor, num_generations: int) -> torch.Tensor:
        """g(q) of AER eq. 8 for every completion of the gathered batch (its prompt's value), shape (B_global,)."""
        if self.args.accuracy_reward is None:
            reward = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        else:
            reward = rewards_per_func[:, self.reward_func_names.index(self.args.accuracy_reward)]
        correct = (torch.nan_to_num(reward, nan=-math.inf) >= self.args.correct_threshold).float()
        return correct.view(-1, num_generations).mean(dim=1).repeat_interleave(num_generations)

    def _coefficients(self, accuracy: torch.Tensor, alpha: float) -> torch.Tensor:
        """lambda_t(q) per prompt: eq. 9 with C1 on, alpha for every prompt with `difficulty_aware` off."""
        if not self.args.difficulty_aware:
            return torch.full_like(accuracy if accuracy.is_floating_point() else accuracy.float(), float(alpha))
        return aer_coefficients(accuracy, alpha, self.args.rho, self.args.eps)

    def rollout_columns(self, rewards_per_func: torch.Tensor, num_generations: int) -> dict[str, torch.Tensor]:
        accuracy = self._group_accuracy(rewards_per_func, num_generations)
        if self.mode == "train":
            per_prompt = accuracy[::num_generations]
            coef = self._coefficients(per_prompt, self.alpha)
            self.log_metric("aer/positive_coef_frac", (coef > 0).float().mean())
            # C1's "hard" set (the prompts that get lambda > 0 as soon as alpha > 0).
            hard = self._coefficients(per_prompt, 1.0) > 0
            self.log_metric("aer/hard_frac", hard.float().mean())
            self.log_metric("aer/mean_coef", coef.mean())
        return {GROUP_ACCURACY_KEY: accuracy}

    # -- eq. 7: the entropy term from the loss forward -------------------------------------------------------------
    def extra_loss(self, batch: LossBatch):
        if batch.mode == "train":
            self.record_entropy(batch)
        accuracy = batch.inputs.get(GROUP_ACCURACY_KEY)
        if batch.mode == "train":
            self.log_metric("aer/alpha", self.alpha)
        if accuracy is None or self.alpha == 0.0:
            return None  # lambda = 0 for every prompt: exactly GRPO, no extra work
        # AER eq. 9: one coefficient per prompt, broadcast to its completion's tokens.
        coef = self._coefficients(accuracy, self.alpha)
        num_rows = batch.mask.size(0)
        if batch.mode == "train" and num_rows != self.args.per_device_train_batch_size:
            # The per-sequence normalisation relies on equal micro-batches (see the module docstring).
            raise RuntimeError(
                f"AER got a training micro-batch of {num_rows} responses; TRL's are per_device_train_batch_size "
                f"({self.args.per_device_train_batch_size}) long, which the entropy term's normalisation relies on."
            )
        # AER eq. 7: maximise E_q[lambda(q) H(pi(. | q))] <=> minimise its negative. With `sequence`, the
        # micro-batch's sum over responses divided by its B responses: after the base's division by the accumulation
        # steps and DDP's average over processes, the step's mean over all its responses (module docstring).
        term = aer_entropy_term(
            batch.entropies, batch.mask, coef, self.args.entropy_normalization, num_sequences=num_rows
        )
        return -term

    # -- C2 and C3 once per rollout batch (or optimizer step) ------------------------------------------------------
    def update_controller(self, entropy: float) -> None:
        if self.initial_entropy is None:
            self.initial_entropy = entropy  # C2: H0 = the first H_t, the first iteration's entropy (AER eq. 10)
        target = self.target_entropy
        if self.args.adaptive_alpha:
            self.alpha = aer_update_alpha(self.alpha, self.args.eta, target, entropy)  # C3, AER eq. 11
        self.log_metric("aer/entropy", entropy)
        self.log_metric("aer/target_entropy", target)
        self.log_metric("aer/initial_entropy", self.initial_entropy)

    # -- C2 option: H0 estimated before training --------------------------------------------------------------------
    def before_training(self, resume_checkpoint: str | None) -> None:
        # A resumed run takes H0 from the checkpoint's method state, loaded after this hook.
        if self.initial_entropy is None and self.args.initial_entropy_prompts > 0 and resume_checkpoint is None:
            self.initial_entropy = self.estimate_initial_entropy(self.args.initial_entropy_prompts)

    @torch.no_grad()
    def estimate_initial_entropy(self, num_prompts: int) -> float:
        """Entropy of `num_generations` responses to each of the first `num_prompts` training prompts (shuffled with
        `args.seed`), under the current policy, reduced over processes, averaged as `entropy_normalization` says (the
        mean over responses of their mean token entropy, or the token mean): the same measure as H_t. Logs nothing."""
        dataset = self.train_dataset.shuffle(seed=self.args.seed).select(
            range(min(num_prompts, len(self.train_dataset)))
        )
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        rows = [dataset[i] for i in range(rank, len(dataset), world)]
        per_call = max(1, self.args.per_device_train_batch_size // self.num_generations)
        n_calls = math.ceil(math.ceil(len(dataset) / world) / per_call)
        was_training = self.model.training
        self.model.train()  # generation settings of training (num_generations, temperature)
        total = torch.zeros(2, dtype=torch.float64, device=self.accelerator.device)
        try:
            with self.discarded_metrics():
                for c in range(n_calls):
                    chunk = rows[c * per_call : (c + 1) * per_call] or rows[:1]  # every rank takes part in gathers
                    weight = 1.0 if rows[c * per_call : (c + 1) * per_call] else 0.0
                    batch = [row for row in chunk for _ in range(self.num_generations)]
                    out = self.generate_and_score(batch)
                    ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
                    attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
                    ent = self.policy_forward(ids, attn, out["completion_ids"].size(1), batch_size=len(batch)).entropies
                    mask = out["completion_mask"].to(ent.dtype)
                    if self.args.entropy_normalization == "sequence":
                        counted = (mask.sum(-1) > 0).to(ent.dtype)
                        stats = torch.stack([(sequence_entropies(ent, mask) * counted).sum(), counted.sum()])
                    else:
                        stats = torch.stack([(ent * mask).sum(), mask.sum()])
                    total += weight * stats.double()
        finally:
            self.model.train(was_training)
        total = self.accelerator.reduce(total, reduction="sum") if world > 1 else total
        return float(total[0] / total[1].clamp(min=1.0))

    # -- checkpointed state ------------------------------------------------------------------------------------------
    def method_state(self):
        return {"alpha": self.alpha, "initial_entropy": self.initial_entropy, **super().method_state()}

    def load_method_state(self, state):
        super().load_method_state(state)
        self.alpha = float(state["alpha"])
        self.initial_entropy = state["initial_entropy"]
