"""Two processes on the CPU (gloo): metrics and final weights agree across ranks, with every lever active."""

from __future__ import annotations

import json
import os
import subprocess
import sys

from tests.helpers import clean_history


def test_two_process_run_agrees_across_ranks(tmp_path):
    env = dict(os.environ, OMP_NUM_THREADS="1", PYTHONUNBUFFERED="1")
    cmd = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--nproc_per_node",
        "2",
        "--standalone",
        "tests/dist_worker.py",
        str(tmp_path),
    ]
    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    result = subprocess.run(cmd, cwd=root, env=env, capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]

    reports = [json.load(open(tmp_path / f"rank{r}.json")) for r in range(2)]
    assert [r["world_size"] for r in reports] == [2, 2]
    assert reports[0]["params_sha256"] == reports[1]["params_sha256"]
    history = [clean_history(r["log_history"]) for r in reports]
    assert history[0] == history[1]
    steps = [h for h in history[0] if "reward" in h]
    assert len(steps) == 3
    # Each rank generates 8 completions; the augmentation hook saw the gathered 16.
    assert all(h["seen_batch"] == 16 for h in steps)
    assert all("rewards/digits/mean" in h and "rollout/entropy" in h for h in steps)
