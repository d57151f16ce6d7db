"""Worker of the 2-process HEAL test: 2 steps, each rank records the gathered rollout batch and its EDA rewards.

Run: torchrun --nproc_per_node 2 tests/dist_heal_worker.py OUTPUT_DIR
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from tests.helpers import shut_down_process_group, tiny_dataset  # noqa: E402
from tests.test_heal import heal_trainer  # noqa: E402


def main(output_dir: str) -> None:
    torch.set_num_threads(1)
    trainer = heal_trainer(
        output_dir, target=tiny_dataset(16), general=tiny_dataset(16, family="compare", seed=1), max_steps=2,
        per_device_train_batch_size=8, mixing="fixed_share", general_share=0.5, ddp_backend="gloo",
    )  # fmt: skip
    trainer.train()
    records = []
    for rec in trainer.records:
        lengths = rec["mask"].sum(1).long().tolist()
        records.append(
            {
                "domains": rec["domains"],
                "entropies": [rec["entropies"][i, :n].tolist() for i, n in enumerate(lengths)],
                "eda": rec["eda"].tolist(),
            }
        )
    rank = trainer.accelerator.process_index
    with open(os.path.join(output_dir, f"rank{rank}.json"), "w") as f:
        json.dump({"records": records}, f)


if __name__ == "__main__":
    main(sys.argv[1])
    shut_down_process_group()
