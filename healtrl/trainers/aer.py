"""`AERTrainer`: Adaptive Entropy Regularization (Zhang et al., aer.txt §4.2, Appendix A.2) on top of TRL's GRPO.

Objective (aer.txt eq. 7): J_AER = J_GRPO + E_q[lambda_t(q) * H(pi_theta(. | q))], with
- C1 (eq. 8-9): lambda_t(q) = alpha_t * max(0, rho - g(q)) / (rho + eps) + alpha_t * 1[rho = 0, g(q) = 0], g(q) the
  group accuracy of prompt q's m responses;
- C2 (eq. 10): target entropy H* = tau * H0, H0 the policy entropy at the first training step (or given, or estimated
  before training);
- C3 (eq. 11): alpha_{t+1} = max(0, alpha_t + eta * sign(H* - H_t)) after every optimizer step.

Where the pieces live:
- g(q) is computed once per generation batch from the gathered rewards (identical on every rank) and travels with the
  batch as the column `aer_group_accuracy`, so that it is split, shuffled and buffered with the rest of the batch.
- The entropy term uses the per-token entropies of the loss forward (lever 2, `extra_loss`), with gradients: no
  second forward. Normalisation: like TRL's own `entropy_coef` bonus, the term of one micro-batch is the token mean
  over the micro-batch, -sum_t lambda(q_t) H_t / sum_t 1 (each token weighted by its prompt's coefficient), divided by
  the gradient-accumulation steps by the base trainer. It does not depend on `loss_type` (TRL's bonus does not either):
  with the same lambda for every prompt, AER's term is exactly TRL's `entropy_coef = lambda` bonus, which the tests
  check. The paper's H(pi(. | q)) is the mean token entropy of q's responses; the token mean over the micro-batch
  weights each prompt by its number of tokens, as a token-level loss (DAPO) does.
- H_t of C3 is the token-weighted mean entropy of all micro-batches of the optimizer step over all processes.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field

import torch

from ..functional.aer import aer_coefficients, aer_update_alpha
from ._control import EntropyControlMixin
from .base import EntropyGRPOConfig, EntropyGRPOTrainer, LossBatch

GROUP_ACCURACY_KEY = "aer_group_accuracy"


@dataclass
class AERConfig(EntropyGRPOConfig):
    r"""
    Configuration for [`AERTrainer`]: every field of [`EntropyGRPOConfig`] plus AER's (aer.txt §4.2, Table 3).

    Parameters:
        rho (`float`, *optional*, defaults to `0.2`):
            Pivot accuracy rho in [0, 1] of C1 (eq. 9): prompts whose group accuracy is below rho get a positive
            entropy coefficient, growing linearly to alpha at accuracy 0.
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
    """

    rho: float = field(
        default=0.2,
        metadata={
            "help": "Pivot accuracy rho in [0, 1] of AER's difficulty-aware coefficients (aer.txt eq. 9). Paper: 0.2."
        },
    )
    tau: float = field(
        default=0.4,
        metadata={"help": "Reduction ratio of the target entropy H* = tau * H0 (aer.txt eq. 10), > 0. Paper: 0.4."},
    )
    eta: float = field(
        default=0.005,
        metadata={"help": "Step size of the sign update of alpha (aer.txt eq. 11), > 0. Paper: 0.005."},
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
        default=1e-8, metadata={"help": "Constant epsilon of aer.txt eq. 9 (>= 0; > 0 when rho = 0). Paper: 1e-8."}
    )
    accuracy_reward: str | None = field(
        default=None,
        metadata={
            "help": "Reward function giving the correctness r(q, o) of aer.txt eq. 8. None: the weighted sum of all "
            "reward functions."
        },
    )
    correct_threshold: float = field(
        default=0.5,
        metadata={"help": "A response is correct (r = 1 in aer.txt eq. 8) when its accuracy reward is >= this value."},
    )

    def __post_init__(self):
        if not (0.0 <= self.rho <= 1.0):
            raise ValueError(f"rho must be in [0, 1] (AER pivot accuracy, aer.txt eq. 9), got {self.rho}.")
        if not (self.tau > 0) or math.isinf(self.tau):
            raise ValueError(f"tau must be > 0 (target entropy H* = tau * H0, aer.txt eq. 10), got {self.tau}.")
        if not (self.eta > 0) or math.isinf(self.eta):
            raise ValueError(f"eta must be > 0 (step size of alpha, aer.txt eq. 11), got {self.eta}.")
        if not (self.alpha_init >= 0) or math.isinf(self.alpha_init):
            raise ValueError(f"alpha_init must be >= 0 (alpha_0 of aer.txt eq. 11), got {self.alpha_init}.")
        if self.initial_entropy is not None and not (0 < self.initial_entropy < math.inf):
            raise ValueError(f"initial_entropy must be > 0 (H0 of aer.txt eq. 10) or null, got {self.initial_entropy}.")
        if self.initial_entropy_prompts < 0:
            raise ValueError(f"initial_entropy_prompts must be >= 0, got {self.initial_entropy_prompts}.")
        if self.initial_entropy is not None and self.initial_entropy_prompts > 0:
            raise ValueError("Set either initial_entropy or initial_entropy_prompts > 0, not both (both give H0).")
        if not (self.eps >= 0) or (self.rho == 0 and self.eps == 0):
            raise ValueError(f"eps must be >= 0, and > 0 when rho = 0 (aer.txt eq. 9), got {self.eps}.")
        super().__post_init__()


class AERTrainer(EntropyControlMixin, EntropyGRPOTrainer):
    """GRPO with Adaptive Entropy Regularization (aer.txt §4.2). Constructor: the same as `EntropyGRPOTrainer`.

    Logged metrics (TRL's buffer): `aer/alpha` (the alpha of the step), `aer/target_entropy` (H*), `aer/initial_entropy`
    (H0), `aer/entropy` (H_t, global token mean of the step), `aer/positive_coef_frac` (share of the batch's prompts
    with lambda > 0), `aer/mean_coef` (mean lambda over prompts).
    """

    config_class = AERConfig
    _tag_names = ["trl", "grpo", "healtrl", "aer"]
    _name = "AER"
    # aer.txt: title and authors from its first lines; no arXiv id in the text.
    _paper = {
        "title": "Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM Reinforcement "
        "Learning",
        "id": None,
        "citation": (
            "@misc{zhang_aer,\n"
            "    title  = {{Revisiting Entropy Regularization: Adaptive Coefficient Unlocks Its Potential for LLM Reinforcement Learning}},\n"
            "    author = {Xiaoyun Zhang and Xiaojian Yuan and Di Huang and Wang You and Chen Hu and Jingqing Ruan and Kejiang Chen and Xing Hu},\n"
            "}"
        ),
    }
    _card_description = (
        "Adaptive Entropy Regularization: GRPO plus an entropy bonus whose per-prompt coefficient grows as the "
        "prompt's group accuracy falls below rho (eq. 8-9), scaled by a global alpha that a sign rule (eq. 11) steers "
        "so the policy entropy settles at tau times its initial value (eq. 10)."
    )
    _card_method_fields = (
        "tau",
        "rho",
        "eta",
        "alpha_init",
        "initial_entropy",
        "initial_entropy_prompts",
        "eps",
        "accuracy_reward",
        "correct_threshold",
    )
    _card_summary_keys = ("aer/alpha", "aer/target_entropy")

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
        self._init_control()
        self.alpha = float(self.args.alpha_init)
        self.initial_entropy: float | None = self.args.initial_entropy
        self._last_rewards_per_func: torch.Tensor | None = None

    @property
    def target_entropy(self) -> float | None:
        """H* = tau * H0 (aer.txt eq. 10), None until H0 is known."""
        return None if self.initial_entropy is None else self.args.tau * self.initial_entropy

    # -- C1: group accuracy from the gathered rewards --------------------------------------------------------------
    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        self._last_rewards_per_func = rewards_per_func
        return rewards_per_func

    def _group_accuracy(self, rewards_per_func: torch.Tensor, num_generations: int) -> torch.Tensor:
        """g(q) of aer.txt eq. 8 for every completion of the gathered batch (its prompt's value), shape (B_global,)."""
        if self.args.accuracy_reward is None:
            reward = (rewards_per_func * self.reward_weights.to(rewards_per_func.device).unsqueeze(0)).nansum(dim=1)
        else:
            reward = rewards_per_func[:, self.reward_func_names.index(self.args.accuracy_reward)]
        correct = (torch.nan_to_num(reward, nan=-math.inf) >= self.args.correct_threshold).float()
        return correct.view(-1, num_generations).mean(dim=1).repeat_interleave(num_generations)

    def _generate_and_score_completions(self, inputs):
        output = super()._generate_and_score_completions(inputs)
        mode = self._mode
        num_generations = self.num_generations if mode == "train" else self.num_generations_eval
        accuracy = self._group_accuracy(self._last_rewards_per_func, num_generations)
        self._last_rewards_per_func = None
        local = output["advantages"].size(0)
        start = self.accelerator.process_index * local
        output[GROUP_ACCURACY_KEY] = accuracy[start : start + local].to(output["advantages"].device)
        if mode == "train":
            per_prompt = accuracy[::num_generations]
            coef = aer_coefficients(per_prompt, self.alpha, self.args.rho, self.args.eps)
            self.log_metric("aer/positive_coef_frac", (coef > 0).float().mean())
            # C1's "hard" set (the prompts that get lambda > 0 as soon as alpha > 0).
            hard = aer_coefficients(per_prompt, 1.0, self.args.rho, self.args.eps) > 0
            self.log_metric("aer/hard_frac", hard.float().mean())
            self.log_metric("aer/mean_coef", coef.mean())
        return output

    # -- eq. 7: the entropy term from the loss forward -------------------------------------------------------------
    def extra_loss(self, batch: LossBatch):
        if batch.mode == "train":
            self._record_entropy(batch)
        accuracy = batch.inputs.get(GROUP_ACCURACY_KEY)
        if batch.mode == "train":
            self.log_metric("aer/alpha", self.alpha)
        if accuracy is None or self.alpha == 0.0:
            return None  # lambda = 0 for every prompt: exactly GRPO, no extra work
        # aer.txt eq. 9: one coefficient per prompt, broadcast to its completion's tokens.
        coef = aer_coefficients(accuracy, self.alpha, self.args.rho, self.args.eps).to(batch.entropies.dtype)
        mask = batch.mask.to(batch.entropies.dtype)
        # aer.txt eq. 7: maximise E_q[lambda(q) H] <=> minimise -(token mean of lambda(q_t) * H_t) over the micro-batch
        # (normalised like TRL's entropy_coef bonus; see the module docstring).
        term = (coef.unsqueeze(1) * batch.entropies * mask).sum() / mask.sum().clamp(min=1.0)
        return -term

    # -- C2 and C3 after every optimizer step ----------------------------------------------------------------------
    def after_optimizer_step(self, entropy: float) -> None:
        if self.initial_entropy is None:
            self.initial_entropy = entropy  # C2: H0 = entropy of the first training step (aer.txt eq. 10)
        target = self.target_entropy
        self.alpha = aer_update_alpha(self.alpha, self.args.eta, target, entropy)  # C3, aer.txt eq. 11
        self.log_metric("aer/entropy", entropy)
        self.log_metric("aer/target_entropy", target)
        self.log_metric("aer/initial_entropy", self.initial_entropy)

    # -- C2 option: H0 estimated before training --------------------------------------------------------------------
    def train(self, *args, **kwargs):
        resuming = bool(kwargs.get("resume_from_checkpoint") or (args and args[0]))
        if self.initial_entropy is None and self.args.initial_entropy_prompts > 0 and not resuming:
            self.initial_entropy = self.estimate_initial_entropy(self.args.initial_entropy_prompts)
        return super().train(*args, **kwargs)

    @torch.no_grad()
    def estimate_initial_entropy(self, num_prompts: int) -> float:
        """Mean token entropy of `num_generations` responses to each of the first `num_prompts` training prompts
        (shuffled with `args.seed`), under the current policy, reduced over processes. Logs nothing."""
        dataset = self.train_dataset.shuffle(seed=self.args.seed).select(
            range(min(num_prompts, len(self.train_dataset)))
        )
        world, rank = self.accelerator.num_processes, self.accelerator.process_index
        rows = [dataset[i] for i in range(rank, len(dataset), world)]
        per_call = max(1, self.args.per_device_train_batch_size // self.num_generations)
        n_calls = math.ceil(math.ceil(len(dataset) / world) / per_call)
        saved_metrics = copy.deepcopy(self._metrics)
        was_training = self.model.training
        self.model.train()  # generation settings of training (num_generations, temperature)
        total = torch.zeros(2, dtype=torch.float64, device=self.accelerator.device)
        try:
            for c in range(n_calls):
                chunk = rows[c * per_call : (c + 1) * per_call] or rows[:1]  # every rank takes part in the gathers
                weight = 1.0 if rows[c * per_call : (c + 1) * per_call] else 0.0
                batch = [row for row in chunk for _ in range(self.num_generations)]
                out = EntropyGRPOTrainer._generate_and_score_completions(self, batch)
                self._last_rewards_per_func = None
                ids = torch.cat([out["prompt_ids"], out["completion_ids"]], dim=1)
                attn = torch.cat([out["prompt_mask"], out["completion_mask"]], dim=1)
                with self._lm_head():
                    _, ent, _ = super()._get_per_token_logps_and_entropies(
                        self.model,
                        ids,
                        attn,
                        out["completion_ids"].size(1),
                        batch_size=len(batch),
                        compute_entropy=True,
                    )
                mask = out["completion_mask"].to(ent.dtype)
                total += weight * torch.stack([(ent * mask).sum(), mask.sum()]).double()
        finally:
            self._metrics.clear()
            self._metrics.update(saved_metrics)
            self.model.train(was_training)
        total = self.accelerator.reduce(total, reduction="sum") if world > 1 else total
        return float(total[0] / total[1].clamp(min=1.0))

    # -- checkpointed state ------------------------------------------------------------------------------------------
    def method_state(self):
        return {"alpha": self.alpha, "initial_entropy": self.initial_entropy, "rng_calls": self._rng_calls}

    def load_method_state(self, state):
        self.alpha = float(state["alpha"])
        self.initial_entropy = state["initial_entropy"]
        self._rng_calls = int(state.get("rng_calls", 0))
