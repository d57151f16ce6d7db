"""Worker of the 2-process test: trains a tiny model with every lever active and writes what each rank saw.

Run: torchrun --nproc_per_node 2 tests/dist_worker.py OUTPUT_DIR
"""

from __future__ import annotations

import hashlib
import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from healtrl import EntropyGRPOConfig  # noqa: E402
from tests.helpers import build_trainer, shut_down_process_group  # noqa: E402
from tests.test_levers import EntropyProbe  # noqa: E402


class AllLevers(EntropyProbe):
    """Augmented reward from gathered rollouts with entropies, shaped advantages, and an extra loss term."""

    def shape_advantages(self, advantages, batch):
        return advantages.unsqueeze(1) * (1.0 + batch.entropies.detach() / 10.0)

    def extra_loss(self, batch):
        return -0.01 * (batch.entropies * batch.mask).sum() / batch.mask.sum().clamp(min=1)

    def augment_rewards(self, rollouts):
        out = super().augment_rewards(rollouts)
        self.log_metric("seen_batch", len(rollouts.completions))
        return out


def main(output_dir: str) -> None:
    torch.set_num_threads(1)
    trainer = build_trainer(
        AllLevers, EntropyGRPOConfig, output_dir, per_device_train_batch_size=8, max_steps=3, ddp_backend="gloo"
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    digest = hashlib.sha256()
    for name, param in sorted(trainer.model.named_parameters()):
        digest.update(name.encode())
        digest.update(param.detach().cpu().numpy().tobytes())
    report = {
        "rank": rank,
        "world_size": trainer.accelerator.num_processes,
        "params_sha256": digest.hexdigest(),
        "log_history": trainer.state.log_history,
    }
    with open(os.path.join(output_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1])
    shut_down_process_group()
