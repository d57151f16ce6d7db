"""The TRL boundary states which TRL call it is inside (`healtrl/trainers/_trl/hooks.py`, issue #28), and refuses what
it cannot follow: an unknown `loss_type` in `aggregate_like_policy_loss`, a second forward inside `_compute_loss`."""

from __future__ import annotations

import types

import pytest
import torch

from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer
from healtrl.trainers._trl import LOSS_TYPES, LossBatch, TRLCall, aggregate_like_policy_loss
from tests.helpers import build_trainer, next_inputs


def _batch(mode="train"):
    per_token = torch.ones(2, 3)
    return LossBatch(
        per_token_logps=per_token,
        entropies=per_token,
        mask=torch.ones(2, 3),
        advantages=torch.zeros(2),
        inputs={"num_items_in_batch": torch.tensor(6.0)},
        mode=mode,
    )


def _trainer(loss_type):
    return types.SimpleNamespace(
        loss_type=loss_type,
        max_completion_length=3,
        accelerator=types.SimpleNamespace(num_processes=1),
        args=types.SimpleNamespace(steps_per_generation=1),
    )


@pytest.mark.parametrize("loss_type", LOSS_TYPES)
def test_known_loss_types_aggregate(loss_type):
    batch = _batch()
    value = aggregate_like_policy_loss(_trainer(loss_type), batch.per_token_logps, batch.mask, batch)
    assert torch.isfinite(value)


def test_unknown_loss_type_raises_naming_it():
    batch = _batch()
    with pytest.raises(ValueError, match="'new_loss'"):
        aggregate_like_policy_loss(_trainer("new_loss"), batch.per_token_logps, batch.mask, batch)


class _CallRecorder(EntropyGRPOTrainer):
    seen: list = []

    def shape_advantages(self, advantages, batch):
        type(self).seen.append(self._call.call)
        return None


def test_the_loss_forward_runs_inside_the_stated_call(tmp_path):
    trainer = build_trainer(_CallRecorder, EntropyGRPOConfig, tmp_path)
    _CallRecorder.seen = []
    assert trainer._call is None
    inputs = next_inputs(trainer)
    trainer.compute_loss(trainer.model, inputs)
    assert _CallRecorder.seen == [TRLCall.LOSS]
    assert trainer._call is None  # restored after the call


def test_a_second_forward_inside_the_loss_is_an_error(tmp_path):
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path)
    inputs = next_inputs(trainer)
    original = trainer._get_per_token_logps_and_entropies

    def twice(*args, **kwargs):
        original(*args, **kwargs)
        return original(*args, **kwargs)

    trainer._get_per_token_logps_and_entropies = twice  # a TRL release whose loss runs two forwards
    with pytest.raises(RuntimeError, match="second forward inside GRPOTrainer._compute_loss"):
        trainer.compute_loss(trainer.model, inputs)


# ---------------------------------------------------------------------------------------------------------------
# The hook surface: every hook the boundary declares is in ARCHITECTURE.md's table; one request for rollout stats
# ---------------------------------------------------------------------------------------------------------------
def test_every_declared_hook_is_in_the_architecture_table():
    from pathlib import Path

    from healtrl.trainers._trl import BoundaryHooks
    from healtrl.trainers.contract import ACCESSORS

    text = (Path(__file__).resolve().parents[1] / "ARCHITECTURE.md").read_text(encoding="utf-8")
    table = "\n".join(line for line in text.splitlines() if line.startswith("| `"))
    accessors = {accessor.name for accessor in ACCESSORS}  # listed apart (tests/test_method_contract.py)
    declared = [
        name
        for name in vars(BoundaryHooks)
        if not name.startswith("__") and name not in {"_call", "_inside"} | accessors
    ]
    declared += [name for name in BoundaryHooks.__annotations__ if name != "_call"]
    missing = sorted({name for name in declared if f"`{name}" not in table})
    assert not missing, f"hooks of BoundaryHooks missing from ARCHITECTURE.md's hook table: {missing}"


class _AsksForPowerSums(EntropyGRPOTrainer):
    def rollout_stats_needed(self):
        return frozenset({"logp", "sum_p2", "sum_p2_logp"})

    def finish_generation_batch(self, batch, stats):
        type(self).seen = (stats, batch["completion_mask"].clone())


def test_rollout_stats_request_is_served_and_names_its_source(tmp_path):
    """A trainer that asks for log p and the power sums gets exactly those, (B, T) like the completions, zero past
    each completion, from the generation logits (on-policy transformers generation: no extra forward)."""
    trainer = build_trainer(_AsksForPowerSums, EntropyGRPOConfig, tmp_path, inspect_every_steps=0)
    next_inputs(trainer)
    stats, mask = _AsksForPowerSums.seen
    assert stats.source == "generation"
    assert sorted(stats.values) == ["logp", "sum_p2", "sum_p2_logp"]
    mask = mask.bool()
    assert mask.any() and not mask.all()  # completions of different lengths: the zero padding is checked
    for key in stats.values:
        assert stats[key].shape == mask.shape
        assert torch.all(stats[key][~mask] == 0)
    assert torch.all(stats["logp"][mask] <= 0) and torch.all((stats["sum_p2"][mask] > 0) & (stats["sum_p2"][mask] <= 1))
    with pytest.raises(KeyError, match="'entropy' was not requested"):
        stats["entropy"]


class _AsksForNonsense(EntropyGRPOTrainer):
    def rollout_stats_needed(self):
        return frozenset({"logits"})


def test_unknown_rollout_statistic_is_refused():
    trainer = object.__new__(_AsksForNonsense)  # the check runs before generating: no model needed
    with pytest.raises(ValueError, match=r"rollout_stats_needed asked for \['logits'\]"):
        trainer._rollout_stats_wanted()
