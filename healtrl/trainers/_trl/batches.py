"""What the levers receive: `LossBatch` (levers 1 and 2, from the policy forward of the loss) and `RolloutBatch`
(lever 3, the gathered generation batch). The TRL boundary builds them (`loss.py`, `generation.py`); `base.py`
re-exports them for the method trainers."""

from __future__ import annotations

from dataclasses import dataclass
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
