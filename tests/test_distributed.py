"""Two processes on the CPU (gloo): metrics and final weights agree across ranks, with every lever active."""

from __future__ import annotations

from tests.helpers import clean_history, run_two_processes


def test_two_process_run_agrees_across_ranks(tmp_path):
    reports = run_two_processes("tests/dist_worker.py", tmp_path)
    assert [r["world_size"] for r in reports] == [2, 2]
    assert reports[0]["params_sha256"] == reports[1]["params_sha256"]
    history = [clean_history(r["log_history"]) for r in reports]
    assert history[0] == history[1]
    steps = [h for h in history[0] if "reward" in h]
    assert len(steps) == 3
    # Each rank generates 8 completions; the augmentation hook saw the gathered 16.
    assert all(h["seen_batch"] == 16 for h in steps)
    assert all("rewards/digits/mean" in h and "rollout/entropy" in h for h in steps)
