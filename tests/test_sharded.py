"""FSDP2 and DeepSpeed ZeRO-3 training in two CPU processes (gloo), through TRL's and accelerate's own paths.

accelerate runs FSDP and DeepSpeed only on an accelerator; `healtrl.utils.distributed.accelerator_paths_on_cpu` pins its
device to the CPU (the one patch, explained there; `HEALTRL_SHARD_ON_CPU=1` applies it to a launch of train.py). What runs after it is the GPU code path: `fully_shard` per decoder layer and at the root
(the LM head is a DTensor), TRL's fused LM head over the sharded weight routed through healtrl's kernel, the
full-state-dict save, DeepSpeed's ZeRO-3 engine and its checkpoints. Not exercised: NCCL, CUDA, mixed precision.

Reference run: the same 2-process run under DDP. A single process cannot be the reference step for step: TRL seeds
generation per device (`set_seed(seed, device_specific=True)`), so 2 ranks sample other completions than 1 process.
DDP itself is checked against its ranks in test_distributed.py and against the math in test_parity.py.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from transformers import AutoModelForCausalLM

from tests.helpers import ROOT, clean_history, tiny_model

WORKER = "tests/dist_sharded_worker.py"
# Sharding changes only the order of float32 reductions (all-gather / reduce-scatter vs all-reduce): tolerance.
METRIC_REL, WEIGHT_ATOL = 1e-5, 1e-6


def run_worker(mode: str, output_dir: Path, python: str = sys.executable, **env) -> list[dict]:
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1", **env)
    cmd = [python, "-m", "torch.distributed.run", "--nproc_per_node", "2", "--standalone", WORKER, mode]
    result = subprocess.run([*cmd, str(output_dir)], cwd=ROOT, env=env, capture_output=True, text=True, timeout=900)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-5000:]
    return [json.loads((output_dir / mode / f"rank{r}.json").read_text()) for r in range(2)]


def assert_metrics_close(history_a, history_b):
    a, b = clean_history(history_a), clean_history(history_b)
    assert len(a) == len(b) and len(a) >= 2
    for entry_a, entry_b in zip(a, b):
        assert set(entry_a) == set(entry_b), set(entry_a) ^ set(entry_b)
        for key, va in entry_a.items():
            vb = entry_b[key]
            if isinstance(va, float):
                assert math.isclose(va, vb, rel_tol=METRIC_REL, abs_tol=1e-7), (key, va, vb)
            else:
                assert va == vb, (key, va, vb)


def load_params(folder) -> dict[str, torch.Tensor]:
    return {n: p.detach() for n, p in AutoModelForCausalLM.from_pretrained(folder).named_parameters()}


@pytest.fixture(scope="module")
def fsdp2_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("fsdp2")
    return out, run_worker("fsdp2", out)


@pytest.mark.slow  # a two-process FSDP2 launch (~30 s)
def test_fsdp2_trains_with_sharded_head_and_saves_a_normal_checkpoint(fsdp2_run):
    out, ranks = fsdp2_run
    initial = dict(tiny_model().named_parameters())
    for name in ("opefo_exact", "aer"):
        r0, r1 = ranks[0][name], ranks[1][name]
        assert r0["distributed_type"] == "DistributedType.FSDP"
        assert r0["head_type"] == "DTensor"  # the LM head is sharded, TRL gathers it for the fused head
        # healtrl's kernel served every training forward; OPEFO's exact estimator took the power sums from it.
        assert r0["kernel_calls"] == 2
        assert r0["power_sum_calls"] == (2 if name == "opefo_exact" else 0)
        assert clean_history(r0["history"]) == clean_history(r1["history"])
        steps = [e for e in r0["history"] if "loss" in e]
        assert len(steps) == 2 and all(math.isfinite(e["loss"]) for e in steps)
        key = "opefo/lambda" if name == "opefo_exact" else "aer/alpha"
        assert all(key in e for e in steps)
        # save_model gathered the full state dict into a regular checkpoint, with its model card.
        folder = out / "fsdp2" / name
        assert (folder / "README.md").read_text().strip()
        params = load_params(folder)
        assert params.keys() == initial.keys()
        assert any(not torch.equal(params[n], initial[n].detach()) for n in params)  # it trained


@pytest.mark.slow
def test_fsdp2_matches_ddp(fsdp2_run, tmp_path):
    out, fsdp = fsdp2_run
    ddp = run_worker("ddp", tmp_path)
    for name in ("opefo_exact", "aer"):
        assert ddp[0][name]["distributed_type"] == "DistributedType.MULTI_CPU"
        assert ddp[0][name]["head_type"] == "Parameter"
        assert_metrics_close(fsdp[0][name]["history"], ddp[0][name]["history"])
        sharded, replicated = load_params(out / "fsdp2" / name), load_params(tmp_path / "ddp" / name)
        for n, p in replicated.items():
            torch.testing.assert_close(sharded[n], p, rtol=0, atol=WEIGHT_ATOL, msg=n)


def assert_resumed_exactly(report, name):
    """Resumed at step 2 (model, optimizer, RNG, healtrl state): step 3 is the uninterrupted run's step 3."""
    full = {e["step"]: e for e in clean_history(report["history"]) if "loss" in e}
    resumed = {e["step"]: e for e in clean_history(report["resumed_history"]) if "loss" in e}
    assert sorted(full) == sorted(resumed) == [1, 2, 3]
    assert resumed[3] == full[3], name
    assert report["resumed_method_state"] == report["method_state"]


@pytest.mark.slow
def test_fsdp2_checkpoint_resumes_exactly(tmp_path):
    ranks = run_worker("fsdp2_resume", tmp_path)
    assert clean_history(ranks[0]["history"]) == clean_history(ranks[1]["history"])
    assert_resumed_exactly(ranks[0], "aer")
    # accelerate's FSDP checkpoint (full state dict: model and optimizer) next to healtrl's state.
    assert {"pytorch_model_fsdp.bin", "optimizer.bin", "healtrl_state.json"} <= set(ranks[0]["checkpoint_files"])


DEEPSPEED = importlib.util.find_spec("deepspeed") is not None


@pytest.mark.slow
@pytest.mark.skipif(
    not DEEPSPEED,
    reason="DeepSpeed is not installed (it is no healtrl extra). To run: pip install wheel; "
    "DS_BUILD_OPS=0 pip install --no-build-isolation deepspeed (0.19.8 checked; build isolation would pull a torch)",
)
def test_zero3_every_trainer_runs_checkpoints_and_resumes(tmp_path):
    ranks = run_worker("zero3", tmp_path, DS_ACCELERATOR="cpu")
    # OPEFO's exact estimator is refused: its power sums need the kernel, ZeRO-3 goes to TRL's own LM head.
    assert "DeepSpeed ZeRO-3" in ranks[0]["exact_refused"]
    initial = dict(tiny_model().named_parameters())
    for name in ("opefo", "aer", "posadv", "clip_cov", "heal"):
        r0, r1 = ranks[0][name], ranks[1][name]
        assert r0["distributed_type"] == "DistributedType.DEEPSPEED"
        assert clean_history(r0["history"]) == clean_history(r1["history"])
        assert_resumed_exactly(r0, name)  # from DeepSpeed's checkpoint
        folder = tmp_path / "zero3" / name
        assert (folder / "checkpoint-2" / "global_step2").is_dir()  # DeepSpeed's partitioned states
        assert (folder / "README.md").read_text().strip()
        params = load_params(folder)  # zero3_save_16bit_model: the final save is a full model
        assert params.keys() == initial.keys()
        assert any(not torch.equal(params[n], initial[n].detach()) for n in params)
