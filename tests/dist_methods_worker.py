"""Worker of the 2-process test of the method trainers: AER, entropy-guided PosAdv and Clip-Cov, 3 steps each.

Run: torchrun --nproc_per_node 2 tests/dist_methods_worker.py OUTPUT_DIR
"""

from __future__ import annotations

import json
import os
import sys

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from healtrl import AERConfig, AERTrainer, GRPOBaselineConfig, GRPOBaselineTrainer, PosAdvConfig, PosAdvTrainer  # noqa: E402
from tests.helpers import build_trainer, shut_down_process_group  # noqa: E402

RUNS = {
    "aer": (AERTrainer, AERConfig, dict(alpha_init=0.01, tau=1.0)),
    "posadv": (PosAdvTrainer, PosAdvConfig, dict(entropy_threshold=4.6)),
    "clip_cov": (GRPOBaselineTrainer, GRPOBaselineConfig, dict(entropy_method="clip_cov", clip_cov_ratio=0.05)),
}


def main(output_dir: str) -> None:
    torch.set_num_threads(1)
    report = {}
    for name, (tcls, ccls, kw) in RUNS.items():
        trainer = build_trainer(
            tcls, ccls, os.path.join(output_dir, name), per_device_train_batch_size=8, max_steps=3, ddp_backend="gloo",
            **kw,
        )  # fmt: skip
        trainer.train()
        state = trainer.method_state()
        state.pop("rng_calls", None)  # per-rank stream counter (equal anyway)
        report[name] = {
            "state": state,
            "history": [{k: v for k, v in e.items() if "/" in k and k.split("/")[0] in ("aer", "posadv")}
                        for e in trainer.state.log_history],
        }  # fmt: skip
    rank = trainer.accelerator.process_index
    with open(os.path.join(output_dir, f"rank{rank}.json"), "w") as f:
        json.dump(report, f)


if __name__ == "__main__":
    main(sys.argv[1])
    shut_down_process_group()
