"""Why `benchmarks/overhead.py` resets every trainer at the start of each round.

Without the reset (weights and optimizer carried over from round to round, as the benchmark did before 2026-11-25),
GRPO's and OPEFO's policies drift apart over the rounds, so their steps stop being the same workload. This script
runs the two trainers of `overhead.py` (same geometry, same data) for 21 rounds that way and prints the mean
completion length and policy entropy of the last round's steps at a few rounds.

    python benchmarks/overhead_drift.py     # about 2 minutes on one CPU thread
"""

from __future__ import annotations

import os
import statistics
import sys
import tempfile
import warnings

import torch

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from benchmarks import overhead as ov  # noqa: E402
from benchmarks.heal_toy import general_pool, target_data  # noqa: E402

NAMES = ("grpo (1 update)", "opefo")
REPORT_ROUNDS = (1, 6, 11, 21)


def round_without_reset(trainer) -> None:
    """One round of `STEPS_PER_ROUND` steps the way `overhead.py` ran it before the reset."""
    trainer._step, trainer._buffered_inputs = 0, None
    trainer.clock.steps = []
    trainer.train()


def last_round_means(trainer) -> tuple[float, float]:
    logs = [row for row in trainer.state.log_history if "completions/mean_length" in row][-ov.STEPS_PER_ROUND :]
    length = statistics.mean(row["completions/mean_length"] for row in logs)
    entropy = statistics.mean(row.get("entropy", float("nan")) for row in logs)
    return length, entropy


def main() -> None:
    torch.set_num_threads(1)
    warnings.simplefilter("ignore")
    workdir = tempfile.mkdtemp(prefix="healtrl-drift-")
    target, general = target_data(80, 0), general_pool()
    pool = ov.build("heal", workdir, target, general, None).train_dataset  # the prompts every trainer sees
    trainers = {name: ov.build(name, workdir, target, general, pool) for name in NAMES}
    for r in range(1, max(REPORT_ROUNDS) + 1):
        for trainer in trainers.values():
            round_without_reset(trainer)
        if r in REPORT_ROUNDS:
            for name, trainer in trainers.items():
                length, entropy = last_round_means(trainer)
                print(f"round {r} {name}: mean completion length {length:.2f}, entropy {entropy:.3f}", flush=True)


if __name__ == "__main__":
    main()
