#!/usr/bin/env python
"""Train with a healtrl trainer from a flat YAML config plus command-line overrides.

    python train.py                                   # the main job: HEAL vs few-shot GRPO on the toy world (CPU)
    python train.py --config configs/toy_grpo_lora.yaml --max_steps 20
    python train.py --config my_run.yaml --help       # every field of the selected trainer
    accelerate launch --config_file configs/accelerate/ddp_8gpu.yaml train.py --config my_run.yaml
    torchrun --nproc_per_node 2 train.py --config configs/toy_grpo.yaml --per_device_train_batch_size 64

`healtrl train ...` runs the same thing. See healtrl/cli/main_job.py for the main job and healtrl/cli/ for what a run
writes to `output_dir`.
"""

import sys

from healtrl.cli import train_main


def shut_down_process_group() -> None:
    """End a torchrun / accelerate launch worker cleanly: a live gloo process group can hang or abort the exit."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    try:
        code = train_main(sys.argv[1:])
    finally:
        shut_down_process_group()
    sys.exit(code)
