"""The processes of a `torchrun` / `accelerate launch` run, for the commands that are not trainers (select, eval).

`healtrl select` and `healtrl eval` shard their work over the processes of a launch and gather one result, identical to
a single-process run with the same seed: the work is cut into the same units whatever the number of processes (one
generation batch each, seeded from its position), each process does every `world`-th unit, and the results are gathered
in unit order. Only the main process writes files and shows progress: on the other processes of a launch,
:func:`processes` also turns off the progress bars of transformers (e.g. "Loading weights"), datasets and
huggingface_hub.

A launch is recognised by `WORLD_SIZE > 1` in the environment (torchrun and accelerate set it); the process group is
created here when nobody did (gloo on a CPU, NCCL on CUDA). Without a launch everything is a no-op on one process.
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
    """Turn off the progress bars of the Hugging Face libraries in this process (one bar per launch, the main one's)."""
    try:
        from transformers.utils import logging as transformers_logging

        transformers_logging.disable_progress_bar()
    except ImportError:
        pass
    try:
        from huggingface_hub.utils import disable_progress_bars

        disable_progress_bars()
    except ImportError:
        pass
    try:
        import datasets

        datasets.disable_progress_bars()
    except ImportError:
        pass


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
