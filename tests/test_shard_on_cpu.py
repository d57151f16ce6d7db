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

from healtrl.cli import train_main
from healtrl.utils import distributed as _distributed
from healtrl.utils.distributed import (
    ShardingUnavailableError,
    check_sharded_launch,
    rehearsal_kind,
    rehearsal_report,
    sharding_not_applied,
)
from tests.helpers import ROOT, free_port

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


@pytest.mark.parametrize("variable,kind", [("ACCELERATE_USE_FSDP", "FSDP"), ("ACCELERATE_USE_DEEPSPEED", "DeepSpeed")])
def test_a_launch_whose_sharding_accelerate_did_not_apply_is_named(launch_env, variable, kind):
    """On any machine (GPUs too), `use_cpu: true` makes accelerate run MULTI_CPU under an FSDP / DeepSpeed config:
    the training entry names the field instead of training unsharded."""
    launch_env.setenv(variable, "true")
    unsharded = SimpleNamespace(accelerator=SimpleNamespace(distributed_type=DistributedType.MULTI_CPU))
    message = sharding_not_applied(unsharded)
    assert message is not None and kind in message and "use_cpu: false" in message and "MULTI_CPU" in message
    sharded = SimpleNamespace(accelerator=SimpleNamespace(distributed_type=getattr(DistributedType, kind.upper())))
    assert sharding_not_applied(sharded) is None
    launch_env.delenv(variable)
    assert sharding_not_applied(unsharded) is None  # a launch that asks for no sharding


def test_training_entry_refuses_use_cpu_under_an_fsdp_launch(launch_env, capsys):
    """`train.py` in a worker of an FSDP launch with the toy config's `use_cpu: true`: exit 2 naming the field, as
    accelerate's MULTI_CPU run would ignore the FSDP settings (simulated: a machine with an accelerator, 1 process)."""
    import torch.distributed as dist

    launch_env.setenv("ACCELERATE_USE_FSDP", "true")
    for name, value in {"WORLD_SIZE": "1", "LOCAL_WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1"}.items():
        launch_env.setenv(name, value)
    launch_env.setenv("MASTER_PORT", str(free_port()))
    launch_env.setattr(_distributed, "accelerator_found", lambda: True)
    try:
        code = train_main(["--config", str(ROOT / "configs" / "toy_grpo.yaml"), "--max_steps", "1"])
    finally:  # this process's one-process group and accelerate's state must not reach the next test
        if dist.is_initialized():
            dist.destroy_process_group()
        accelerate.state.AcceleratorState._reset_state(reset_partial_state=True)
    assert code == 2
    err = capsys.readouterr().err
    assert "asks for FSDP" in err and "use_cpu: false" in err
