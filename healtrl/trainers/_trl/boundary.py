"""`TRLBoundary`: TRL's `GRPOTrainer` with each private method it wraps overridden once, from the parts of `_trl/`.

The parts follow TRL's own methods: `LossCalls` (`loss.py`: `_compute_loss`), `GenerationCalls` (`generation.py`:
`_generate_and_score_completions`, `_generate`, `_calculate_rewards`, `_get_train_sampler`), `CheckpointCalls`
(`checkpoint.py`: transformers' `_save_checkpoint`, `_load_optimizer_and_scheduler`) and `LMHeadForwards`
(`lm_head.py`: TRL's forward under healtrl's kernel). This class composes them, dispatches TRL's
`_get_per_token_logps_and_entropies` by the call it runs in (`hooks.TRLCall`) and offers the accessors of TRL's private
state that the methods use.
"""

from __future__ import annotations

import contextlib
import copy
from typing import Any

from trl import GRPOTrainer
from trl.trainer.base_trainer import _BaseTrainer

from .checkpoint import CheckpointCalls
from .generation import GenerationCalls
from .hooks import TRLCall
from .loss import LossCalls


class _ExtrasAfterTRLChecks(_BaseTrainer):
    """Runs between TRL's `GRPOTrainer.__init__` and transformers' `Trainer.__init__` (it follows `GRPOTrainer` in the
    MRO of `TRLBoundary`): TRL has validated the model, PEFT and reward setup by then, and transformers is about to
    build the `report_to` callbacks, which would fail on a missing backend with its own message. Calls the trainer's
    `_before_trainer_callbacks(args)` there (`hooks.BoundaryHooks`; `EntropyGRPOTrainer` checks the extras)."""

    def __init__(self, *args, **kwargs):
        training_args = kwargs.get("args")
        if training_args is not None:
            self._before_trainer_callbacks(training_args)
        super().__init__(*args, **kwargs)


class TRLBoundary(CheckpointCalls, GenerationCalls, LossCalls, GRPOTrainer, _ExtrasAfterTRLChecks):
    """TRL's `GRPOTrainer` with its private methods overridden once, calling the hooks of `hooks.BoundaryHooks`.

    Not used alone: `EntropyGRPOTrainer` (`base.py`) sets the state the hooks declare and overrides the levers.
    """

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        call = self._call
        if call is not None and call.call is TRLCall.LOSS:
            return self._loss_policy_forward(call, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if call is not None and self._is_old_logps_pass(call, model):
            return self._old_logps_forward(call, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        logps, entropies, aux, _, _ = self._trl_forward(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )
        return logps, entropies, aux

    # ------------------------------------------------------------------------------------------------------------
    # Accessors of TRL's private state
    # ------------------------------------------------------------------------------------------------------------
    @contextlib.contextmanager
    def discarded_metrics(self):
        """Within the block, nothing reaches TRL's metric buffer (`GRPOTrainer._metrics`): restored on exit."""
        saved = copy.deepcopy(self._metrics)
        try:
            yield
        finally:
            self._metrics.clear()
            self._metrics.update(saved)

    def log_completion_columns(self, columns: dict[str, list]) -> None:
        """Add columns (one value per local completion) to TRL's `log_completions` table.

        `GRPOTrainer._log_completion_extra` is the function TRL 1.16 hands reward functions as `log_extra`; TRL gathers
        its values across processes after the rewards and adds them as columns of the completions table.
        """
        for name, values in columns.items():
            self._log_completion_extra(name, values)

    def run_output_dir(self, trial=None) -> str:
        """The run's output folder (transformers' `Trainer._get_output_dir`), where its checkpoints are."""
        return self._get_output_dir(trial=trial)

    # TRL's model-card class attributes (`_name`, `_paper`, `_tag_names`, as every TRL trainer sets them).
    @classmethod
    def set_trl_card(cls, name: str, paper: dict[str, Any], tags: list[str]) -> None:
        """Set the class's TRL model-card attributes (`trainers/_card.py` does, from a method's `CardDescription`)."""
        cls._name = name
        cls._paper = paper
        cls._tag_names = tags

    @property
    def card_name(self) -> str:
        return self._name

    @property
    def card_paper(self) -> dict[str, Any]:
        return self._paper

    @property
    def card_tags(self) -> list[str]:
        return list(self._tag_names)
