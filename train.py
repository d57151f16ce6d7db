#!/usr/bin/env python
"""Train with a healtrl trainer from a flat YAML config plus command-line overrides.

    python train.py                                   # the main job: HEAL vs few-shot GRPO on the toy world (CPU)
    python train.py --config configs/toy_grpo_lora.yaml --max_steps 20
    python train.py --config my_run.yaml --help       # every field of the selected trainer
    accelerate launch --config_file configs/accelerate/ddp_8gpu.yaml train.py --config my_run.yaml
    torchrun --nproc_per_node 2 train.py --config configs/toy_grpo.yaml --per_device_train_batch_size 64

`healtrl train ...` runs the same thing. See healtrl/main_job.py for the main job and healtrl/cli.py for what a run
writes to `output_dir`.
"""

import sys

from healtrl.cli import train_main

if __name__ == "__main__":
    sys.exit(train_main(sys.argv[1:]))
