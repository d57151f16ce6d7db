"""Atomic checkpoints and resume refusals (`healtrl.checkpoints`, `EntropyGRPOTrainer._save_checkpoint`).

- A checkpoint is complete only with its marker `healtrl_checkpoint.json`, written last: a half-written one is skipped
  (with a warning naming it) by `resume_from_checkpoint: true` and refused by path; it is never loaded.
- Old checkpoints are deleted (`save_total_limit`) only once the new one is complete.
- Resuming is refused, naming the field and both values, with another trainer, other values of fields that change the
  math, other healtrl/TRL versions, or another number of processes for a checkpoint inside a rollout batch;
  `resume_allow_mismatch` accepts listed fields.
- Every trainer resumes in the middle of a rollout batch (the base trainer saves the batch), not only the controllers.
"""

from __future__ import annotations

import json
import os
import warnings

import pytest
import torch

from healtrl import (
    AERConfig,
    AERTrainer,
    EntropyGRPOConfig,
    EntropyGRPOTrainer,
    OPEFOConfig,
    OPEFOTrainer,
    PosAdvConfig,
    PosAdvTrainer,
)
from healtrl.checkpoints import (
    MARKER_FILE,
    ResumeError,
    last_complete_checkpoint,
    resolve_resume_checkpoint,
    write_json_atomic,
)
from healtrl.trainers.base import ROLLOUT_BUFFER_FILE, STATE_FILE
from tests.helpers import build_trainer

SAVE = dict(save_strategy="steps", save_steps=2, max_steps=4)
# 4 micro-batches per rollout batch, one per optimizer step: checkpoint 2 lies inside a rollout batch.
MID_ROLLOUT = dict(per_device_train_batch_size=16, gradient_accumulation_steps=1, steps_per_generation=4)


def params(trainer):
    return {n: p.detach().clone() for n, p in trainer.model.named_parameters()}


@pytest.fixture(scope="module")
def aer_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("aer") / "run"
    build_trainer(AERTrainer, AERConfig, out, tau=0.9, alpha_init=0.01, **SAVE).train()
    return out


# ---------------------------------------------------------------------------------------------------------------
# Completion marker, resolution of resume_from_checkpoint
# ---------------------------------------------------------------------------------------------------------------
def test_every_checkpoint_ends_with_its_marker(aer_run):
    for step in (2, 4):
        marker = json.loads((aer_run / f"checkpoint-{step}" / MARKER_FILE).read_text())
        assert marker["complete"] is True and marker["trainer"] == "AERTrainer" and marker["global_step"] == step
        assert marker["fields"]["tau"] == 0.9 and marker["num_processes"] == 1
        assert (aer_run / f"checkpoint-{step}" / STATE_FILE).exists()
    assert not [name for name in os.listdir(aer_run / "checkpoint-4") if ".tmp-" in name]  # no temporary files left


@pytest.mark.slow  # ~12 s: a training run; slow to keep the default suite under 10 minutes (.ci/release runs it)
def test_half_written_checkpoint_is_skipped_with_a_warning_and_never_loaded(tmp_path):
    out = tmp_path / "run"
    build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, out, **SAVE).train()
    half = out / "checkpoint-4"
    os.remove(half / MARKER_FILE)  # as a run killed while writing it leaves it
    (half / "model.safetensors").write_bytes(b"not a model")  # loading it would fail loudly
    with pytest.warns(RuntimeWarning, match=f"incomplete checkpoint.*{half}.*Resuming from {out / 'checkpoint-2'}"):
        assert last_complete_checkpoint(str(out)) == str(out / "checkpoint-2")

    for value in (True, "true", "latest", "LATEST"):
        resumed = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, out, **dict(SAVE, save_strategy="no"))
        with pytest.warns(RuntimeWarning, match=str(half)):
            resumed.train(resume_from_checkpoint=value)
        steps = [e["step"] for e in resumed.state.log_history if "loss" in e]
        assert steps == [1, 2, 3, 4]  # 1-2 from checkpoint-2's trainer state, 3-4 trained after resuming
    # By path: refused, naming the missing marker.
    with pytest.raises(ResumeError, match=f"{half} has no {MARKER_FILE}"):
        resolve_resume_checkpoint(str(half), str(out))
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, out, **dict(SAVE, save_strategy="no"))
    with pytest.raises(ResumeError, match="incomplete"):
        trainer.train(resume_from_checkpoint=str(half))


def test_resume_resolution(tmp_path):
    assert resolve_resume_checkpoint(None, str(tmp_path)) is None
    assert resolve_resume_checkpoint(False, str(tmp_path)) is None
    assert resolve_resume_checkpoint("false", str(tmp_path)) is None
    with pytest.raises(ResumeError, match=f"no complete checkpoint in {tmp_path / 'none'}"):
        resolve_resume_checkpoint("true", str(tmp_path / "none"))
    with pytest.raises(ResumeError, match="is not a folder"):
        resolve_resume_checkpoint(str(tmp_path / "missing"), str(tmp_path))
    (tmp_path / "checkpoint-10").mkdir()
    (tmp_path / "checkpoint-9").mkdir()
    write_json_atomic(str(tmp_path / "checkpoint-9" / MARKER_FILE), {"complete": True})
    (tmp_path / "checkpoint-x").mkdir()  # not a checkpoint name: ignored
    with pytest.warns(RuntimeWarning, match="checkpoint-10"):
        assert resolve_resume_checkpoint("latest", str(tmp_path)) == str(tmp_path / "checkpoint-9")


def test_atomic_json_write_keeps_the_old_file_when_interrupted(tmp_path, monkeypatch):
    path = tmp_path / STATE_FILE
    write_json_atomic(str(path), {"alpha": 1.0})

    def broken_dump(obj, f, **kwargs):
        f.write('{"alpha": 2.')  # half the new content, then the process dies
        raise KeyboardInterrupt

    monkeypatch.setattr(json, "dump", broken_dump)
    with pytest.raises(KeyboardInterrupt):
        write_json_atomic(str(path), {"alpha": 2.0})
    monkeypatch.undo()
    assert json.loads(path.read_text()) == {"alpha": 1.0}


@pytest.mark.slow  # ~15 s: two trainings; slow to keep the default suite under 10 minutes (.ci/release runs it)
def test_old_checkpoints_are_deleted_only_once_the_new_one_is_complete(tmp_path, monkeypatch):
    out = tmp_path / "run"
    trainer = build_trainer(AERTrainer, AERConfig, out, alpha_init=0.01, save_total_limit=1, **dict(SAVE, max_steps=6))
    original = AERTrainer.method_state

    def method_state(self):
        if self.state.global_step == 4:
            raise KeyboardInterrupt  # the run dies after transformers wrote checkpoint-4, before its marker
        return original(self)

    monkeypatch.setattr(AERTrainer, "method_state", method_state)
    with pytest.raises(KeyboardInterrupt):
        trainer.train()
    # transformers would have rotated checkpoint-2 away inside its save of checkpoint-4.
    assert (out / "checkpoint-2" / MARKER_FILE).exists()
    assert not (out / "checkpoint-4" / MARKER_FILE).exists()
    monkeypatch.undo()
    resumed = build_trainer(AERTrainer, AERConfig, out, alpha_init=0.01, save_total_limit=1, **dict(SAVE, max_steps=6))
    with pytest.warns(RuntimeWarning, match="checkpoint-4"):
        resumed.train(resume_from_checkpoint=True)
    assert sorted(os.listdir(out)).count("checkpoint-6") == 1
    assert [name for name in os.listdir(out) if name.startswith("checkpoint-")] == ["checkpoint-6"]
    assert (out / "checkpoint-6" / MARKER_FILE).exists()


# ---------------------------------------------------------------------------------------------------------------
# Refusals
# ---------------------------------------------------------------------------------------------------------------
def test_resume_with_another_trainer_is_refused(aer_run, tmp_path):
    other = build_trainer(PosAdvTrainer, PosAdvConfig, tmp_path / "other", **SAVE)
    with pytest.raises(ResumeError, match="field `trainer`: checkpoint 'AERTrainer', this run 'PosAdvTrainer'"):
        other.train(resume_from_checkpoint=str(aer_run / "checkpoint-2"))


def test_resume_with_other_method_fields_is_refused_unless_allowed(aer_run, tmp_path):
    checkpoint = str(aer_run / "checkpoint-2")
    changed = build_trainer(AERTrainer, AERConfig, tmp_path / "a", tau=0.5, alpha_init=0.01, rho=0.3, **SAVE)
    with pytest.raises(ResumeError) as info:
        changed.train(resume_from_checkpoint=checkpoint)
    message = str(info.value)
    assert "tau: checkpoint 0.9, this run 0.5" in message and "rho: checkpoint 0.2, this run 0.3" in message
    assert "resume_allow_mismatch: [rho, tau]" in message
    # A GRPO field that changes the math.
    seed = build_trainer(AERTrainer, AERConfig, tmp_path / "b", tau=0.9, alpha_init=0.01, **SAVE, seed=1)
    with pytest.raises(ResumeError, match="seed: checkpoint 0, this run 1"):
        seed.train(resume_from_checkpoint=checkpoint)
    # Accepted explicitly: resumes, with a warning naming the difference.
    allowed = build_trainer(
        AERTrainer, AERConfig, tmp_path / "c", tau=0.5, alpha_init=0.01, resume_allow_mismatch=["tau"], **SAVE
    )
    with pytest.warns(RuntimeWarning, match="tau: checkpoint 0.9, this run 0.5"):
        allowed.train(resume_from_checkpoint=checkpoint)
    assert allowed.state.global_step == 4
    # Settings that do not change the math are not compared (diagnostics, lengths of the run).
    longer = build_trainer(
        AERTrainer, AERConfig, tmp_path / "d", tau=0.9, alpha_init=0.01, entropy_flow_diagnostics=True,
        **dict(SAVE, max_steps=5),
    )  # fmt: skip
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        longer.train(resume_from_checkpoint=checkpoint)


def test_resume_with_another_opefo_estimator_is_refused(tmp_path):
    out = tmp_path / "run"
    build_trainer(OPEFOTrainer, OPEFOConfig, out, **dict(SAVE, max_steps=2)).train()
    other = build_trainer(OPEFOTrainer, OPEFOConfig, out, entropy_change_estimator="steer", **SAVE)
    with pytest.raises(ResumeError, match="entropy_change_estimator: checkpoint 'opefo', this run 'steer'"):
        other.train(resume_from_checkpoint=True)


# trl_version takes the same path as healtrl_version (~3 s each): slow, to keep the default suite under 10 minutes
@pytest.mark.parametrize("key", ["healtrl_version", pytest.param("trl_version", marks=pytest.mark.slow)])
def test_resume_from_another_version_is_refused_unless_allowed(aer_run, tmp_path, key):
    checkpoint = tmp_path / "checkpoint-2"
    import shutil

    shutil.copytree(aer_run / "checkpoint-2", checkpoint)
    marker = json.loads((checkpoint / MARKER_FILE).read_text())
    current = marker[key]
    (checkpoint / MARKER_FILE).write_text(json.dumps(dict(marker, **{key: "0.0.1"})))
    trainer = build_trainer(AERTrainer, AERConfig, tmp_path / "a", tau=0.9, alpha_init=0.01, **SAVE)
    with pytest.raises(ResumeError, match=f"{key}: checkpoint '0.0.1', this run '{current}'"):
        trainer.train(resume_from_checkpoint=str(checkpoint))
    allowed = build_trainer(
        AERTrainer, AERConfig, tmp_path / "b", tau=0.9, alpha_init=0.01, resume_allow_mismatch=[key], **SAVE
    )
    with pytest.warns(RuntimeWarning, match=key):
        allowed.train(resume_from_checkpoint=str(checkpoint))


@pytest.mark.slow  # ~10 s: three trainings; slow to keep the default suite under 10 minutes (.ci/release runs it)
def test_resume_mid_rollout_with_another_number_of_processes_is_refused(tmp_path):
    out = tmp_path / "run"
    build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, out, **MID_ROLLOUT, **SAVE).train()
    checkpoint = out / "checkpoint-2"
    marker = json.loads((checkpoint / MARKER_FILE).read_text())
    assert marker["mid_rollout"] is True and (checkpoint / ROLLOUT_BUFFER_FILE.format(rank=0)).exists()
    (checkpoint / MARKER_FILE).write_text(json.dumps(dict(marker, num_processes=2)))
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, out, **MID_ROLLOUT, **SAVE)
    with pytest.raises(ResumeError, match="num_processes: checkpoint 2, this run 1.*cannot be re-sharded"):
        trainer.train(resume_from_checkpoint=str(checkpoint))
    # At a rollout-batch boundary the state re-shards: accepted, with a warning that the random streams differ.
    boundary = out / "checkpoint-4"
    marker = json.loads((boundary / MARKER_FILE).read_text())
    assert marker["mid_rollout"] is False
    (boundary / MARKER_FILE).write_text(json.dumps(dict(marker, num_processes=2)))
    trainer = build_trainer(EntropyGRPOTrainer, EntropyGRPOConfig, out, **MID_ROLLOUT, **dict(SAVE, max_steps=5))
    with pytest.warns(RuntimeWarning, match="num_processes: checkpoint 2, this run 1"):
        trainer.train(resume_from_checkpoint=str(boundary))


def test_unknown_allowed_mismatch_is_a_config_error(tmp_path):
    with pytest.raises(ValueError, match=r"resume_allow_mismatch: \['tua'\].*tau"):
        AERConfig(output_dir=str(tmp_path), use_cpu=True, report_to="none", resume_allow_mismatch=["tua"])


# ---------------------------------------------------------------------------------------------------------------
# Resume in the middle of a rollout batch: every trainer (the base trainer saves the batch)
# ---------------------------------------------------------------------------------------------------------------
def test_plain_trainer_resumes_inside_a_rollout_batch_bitwise(tmp_path):
    """(OPEFO trains on one rollout batch per optimizer step: its checkpoints never fall inside one. HEAL's and every
    other trainer's case runs in tests/test_kill_resume.py.)"""
    tcls, ccls = EntropyGRPOTrainer, EntropyGRPOConfig
    cfg = dict(MID_ROLLOUT, learning_rate=5e-2, **SAVE)
    full = build_trainer(tcls, ccls, tmp_path / "full", **cfg)
    full.train()
    assert (tmp_path / "full" / "checkpoint-2" / ROLLOUT_BUFFER_FILE.format(rank=0)).exists()
    resumed = build_trainer(tcls, ccls, tmp_path / "resumed", **dict(cfg, save_strategy="no"))
    resumed.train(resume_from_checkpoint=str(tmp_path / "full" / "checkpoint-2"))
    expected, got = params(full), params(resumed)
    assert all(torch.equal(expected[name], got[name]) for name in expected)
    key = "loss"
    after = [(e["step"], e[key]) for e in full.state.log_history if key in e and e["step"] > 2]
    assert after and [(e["step"], e[key]) for e in resumed.state.log_history if key in e and e["step"] > 2] == after
