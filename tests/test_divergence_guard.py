"""The divergence guard (`divergence_guard`, `divergence_entropy_fraction`; healtrl/trainers/_guard.py).

- A loss forced to NaN stops the run before the optimizer step: the weights stay those of the last step, no
  checkpoint of the step is written, the message names the cause and the last good checkpoint.
- A policy driven to near-uniform entropy (a large entropy bonus, the threshold set low on the toy) stops likewise.
- A randomly initialised model starts near uniform and does not trip the entropy criterion; the guard's metrics are
  logged every step either way.
- Weights that became NaN/inf are never written as a checkpoint (train.py exits with code 3 and keeps metrics.jsonl).
"""

from __future__ import annotations

import json
import math
import os

import pytest
import torch

from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer, GRPOBaselineConfig, GRPOBaselineTrainer
from healtrl.checkpoints import MARKER_FILE, DivergenceError
from tests.helpers import build_trainer


class NaNAtStep3(EntropyGRPOTrainer):
    """Lever 2 returns NaN in the third optimizer step (a reward, a kernel or an overflow gone wrong)."""

    def extra_loss(self, batch):
        if batch.mode == "train" and self.state.global_step == 2:
            return batch.per_token_logps.sum() * float("nan")
        return None


def params(model):
    return {n: p.detach().clone() for n, p in model.named_parameters()}


def test_nan_loss_stops_before_the_update_and_keeps_the_last_good_checkpoint(tmp_path):
    out = tmp_path / "run"
    trainer = build_trainer(NaNAtStep3, EntropyGRPOConfig, out, max_steps=5, save_strategy="steps", save_steps=1)
    before = {}

    class Snapshot:  # the weights after step 2, as checkpoint-2 holds them
        def on_step_end(self, args, state, control, **kwargs):
            if state.global_step == 2:
                before.update(params(trainer.model))

    from transformers import TrainerCallback

    trainer.add_callback(type("SnapshotCallback", (Snapshot, TrainerCallback), {})())
    with pytest.raises(DivergenceError) as info:
        trainer.train()
    message = str(info.value)
    assert "at optimizer step 3" in message and "the loss is NaN/inf" in message
    assert f"The last good checkpoint is {out / 'checkpoint-2'}" in message
    # The update of step 3 was not applied, and no checkpoint of it exists.
    after = params(trainer.model)
    assert all(torch.equal(before[n], after[n]) for n in before)
    assert all(torch.isfinite(p).all() for p in after.values())
    assert trainer.state.global_step == 2
    assert (out / "checkpoint-2" / MARKER_FILE).exists() and not (out / "checkpoint-3").exists()
    # Logged either way: 0 on the good steps, 1 on the step that tripped.
    logged = [e["divergence/nonfinite"] for e in trainer.state.log_history if "divergence/nonfinite" in e]
    assert logged == [0.0, 0.0, 1.0]
    assert trainer.state.log_history[-1]["divergence/tripped"] == 1.0


def test_entropy_driven_to_uniform_stops_the_run(tmp_path):
    """The warmed-up toy model (entropy about 0.2 of log V) trained with a large entropy bonus climbs towards uniform;
    with the threshold at 0.5 of log V the guard stops it the first step above."""
    from healtrl.toy import toy_model_path

    model = toy_model_path("healtrl-toy/qwen2-add")
    trainer = build_trainer(
        GRPOBaselineTrainer,
        GRPOBaselineConfig,
        tmp_path / "run",
        model=model,
        max_steps=40,
        learning_rate=5e-2,
        entropy_coef=1.0,
        divergence_entropy_fraction=0.5,
    )
    with pytest.raises(DivergenceError, match=r"the policy entropy .* nats is 0\.\d+ of the uniform entropy") as info:
        trainer.train()
    assert "above divergence_entropy_fraction 0.5 (it was below half of it at step 1)" in str(info.value)
    fractions = [
        e["divergence/entropy_fraction"] for e in trainer.state.log_history if "divergence/entropy_fraction" in e
    ]
    assert fractions[0] < 0.25 and fractions[-1] > 0.5 and all(f <= 0.5 for f in fractions[:-1])
    entropy = [e["entropy"] for e in trainer.state.log_history if "entropy" in e]
    log_v = math.log(trainer.model.config.vocab_size)
    assert entropy[-1] / log_v == pytest.approx(fractions[-1], rel=1e-4)


def test_random_model_near_uniform_does_not_trip_and_metrics_are_logged(tmp_path):
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, tmp_path / "run", max_steps=2)
    trainer.train()
    fractions = [
        e["divergence/entropy_fraction"] for e in trainer.state.log_history if "divergence/entropy_fraction" in e
    ]
    assert len(fractions) == 2 and all(f > 0.9 for f in fractions)  # near uniform from the start: never armed
    assert trainer._guard.armed_step is None
    assert [e["divergence/nonfinite"] for e in trainer.state.log_history if "divergence/nonfinite" in e] == [0.0, 0.0]


def test_guard_off_logs_nothing_and_does_not_stop(tmp_path):
    trainer = build_trainer(NaNAtStep3, EntropyGRPOConfig, tmp_path / "run", max_steps=3, divergence_guard=False)
    trainer.train()
    assert not any("divergence/nonfinite" in e for e in trainer.state.log_history)


def test_bad_threshold_is_refused(tmp_path):
    with pytest.raises(ValueError, match="divergence_entropy_fraction must be in"):
        EntropyGRPOConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", divergence_entropy_fraction=1.5)


def test_train_script_never_writes_a_checkpoint_of_nan_weights(tmp_path, capsys):
    """An infinite learning rate makes every weight inf in step 1: the save of checkpoint-1 is refused, train.py
    exits with code 3 and the message, and metrics.jsonl holds the run's history."""
    from healtrl.cli import train_main

    out = tmp_path / "run"
    threads = torch.get_num_threads()
    try:
        code = train_main(
            [
                "--config", "configs/toy_grpo.yaml",
                "--max_steps", "3",
                "--logging_steps", "1",
                "--per_device_train_batch_size", "16",
                "--num_train_samples", "32",
                "--save_strategy", "steps",
                "--save_steps", "1",
                "--learning_rate", "1e39",
                "--output_dir", str(out),
            ]
        )  # fmt: skip
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert code == 3
    assert "Divergence guard: training stopped while saving the checkpoint of step 1" in err
    assert "the model's weights are NaN/inf" in err and "No complete checkpoint has been written" in err
    assert not (out / "checkpoint-1" / MARKER_FILE).exists()
    history = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert history[-1]["divergence/tripped"] == 1.0
    assert os.path.exists(out / "config.yaml")
