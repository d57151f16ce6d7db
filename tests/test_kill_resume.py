"""Kill-and-resume equivalence: a toy run killed with SIGKILL and resumed ends where the uninterrupted run ends.

Every run is `train.py` in a subprocess (`tests/kill_resume_worker.py`, which is train.py plus a deterministic SIGKILL
at a chosen point: after a checkpoint, inside a checkpoint write, during generation, between the micro-batches of one
optimizer step). The killed run is resumed with `--resume_from_checkpoint true` (the last complete checkpoint of
output_dir), `latest` or the checkpoint's path, and compared with an uninterrupted run of the same config:

- the final weights (`model.safetensors`): bitwise equal;
- the method state of the last checkpoint (`healtrl_state.json`): equal;
- every logged metric of every step after the resume point (`metrics.jsonl`): equal, except wall-clock timings
  (`step_time`, `train_runtime`, ...) and the end-of-training summary `train_loss`, which transformers averages over
  the steps this process ran (the resumed process ran only the steps after the checkpoint).

CPU with one torch thread (`torch_num_threads: 1` in the toy configs) is deterministic, so bitwise equality is
expected and asserted. The layout puts checkpoints inside rollout batches: gradient accumulation 2, 4 micro-batches
per generation (2 optimizer steps per rollout batch), checkpoints every 3 optimizer steps (step 3 is in the middle of
the second rollout batch, step 6 ends the third).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from healtrl.checkpoints import MARKER_FILE

REPO = Path(__file__).resolve().parents[1]
WORKER = REPO / "tests" / "kill_resume_worker.py"
TIMING_KEYS = {"step_time", "train_runtime", "train_samples_per_second", "train_steps_per_second"}
SUMMARY_KEYS = {"train_loss"}  # transformers: mean loss over the steps this process ran

# 6 optimizer steps of 2 micro-batches of 2 prompts x 8 completions; one rollout batch (8 prompts) per 2 steps.
LAYOUT = [
    "--max_steps", "6",
    "--logging_steps", "1",
    "--per_device_train_batch_size", "16",
    "--gradient_accumulation_steps", "2",
    "--steps_per_generation", "4",
    "--save_strategy", "steps",
    "--save_steps", "3",
]  # fmt: skip
SMALL_DATA = ["--num_train_samples", "64"]

# trainer -> (config, extra overrides). HEAL keeps its toy config's 8 target + 32 general rows.
TRAINERS = {
    "grpo": ("configs/toy_grpo.yaml", SMALL_DATA),
    "grpo_clip_cov": ("configs/toy_grpo.yaml", [*SMALL_DATA, "--entropy_method", "clip_cov"]),
    "grpo_kl_cov": ("configs/toy_grpo.yaml", [*SMALL_DATA, "--entropy_method", "kl_cov"]),
    "grpo_entropy_adv": ("configs/toy_grpo.yaml", [*SMALL_DATA, "--entropy_method", "entropy_adv"]),
    "aer": ("configs/aer_toy.yaml", SMALL_DATA),
    "posadv": ("configs/posadv_toy.yaml", SMALL_DATA),
    # OPEFO is strictly on-policy (one rollout batch per optimizer step): its checkpoints are at rollout boundaries.
    "opefo": ("configs/opefo_toy.yaml", [*SMALL_DATA, "--steps_per_generation", "2"]),
    "heal": ("configs/heal_toy.yaml", []),
}


def args_for(trainer: str, output_dir: Path) -> list[str]:
    config, extra = TRAINERS[trainer]
    return ["--config", config, *LAYOUT, *extra, "--output_dir", str(output_dir)]


TORCHRUN = [sys.executable, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone"]


def run(args: list[str], kill: str | None = None, processes: int = 1, **env_extra) -> subprocess.CompletedProcess:
    env = dict(os.environ, PYTHONUNBUFFERED="1", PYTHONPATH=str(REPO), OMP_NUM_THREADS="1", **env_extra)
    env.pop("HEALTRL_TEST_KILL", None)
    if kill:
        env["HEALTRL_TEST_KILL"] = kill
    launcher = [sys.executable] if processes == 1 else TORCHRUN
    result = subprocess.run(
        [*launcher, str(WORKER), *args], cwd=REPO, env=env, capture_output=True, text=True, timeout=900
    )
    if kill:  # torchrun reports its workers' SIGKILL as a failure of its own
        killed = result.returncode == -9 if processes == 1 else "Signal 9 (SIGKILL)" in result.stderr
        assert killed, f"the run was to be killed at {kill}:\n{result.stderr[-3000:]}"
    else:
        assert result.returncode == 0, result.stderr[-3000:]
    return result


def history(output_dir: Path) -> list[dict]:
    return [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines() if line.strip()]


def steps_after(entries: list[dict], step: int) -> list[dict]:
    drop = TIMING_KEYS | SUMMARY_KEYS
    return [{k: v for k, v in e.items() if k not in drop} for e in entries if e.get("step", 0) > step]


def assert_same_run(reference: Path, resumed: Path, resume_step: int) -> None:
    from safetensors.torch import load_file

    expected, got = load_file(reference / "model.safetensors"), load_file(resumed / "model.safetensors")
    assert expected.keys() == got.keys()
    different = [name for name in expected if not (expected[name] == got[name]).all()]
    assert not different, f"weights differ from the uninterrupted run: {different}"
    last = "checkpoint-6"
    state = reference / last / "healtrl_state.json"
    assert state.exists() == (resumed / last / "healtrl_state.json").exists()
    if state.exists():
        assert json.loads(state.read_text()) == json.loads((resumed / last / "healtrl_state.json").read_text())
    after = steps_after(history(reference), resume_step)
    assert len(after) == 6 - resume_step + 1  # one entry per step, plus the end-of-training summary
    assert steps_after(history(resumed), resume_step) == after


@pytest.fixture(scope="module")
def reference_runs(tmp_path_factory, toy_models):
    """The uninterrupted run of each trainer, made on first use."""
    root = tmp_path_factory.mktemp("uninterrupted")
    made: dict[str, Path] = {}

    def get(trainer: str) -> Path:
        if trainer not in made:
            out = root / trainer
            run(args_for(trainer, out))
            made[trainer] = out
        return made[trainer]

    return get


@pytest.mark.slow  # killed training processes (~60 s); test_checkpoint_safety.py checks the skipped half-written checkpoint in the default suite
def test_kill_during_checkpoint_write_resumes_from_the_last_complete_one(tmp_path, reference_runs):
    """Killed while writing checkpoint 6: checkpoint-6 is incomplete (no marker), `--resume_from_checkpoint true`
    skips it with a warning naming it, resumes from checkpoint-3 (inside a rollout batch) and ends bitwise where the
    uninterrupted run ends."""
    reference = reference_runs("grpo")
    out = tmp_path / "run"
    run(args_for("grpo", out), kill="during_save:6")
    assert (out / "checkpoint-6" / "model.safetensors").exists()  # half-written: the model is there, ...
    assert not (out / "checkpoint-6" / MARKER_FILE).exists()  # ... the marker is not
    assert (out / "checkpoint-3" / MARKER_FILE).exists()
    assert json.loads((out / "checkpoint-3" / MARKER_FILE).read_text())["mid_rollout"] is True

    resumed = run([*args_for("grpo", out), "--resume_from_checkpoint", "true"])
    assert f"incomplete checkpoint(s) without {MARKER_FILE}" in resumed.stderr
    assert str(out / "checkpoint-6") in resumed.stderr and f"Resuming from {out / 'checkpoint-3'}" in resumed.stderr
    assert (out / "checkpoint-6" / MARKER_FILE).exists()  # rewritten completely by the resumed run
    assert_same_run(reference, out, resume_step=3)


def test_resume_true_without_a_complete_checkpoint_is_refused(tmp_path, capsys):
    """train.py's entry point, in process: the resume is resolved before anything is loaded."""
    import torch

    from healtrl.cli import train_main

    out = tmp_path / "run"
    (out / "checkpoint-2").mkdir(parents=True)  # a folder the run was killed while writing
    threads = torch.get_num_threads()
    try:
        code = train_main([*args_for("grpo", out), "--resume_from_checkpoint", "true"])
    finally:
        torch.set_num_threads(threads)
    err = capsys.readouterr().err
    assert code == 2
    assert f"no complete checkpoint in {out}" in err and str(out / "checkpoint-2") in err


# Each trainer with one kill point (all points over the trainers) and one way to name the checkpoint; AER with all.
SLOW_CASES = [
    ("grpo", "micro_batch:9", "true"),
    ("grpo_clip_cov", "during_generation:3", "latest"),
    ("grpo_kl_cov", "after_save:3", "path"),
    ("grpo_entropy_adv", "during_save:6", "true"),
    ("aer", "micro_batch:9", "path"),
    ("aer", "during_generation:3", "true"),
    ("aer", "after_save:3", "latest"),
    ("aer", "during_save:6", "true"),
    ("posadv", "during_generation:3", "path"),
    ("opefo", "micro_batch:11", "true"),
    ("heal", "during_save:6", "latest"),
    ("heal", "micro_batch:9", "path"),
]


@pytest.mark.slow
@pytest.mark.parametrize(("trainer", "kill", "resume"), SLOW_CASES, ids=[f"{t}-{k}-{r}" for t, k, r in SLOW_CASES])
def test_every_trainer_resumes_to_the_uninterrupted_run(tmp_path, reference_runs, trainer, kill, resume):
    reference = reference_runs(trainer)
    out = tmp_path / "run"
    run(args_for(trainer, out), kill=kill)
    assert (out / "checkpoint-3" / MARKER_FILE).exists()
    value = str(out / "checkpoint-3") if resume == "path" else resume
    run([*args_for(trainer, out), "--resume_from_checkpoint", value])
    assert_same_run(reference, out, resume_step=3)


@pytest.mark.slow
def test_two_processes_resume_inside_a_rollout_batch_to_the_uninterrupted_run(tmp_path, toy_models):
    """torchrun, 2 CPU processes (gloo): killed between the micro-batches of step 5, resumed from checkpoint-3, which
    holds each process's part of an unfinished rollout batch."""
    reference, out = tmp_path / "full", tmp_path / "run"
    run(args_for("aer", reference), processes=2)
    run(args_for("aer", out), kill="micro_batch:9", processes=2)
    marker = json.loads((out / "checkpoint-3" / MARKER_FILE).read_text())
    assert marker["num_processes"] == 2 and marker["mid_rollout"] is True
    assert sorted(p.name for p in (out / "checkpoint-3").glob("healtrl_rollout_buffer_rank*.pt")) == [
        "healtrl_rollout_buffer_rank0.pt",
        "healtrl_rollout_buffer_rank1.pt",
    ]
    run([*args_for("aer", out), "--resume_from_checkpoint", "true"], processes=2)
    assert_same_run(reference, out, resume_step=3)


# ---------------------------------------------------------------------------------------------------------------
# healtrl select: killed while writing its records, resumed without rescoring finished questions
# ---------------------------------------------------------------------------------------------------------------
SELECT_ARGS = [
    "select", "--model", "healtrl-toy/qwen2-add", "--dataset", "healtrl-toy/add+compare", "--reward", "toy",
    "--num_rollouts", "4", "--top_k", "6", "--max_questions", "16", "--max_new_tokens", "4", "--batch_size", "4",
    "--no_progress",
]  # fmt: skip


@pytest.mark.slow  # three `healtrl select` processes; tests/test_selection.py covers the resume in the default suite
def test_select_killed_while_writing_records_resumes_without_rescoring(tmp_path, toy_models):
    from healtrl.selection import pipeline as selection

    full, out = tmp_path / "full", tmp_path / "run"
    run([*SELECT_ARGS, "--output_dir", str(full)])
    scored = tmp_path / "scored.txt"
    run([*SELECT_ARGS, "--output_dir", str(out)], kill="select_write:3", HEALTRL_TEST_SCORED=str(scored))
    first = [line.split() for line in scored.read_text().splitlines()]
    assert len(first) == 3  # the third batch was scored, then the run died halfway through writing it
    assert not (out / selection.RECORDS_FILE).read_text().endswith("\n")  # a torn last line
    scored.unlink()
    run([*SELECT_ARGS, "--output_dir", str(out)], HEALTRL_TEST_SCORED=str(scored))
    second = [line.split() for line in scored.read_text().splitlines()]
    # The two finished batches are not scored again; the torn one is.
    assert second[0] == first[2] and not {i for b in first[:2] for i in b} & {i for b in second for i in b}
    assert (out / selection.RECORDS_FILE).read_text() == (full / selection.RECORDS_FILE).read_text()
    assert (out / selection.SELECTED_JSONL).read_text() == (full / selection.SELECTED_JSONL).read_text()
