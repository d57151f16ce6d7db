"""`accelerate launch` end to end on the CPU: 2 processes, train.py, a toy config, the shipped CPU variants of the
accelerate configs (configs/accelerate/ddp_cpu2.yaml, fsdp2_cpu2.yaml, deepspeed_zero3_cpu2.yaml). Slow (15-25 s each
on 2 cores). The ZeRO-3 launch needs DeepSpeed (not a healtrl extra) and DS_ACCELERATOR=cpu, which the test sets.

FSDP2 and ZeRO-3 launch train.py with HEALTRL_SHARD_ON_CPU=1, the opt-in to the CPU rehearsal (the one patch that lets
accelerate shard on CPU tensors, healtrl/utils/distributed.py); each process then prints its distributed type and the type of
its LM head weight, which the tests check. Without the opt-in train.py refuses such a launch instead of training
unsharded. The launches train the same 2 rollout streams, so their metrics agree to float32 rounding.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT, free_port

# float32 in both launches (TRL's default is bf16 autocast, also on the CPU).
TRAIN_ARGS = ["--config", "configs/toy_grpo.yaml", "--max_steps", "2", "--per_device_train_batch_size", "16",
              "--logging_steps", "1", "--bf16", "false"]  # fmt: skip
PER_RANK, RANKS = 16, 2


def run_launch(config: str, output_dir, *extra, python=sys.executable, **set_env) -> subprocess.CompletedProcess:
    cmd = [python, "-m", "accelerate.commands.launch", "--config_file", f"configs/accelerate/{config}"]
    cmd += ["--main_process_port", str(free_port())]  # not accelerate's fixed default 29500: parallel runs collide
    cmd += ["train.py", *TRAIN_ARGS, "--output_dir", str(output_dir), *extra]
    env = {k: v for k, v in os.environ.items() if k != "HEALTRL_SHARD_ON_CPU"}
    env.update(OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), **set_env)
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)


def launch(config: str, output_dir, *extra, **env) -> tuple[list[dict], str]:
    """The logged training steps and the launch's output (stdout + stderr)."""
    result = run_launch(config, output_dir, *extra, **env)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert (output_dir / "model.safetensors").is_file() and (output_dir / "README.md").read_text().strip()
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if "loss" in row], result.stdout + result.stderr


@pytest.fixture(scope="module")
def ddp_metrics(tmp_path_factory):
    rows, output = launch("ddp_cpu2.yaml", tmp_path_factory.mktemp("ddp"))
    assert "CPU rehearsal" not in output
    return rows


@pytest.mark.slow
def test_accelerate_launch_ddp_cpu_runs_two_processes(ddp_metrics):
    assert len(ddp_metrics) == 2
    # The logged means are over the gathered batch of 2 x 16 completions: multiples of 1/32, and not all of 1/16
    # (which one process of 16 would give).
    means = [row["rewards/toy_reward/mean"] * PER_RANK * RANKS for row in ddp_metrics]
    means += [row["completions/mean_length"] * PER_RANK * RANKS for row in ddp_metrics]
    assert all(abs(m - round(m)) < 1e-4 for m in means)
    assert any(round(m) % 2 for m in means)


def assert_rehearsal(output: str, kind: str, head: str) -> None:
    """The rehearsal warning (once) and, from each process, what accelerate prepared."""
    assert output.count("HEALTRL_SHARD_ON_CPU=1: a CPU rehearsal of the") == 1, output[-3000:]
    for rank in range(RANKS):
        line = f"healtrl CPU rehearsal, rank {rank}/{RANKS}: DistributedType.{kind}, LM head weight {head}"
        assert line + "\n" in output, output[-3000:]  # (on rank 0 after the progress bar's first frame)


@pytest.mark.slow
def test_accelerate_launch_fsdp2_cpu_without_opt_in_refuses(tmp_path):
    result = run_launch("fsdp2_cpu2.yaml", tmp_path / "out", "--use_cpu", "false")
    assert result.returncode != 0
    assert "HEALTRL_SHARD_ON_CPU=1" in result.stderr and "unsharded" in result.stderr, result.stderr[-3000:]
    assert not (tmp_path / "out" / "metrics.jsonl").exists()


@pytest.mark.slow
def test_accelerate_launch_fsdp2_cpu_shards_and_matches_ddp(ddp_metrics, tmp_path):
    fsdp, output = launch("fsdp2_cpu2.yaml", tmp_path / "out", "--use_cpu", "false", HEALTRL_SHARD_ON_CPU="1")
    assert_rehearsal(output, "FSDP", "DTensor")
    assert_metrics_match(fsdp, ddp_metrics)


def assert_metrics_match(rows, reference):
    assert len(rows) == len(reference) == 2
    for row, ref in zip(rows, reference):
        for key, value in ref.items():
            if key in ("step_time",) or not isinstance(value, float):
                continue
            assert math.isclose(row[key], value, rel_tol=1e-5, abs_tol=1e-7), (key, row[key], value)


@pytest.mark.slow
@pytest.mark.skipif(
    importlib.util.find_spec("deepspeed") is None,
    reason="DeepSpeed is not installed (no healtrl extra); benchmarks/results/gpu_readiness.md says how to install it",
)
def test_accelerate_launch_zero3_cpu_partitions_and_matches_ddp(ddp_metrics, tmp_path):
    rows, output = launch("deepspeed_zero3_cpu2.yaml", tmp_path / "out", "--use_cpu", "false",
                          HEALTRL_SHARD_ON_CPU="1", DS_ACCELERATOR="cpu")  # fmt: skip
    assert_rehearsal(output, "DEEPSPEED", "Parameter (ZeRO-3 partitioned)")
    assert_metrics_match(rows, ddp_metrics)
