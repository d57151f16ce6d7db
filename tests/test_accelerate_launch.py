"""`accelerate launch` end to end on the CPU: 2 processes, train.py, a toy config, the shipped CPU variants of the
accelerate configs (configs/accelerate/ddp_cpu2.yaml, fsdp2_cpu2.yaml, deepspeed_zero3_cpu2.yaml). Slow (15-25 s each
on 2 cores). The ZeRO-3 launch needs DeepSpeed (not a healtrl extra) and DS_ACCELERATOR=cpu, which the test sets.

FSDP2 and ZeRO-3 go through tests/fsdp_cpu_train.py: train.py plus the one patch that lets accelerate shard on CPU tensors
(tests/fsdp_cpu.py). The launches train the same 2 rollout streams, so their metrics agree to float32 rounding.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys

import pytest

from tests.helpers import ROOT

# float32 in both launches (TRL's default is bf16 autocast, also on the CPU).
TRAIN_ARGS = ["--config", "configs/toy_grpo.yaml", "--max_steps", "2", "--per_device_train_batch_size", "16",
              "--logging_steps", "1", "--bf16", "false"]  # fmt: skip
PER_RANK, RANKS = 16, 2


def free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def launch(config: str, script: str, output_dir, *extra, python=sys.executable, **env) -> list[dict]:
    cmd = [python, "-m", "accelerate.commands.launch", "--config_file", f"configs/accelerate/{config}"]
    cmd += ["--main_process_port", str(free_port())]  # not accelerate's fixed default 29500: parallel runs collide
    cmd += [script, *TRAIN_ARGS, "--output_dir", str(output_dir), *extra]
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", PYTHONPATH=str(ROOT), **env)
    result = subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    assert (output_dir / "model.safetensors").is_file() and (output_dir / "README.md").read_text().strip()
    lines = (output_dir / "metrics.jsonl").read_text().splitlines()
    return [row for row in map(json.loads, lines) if "loss" in row]


@pytest.fixture(scope="module")
def ddp_metrics(tmp_path_factory):
    return launch("ddp_cpu2.yaml", "train.py", tmp_path_factory.mktemp("ddp"))


@pytest.mark.slow
def test_accelerate_launch_ddp_cpu_runs_two_processes(ddp_metrics):
    assert len(ddp_metrics) == 2
    # The logged means are over the gathered batch of 2 x 16 completions: multiples of 1/32, and not all of 1/16
    # (which one process of 16 would give).
    means = [row["rewards/toy_reward/mean"] * PER_RANK * RANKS for row in ddp_metrics]
    means += [row["completions/mean_length"] * PER_RANK * RANKS for row in ddp_metrics]
    assert all(abs(m - round(m)) < 1e-4 for m in means)
    assert any(round(m) % 2 for m in means)


@pytest.mark.slow
def test_accelerate_launch_fsdp2_cpu_shards_and_matches_ddp(ddp_metrics, tmp_path):
    record = tmp_path / "record"
    fsdp = launch("fsdp2_cpu2.yaml", "tests/fsdp_cpu_train.py", tmp_path / "out", "--use_cpu", "false",
                  HEALTRL_TEST_FSDP_RECORD=str(record))  # fmt: skip
    for rank in range(RANKS):
        seen = json.loads((record / f"rank{rank}.json").read_text())
        assert seen == {"distributed_type": "DistributedType.FSDP", "num_processes": 2, "head_type": "DTensor",
                        "head_partitioned": False}  # fmt: skip
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
    record = tmp_path / "record"
    rows = launch("deepspeed_zero3_cpu2.yaml", "tests/fsdp_cpu_train.py", tmp_path / "out", "--use_cpu", "false",
                  HEALTRL_TEST_FSDP_RECORD=str(record), DS_ACCELERATOR="cpu")  # fmt: skip
    for rank in range(RANKS):
        seen = json.loads((record / f"rank{rank}.json").read_text())
        assert seen == {"distributed_type": "DistributedType.DEEPSPEED", "num_processes": 2,
                        "head_type": "Parameter", "head_partitioned": True}  # fmt: skip
    assert_metrics_match(rows, ddp_metrics)
