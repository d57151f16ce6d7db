"""accelerate's FSDP and DeepSpeed paths on CPU tensors, for tests: the one patch needed, and why.

accelerate 1.15 turns a run into FSDP only from an accelerator's distributed type (`AcceleratorState.__init__`:
MULTI_GPU, MULTI_XPU, ...). On a machine without an accelerator, `PartialState._prepare_backend` picks MULTI_CPU when
asked for the CPU -- and MULTI_CPU ignores the FSDP plugin (the run silently becomes DDP) and the DeepSpeed one -- and
no backend at all otherwise, so a DeepSpeed run counts one process although DeepSpeed's own process group has two.
torch's FSDP2 (`fully_shard`) trains CPU tensors over gloo, and DeepSpeed has a CPU accelerator (DS_ACCELERATOR=cpu).

`accelerator_paths_on_cpu` makes accelerate report a MULTI_GPU run on the gloo backend with its device pinned to the
CPU (`ACCELERATE_TORCH_DEVICE=cpu`). Everything after that is the code a GPU run executes: the FSDP plugin and
`fsdp2_prepare_model` (`fully_shard` per decoder layer and at the root, so the LM head is a DTensor), TRL's fused LM
head over the sharded weight, the full-state-dict save; or DeepSpeed's engine, ZeRO-3 partitioning and checkpoints.
What it does not exercise: NCCL, CUDA streams and memory, mixed precision (runs are float32), CPU offload.
"""

from __future__ import annotations

import os


def accelerator_paths_on_cpu() -> None:
    """Call in a torchrun worker before anything builds an accelerate state (TrainingArguments, Accelerator)."""
    import accelerate.state
    from accelerate.utils import DistributedType

    if int(os.environ.get("LOCAL_RANK", -1)) == -1:
        raise RuntimeError("accelerator_paths_on_cpu needs a torchrun / accelerate launch worker (LOCAL_RANK unset).")
    os.environ["ACCELERATE_TORCH_DEVICE"] = "cpu"

    def _prepare_backend(self, cpu=False, sagemaker_dp=False, backend=None):
        return "gloo", DistributedType.MULTI_GPU

    accelerate.state.PartialState._prepare_backend = _prepare_backend
