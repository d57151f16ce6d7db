"""What the levers receive: `LossBatch` (levers 1 and 2, from the policy forward of the loss), `RolloutBatch`
(lever 3, the gathered generation batch) and `RolloutStats` (the per-token statistics of the local generation batch a
trainer asked for with `rollout_stats_needed`). The TRL boundary builds them (`loss.py`, `generation.py`); `base.py`
re-exports them for the method trainers."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch


@dataclass
class LossBatch:
    """What the policy forward of one training micro-batch produced, handed to levers 1 and 2.

    All tensors are (B, T) over completion tokens. `per_token_logps` and `entropies` carry gradients (they are the ones
    TRL's loss is built from); detach them for statistics. `mask` is 1 on tokens that enter the loss. `sum_p2` and
    `sum_p2_logp` (sum_v p_v^2 and sum_v p_v^2 log p_v of each token's distribution, no gradient) are present when the
    trainer's `needs_power_sums` is true.
    """

    per_token_logps: torch.Tensor
    entropies: torch.Tensor
    mask: torch.Tensor
    advantages: torch.Tensor
    inputs: dict[str, Any]
    mode: str
    sum_p2: torch.Tensor | None = None
    sum_p2_logp: torch.Tensor | None = None

    @property
    def old_per_token_logps(self) -> torch.Tensor:
        """Log-probs of the policy that sampled the batch (equal to the current ones, detached, when on-policy)."""
        old = self.inputs.get("old_per_token_logps")
        return self.per_token_logps.detach() if old is None else old


@dataclass
class RolloutBatch:
    """The whole generation batch of one step, gathered across processes (identical on every rank), for lever 3.

    `rewards_per_func` is (B, n_reward_funcs) with the augmentation columns still NaN. `entropies` and `entropy_mask`
    are (B, T) right-padded per-token entropies of each completion, present when `rollout_entropy` is on.
    `inputs` holds the dataset rows (with their extra columns, e.g. `domain`), one per completion.
    """

    prompts: list
    completions: list
    completion_ids: list[list[int]]
    inputs: list[dict[str, Any]]
    rewards_per_func: torch.Tensor
    reward_func_names: list[str]
    num_generations: int
    entropies: torch.Tensor | None = None
    entropy_mask: torch.Tensor | None = None

    def column(self, key: str) -> list:
        """One dataset column over the batch; a clear error when the dataset has no such column."""
        if self.inputs and key not in self.inputs[0]:
            raise KeyError(
                f"The rollout batch has no column '{key}'. Columns found: {sorted(self.inputs[0])}. Add '{key}' to "
                "the training dataset."
            )
        return [row[key] for row in self.inputs]


#: The per-token statistics a trainer can ask for (`rollout_stats_needed`): log p of the sampled token, the entropy
#: -sum_v p_v log p_v, and the power sums sum_v p_v^2 and sum_v p_v^2 log p_v, all of p = softmax(z / T) (z the LM
#: head's logits, T the training temperature).
ROLLOUT_STAT_KEYS = ("logp", "entropy", "sum_p2", "sum_p2_logp")

#: Where `RolloutStats` came from, cheapest first, and what each cost.
ROLLOUT_STAT_SOURCES = {
    "old_logps": "taken from TRL's old-log-prob pass (no extra forward)",
    "generation": "read off the generation's own LM-head logits (no extra forward)",
    "forward": "computed with one extra no-grad forward of the policy over the generation batch",
}


@dataclass
class RolloutStats:
    """Per-token statistics of the local generation batch under the policy that generated it, as requested.

    `values` maps each requested key of `ROLLOUT_STAT_KEYS` to a (B_local, T) float tensor, T the completions' padded
    width (TRL's `completion_ids`), zero past the end of each completion; `mask` is 1 on completion tokens. `source`
    says where they came from (a key of `ROLLOUT_STAT_SOURCES`).
    """

    source: str
    mask: torch.Tensor
    values: dict[str, torch.Tensor] = field(default_factory=dict)

    def __getitem__(self, key: str) -> torch.Tensor:
        if key not in self.values:
            raise KeyError(f"Rollout statistic '{key}' was not requested; requested: {sorted(self.values)}.")
        return self.values[key]

    def get(self, key: str) -> torch.Tensor | None:
        return self.values.get(key)
