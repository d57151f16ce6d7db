"""`healtrl select` and `healtrl eval` shard their work over the processes of a launch and write one result identical to
a single-process run with the same seed (issue #16 item 6; healtrl/utils/distributed.py).

Both runs use the toy model on the CPU: 2 processes under torchrun (gloo) against this process alone. Selection: the
records (per-question rewards, entropies, scores) and the selected rows are equal; evaluation: every problem's
correct count, pass@k and response lengths are equal. Only the main process writes; with progress on, only the main
process shows progress bars (counted per rank by the worker).
"""

from __future__ import annotations

import json

import pytest

from healtrl.utils.distributed import Processes, interleave
from tests.helpers import run_two_processes
from tests.select_eval_args import checkpoints_args, eval_args, make_run, select_args


def _records(folder) -> list[dict]:
    return [json.loads(line) for line in (folder / "select" / "records.jsonl").read_text().splitlines()]


def _eval(folder) -> dict:
    data = json.loads((folder / "eval" / "results.json").read_text())
    for task in data["tasks"].values():
        task.pop("seconds", None)
    data.pop("created", None)
    return data


def test_interleave_and_sharding_rules():
    units = 7
    shards = [list(Processes(rank=r, world=3).mine(units)) for r in range(3)]
    assert shards == [[0, 3, 6], [1, 4], [2, 5]]
    assert interleave(shards, units, 3) == list(range(units))
    with pytest.raises(RuntimeError, match="process 1 returned 1 results for 2 units"):
        interleave([[0, 3, 6], [1], [2, 5]], units, 3)
    assert Processes().gather("x") == ["x"]  # one process: no collective


@pytest.mark.slow  # a two-process launch (~35 s)
def test_two_processes_equal_one(tmp_path, restore_threads, monkeypatch):
    from healtrl.cli.eval import eval_main
    from healtrl.cli.select import select_main

    two, one, run = tmp_path / "two", tmp_path / "one", tmp_path / "run"
    make_run(str(run))
    monkeypatch.setenv("HEALTRL_TEST_RUN", str(run))
    reports = run_two_processes("tests/dist_select_eval_worker.py", two)
    assert [r["checkpoints_code"] for r in reports] == [0, 0]
    assert [(r["rank"], r["world_size"], r["select_code"], r["eval_code"]) for r in reports] == [
        (0, 2, 0, 0),
        (1, 2, 0, 0),
    ]
    # The work was shared: selection's 6 batches 3 + 3, evaluation's 7 batches 4 + 3 (generation calls per rank).
    assert [(r["select_batches"], r["eval_batches"]) for r in reports] == [(3, 4), (3, 3)]
    # Progress on (the worker drops --no_progress): healtrl's bars, and the libraries' ("Loading weights"), show on the
    # main process only
    bars = [{k: r[f"{k}_bars"] for k in ("select", "eval", "checkpoints")} for r in reports]
    assert "healtrl select" in bars[0]["select"], bars
    assert "toy-add (k=4)" in bars[0]["eval"] and "toy-add (k=2)" in bars[0]["checkpoints"], bars
    assert bars[1] == {"select": [], "eval": [], "checkpoints": []}, bars
    assert select_main(select_args(str(one))) == 0
    assert eval_main(eval_args(str(one))) == 0

    records_two, records_one = _records(two), _records(one)
    assert len(records_one) == 24
    assert records_two == records_one  # same questions, same order, same rewards, entropies and scores
    selected = [(two / "select" / "selected.jsonl").read_text(), (one / "select" / "selected.jsonl").read_text()]
    assert selected[0] == selected[1]

    eval_two, eval_one = _eval(two), _eval(one)
    task_one = eval_one["tasks"]["toy-add"]
    assert len(task_one["correct"]) == 13 and sum(task_one["correct"]) > 0
    assert eval_two == eval_one

    # `healtrl eval --checkpoints`: the same rows (per-checkpoint results) and the same best checkpoint.
    assert eval_main(checkpoints_args(str(one), str(run))) == 0
    rows = [
        [{k: v for k, v in json.loads(line).items() if k != "seconds"}
         for line in (folder / "checkpoints" / "checkpoint_eval.jsonl").read_text().splitlines()]
        for folder in (two, one)
    ]  # fmt: skip
    for row in rows[0] + rows[1]:
        for task in row["tasks"].values():
            task.pop("seconds", None)
    assert [r["checkpoint"] for r in rows[1]] == ["checkpoint-10", "checkpoint-20"]
    assert rows[0] == rows[1]
    best = [json.loads((folder / "checkpoints" / "best_checkpoint.json").read_text()) for folder in (two, one)]
    for b in best:
        b.pop("table")
    assert best[0] == best[1] and best[1]["checkpoint"] == "checkpoint-20"
