"""The README's main-job figures over seeds: `python train.py --seed S` for each seed, and the range of each figure.

The README quotes the main job (`python train.py`, HEAL vs few-shot GRPO on the toy world) as the range over seeds
0, 1, 2 that this script prints, so that a user can tell a normal run from a broken one: float results differ between
CPU types (vectorised kernels sum in a different order), and over 300 steps of sampling a different last bit grows
into a different run, so one machine's seed 0 is not another's.

Each seed runs the main job exactly as a user would, in its own process and folder:

    python train.py --seed S --output_dir <work-dir>/seed<S>

`--seed` is the trainer seed of both runs (HEAL and GRPO): it draws the 8 target problems (`num_train_samples`,
no `dataset_seed` in configs/main.yaml), the sampling and the initialisation of everything seeded by TRL. The
selection step (configs/main_select.yaml, its own `seed: 0`) is the same for every seed. The figures are the summary
table's: for GRPO and HEAL, the target-domain entropy of the first logged step and the mean of the last 10 logged
steps (nats per token), and the target-domain reward, first and last (`healtrl.cli.main_job.summarize`).

Each seed is a full main job: about 2 minutes on an idle 2-core CPU (README), many times more on a loaded one; run
seeds in parallel as separate invocations with the same `--work-dir` (`--seeds 1`, `--seeds 2`), then once more
without training to print the table of all of them. A seed whose folder holds a finished run of the same command
is not run again (`--rerun` runs it anyway), so an interrupted invocation resumes. The table goes to stdout and, with
`--output`, into a markdown file.

    python benchmarks/main_job_seeds.py                       # seeds 0 1 2, one after another
    python benchmarks/main_job_seeds.py --output benchmarks/results/main_job_seeds.md
    python benchmarks/main_job_seeds.py --seeds 0 --work-dir /tmp/mj -- --max_steps 20   # overrides after `--`
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)

from _bench import cpu_model  # noqa: E402

from healtrl.cli.main_job import PANELS, PLOT_FILE, SUMMARY_WINDOW, _mean_last  # noqa: E402
from healtrl.views.curves import curve, read_metrics  # noqa: E402

RUNS = ("GRPO", "HEAL")
ENTROPY, REWARD = PANELS.values()
# (column, run, panel keys, which value): the README's figures
FIGURES = [
    (f"{run} {name} {which}", run, keys, which)
    for run in RUNS
    for name, keys in (("entropy", ENTROPY), ("reward", REWARD))
    for which in ("first", "last")
]


def command(seed: int, folder: str, overrides: list[str]) -> list[str]:
    return ["train.py", "--seed", str(seed), "--output_dir", folder, *overrides]


def finished(seed: int, folder: str, overrides: list[str]) -> bool:
    """Whether `folder` holds a finished main job of this very command (`<folder>.command`, written after it)."""
    try:
        with open(folder + ".command") as f:
            same = f.read().split("\0") == command(seed, folder, overrides)
    except OSError:
        return False
    return same and os.path.isfile(os.path.join(folder, PLOT_FILE))


def run_seed(seed: int, folder: str, overrides: list[str]) -> float:
    """Run the main job for `seed` into `folder`; its wall time in seconds."""
    cmd = [sys.executable, *command(seed, folder, overrides)]
    print(f"$ {' '.join(cmd[1:])}", flush=True)
    env = dict(os.environ, PYTHONUNBUFFERED="1")
    env["PYTHONPATH"] = ROOT + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    start = time.perf_counter()
    with open(os.path.join(folder + ".log"), "w") as log:
        result = subprocess.run(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    if result.returncode != 0:
        sys.exit(f"seed {seed}: train.py exited with {result.returncode}; its output is in {folder}.log")
    with open(folder + ".command", "w") as f:
        f.write("\0".join(cmd[1:]))
    return time.perf_counter() - start


def figures(folder: str) -> dict[str, float]:
    values = {}
    for column, run, keys, which in FIGURES:
        history = read_metrics(os.path.join(folder, run.lower()))
        if which == "first":
            values[column] = curve(history, keys)[1][0]
        else:
            values[column] = _mean_last(history, keys, SUMMARY_WINDOW)
    return values


def report(per_seed: dict[int, dict[str, float]], times: dict[int, float], overrides: list[str]) -> str:
    columns = [c for c, *_ in FIGURES]
    lines = [
        "# The main job over seeds",
        "",
        f"`python benchmarks/main_job_seeds.py{' -- ' + ' '.join(overrides) if overrides else ''}`, "
        f"{datetime.date.today().isoformat()}, {cpu_model()} ({os.cpu_count()} cores), Python "
        f"{platform.python_version()}.",
        "",
        f"Each seed: `python train.py --seed S`. Entropy: target-domain rollouts, nats per token; reward: their mean "
        f"accuracy. first: the first logged step; last: the mean of the last {SUMMARY_WINDOW} logged steps.",
        "",
        "| seed | " + " | ".join(columns) + " | wall |",
        "|---|" + "---|" * (len(columns) + 1),
    ]
    for seed, values in per_seed.items():
        wall = f"{times[seed]:.0f} s" if seed in times else "(cached)"
        lines.append(f"| {seed} | " + " | ".join(f"{values[c]:.3f}" for c in columns) + f" | {wall} |")
    lo = {c: min(v[c] for v in per_seed.values()) for c in columns}
    hi = {c: max(v[c] for v in per_seed.values()) for c in columns}
    lines.append("| range | " + " | ".join(f"{lo[c]:.3f}-{hi[c]:.3f}" for c in columns) + " | |")
    lines += ["", "In words (min-max over the seeds):", ""]

    def rng(c):
        return f"{lo[c]:.3f}-{hi[c]:.3f}"

    for run in RUNS:
        lines.append(
            f"- {run}: target-domain entropy {rng(f'{run} entropy first')} -> {rng(f'{run} entropy last')}, "
            f"reward {rng(f'{run} reward first')} -> {rng(f'{run} reward last')}"
        )
    heal_over_grpo = [v["HEAL entropy last"] / max(v["GRPO entropy last"], 1e-12) for v in per_seed.values()]
    lines.append(
        f"- HEAL's final target-domain entropy / GRPO's: {min(heal_over_grpo):.1f}x-{max(heal_over_grpo):.1f}x"
    )
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    overrides: list[str] = []
    if "--" in argv:
        argv, overrides = argv[: argv.index("--")], argv[argv.index("--") + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--work-dir", default=os.path.join(ROOT, "outputs", "main_job_seeds"))
    parser.add_argument("--output", help="also write the table into this markdown file")
    parser.add_argument("--rerun", action="store_true", help="run every seed, also those already finished")
    args = parser.parse_args(argv)

    os.makedirs(args.work_dir, exist_ok=True)
    per_seed, times = {}, {}
    for seed in args.seeds:
        folder = os.path.abspath(os.path.join(args.work_dir, f"seed{seed}"))
        if args.rerun or not finished(seed, folder, overrides):
            times[seed] = run_seed(seed, folder, overrides)
            print(f"seed {seed}: {times[seed]:.0f} s", flush=True)
        per_seed[seed] = figures(folder)
    text = report(per_seed, times, overrides)
    print("\n" + text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
