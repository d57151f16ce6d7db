"""torchrun worker for tests/test_select_eval_processes.py: `healtrl select` and `healtrl eval` on 2 CPU processes.

Run as `torchrun --nproc_per_node 2 tests/dist_select_eval_worker.py OUTPUT_DIR`; each rank writes rank{r}.json with
the exit codes, the process group size it saw, its generation batches and the progress bars it showed. The commands
run with progress on (the shared arguments' `--no_progress` dropped): only the main process may show a bar.
"""

from __future__ import annotations

import json
import os
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from tests.select_eval_args import checkpoints_args, eval_args, select_args  # noqa: E402


def _with_progress(args: list[str]) -> list[str]:
    return [a for a in args if a != "--no_progress"]


def main(out: str) -> None:
    import tqdm.auto
    from transformers.generation.utils import GenerationMixin

    from healtrl.cli.eval import eval_main
    from healtrl.cli.select import select_main

    calls = {"n": 0}
    original = GenerationMixin.generate

    def counted(self, *args, **kwargs):  # each call is one generation batch of this process
        calls["n"] += 1
        return original(self, *args, **kwargs)

    GenerationMixin.generate = counted

    shown: list[str] = []  # labels of the progress bars this process displayed (tqdm with disable=False)

    class CountedBar(tqdm.auto.tqdm):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            if not self.disable:
                shown.append(str(kwargs.get("desc")))

    tqdm.auto.tqdm = CountedBar  # healtrl, transformers and datasets look it up at each call
    rank = int(os.environ["RANK"])
    world = int(os.environ["WORLD_SIZE"])
    report = {"rank": rank, "world_size": world}
    report["select_code"] = select_main(_with_progress(select_args(out)))
    report["select_batches"] = calls["n"]
    report["select_bars"], shown[:] = list(shown), []
    report["eval_code"] = eval_main(_with_progress(eval_args(out)))
    report["eval_batches"] = calls["n"] - report["select_batches"]
    report["eval_bars"], shown[:] = list(shown), []
    report["checkpoints_code"] = eval_main(_with_progress(checkpoints_args(out, os.environ["HEALTRL_TEST_RUN"])))
    report["checkpoints_bars"] = list(shown)
    Path(out, f"rank{rank}.json").write_text(json.dumps(report))


if __name__ == "__main__":
    main(sys.argv[1])
