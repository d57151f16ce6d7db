"""The processes of a `torchrun` / `accelerate launch` run, for the commands that are not trainers (select, eval).

`healtrl select` and `healtrl eval` shard their work over the processes of a launch and gather one result, identical to
a single-process run with the same seed: the work is cut into the same units whatever the number of processes (one
generation batch each, seeded from its position), each process does every `world`-th unit, and the results are gathered
in unit order. Only the main process writes files and shows progress: on the other processes of a launch,
:func:`processes` also turns off the progress bars of transformers (e.g. "Loading weights"), datasets and
huggingface_hub.

A launch is recognised by `WORLD_SIZE > 1` in the environment (torchrun and accelerate set it); the process group is
created here when nobody did (gloo on a CPU, NCCL on CUDA). Without a launch everything is a no-op on one process.

Sharded training without an accelerator (`check_sharded_launch`, called by the training entry before any accelerate
state exists). accelerate 1.15 turns a run into FSDP or DeepSpeed only from an accelerator's distributed type
(`PartialState._prepare_backend`: MULTI_GPU, MULTI_XPU, ...). In a launch worker on a CPU-only machine it picks no
distributed type at all (or MULTI_CPU with `use_cpu`), ignores the FSDP plugin and gives DeepSpeed no backend: an
`accelerate launch` of an FSDP or DeepSpeed config would train unsharded, silently. So the training entry refuses such
a launch, unless `HEALTRL_SHARD_ON_CPU=1` asks for the CPU rehearsal: `accelerator_paths_on_cpu` makes accelerate
report a MULTI_GPU run on the gloo backend with its device pinned to the CPU (`ACCELERATE_TORCH_DEVICE=cpu`).
Everything after that is the code a GPU run executes: the FSDP plugin and `fsdp2_prepare_model` (`fully_shard` per
decoder layer and at the root, so the LM head is a DTensor), TRL's fused LM head over the sharded weight, the
full-state-dict save; or DeepSpeed's engine (with `DS_ACCELERATOR=cpu`), ZeRO-3 partitioning and checkpoints. What it
does not exercise: NCCL, CUDA streams and memory, mixed precision (run it in float32), CPU offload.
"""

from __future__ import annotations

import atexit
import os
from dataclasses import dataclass
from typing import Any


@dataclass(frozen=True)
class Processes:
    rank: int = 0
    world: int = 1
    local_rank: int = 0

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world > 1

    def device(self, requested: str | None = None) -> str:
        """`requested`, or this process's own device: `cuda:<local rank>` when CUDA is available, else `cpu`."""
        import torch

        if requested not in (None, "auto"):
            if self.distributed and requested == "cuda":
                return f"cuda:{self.local_rank}"
            return requested
        return f"cuda:{self.local_rank}" if torch.cuda.is_available() else "cpu"

    def mine(self, units: int) -> range:
        """The units (0..units-1) this process works on: every `world`-th, from `rank`."""
        return range(self.rank, units, self.world)

    def gather(self, obj: Any) -> list[Any]:
        """Every process's `obj`, in rank order, on every process."""
        if not self.distributed:
            return [obj]
        import torch.distributed as dist

        out: list[Any] = [None] * self.world
        dist.all_gather_object(out, obj)
        return out

    def barrier(self) -> None:
        if self.distributed:
            import torch.distributed as dist

            dist.barrier()


def processes() -> Processes:
    """This process's place in the launch; initialises the default process group on first use in a launch."""
    world = int(os.environ.get("WORLD_SIZE", "1"))
    if world <= 1:
        return Processes()
    import torch
    import torch.distributed as dist

    rank = int(os.environ.get("RANK", "0"))
    local_rank = int(os.environ.get("LOCAL_RANK", str(rank)))
    if not dist.is_initialized():
        backend = "nccl" if torch.cuda.is_available() else "gloo"
        if backend == "nccl":
            torch.cuda.set_device(local_rank)
        dist.init_process_group(backend=backend)
        # Created here, so ended here, at exit: gloo's threads can abort the process otherwise. One group serves every
        # command of the process (a worker may run select, then eval).
        atexit.register(_close)
    procs = Processes(rank=dist.get_rank(), world=dist.get_world_size(), local_rank=local_rank)
    if not procs.is_main:
        silence_library_progress_bars()
    return procs


def silence_library_progress_bars() -> None:
    """Turn off the progress bars of the Hugging Face libraries in this process (one bar per launch, the main one's).
    All three are dependencies of healtrl (huggingface_hub through transformers and datasets)."""
    import datasets
    from huggingface_hub.utils import disable_progress_bars
    from transformers.utils import logging as transformers_logging

    transformers_logging.disable_progress_bar()
    disable_progress_bars()
    datasets.disable_progress_bars()


def _close() -> None:
    import torch.distributed as dist

    if dist.is_initialized():
        dist.barrier()
        dist.destroy_process_group()


def interleave(per_rank: list[list[Any]], units: int, world: int) -> list[Any]:
    """Put back in unit order the results `gather` returned, where rank r held units r, r + world, ..."""
    out: list[Any] = [None] * units
    for rank, items in enumerate(per_rank):
        positions = range(rank, units, world)
        if len(items) != len(positions):
            raise RuntimeError(f"process {rank} returned {len(items)} results for {len(positions)} units")
        for position, item in zip(positions, items):
            out[position] = item
    return out


# The opt-in of the CPU rehearsal, and what `accelerate launch` exports for a config that asks for sharding
# (accelerate/utils/launch.py: `prepare_multi_gpu_env` and `prepare_deepspeed_cmd_env`).
SHARD_ON_CPU = "HEALTRL_SHARD_ON_CPU"
SHARDING_ENV = {"ACCELERATE_USE_FSDP": "FSDP", "ACCELERATE_USE_DEEPSPEED": "DeepSpeed"}
REHEARSAL_NOTE = (
    "a CPU rehearsal of the {kind} launch, not real training: accelerate runs its accelerator path on CPU tensors "
    "over gloo (run it in float32: --bf16 false). Exercised: the {kind} code a GPU run executes (sharding, TRL's fused "
    "LM head over the sharded weight, checkpoints). Not exercised: NCCL, CUDA streams and memory, mixed precision, "
    "CPU offload."
)


class ShardingUnavailableError(RuntimeError):
    """A launch asks for FSDP or DeepSpeed on a machine where accelerate would silently train unsharded."""


def requested_sharding() -> str | None:
    """The sharding ("FSDP", "DeepSpeed") a launch worker's accelerate environment asks for, else None."""
    if int(os.environ.get("LOCAL_RANK", -1)) == -1:
        return None
    for variable, kind in SHARDING_ENV.items():
        if os.environ.get(variable, "false").lower() == "true":  # accelerate's own test (accelerate/state.py)
            return kind
    return None


def accelerator_found() -> bool:
    """Whether accelerate finds an accelerator for a launch worker (CUDA, XPU, NPU, ...): asked of accelerate's own
    `_prepare_backend` (the unpatched one), which reads only the environment."""
    from accelerate.state import PartialState
    from accelerate.utils import DistributedType

    prepare = PartialState._prepare_backend
    prepare = getattr(prepare, "healtrl_original", prepare)
    _, distributed_type = prepare(PartialState.__new__(PartialState), cpu=False)
    return distributed_type not in (DistributedType.NO, DistributedType.MULTI_CPU)


def check_sharded_launch() -> str | None:
    """Call in the training entry before anything builds an accelerate state (TrainingArguments, Accelerator).

    A launch worker asking for FSDP or DeepSpeed without an accelerator: with `HEALTRL_SHARD_ON_CPU=1`, apply
    `accelerator_paths_on_cpu`, warn that this is a CPU rehearsal, and return the kind ("FSDP", "DeepSpeed"); without
    it raise `ShardingUnavailableError`. Anything else: return None and change nothing."""
    kind = requested_sharding()
    if kind is None or accelerator_found():
        return None
    if os.environ.get(SHARD_ON_CPU, "0").lower() not in ("1", "true", "yes"):
        raise ShardingUnavailableError(
            f"this launch asks for {kind} (ACCELERATE_USE_{kind.upper()}=true from the accelerate config), but this "
            f"machine has no accelerator: accelerate would ignore the {kind} settings and train unsharded (as DDP or "
            f"a single process) without saying so. Launch on GPUs, or set {SHARD_ON_CPU}=1 for a CPU rehearsal of the "
            f"{kind} path (gloo, float32; not for real training)."
        )
    accelerator_paths_on_cpu()
    if os.environ.get("RANK", "0") == "0":
        import logging

        logging.getLogger("healtrl").warning("%s=1: %s", SHARD_ON_CPU, REHEARSAL_NOTE.format(kind=kind))
    return kind


def honour_ddp_timeout(seconds: int | float) -> None:
    """Give the default process group the collective timeout `seconds` (TrainingArguments' `ddp_timeout`).

    transformers 5 (`TrainingArguments._setup_devices`) passes `ddp_timeout` to accelerate on accelerators only: with
    `use_cpu: true` the gloo group keeps torch's 30 minutes, so a frozen peer of a CPU run would hold every other
    process for 30 minutes whatever `--ddp_timeout` says. Applied to the group that exists (a no-op outside a launch).
    """
    import datetime

    import torch
    import torch.distributed as dist

    if not (dist.is_available() and dist.is_initialized()) or dist.get_backend() != "gloo":
        return
    group = dist.distributed_c10d._get_default_group()
    group._get_backend(torch.device("cpu")).set_timeout(datetime.timedelta(seconds=seconds))


def accelerator_paths_on_cpu() -> None:
    """Make accelerate take its accelerator path on CPU tensors (gloo, device pinned to the CPU); see the module
    docstring. Call in a torchrun / accelerate launch worker before anything builds an accelerate state."""
    import accelerate.state
    from accelerate.utils import DistributedType

    if int(os.environ.get("LOCAL_RANK", -1)) == -1:
        raise RuntimeError("accelerator_paths_on_cpu needs a torchrun / accelerate launch worker (LOCAL_RANK unset).")
    state = accelerate.state.PartialState
    original = getattr(state._prepare_backend, "healtrl_original", state._prepare_backend)
    os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"

    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        if cpu:
            raise ValueError(
                f"{SHARD_ON_CPU}=1 runs accelerate's accelerator path on CPU tensors, which a CPU run bypasses: with "
                "use_cpu (the training config's `use_cpu: true`, or the accelerate config's `use_cpu: true` / "
                "`--cpu`) accelerate ignores the sharding settings. Set `use_cpu: false` (`--use_cpu false`)."
            )
        return "gloo", DistributedType.MULTI_GPU

    _prepare_backend.healtrl_original = original
    state._prepare_backend = _prepare_backend


def _sharded_as(accelerator, kind: str) -> bool:
    """Whether accelerate prepared the run as the sharding `kind` ("FSDP", "DeepSpeed") asks."""
    return str(accelerator.distributed_type) == f"DistributedType.{kind.upper()}"


def sharding_not_applied(trainer) -> str | None:
    """Why accelerate did not prepare the sharding that this launch asks for (None when it did, or none is asked).

    On any machine, GPUs included, a training config with `use_cpu: true` (or `accelerate launch --cpu`) makes
    accelerate run MULTI_CPU and ignore the FSDP / DeepSpeed settings of the accelerate config, without a word; the
    training entry calls this once the trainer exists and refuses such a run."""
    kind = requested_sharding()
    if kind is None:
        return None
    if _sharded_as(trainer.accelerator, kind):
        return None
    return (
        f"this launch asks for {kind} (ACCELERATE_USE_{kind.upper()}=true from the accelerate config), but accelerate "
        f"prepared a {trainer.accelerator.distributed_type} run, which would train unsharded. With `use_cpu: true` in the training config "
        f"(or `--cpu` / `use_cpu: true` in the accelerate config) accelerate ignores the {kind} settings: set "
        "`use_cpu: false` (`--use_cpu false`), or launch with a DDP accelerate config."
    )


def rehearsal_kind() -> str | None:
    """The kind ("FSDP", "DeepSpeed") of the CPU rehearsal this process runs (`accelerator_paths_on_cpu` applied to a
    launch asking for sharding), else None."""
    from accelerate.state import PartialState

    patched = hasattr(PartialState._prepare_backend, "healtrl_original")
    return requested_sharding() if patched else None


def rehearsal_report(trainer, kind: str) -> str:
    """After accelerate prepared the policy in a CPU rehearsal: one line with what the policy became (distributed
    type, processes, the LM head's weight type); raises when accelerate did not shard as `kind` asks."""
    accelerator = trainer.accelerator
    weight = accelerator.unwrap_model(trainer.model).get_output_embeddings().weight
    distributed_type = str(accelerator.distributed_type)
    if not _sharded_as(accelerator, kind):
        raise RuntimeError(f"{SHARD_ON_CPU}=1 asked for {kind}, but accelerate prepared a {distributed_type} run.")
    partitioned = " (ZeRO-3 partitioned)" if hasattr(weight, "ds_id") else ""
    return (
        f"healtrl CPU rehearsal, rank {accelerator.process_index}/{accelerator.num_processes}: {distributed_type}, "
        f"LM head weight {type(weight).__name__}{partitioned}"
    )
