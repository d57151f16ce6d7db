"""The study's report: per-run summaries, the figures, the findings and the markdown table, from cached run records.

`records` everywhere is {(method, regime): [run record, ...]} (records as `healtrl.study.runs.run_one` writes them).
`run_summary` gives a run's final numbers (window means of the last `window` steps and the held-out scores); `plot`
draws the figures of `FIGURES` (one panel per regime and method group, mean over seeds and min-max band, GRPO thick
and black); `findings` states what held and what did not against GRPO, computed from the numbers; `fixed_steps_table`
puts entropy, reward and the controllers' state at fixed steps side by side; `write_report` writes all of it into
`<output-dir>/toy_study.md`.

Imports matplotlib inside `plot`'s helper and torch and TRL (for their versions) inside `write_report` only.
"""

from __future__ import annotations

import datetime
import math
import os
import platform
import statistics
from collections.abc import Sequence

from .methods import GROUPS, METHODS, notes
from .paths import RUNS_SUBDIR
from .world import TASKS, WORLDS, K, regime_size

GRPO_COLOR = "black"
FIXED_STEPS = (50, 100, 200, 300, 400, 600, 800, 1000)  # the fixed-steps table (and the last step)


def window_mean(values: Sequence[float | None], end: int, window: int) -> float:
    """Mean of the logged values at steps end-window+1..end (1-based), NaN when none was logged."""
    xs = [v for v in values[max(0, end - window) : end] if v is not None]
    return sum(xs) / len(xs) if xs else math.nan


def run_summary(record: dict, window: int) -> dict[str, float]:
    """Final numbers of one run: window means at the last step and the held-out metrics."""
    steps, series = record["steps"], record["series"]
    pass_at = record["held_out"]["pass_at"]
    return {
        "reward": window_mean(series["reward_target"], steps, window),
        "entropy": window_mean(series["entropy_target"], steps, window),
        "entropy_start": window_mean(series["entropy_target"], min(window, steps), window),
        "reward_start": window_mean(series["reward_target"], min(window, steps), window),
        "avg@k": record["held_out"]["avg@k"],
        "pass@4": pass_at.get("4", math.nan),
        "pass@16": pass_at.get(str(K), math.nan),
        "seconds": record["seconds"]["total"],
        "per_step": record["seconds"]["per_step"],
    }


def spread(values: Sequence[float], digits: int = 3) -> str:
    """The cell "mean (min-max)" over the finite values; "—" when there are none."""
    finite = [v for v in values if v == v and not math.isinf(v)]
    if not finite:
        return "—"
    if len(finite) == 1:
        return f"{finite[0]:.{digits}f}"
    return f"{statistics.mean(finite):.{digits}f} ({min(finite):.{digits}f}-{max(finite):.{digits}f})"


def smooth(values: Sequence[float | None], window: int) -> list[float]:
    """Trailing moving average over the logged values of the last `window` steps (NaN before the first value)."""
    return [window_mean(values, t, window) for t in range(1, len(values) + 1)]


def _curve_grid(
    records: dict,
    methods: Sequence[str],
    regimes: Sequence[str],
    path: str,
    curve,
    *,
    title: str,
    xlabel: str,
    ylabel: str,
    log_y: bool = False,
    log2_x: bool = False,
) -> None:
    """One figure: one row per regime, one column per method group; `curve(record) -> (xs, ys)` per run, drawn as
    the mean over seeds (line) and min-max over seeds (band); GRPO thick and black in every panel. Runs whose curve is
    all NaN (e.g. held-out scores that were not measured) are left out."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib import ticker

    groups = [g for g in GROUPS if any(METHODS[m][1] == g for m in methods if m != "grpo")] or ["HEAL"]
    fig, axes = plt.subplots(
        len(regimes), len(groups), figsize=(4.2 * len(groups), 3.2 * len(regimes)), squeeze=False, sharey=True
    )
    palette = plt.get_cmap("tab10").colors
    colors, i = {}, 0
    for m in METHODS:
        if m != "grpo":
            colors[m] = palette[i % len(palette)]
            i += 1
    task = next(iter(records.values()))[0].get("task", "add") if records else "add"
    for row, regime in enumerate(regimes):
        for col, group in enumerate(groups):
            ax = axes[row][col]
            shown = [m for m in methods if m == "grpo" or METHODS[m][1] == group]
            for m in shown:
                curves = [curve(r) for r in records.get((m, regime), [])]
                curves = [(xs, ys) for xs, ys in curves if any(y == y for y in ys)]
                if not curves:
                    continue
                xs = curves[0][0]
                by_x = list(zip(*(ys for _, ys in curves)))
                mean = [statistics.mean(v) if all(y == y for y in v) else math.nan for v in by_x]
                lo = [min(v) for v in by_x]
                hi = [max(v) for v in by_x]
                # GRPO thick and underneath: a method whose curve equals GRPO's (Clip-Higher) shows inside it.
                color, z = (GRPO_COLOR, 1) if m == "grpo" else (colors[m], 2)
                label = METHODS[m][0] + (f" ({len(curves)} seeds)" if len(curves) != len(records[(m, regime)]) else "")
                ax.plot(xs, mean, color=color, lw=2.6 if m == "grpo" else 1.3, label=label, zorder=z + 0.5)
                ax.fill_between(xs, lo, hi, color=color, alpha=0.12, lw=0, zorder=z)
            if log_y:  # OPEFO's blow-up (~4 nats) and GRPO's collapse (~0.04) in one panel
                ax.set_yscale("log")
                ax.yaxis.set_major_locator(ticker.LogLocator(base=10, subs=(1.0, 2.0, 5.0)))
                ax.yaxis.set_major_formatter(ticker.FormatStrFormatter("%.2g"))
                ax.yaxis.set_minor_formatter(ticker.NullFormatter())
            if log2_x:
                ax.set_xscale("log", base=2)
                ax.xaxis.set_major_formatter(ticker.FormatStrFormatter("%d"))
            ax.grid(True, which="both", alpha=0.3, lw=0.5)
            size = regime_size(task, regime) if records else "?"
            ax.set_title(f"{regime.replace('_', '-')} ({size} target problems): {group}", fontsize=9)
            if row == len(regimes) - 1:
                ax.set_xlabel(xlabel)
            if col == 0:
                ax.set_ylabel(ylabel)
            ax.legend(fontsize=7, loc="best")
    world = {"add": "Toy world", "countdown": "Reasoning world (Countdown)"}.get(task, f"{task} world")
    fig.suptitle(f"{world}: {title}", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


# The figures of the report: file name -> (what it shows, as the markdown's image text)
FIGURES = {
    "toy_study.png": "target-domain entropy per step",
    "toy_study_reward.png": "training reward per step",
    "toy_study_pass_at_k.png": "held-out pass@k after training",
}


def plot(records: dict, methods: Sequence[str], regimes: Sequence[str], folder: str, smooth_window: int) -> list[str]:
    """The report's figures (`FIGURES`, in that order) in `folder`: target-domain rollout entropy and training reward
    per step (moving averages), and held-out pass@k for k = 1..K after training. Returns the paths written."""
    paths = [os.path.join(folder, name) for name in FIGURES]
    band = f"mean over seeds, band = min-max, {smooth_window}-step moving average"

    def per_step(name):
        return lambda r: (range(1, r["steps"] + 1), smooth(r["series"][name], smooth_window))

    ks = [2**j for j in range(K.bit_length()) if 2**j <= K]
    _curve_grid(
        records,
        methods,
        regimes,
        paths[0],
        per_step("entropy_target"),
        log_y=True,
        title=f"target-domain rollout entropy\n{band}, log scale",
        xlabel="training step",
        ylabel="target-domain entropy (nats/token)",
    )
    _curve_grid(
        records,
        methods,
        regimes,
        paths[1],
        per_step("reward_target"),
        title=f"accuracy reward of the target rollouts (training problems)\n{band}",
        xlabel="training step",
        ylabel="training reward",
    )
    _curve_grid(
        records,
        methods,
        regimes,
        paths[2],
        lambda r: (ks, [r["held_out"]["pass_at"].get(str(k), math.nan) for k in ks]),
        log2_x=True,
        title=f"unbiased pass@k on the held-out problems after training ({K} samples each, temperature 1)\n"
        "mean over seeds, band = min-max",
        xlabel="k",
        ylabel="held-out pass@k",
    )
    return paths


def _paired(records: dict, method: str, regime: str, key: str, window: int) -> dict[int, float]:
    return {r["seed"]: run_summary(r, window)[key] for r in records.get((method, regime), [])}


def findings(
    records: dict, methods: Sequence[str], regimes: Sequence[str], window: int, task: str = "add"
) -> list[str]:
    """Plain statements computed from the numbers: collapse of GRPO, seed-paired comparisons with GRPO, blow-ups,
    runs identical to GRPO, and held-out pass@16 against GRPO's (with whether the ranges overlap)."""
    lines = []
    for regime in regimes:
        if ("grpo", regime) not in records:
            continue
        grpo = [run_summary(r, window) for r in records[("grpo", regime)]]
        lines.append(
            f"- {regime}: GRPO's target entropy goes from {spread([s['entropy_start'] for s in grpo])} (first "
            f"{window} steps) to {spread([s['entropy'] for s in grpo])} (last {window}), its training reward from "
            f"{spread([s['reward_start'] for s in grpo])} to {spread([s['reward'] for s in grpo])}."
        )
        grpo_h = _paired(records, "grpo", regime, "entropy", window)
        grpo_series = {r["seed"]: r["series"]["entropy_target"] for r in records[("grpo", regime)]}
        above, below, mixed, same, blow = [], [], [], [], []
        for m in methods:
            if m == "grpo" or (m, regime) not in records:
                continue
            h = _paired(records, m, regime, "entropy", window)
            seeds = sorted(set(h) & set(grpo_h))
            if not seeds:
                continue
            label = f"{METHODS[m][0]} {spread([h[s] for s in seeds])}"
            if all(
                r["seed"] in grpo_series and r["series"]["entropy_target"] == grpo_series[r["seed"]]
                for r in records[(m, regime)]
            ):
                same.append(METHODS[m][0])
            elif all(h[s] > grpo_h[s] for s in seeds):
                above.append(label)
            elif all(h[s] < grpo_h[s] for s in seeds):
                below.append(label)
            else:
                mixed.append(label)
            start = _paired(records, m, regime, "entropy_start", window)
            if any(h[s] > 2 * start[s] for s in seeds):
                rewards = _paired(records, m, regime, "reward", window)
                blow.append(
                    f"{METHODS[m][0]} on {sum(h[s] > 2 * start[s] for s in seeds)} of {len(seeds)} seeds (final "
                    f"entropy {spread(list(h.values()))}, reward {spread(list(rewards.values()))})"
                )
        n = len(grpo_h)
        lines.append(
            f"  Final target entropy above GRPO's ({spread(list(grpo_h.values()))}) on every one of the {n} seeds: "
            + (", ".join(above) or "none")
            + "; below on every seed: "
            + (", ".join(below) or "none")
            + "; neither: "
            + (", ".join(mixed) or "none")
            + "."
        )
        if same:
            lines.append(f"  Entropy curve identical to GRPO's on every seed: {', '.join(same)}.")
        if blow:
            lines.append(f"  Entropy ends above twice its starting level: {'; '.join(blow)}.")
        g = _paired(records, "grpo", regime, "pass@16", window)
        better, overlap = [], []
        for m in methods:
            if m == "grpo" or (m, regime) not in records:
                continue
            p = _paired(records, m, regime, "pass@16", window)
            if statistics.mean(p.values()) > statistics.mean(g.values()):
                (better if min(p.values()) > max(g.values()) else overlap).append(
                    f"{METHODS[m][0]} {spread(list(p.values()))}"
                )
        if len(g) > 1:
            lines.append(
                f"  Held-out pass@16 (GRPO {spread(list(g.values()))}): mean above GRPO's with no overlap of the seed "
                f"ranges: {', '.join(better) or 'none'}; mean above but ranges overlapping: "
                f"{', '.join(overlap) or 'none'}."
            )
        else:
            lines.append(
                f"  Held-out pass@16 above GRPO's ({spread(list(g.values()))}), one seed: "
                f"{', '.join(better + overlap) or 'none'}."
            )
    if ("grpo", "few_shot") in records and ("grpo", "full") in records:
        few = [run_summary(r, window)["entropy"] for r in records[("grpo", "few_shot")]]
        full = [run_summary(r, window)["entropy"] for r in records[("grpo", "full")]]
        lines.append(
            f"- GRPO's final target entropy is {spread(few)} with {regime_size(task, 'few_shot')} target problems and "
            f"{spread(full)} with {regime_size(task, 'full')} "
            f"({'lower' if statistics.mean(few) < statistics.mean(full) else 'not lower'} in the few-shot regime)."
        )
    lines.append(
        f"- Scale of the evidence: {len({r['seed'] for v in records.values() for r in v})} seed(s), 20 held-out "
        "problems (one problem moves pass@16 by 0.05); these statements are computed by the script from the numbers "
        "above."
    )
    return lines


def _at(values: Sequence[float | None] | None, step: int, digits: int = 2) -> str:
    """The value logged at `step` (1-based), "—" when missing (e.g. a run cached before the series existed)."""
    v = window_mean(values or [], step, 1)
    return "—" if math.isnan(v) else f"{v:.{digits}f}"


def fixed_steps_table(records: dict, methods: Sequence[str], regimes: Sequence[str], steps: int, window: int):
    """Entropy and reward at fixed steps, per method and seed, side by side (issue #4), plus the controllers' state.

    H@s / R@s: mean target-rollout entropy / reward over the `window` steps ending at s (H@1: the first step alone).
    zero-std: share of the step's groups whose rewards are all equal (no policy gradient from them). alpha / lambda:
    AER's global scale or PosAdv's lambda at that step. Returns markdown lines.
    """
    points = [p for p in FIXED_STEPS if p < steps] + [steps]
    head = ["data", "method", "seed", "H@1"] + [f"H@{p}" for p in points] + [f"R@{p}" for p in points]
    head += [f"zero-std at {'/'.join(map(str, points))}", "alpha or lambda at the same steps"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for regime in regimes:
        for m in methods:
            for r in records.get((m, regime), []):
                series = r["series"]
                h, rew = series["entropy_target"], series["reward_target"]
                cells = [regime, METHODS[m][0], str(r["seed"]), f"{window_mean(h, 1, 1):.3f}"]
                cells += [f"{window_mean(h, p, window):.3f}" for p in points]
                cells += [f"{window_mean(rew, p, window):.3f}" for p in points]
                cells.append(" / ".join(_at(series.get("zero_std"), p) for p in points))
                control = series.get("controller")
                has_control = control is not None and any(v is not None for v in control)
                # Three digits for the controllers: AER's alpha moves by eta = 0.005 a step.
                cells.append(" / ".join(_at(control, p, 3) for p in points) if has_control else "")
                lines.append("| " + " | ".join(cells) + " |")
    return lines


def write_report(args, records: dict, wall_seconds: float, trained: int, cached: int) -> str:
    """Write the figures (`FIGURES`) and the markdown table; return the markdown path."""
    import torch
    import trl

    md = os.path.join(args.output_dir, "toy_study.md")
    plot(records, args.methods, args.regimes, args.output_dir, args.smooth)
    run_seconds = [r["seconds"]["total"] for v in records.values() for r in v]
    cpu_seconds = [r["seconds"].get("cpu", math.nan) for v in records.values() for r in v]
    finished = [str(r.get("finished", "?")) for v in records.values() for r in v]
    lines = [
        "# The reproduction study on the toy world" if args.task == "add" else f"# The study on the {args.task} world",
        "",
        f"Command: `{args.command}`",
        "",
        f"Date: {datetime.date.today().isoformat()}. Machine: {platform.platform()}, "
        f"{platform.processor() or platform.machine()}, {os.cpu_count()} cores, Python {platform.python_version()}, "
        f"torch {torch.__version__}, TRL {trl.__version__}; {args.jobs} worker process(es), 1 torch thread each.",
        "",
        (
            f"Wall time of this invocation: {wall_seconds:.0f} s ({trained} runs trained, {cached} read from the cache "
            f"`{RUNS_SUBDIR}/`)"
            if trained
            else f"This invocation trained no run: all {cached} were read from the cache `{RUNS_SUBDIR}/`"
        )
        + f"; the runs finished between {min(finished, default='-')} and {max(finished, default='-')}. "
        f"Sum of the per-run wall times (training + held-out evaluation): {sum(run_seconds):.0f} s over "
        f"{len(run_seconds)} runs; sum of their CPU times: {sum(cpu_seconds):.0f} s (/ {args.jobs} jobs = "
        f"{sum(cpu_seconds) / args.jobs:.0f} s = {sum(cpu_seconds) / args.jobs / 3600:.2f} h: what the runs alone "
        f"would take on {args.jobs} free cores, without process start-up; the study's cost).",
        "",
        "## Setup",
        "",
        f"`{TASKS[args.task][0]}`: {TASKS[args.task][1]}. Target data: {regime_size(args.task, 'few_shot')} "
        f"training problems of `{args.task}` (`few_shot`) or {regime_size(args.task, 'full')} (`full`), drawn by "
        "seed; its 20 held-out problems are never trained on. Every run: "
        f"{args.steps} optimizer steps, 16 prompts x 8 generations per step, lr 5e-4 decaying linearly to 0, "
        f"temperature 1, no KL, at most {WORLDS[args.task]['completion']} completion tokens; seeds "
        f"{', '.join(map(str, args.seeds))}. Final reward: mean accuracy reward of the target rollouts (training "
        f"prompts) over the last {args.window} steps; final entropy: mean token entropy of the target-domain "
        f"rollouts over the last {args.window} steps. Held out: {K} samples per problem at temperature 1; avg@{K} "
        f"(= unbiased pass@1), unbiased pass@4 and pass@{K}. Each cell: mean (min-max) over seeds; '[n of m seeds]' "
        "where only n runs have a valid held-out score (runs evaluated before the verifier scored `toy-countdown` "
        "rows keep their training series, not their held-out scores: `load_run`). s/run: wall time of one run "
        "(training + evaluation) on a possibly shared machine.",
        "",
        "## Results",
        "",
        *(f"![{what}]({name})\n" for name, what in FIGURES.items()),
        "| data | method | final reward (train) | held-out avg@16 | pass@4 | pass@16 | final entropy | s/run | notes |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for regime in args.regimes:
        for m in args.methods:
            runs = records.get((m, regime))
            if not runs:
                continue
            s = [run_summary(r, args.window) for r in runs]
            cells = []
            for key in ("reward", "avg@k", "pass@4", "pass@16", "entropy"):
                values = [x[key] for x in s]
                measured = sum(v == v for v in values)  # NaN: a held-out score not measured (see load_run)
                cells.append(
                    spread(values) + (f" [{measured} of {len(values)} seeds]" if measured < len(values) else "")
                )
            lines.append(
                f"| {regime} | {METHODS[m][0]} | "
                + " | ".join(cells)
                + f" | {statistics.mean(x['seconds'] for x in s):.0f} | {notes(m, args.task)} |"
            )
    lines += ["", "## What held and what did not", ""]
    lines += findings(records, args.methods, args.regimes, args.window, args.task)
    lines += [
        "",
        "## Entropy and reward at fixed steps",
        "",
        f"H@s / R@s: mean target-rollout entropy / training reward over the {args.window} steps ending at step s (H@1: "
        "the first step). AER's target is H* = tau x H0 = 0.4 x H@1; entropy-guided PosAdv's threshold is delta = "
        "0.2. zero-std: share of the step's groups whose 8 rewards are all equal, which give no policy gradient. alpha "
        "or lambda: AER's global scale alpha, PosAdv's lambda or OPEFO's lambda* at that step (empty for the other "
        "methods and for runs cached before these series were recorded, whose zero-std cells read —).",
        "",
    ]
    lines += fixed_steps_table(records, args.methods, args.regimes, args.steps, args.window)
    with open(md, "w") as f:
        f.write("\n".join(lines) + "\n")
    return md
