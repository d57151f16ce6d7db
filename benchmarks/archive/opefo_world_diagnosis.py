"""Why OPEFO diverges in the reasoning world (issue #26 item 4): GRPO, OPEFO with the paper's eq. 6 estimator and OPEFO
with the exact first-order estimator, from the cached runs of `toy_study.py` (no training here).

The runs (full regime, 256 Countdown problems, 100 steps, the study's settings) come from

    python benchmarks/toy_study.py --task countdown --pairs grpo:full opefo:full opefo_exact:full --seeds 0 \
        --steps 100 --jobs 1 --output-dir benchmarks/results/reasoning_study/opefo_diagnosis

Per step, every run logs the entropy flow predicted by eq. 6 for its update batch before any reweighting
(`entropy_flow/increase`, `entropy_flow/decrease`), so the lambda* that eq. 9 would give with eq. 6 is
(|decrease| - increase) / (|decrease| + increase) in every run; the OPEFO runs also log the lambda* they applied
(`opefo/lambda`, the `controller` series), which for `opefo_exact` comes from the exact estimator.

    python benchmarks/archive/opefo_world_diagnosis.py --output benchmarks/results/reasoning_study/opefo_diagnosis/diagnosis.md
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import sys

from healtrl.functional.opefo import opefo_lambda_from_sums

BENCHMARKS = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))  # this file is in benchmarks/archive/
RUNS = os.path.join(BENCHMARKS, "results", "reasoning_study", "opefo_diagnosis", "toy_study_runs")
METHODS = (("grpo", "GRPO"), ("opefo", "OPEFO, eq. 6 (paper)"), ("opefo_exact", "OPEFO, exact estimator"))
STEPS = (1, 10, 25, 50, 75, 100)


def lambda_eq6(series: dict, step: int) -> float | None:
    """lambda* of OPEFO eq. 9 from the run's logged eq. 6 flow sums at `step` (healtrl.functional's own formula)."""
    inc, dec = series["flow_increase"][step - 1], series["flow_decrease"][step - 1]
    if inc is None or dec is None:
        return None
    return float(opefo_lambda_from_sums(inc, abs(dec)))


def cell(value: float | None, digits: int = 3) -> str:
    return "—" if value is None else f"{value:.{digits}f}"


def main(argv=None) -> str:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--runs", default=RUNS, help="the toy_study run cache of the diagnosis")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--output", help="write the markdown here as well")
    args = parser.parse_args(argv)
    records = {}
    for method, _ in METHODS:
        path = os.path.join(args.runs, f"{method}-countdown-full-seed{args.seed}-{args.steps}steps.json")
        if not os.path.exists(path):
            raise SystemExit(f"missing run {path}: run the toy_study command in this script's docstring first.")
        with open(path) as f:
            records[method] = json.load(f)
    steps = [s for s in STEPS if s <= args.steps]
    lines = [
        "# OPEFO in the reasoning world: the estimator",
        "",
        f"Command: `python benchmarks/archive/opefo_world_diagnosis.py {' '.join(argv if argv is not None else sys.argv[1:])}`"
        f" ({datetime.date.today().isoformat()}), from the cached runs in `{os.path.relpath(args.runs, BENCHMARKS)}` "
        f"(seed {args.seed}, full regime, {args.steps} steps; how they were made: this script's docstring).",
        "",
        "## Target-domain entropy (nats/token) at step s",
        "",
        "| method | " + " | ".join(f"s={s}" for s in steps) + " | final reward (last 10) |",
        "|---|" + "---|" * (len(steps) + 1),
    ]
    for method, label in METHODS:
        s = records[method]["series"]
        rewards = [x for x in s["reward_target"][-10:] if x is not None]
        lines.append(
            f"| {label} | "
            + " | ".join(cell(s["entropy_target"][i - 1]) for i in steps)
            + f" | {cell(sum(rewards) / len(rewards))} |"
        )
    lines += [
        "",
        "## lambda* at step s: eq. 9 with eq. 6's flow (logged by every run) and the lambda* the run applied",
        "",
        "| method | which | " + " | ".join(f"s={s}" for s in steps) + " |",
        "|---|---|" + "---|" * len(steps),
    ]
    for method, label in METHODS:
        s = records[method]["series"]
        lines.append(f"| {label} | eq. 6 | " + " | ".join(cell(lambda_eq6(s, i)) for i in steps) + " |")
        applied = s.get("controller") or [None] * args.steps
        if method != "grpo" and any(v is not None for v in applied):
            lines.append(f"| {label} | applied | " + " | ".join(cell(applied[i - 1]) for i in steps) + " |")
        elif method != "grpo":  # runs cached before the series was kept; eq. 6 runs apply the eq. 6 row itself
            lines.append(f"| {label} | applied | not logged: the eq. 6 row (same estimator, same tokens) |")
    lines += [
        "",
        "Held-out pass@k of these runs is not shown: they were evaluated before `toy_reward` verified rows of the "
        "registry task `toy-countdown`, so their held-out scores counted one reference path only (fixed 2026-11-26; "
        "the training series above use the verifier and are unaffected).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)
    return text


if __name__ == "__main__":
    main()
