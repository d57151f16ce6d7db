"""`train.py` with a deterministic SIGKILL, for tests/test_kill_resume.py.

    HEALTRL_TEST_KILL=<point>:<n> python tests/kill_resume_worker.py --config ... (train.py's arguments)

runs `healtrl.cli.train_main` (what train.py runs) and kills its own process with SIGKILL (no cleanup, no atexit, no
flush: what a preemption or the OOM killer does) at the chosen point:

- `after_save:<n>`: right after the checkpoint of optimizer step n is complete (marker written);
- `during_save:<n>`: inside transformers' write of checkpoint n, after the model, optimizer and scheduler files and
  before the RNG and trainer state, the method state and the completion marker: a half-written checkpoint;
- `during_generation:<n>`: in the n-th rollout generation of training, after the completions are sampled and before
  they are scored;
- `micro_batch:<n>`: after the n-th training micro-batch (forward + backward), i.e. between the micro-batches of one
  optimizer step when n is not a multiple of gradient_accumulation_steps;
- `select_write:<n>`: (`kill_resume_worker.py select ...` runs `healtrl select`) in the middle of writing the records
  of the n-th scored batch: half of its first line is on disk.

With HEALTRL_TEST_SCORED=<file>, `healtrl select` appends the question indices of every batch it scores to <file>.

Without HEALTRL_TEST_KILL it is train.py. The hooks wrap methods of transformers' and TRL's classes, so the trainers'
own code runs unchanged.
"""

from __future__ import annotations

import os
import signal
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

POINTS = ("after_save", "during_save", "during_generation", "micro_batch", "select_write")


def _die() -> None:
    sys.stdout.flush()
    sys.stderr.flush()
    os.kill(os.getpid(), signal.SIGKILL)


def install(spec: str) -> None:
    point, _, n = spec.partition(":")
    if point not in POINTS or not n.isdigit():
        raise SystemExit(f"HEALTRL_TEST_KILL must be <point>:<n> with point one of {POINTS}; got {spec!r}")
    n = int(n)
    from transformers import Trainer
    from trl import GRPOTrainer

    from healtrl.trainers.base import EntropyGRPOTrainer

    if point == "after_save":
        original = EntropyGRPOTrainer._save_checkpoint

        def save(self, model, trial):
            original(self, model, trial)
            if self.state.global_step == n:
                _die()

        EntropyGRPOTrainer._save_checkpoint = save
    elif point == "during_save":
        original = Trainer._save_scaler  # after the model, optimizer and scheduler; before RNG and trainer state

        def save_scaler(self, output_dir):
            original(self, output_dir)
            if self.state.global_step == n:
                _die()

        Trainer._save_scaler = save_scaler
    elif point == "during_generation":
        original = GRPOTrainer._generate
        calls = [0]

        def generate(self, prompts):
            outputs = original(self, prompts)
            if self.model.training:
                calls[0] += 1
                if calls[0] == n:
                    _die()
            return outputs

        GRPOTrainer._generate = generate
    elif point == "select_write":
        from healtrl.selection import data as selection_data

        calls = [0]
        original = selection_data.RecordStore.append

        def append(self, records):
            calls[0] += 1
            if calls[0] == n:
                import json

                with open(self.records_path, "a") as f:
                    line = json.dumps(records[0])
                    f.write(line[: len(line) // 2])
                    f.flush()
                    os.fsync(f.fileno())
                _die()
            original(self, records)

        selection_data.RecordStore.append = append
    else:
        original = GRPOTrainer.training_step
        calls = [0]

        def training_step(self, *args, **kwargs):
            loss = original(self, *args, **kwargs)
            calls[0] += 1
            if calls[0] == n:
                _die()
            return loss

        GRPOTrainer.training_step = training_step


def count_scored(path: str) -> None:
    from healtrl.selection import pipeline as selection

    original = selection._score_batch

    def score_batch(batch, *args, **kwargs):
        with open(path, "a") as f:
            f.write(" ".join(map(str, batch)) + "\n")
        return original(batch, *args, **kwargs)

    selection._score_batch = score_batch


if __name__ == "__main__":
    spec = os.environ.get("HEALTRL_TEST_KILL")
    if spec:
        install(spec)
    if os.environ.get("HEALTRL_TEST_SCORED"):
        count_scored(os.environ["HEALTRL_TEST_SCORED"])
    if sys.argv[1:2] == ["select"]:
        from healtrl.cli.select import select_main

        sys.exit(select_main(sys.argv[2:]))
    from healtrl.cli import train_main

    sys.exit(train_main(sys.argv[1:]))
