"""When does full-data GRPO's entropy fall below AER's target tau x H0? The step budget of issue #40 item 3, from the
cached runs only (no training).

Reads the reasoning study's cached full-data GRPO runs (`grpo-countdown-full-seed<s>-<T>steps.json`, seeds 0-4, T = 85
and 100) and, per seed:

- H0: the first step's target-domain rollout entropy (`series["entropy_target"][0]`), the H0 that
  `benchmarks/claims.py` uses for AER's claim (`initial(record, n=1)`); tau: `AERConfig.tau`'s default, read from
  `healtrl/trainers/aer.py` without importing healtrl (0.4, the paper's value).
- observed crossing: the first step at which the mean of `entropy_target` over the 5 steps ending there is <= tau x H0
  (none if the run ends above it).
- learning-rate time: the lr decays linearly to 0 at the run's last step (step k of a T-step run uses
  5e-4 x (T - k + 1) / T), so a T-step run is not the first T steps of a longer one. The entropy logged at step k is
  that of the rollouts generated before step k's update, after the updates of steps 1..k-1, whose summed lr (in units
  of the peak lr) is u_T(k) = sum_{j=1}^{k-1} (T - j + 1) / T. The fit is in u, so that one curve can be read at any
  budget.
- fit: least squares of log(entropy_target / H0) = a + b u over the last `window` logged steps of the run; the
  crossing in lr time is u* = (log tau - a) / b (b < 0 required, else the window gives no prediction).
- predicted crossing step at a budget T': the first k with u_T'(k) >= u*.

The budget rule (fixed in `benchmarks/results/reasoning_study/preregistration.md` before any new run): for a window,
the smallest T' that is a multiple of 5 with predicted crossing step <= `--fraction` x T' (0.5) for every seed and for
both fits (the 85-step runs' and the 100-step runs'). Windows 20, 30, 40, 50 and 60 steps are tried; set A (AER and
GRPO, full data, the runs of issue #40 item 3) takes the largest budget over the windows that give a prediction, the
other new runs the budget of the primary window (40). Also printed: AER's controller in the cached AER runs (when its
own measure first crossed), the 85-step fit's prediction of the 100-step runs' crossing (an out-of-sample check: same
seeds, another budget) and the summed lr left after the latest predicted crossing.

Then the cost of the pre-registered new runs (`PLAN`): CPU seconds per optimizer step of each run kind, from the
`seconds.cpu` of the cached runs of a reference (method, regime) (cpu / steps per run, over the 10 cached runs of 85
and 100 steps, seeds 0-4: mean and max), times steps and runs, against the issue's bound of 3 hours of CPU on 2 cores
(21,600 CPU seconds, counted as the study counts its cost: the sum of the runs' CPU times).

    python benchmarks/crossing_estimate.py
"""

from __future__ import annotations

import argparse
import ast
import json
import math
import os
import statistics

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
RUNS = os.path.join(HERE, "results", "reasoning_study", "toy_study_runs")
SEEDS = (0, 1, 2, 3, 4)
BUDGETS = (85, 100)  # the cached full-data GRPO runs
CPU_BOUND = 3 * 3600 * 2  # issue #40: 3 hours of CPU on 2 cores
# The new runs of preregistration.md (set, run, seeds, reference (method, regime) for the CPU rate). "N4": 4 optimizer
# steps per rollout batch (steps_per_generation 4, as the study's Clip-Higher runs, the only cached runs of that kind).
PLAN = (
    ("A", "grpo full, N1", 5, ("grpo", "full")),
    ("A", "aer full, N1", 5, ("aer", "full")),
    ("B", "grpo full, N4", 5, ("clip_higher", "full")),
    ("B", "posadv (entropy-guided) full, N4", 5, ("clip_higher", "full")),
    ("B", "neg_only full, N4", 5, ("clip_higher", "full")),
    ("B", "pos_only full, N4", 5, ("clip_higher", "full")),
    ("B", "kl_cov k 0.002 full, N4, no clip", 5, ("clip_higher", "full")),
    ("B", "clip_cov full, N4", 5, ("clip_higher", "full")),
    ("B", "rand_pos_clip full, N4", 5, ("clip_higher", "full")),
    ("B", "entropy_adv full, N4", 5, ("clip_higher", "full")),
    ("E1", "kl_cov k 0.02 full, N4, no clip (labelled extra)", 5, ("clip_higher", "full")),
    ("E2", "aer full, N4 (labelled extra)", 5, ("clip_higher", "full")),
)


def aer_tau_default(path: str = os.path.join(ROOT, "healtrl", "trainers", "aer.py")) -> float:
    """`AERConfig.tau`'s default, parsed from the source (importing healtrl would load torch and TRL)."""
    tree = ast.parse(open(path).read())
    for node in ast.walk(tree):
        if isinstance(node, ast.ClassDef) and node.name == "AERConfig":
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and getattr(item.target, "id", None) == "tau":
                    for kw in item.value.keywords:
                        if kw.arg == "default":
                            return float(ast.literal_eval(kw.value))
    raise RuntimeError(f"no AERConfig.tau default found in {path}")


def lr_time(k: int, budget: int) -> float:
    """Summed lr (units of the peak lr) of the updates before step k's rollouts in a `budget`-step run."""
    return sum((budget - j + 1) / budget for j in range(1, k))


def observed_crossing(h: list[float], target: float, window: int = 5) -> int | None:
    for k in range(1, len(h) + 1):
        if statistics.fmean(h[max(0, k - window) : k]) <= target:
            return k
    return None


def fit(h: list[float], h0: float, budget: int, window: int) -> tuple[float, float, float]:
    """(a, b, r^2) of log(h / h0) = a + b u over the last `window` steps."""
    ks = range(len(h) - window + 1, len(h) + 1)
    xs = [lr_time(k, budget) for k in ks]
    ys = [math.log(h[k - 1] / h0) for k in ks]
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    sxx = sum((x - mx) ** 2 for x in xs)
    b = sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sxx
    a = my - b * mx
    ss_res = sum((y - a - b * x) ** 2 for x, y in zip(xs, ys))
    ss_tot = sum((y - my) ** 2 for y in ys)
    return a, b, 1 - ss_res / ss_tot


def crossing_step(u_star: float, budget: int) -> int | None:
    """First step k of a `budget`-step run whose rollouts come after summed lr >= u_star (None: not within it)."""
    for k in range(1, budget + 1):
        if lr_time(k, budget) >= u_star:
            return k
    return None


def load_grpo(budget: int, seed: int) -> list[float]:
    path = os.path.join(RUNS, f"grpo-countdown-full-seed{seed}-{budget}steps.json")
    with open(path) as f:
        h = json.load(f)["series"]["entropy_target"]
    if any(v is None for v in h):
        raise SystemExit(f"{path}: missing entropy_target values")
    return h


def crossings(tau: float, window: int) -> tuple[dict, dict] | None:
    """Per (budget, seed): the fit (a, b, r2) and u*; None when a fit's slope is not negative (no prediction)."""
    fits, u_stars = {}, {}
    for budget in BUDGETS:
        for seed in SEEDS:
            h = load_grpo(budget, seed)
            a, b, r2 = fit(h, h[0], budget, window)
            if not b < 0:
                return None
            fits[(budget, seed)] = (a, b, r2)
            u_stars[(budget, seed)] = (math.log(tau) - a) / b
    return fits, u_stars


def latest(u_stars: dict, budget: int) -> tuple[float, tuple[int, int]]:
    """The latest predicted crossing step at `budget` over seeds and fits, and which (fit budget, seed) gives it."""
    steps = {key: crossing_step(u, budget) for key, u in u_stars.items()}
    worst = max(steps, key=lambda key: math.inf if steps[key] is None else steps[key])
    return (math.inf if steps[worst] is None else steps[worst]), worst


def smallest_budget(u_stars: dict, fraction: float) -> int | None:
    for budget in range(85, 401, 5):
        if latest(u_stars, budget)[0] <= fraction * budget:
            return budget
    return None


def main() -> tuple[int, int]:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--windows", type=int, nargs="+", default=[20, 30, 40, 50, 60], help="fit windows (last logged steps)"
    )
    parser.add_argument("--primary", type=int, default=40, help="the window whose fits are printed in full")
    parser.add_argument("--fraction", type=float, default=0.5, help="latest crossing allowed, share of the budget")
    args = parser.parse_args()
    tau = aer_tau_default()
    print(f"tau = {tau:g} (AERConfig.tau default); H0 = entropy_target at step 1 (claims.py's H0 for AER's claim)")
    observed = {}
    for budget in BUDGETS:
        for seed in SEEDS:
            h = load_grpo(budget, seed)
            observed[(budget, seed)] = (
                observed_crossing(h, tau * h[0]),
                statistics.fmean(h[-max(5, len(h) // 10) :]) / h[0],
            )
    primary = crossings(tau, args.primary)
    if primary is None:
        raise SystemExit(f"window {args.primary}: a fit has a non-negative slope")
    fits, u_stars = primary
    print(
        f"\nfits over the last {args.primary} logged steps "
        "(u: summed lr before the step's rollouts, units of the peak lr)"
    )
    print("budget seed  H0      0.4xH0  final/H0 observed  a       b        r2     u*     u at end")
    for (budget, seed), (a, b, r2) in fits.items():
        crossed, ratio = observed[(budget, seed)]
        h0 = load_grpo(budget, seed)[0]
        print(
            f"{budget:6d} {seed:4d}  {h0:.4f}  {tau * h0:.4f}  {ratio:.3f}    {str(crossed):8s}  {a:+.3f}  {b:+.5f}  "
            f"{r2:.3f}  {u_stars[(budget, seed)]:5.1f}  {lr_time(budget, budget):5.1f}"
        )
    print(
        "\nAER's controller in the cached full-data AER runs (its own measure, the sequence-level entropy of the loss"
    )
    print("forward, against its own H0): first logged step with alpha > 0, alpha at the end, max alpha")
    for budget in BUDGETS:
        cells = []
        for seed in SEEDS:
            with open(os.path.join(RUNS, f"aer-countdown-full-seed{seed}-{budget}steps.json")) as f:
                alpha = json.load(f)["series"]["controller"]
            first = next((k for k, v in enumerate(alpha, 1) if v), None)
            cells.append(f"seed {seed}: {first}, {alpha[-1]:g}, {max(v or 0 for v in alpha):g}")
        print(f"  {budget} steps: " + "; ".join(cells))
    print("\nout-of-sample check: the 85-step fit's predicted crossing step in a 100-step run vs the 100-step runs'")
    for seed in SEEDS:
        print(
            f"  seed {seed}: predicted {crossing_step(u_stars[(85, seed)], 100)}, observed {observed[(100, seed)][0]}"
        )
    print(
        "\nrule: smallest multiple of 5, T, with the latest predicted crossing (over seeds and both fits) "
        f"<= {args.fraction:g} T"
    )
    budgets = {}
    for window in args.windows:
        result = crossings(tau, window)
        if result is None:
            print(f"  window {window}: a fit has a non-negative slope, no prediction")
            continue
        budget = smallest_budget(result[1], args.fraction)
        budgets[window] = budget
        step, (fit_budget, seed) = latest(result[1], budget)
        per_seed = {s: max(crossing_step(result[1][(b, s)], budget) for b in BUDGETS) for s in SEEDS}
        r2 = [f[2] for f in result[0].values()]
        print(
            f"  window {window}: T = {budget}; latest crossing step {step} ({step / budget:.2f} of T; seed {seed}, "
            f"{fit_budget}-step fit); per seed {per_seed}; fit r2 {min(r2):.3f}-{max(r2):.3f}"
        )
    t_a, t_b = max(budgets.values()), budgets[args.primary]
    result = crossings(tau, args.primary)[1]
    step_b = latest(result, t_a)[0]
    left = 1 - lr_time(step_b, t_a) / lr_time(t_a + 1, t_a)
    print(
        f"\nbudget of set A (AER and GRPO, full data, 1 update per rollout batch): the largest over the windows, "
        f"{t_a} steps; budget of the other new runs: the primary window's, {t_b} steps.\nAt {t_a} steps the primary "
        f"fit's latest crossing is step {step_b}: {t_a - step_b} steps and {left:.1%} of the summed lr follow it "
        f"(AER's alpha can rise by at most eta x {t_a - step_b} after it)."
    )
    cost(t_a, t_b)
    return t_a, t_b


def cpu_rates(method: str, regime: str) -> list[float]:
    """CPU seconds per optimizer step of every cached run of (method, regime), 85 and 100 steps, seeds 0-4."""
    rates = []
    for budget in BUDGETS:
        for seed in SEEDS:
            with open(os.path.join(RUNS, f"{method}-countdown-{regime}-seed{seed}-{budget}steps.json")) as f:
                record = json.load(f)
            rates.append(record["seconds"]["cpu"] / record["steps"])
    return rates


def cost(budget_a: int, budget_other: int) -> None:
    print(
        f"\ncost of the new runs, set A at {budget_a} steps, the others at {budget_other} "
        "(CPU s per step: mean / max over the reference's 10 cached runs)"
    )
    totals: dict[str, list[float]] = {}
    for group, name, seeds, ref in PLAN:
        rates = cpu_rates(*ref)
        mean, high = statistics.fmean(rates), max(rates)
        budget = budget_a if group == "A" else budget_other
        runs_mean, runs_high = seeds * budget * mean, seeds * budget * high
        totals.setdefault(group, [0.0, 0.0])
        totals[group][0] += runs_mean
        totals[group][1] += runs_high
        print(
            f"  {group:2s} {name:50s} x{seeds} x {budget} steps  rate {mean:.2f} / {high:.2f} ({ref[0]} {ref[1]})  "
            f"{runs_mean:6.0f} / {runs_high:6.0f} CPU s"
        )
    running = [0.0, 0.0]
    for group, (low, high) in totals.items():
        running[0] += low
        running[1] += high
        print(
            f"  set {group:2s}: {low:6.0f} / {high:6.0f} CPU s; cumulative {running[0]:6.0f} / {running[1]:6.0f} "
            f"= {running[0] / 7200:.2f} / {running[1] / 7200:.2f} h on 2 cores (bound {CPU_BOUND} CPU s = 3.00 h)"
        )


if __name__ == "__main__":
    main()
