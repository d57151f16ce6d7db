"""`PosAdvTrainer`: Positive-Advantage Reweighting (arXiv:2511.05993, §7.3, Appendix E.2) on top of TRL's GRPO.

The loss of every token with a positive advantage is multiplied by lambda in [0, 1] (lever 1, `shape_advantages`:
scaling a token's advantage by w >= 0 scales its clipped surrogate by w). lambda follows a schedule:

- `stage` (§7.3, Stage-based): 0 during the first half of training, then linear from 0 to 1 (reaches 1 at the last
  step). Needs the total number of steps (`max_steps`, or derived from the dataset and `num_train_epochs`).
- `epoch` (§7.3, Epoch-wise): lambda = (e - 1) / (E - 1) in epoch e of E >= 2.
- `entropy` (§7.3, Entropy-guided, eq. 5): lambda <- clip(lambda +- Delta, 0, 1), + when the global policy entropy H_k
  exceeds the threshold delta. Paper: delta = 0.2, Delta = 0.05, lambda_0 = 0. `controller_update` sets when: once
  per rollout batch (default; the paper's "training step k" is one verl iteration: one rollout batch, 4 optimizer
  steps in its setup), H_k the token-weighted mean entropy of all the rollout batch's micro-batches over all
  processes; or after every optimizer step, H_k over that step (healtrl.trainers._control). H_k is a token mean: the
  paper trains with a token-level loss.
- `constant`: lambda = `lambda_init` throughout.
- `positive_only` / `negative_only`: the ablations of Appendix E.2 / Figure 5: train on A > 0 tokens only (weight 0 on
  A < 0 tokens) or on A < 0 tokens only (lambda = 0).
- `rand_pos_clip`: the Rand-Pos-Clip baseline (Appendix E.2): lambda = 1, and the loss of a random subset of the
  positive-advantage tokens (k = max(1, int(ratio * N)) of the N valid tokens of each micro-batch, Clip-Cov's count
  rule) is zeroed. Reproducible under `seed`, also across resumes.

Logged: `posadv/lambda`, `posadv/pos_token_frac` (share of valid tokens with A > 0, over all processes),
`posadv/entropy` (H_k, at every update of the controller), `posadv/entropy_threshold` (delta, beside it with the
entropy-guided schedule), `posadv/clipped_tokens` (rand_pos_clip).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
from transformers import TrainerCallback

from ..functional.posadv import (
    entropy_guided_lambda,
    epoch_lambda,
    posadv_token_weights,
    rand_pos_clip_mask,
    stage_lambda,
)
from ._card import CardDescription
from ._control import CONTROLLER_UPDATES, EntropyControlMixin, RandomStreamMixin, check_controller_update
from ._papers import POSADV_PAPER
from .base import EntropyGRPOConfig, EntropyGRPOTrainer, LossBatch

SCHEDULES = ("entropy", "stage", "epoch", "constant", "positive_only", "negative_only", "rand_pos_clip")


@dataclass
class PosAdvConfig(EntropyGRPOConfig):
    r"""
    Configuration for [`PosAdvTrainer`]: every field of [`EntropyGRPOConfig`] plus Pos-Adv-Reweight's (PosAdv §7.3).

    Parameters:
        schedule (`str`, *optional*, defaults to `"entropy"`):
            Schedule of the weight lambda of positive-advantage tokens: `entropy` (entropy-guided, the paper's best),
            `stage`, `epoch`, `constant`, the ablations `positive_only` / `negative_only`, or the baseline
            `rand_pos_clip`.
        lambda_init (`float`, *optional*, defaults to `0.0`):
            lambda_0 of the entropy-guided schedule (paper: 0), and the value of the `constant` schedule. In [0, 1].
        entropy_threshold (`float`, *optional*, defaults to `0.2`):
            Entropy threshold delta of the entropy-guided schedule (paper: 0.2, nats per token), >= 0.
        lambda_step (`float`, *optional*, defaults to `0.05`):
            Step Delta of the entropy-guided schedule (paper: 0.05), in (0, 1].
        rand_pos_clip_ratio (`float`, *optional*, defaults to `0.0002`):
            Share of the valid tokens whose loss Rand-Pos-Clip zeroes (chosen among A > 0 tokens); the paper matches
            Clip-Cov's ratio (0.0002). In (0, 1].
        controller_update (`str`, *optional*, defaults to `"rollout_batch"`):
            When the entropy-guided lambda (eq. 5) moves: `rollout_batch`, once per rollout (generation) batch after its
            last optimizer step, with H_k the entropy of all its micro-batches (the paper's once-per-training-step
            verl workflow; its setup takes 4 optimizer steps per rollout batch); or `optimizer_step`, after every
            optimizer step. Only the `entropy` schedule uses it; `rollout_batch` then needs
            `steps_per_generation * num_iterations` to be a multiple of `gradient_accumulation_steps`.
    """

    schedule: str = field(
        default="entropy",
        metadata={
            "help": "Schedule of lambda, the loss weight of positive-advantage tokens (PosAdv §7.3): entropy "
            "(paper's best), stage, epoch, constant, positive_only, negative_only, rand_pos_clip.",
            "choices": list(SCHEDULES),
        },
    )
    lambda_init: float = field(
        default=0.0,
        metadata={"help": "lambda_0 of the entropy schedule (paper: 0) and the value of the constant one, in [0, 1]."},
    )
    entropy_threshold: float = field(
        default=0.2,
        metadata={"help": "Entropy threshold delta of the entropy-guided schedule (PosAdv eq. 5). Paper: 0.2."},
    )
    lambda_step: float = field(
        default=0.05,
        metadata={"help": "Step Delta of the entropy-guided schedule (PosAdv eq. 5), in (0, 1]. Paper: 0.05."},
    )
    rand_pos_clip_ratio: float = field(
        default=2e-4,
        metadata={
            "help": "Rand-Pos-Clip: share of valid tokens whose loss is zeroed, drawn among A > 0 tokens (PosAdv "
            "App. E.2; same share as Clip-Cov's 0.0002). In (0, 1]."
        },
    )
    controller_update: str = field(
        default="rollout_batch",
        metadata={
            "help": "When the entropy-guided lambda moves (PosAdv eq. 5): rollout_batch (once per rollout batch, "
            "H_k over all its micro-batches: the paper's workflow) or optimizer_step (after every optimizer step).",
            "choices": list(CONTROLLER_UPDATES),
        },
    )

    def __post_init__(self):
        if not (0.0 <= self.lambda_init <= 1.0):
            raise ValueError(f"lambda_init must be in [0, 1], got {self.lambda_init}.")
        if not (self.entropy_threshold >= 0) or math.isinf(self.entropy_threshold):
            raise ValueError(f"entropy_threshold must be >= 0 (delta of PosAdv eq. 5), got {self.entropy_threshold}.")
        if not (0.0 < self.lambda_step <= 1.0):
            raise ValueError(f"lambda_step must be in (0, 1] (Delta of PosAdv eq. 5), got {self.lambda_step}.")
        if not (0.0 < self.rand_pos_clip_ratio <= 1.0):
            raise ValueError(f"rand_pos_clip_ratio must be in (0, 1], got {self.rand_pos_clip_ratio}.")
        if self.schedule == "epoch" and self.max_steps <= 0 and math.ceil(self.num_train_epochs) < 2:
            raise ValueError(
                f"schedule 'epoch' needs num_train_epochs >= 2 (lambda = (e - 1) / (E - 1)), got "
                f"num_train_epochs={self.num_train_epochs}."
            )
        super().__post_init__()
        check_controller_update(self, active=self.schedule == "entropy")


class _CheckEpochs(TrainerCallback):
    def on_train_begin(self, args, state, control, **kwargs):
        if math.ceil(state.num_train_epochs) < 2:
            raise ValueError(
                f"schedule 'epoch' needs at least 2 epochs; this run has {state.num_train_epochs} (from max_steps="
                f"{args.max_steps}). Raise max_steps or num_train_epochs, or pick another schedule."
            )


class PosAdvTrainer(RandomStreamMixin, EntropyControlMixin, EntropyGRPOTrainer):
    """GRPO with Positive-Advantage Reweighting (arXiv:2511.05993, §7.3). Constructor: the same as
    `EntropyGRPOTrainer`."""

    config_class = PosAdvConfig
    card = CardDescription(
        name="Pos-Adv-Reweight",
        paper=POSADV_PAPER,
        description=(
            "Positive-Advantage Reweighting: tokens with a positive advantage drive entropy collapse, so GRPO's loss on "
            "them is multiplied by a weight lambda in [0, 1] that follows a schedule (entropy-guided, eq. 5: lambda rises "
            "by Delta while the entropy is above delta and falls otherwise; or stage, epoch, constant)."
        ),
        summary_keys=("posadv/lambda",),
        tags=("posadv",),
    )

    def __init__(self, model, reward_funcs=None, args: PosAdvConfig | None = None, train_dataset=None, **kwargs):
        # `stage` without max_steps on a dataset without a length is refused by transformers' own check (it needs
        # max_steps for any such dataset), which comes first as in TRL.
        super().__init__(model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset, **kwargs)
        if self.args.schedule == "epoch" and not hasattr(self.train_dataset, "__len__"):
            raise ValueError(
                "schedule 'epoch' needs epochs (lambda = (e - 1) / (E - 1)), and a streaming IterableDataset has no "
                "length, so the run has none. Use a map-style datasets.Dataset, or another schedule (stage, entropy)."
            )
        self.init_entropy_control(self.args.controller_update, measure="token")
        if self.args.schedule == "epoch":
            self.add_callback(_CheckEpochs())
        self.lam = float(self.args.lambda_init)

    # -- lambda ------------------------------------------------------------------------------------------------------
    def current_lambda(self) -> float:
        """lambda for the current optimizer step (PosAdv §7.3)."""
        schedule = self.args.schedule
        if schedule == "stage":
            return stage_lambda(self.state.global_step, max(int(self.state.max_steps), 2))
        if schedule == "epoch":
            epochs = max(math.ceil(self.state.num_train_epochs), 2)
            return epoch_lambda(int(self.state.epoch or 0) + 1, epochs)
        if schedule in ("entropy", "constant"):
            return self.lam
        if schedule == "negative_only":
            return 0.0
        return 1.0  # positive_only, rand_pos_clip

    def shape_advantages(self, advantages: torch.Tensor, batch: LossBatch):
        if batch.mode == "train":
            self.record_entropy(batch)
        else:
            return None  # evaluation loss: plain GRPO
        lam = self.current_lambda()
        negative_weight = 0.0 if self.args.schedule == "positive_only" else 1.0
        adv = advantages.unsqueeze(1).expand_as(batch.mask).to(batch.per_token_logps.dtype)
        # PosAdv §7.3: per-token loss of A > 0 tokens times lambda (A <= 0 tokens times negative_weight).
        shaped = adv * posadv_token_weights(adv, lam, negative_weight)
        if self.args.schedule == "rand_pos_clip":
            # PosAdv App. E.2: zero the loss of a random subset of A > 0 tokens.
            clip = rand_pos_clip_mask(adv, batch.mask, self.args.rand_pos_clip_ratio, self.next_generator())
            shaped = shaped.masked_fill(clip, 0.0)
            self.log_metric("posadv/clipped_tokens", clip.sum())
        self.log_metric("posadv/lambda", lam)
        self.log_metric("posadv/pos_token_frac", self.global_masked_mean((adv > 0).float(), batch.mask))
        return shaped

    def update_controller(self, entropy: float) -> None:
        if self.args.schedule == "entropy":
            self.lam = entropy_guided_lambda(self.lam, entropy, self.args.entropy_threshold, self.args.lambda_step)
            self.log_metric("posadv/entropy_threshold", self.args.entropy_threshold)  # delta, drawn on curves.png
        self.log_metric("posadv/entropy", entropy)

    # -- checkpointed state ------------------------------------------------------------------------------------------
    def method_state(self):
        return {"lambda": self.lam, **super().method_state()}

    def load_method_state(self, state):
        super().load_method_state(state)
        self.lam = float(state["lambda"])
