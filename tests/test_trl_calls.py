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
