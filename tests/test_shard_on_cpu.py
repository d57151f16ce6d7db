"""The training entry's decision for a sharded launch without an accelerator (issue #16 item 4): a launch worker whose
accelerate environment asks for FSDP or DeepSpeed on a machine with no CUDA device is refused (accelerate would train
unsharded without saying so), unless HEALTRL_SHARD_ON_CPU=1 asks for the CPU rehearsal, which patches accelerate
before any state exists and warns. Anything else is left alone. The launches themselves are in
tests/test_accelerate_launch.py (slow)."""

from __future__ import annotations

import logging
from types import SimpleNamespace

import accelerate.state
import pytest
import torch
from accelerate.utils import DistributedType

from healtrl import _distributed
from healtrl._distributed import ShardingUnavailableError, check_sharded_launch, rehearsal_kind, rehearsal_report
from healtrl.cli import train_main
from tests.helpers import ROOT

ORIGINAL = accelerate.state.PartialState._prepare_backend


@pytest.fixture
def launch_env(monkeypatch):
    """A launch worker's environment (no sharding asked yet), no CUDA; accelerate's class and the environment are
    restored afterwards."""
    monkeypatch.setattr(accelerate.state.PartialState, "_prepare_backend", ORIGINAL)
    monkeypatch.setenv("ACCELERATE_TORCH_DEVICE", "unset")
    monkeypatch.delenv("ACCELERATE_TORCH_DEVICE")  # the rehearsal sets it; monkeypatch removes it again
    for name in ("HEALTRL_SHARD_ON_CPU", "ACCELERATE_USE_FSDP", "ACCELERATE_USE_DEEPSPEED", "ACCELERATE_USE_CPU"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("LOCAL_RANK", "0")
    monkeypatch.setenv("RANK", "0")
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    return monkeypatch


@pytest.mark.parametrize("variable,kind", [("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed")])
def test_sharded_launch_without_accelerator_or_opt_in_is_refused(launch_env, variable, kind, capsys):
    launch_env.setenv(variable, "true")
    with pytest.raises(ShardingUnavailableError, match="HEALTRL_SHARD_ON_CPU=1") as err:
        check_sharded_launch()
    assert kind in str(err.value) and "unsharded" in str(err.value)
    assert accelerate.state.PartialState._prepare_backend is ORIGINAL
    # The training entry refuses before reading the config or loading anything: exit code 2, the same message.
    assert train_main(["--config", str(ROOT / "configs" / "toy_grpo.yaml"), "--output_dir", "unused"]) == 2
    assert "HEALTRL_SHARD_ON_CPU=1" in capsys.readouterr().err
    assert accelerate.state.PartialState._prepare_backend is ORIGINAL


@pytest.mark.parametrize("variable,kind", [("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed")])
def test_opt_in_applies_the_patch_and_warns(launch_env, variable, kind, caplog):
    launch_env.setenv(variable, "true")
    launch_env.setenv("HEALTRL_SHARD_ON_CPU", "1")
    with caplog.at_level(logging.WARNING, logger="healtrl"):
        assert check_sharded_launch() == kind
    patched = accelerate.state.PartialState._prepare_backend
    assert patched is not ORIGINAL and patched.healtrl_original is ORIGINAL
    assert patched(None, cpu=False) == ("gloo", DistributedType.MULTI_GPU)
    with pytest.raises(ValueError, match="use_cpu false"):  # a CPU run would bypass the sharding again
        patched(None, cpu=True)
    assert _distributed.os.environ["ACCELERATE_TORCH_DEVICE"] == "cpu"
    assert rehearsal_kind() == kind
    [record] = [r for r in caplog.records if r.name == "healtrl"]
    assert "CPU rehearsal" in record.getMessage() and "gloo" in record.getMessage()
    assert "float32" in record.getMessage() and "Not exercised: NCCL" in record.getMessage()
    # Asked again (a second run in the same process): the original decides, the patch stays one layer deep.
    assert check_sharded_launch() == kind
    assert accelerate.state.PartialState._prepare_backend.healtrl_original is ORIGINAL


def test_launch_asking_nothing_or_with_cuda_is_untouched(launch_env):
    assert check_sharded_launch() is None  # a DDP launch
    launch_env.setenv("ACCELERATE_USE_FSDP", "false")
    assert check_sharded_launch() is None
    launch_env.setenv("ACCELERATE_USE_FSDP", "true")
    launch_env.delenv("LOCAL_RANK")  # not a launch worker
    assert check_sharded_launch() is None
    launch_env.setenv("LOCAL_RANK", "0")
    launch_env.setattr(torch.cuda, "is_available", lambda: True)  # accelerate shards on the GPU itself
    assert check_sharded_launch() is None
    assert accelerate.state.PartialState._prepare_backend is ORIGINAL
    assert rehearsal_kind() is None
    assert "ACCELERATE_TORCH_DEVICE" not in _distributed.os.environ


def test_rehearsal_report_names_what_accelerate_prepared():
    model = torch.nn.Module()
    model.get_output_embeddings = lambda: torch.nn.Linear(2, 3, bias=False)
    accelerator = SimpleNamespace(
        distributed_type=DistributedType.FSDP, process_index=1, num_processes=2, unwrap_model=lambda m: m
    )
    trainer = SimpleNamespace(accelerator=accelerator, model=model)
    line = rehearsal_report(trainer, "FSDP")
    assert line == "healtrl CPU rehearsal, rank 1/2: DistributedType.FSDP, LM head weight Parameter"
    accelerator.distributed_type = DistributedType.MULTI_GPU  # not sharded as asked: stop
    with pytest.raises(RuntimeError, match="asked for FSDP"):
        rehearsal_report(trainer, "FSDP")
