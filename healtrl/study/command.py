"""The study on a toy world: every method x {few-shot, full target data} x seeds, figures, one table (`healtrl study`).

Toy world (`--task add`, the default): `healtrl-toy/qwen2-add+compare`, a tiny Qwen2 warmed up to ~20% sampled
accuracy on single-digit addition (target domain) and max-of-two (general domain). Target data: 8 training additions
(`few_shot`) or all 80 (`full`), drawn by seed; the 20 held-out additions of the test split are never trained on.
Every run: 16 prompts x 8 generations per step, lr 5e-4 decaying linearly to 0 at `--steps`, temperature 1, no KL,
at most 4 completion tokens (`healtrl.toy.collapse.toy_grpo_config`), one torch thread. Methods
(`healtrl.study.methods.METHODS`):

- `grpo`, `hybrid`, `heal` (GRPO on the target data; target + 32 random general prompts without EDA; target + the 32
  general prompts `healtrl select` ranks highest + the EDA reward);
- `aer`, `posadv` (entropy-guided schedule), TRL's `entropy_loss`, `adaptive_entropy`, `clip_higher`, `80_20`, and
  `clip_cov`, `kl_cov`, `entropy_adv`: the trainers, configs and toy settings of `methods.RUN_CONFIGS`; `opefo`:
  `OPEFOTrainer` with the paper's defaults, strictly on-policy (the toy config's one update per rollout batch is what
  it requires). All trained on the same target data as `grpo`.
- Opt-in (not in the default study): PosAdv's ablations `neg_only` / `pos_only` (A<0 / A>0 tokens only), which test
  the premise of the entropy-guided schedule (training on A<0 tokens raises the entropy).
- `--trainer MODULE:CLASS [--config FIELDS.yaml]`: your own trainer (a subclass of healtrl's `EntropyGRPOTrainer`;
  the YAML file: fields of its `config_class`, except those the study sets for every method, `STUDY_FIXED_FIELDS`) as
  one more method, in the same world, data, budget and seeds, beside GRPO (the claims' control; `--methods` adds
  others). Its cached runs are keyed by the class name and a digest of the spec, the fields and the source file of
  the trainer's module (an edited trainer gets new runs).

`--task countdown` runs the study in the reasoning world (`healtrl.toy.world`: Countdown with written-out steps as
the target domain, sum chains as the general one; completions up to 32 tokens; few-shot 16 / full 256 target
problems; HEAL's general data 64 prompts; Clip-Higher with 4 optimizer steps per rollout batch, DAPO's off-policy
mini-batches, so that clipping acts), into `benchmarks/results/reasoning_study/`. Every run logs the entropy flow
(`entropy_flow_diagnostics`: series `flow_net`, `flow_increase`, `flow_decrease`, `flow_upper_clipped_net`,
`flow_lower_clipped_net`), which the claims (`healtrl study --claims`) read for OPEFO's Figure 2 claims.

`--task mul` swaps the target family for single-digit multiplication (`healtrl-toy/qwen2-mul`, hard problems stay
longer; no general domain, so not `heal` / `hybrid`). Besides the final numbers, the report has a table of entropy and
reward at fixed steps per method and seed, with the share of zero-variance groups and AER's alpha / PosAdv's lambda at
those steps (also printed at the end of the run).

Measured per step: the mean token entropy of the step's target-domain rollouts (the generating policy's, full
vocabulary) and their mean accuracy reward. After training: avg@16 and unbiased pass@4 / pass@16 on the 20 held-out
problems (16 samples each at temperature 1; pass@1 from 16 samples equals avg@16).

Runs go to a pool of `--jobs` worker processes (spawned, one torch thread each); each finished run is cached as JSON in
`<output-dir>/toy_study_runs/` (with its wall and CPU time) and reused by later invocations, so an interrupted study
resumes where it stopped; one line per finished run reports the progress ([done/total]). Scratch (trainer folders,
HEAL's selection per seed) goes to `--work-dir`. The figures (`toy_study.png`: entropy per step,
`toy_study_reward.png`: training reward per step, `toy_study_pass_at_k.png`: held-out pass@k for k = 1..16; one panel
per regime and method group) and the table (`toy_study.md`, which links the figures) are written into `--output-dir`
from the cache, for the requested subset. Default: 200 steps per run, 3 seeds, 2 jobs (78 runs).

    healtrl study                                                    # the whole study (3 seeds, 2 regimes, 13 methods)
    healtrl study --seeds 0 --steps 5 --methods grpo heal --regimes few_shot --output-dir /tmp/s
    healtrl study --report                                           # figures + table from the cache, no training
    healtrl study --task countdown --pairs all --seeds 0 1 2 3 4 --steps 85 --jobs 2
                                       # the reasoning world's study: every trainer and baseline in both regimes
    healtrl study --task countdown --pairs claims --seeds 0 1 2 3 4 --steps 175 --jobs 2 \\
        --output-dir benchmarks/results/reasoning_study/horizon175      # issue #40 set A: AER and GRPO, 175 steps
    healtrl study --task countdown --trainer mypkg.methods:MyTrainer --config my_fields.yaml --regimes full \\
        --seeds 0 1 2 3 4 --steps 85 --output-dir /tmp/mine         # your trainer beside GRPO, the claims' budget
    healtrl study --claims --output benchmarks/results/reasoning_study/claims.md --diagnostics diagnostics.md

`python benchmarks/toy_study.py` takes the same options (`--report-only` is `--report`).
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from collections.abc import Sequence

from . import report, runs
from .methods import DEFAULT_METHODS, METHODS, STUDY_METHODS, read_fields, register_user_method, user_method
from .paths import DEFAULT_RUNS, REPOSITORY, RESULTS_DIR, RUNS_SUBDIR, WORK_DIR, results_dir
from .world import REGIMES, TASKS, WORLDS


def _parse_pairs(
    parser: argparse.ArgumentParser, values: Sequence[str] | None, steps: int = 85
) -> list[tuple[str, str]] | None:
    """`--pairs` as [(method, regime), ...] in the given order; "claims" expands to the pairs the claims read at this
    budget (`claims.claim_pairs(steps)`: at 85 steps `claims.CLAIM_PAIRS`), "all" to `STUDY_METHODS` x `REGIMES`
    followed by the claims' pairs."""
    if values is None:
        return None
    from . import claims

    pairs = []
    for value in values:
        if value == "claims":
            if not claims.claim_pairs(steps):
                parser.error(f"--pairs claims: no claim reads {steps}-step runs; give --steps 85, 140 or 175.")
            pairs += list(claims.claim_pairs(steps))
            continue
        if value == "all":
            pairs += [(m, r) for r in REGIMES for m in STUDY_METHODS] + list(claims.claim_pairs(steps))
            continue
        method, sep, regime = value.partition(":")
        if not sep or method not in METHODS or regime not in REGIMES:
            parser.error(
                f"--pairs {value!r}: write METHOD:REGIME with METHOD in {', '.join(METHODS)} and REGIME in "
                f"{', '.join(REGIMES)} (e.g. grpo:few_shot), 'claims' or 'all'."
            )
        pairs.append((method, regime))
    return list(dict.fromkeys(pairs))


def build_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The study's command line (see the module docstring); `prog`: the name `--help` shows."""
    parser = argparse.ArgumentParser(
        prog=prog, description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--methods", nargs="+", choices=list(METHODS),
                        help="methods to run (default: the study's default set; with --trainer: grpo)")  # fmt: skip
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    parser.add_argument("--task", default="add", choices=list(TASKS), help="target task family (see TASKS)")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=200, help="optimizer steps per run")
    parser.add_argument("--jobs", type=int, default=2, help="worker processes (one torch thread each)")
    parser.add_argument("--window", type=int, default=20, help="steps averaged for the final reward / entropy")
    parser.add_argument("--smooth", type=int, default=10, help="moving-average window of the figure's curves")
    parser.add_argument(
        "--output-dir",
        help="PNG, markdown and the run cache go here (default: benchmarks/results for --task add, "
        "benchmarks/results/reasoning_study for countdown, benchmarks/results/<task>_study otherwise; in the source "
        "checkout that holds healtrl)",
    )
    parser.add_argument(
        "--work-dir",
        help="scratch: trainer outputs, general pool, HEAL selections (not needed for the report; default: "
        "outputs/toy_study_work of the source checkout)",
    )
    parser.add_argument(
        "--pairs",
        nargs="+",
        metavar="METHOD:REGIME",
        help="run these (method, regime) pairs instead of --methods x --regimes; 'claims' stands for the pairs "
        "the claims read at --steps (claims.claim_pairs: 85, 140 or 175), 'all' for every trainer and "
        "baseline (STUDY_METHODS) in both regimes plus those pairs; the claims table is `healtrl study --claims`'s",
    )
    parser.add_argument(
        "--report",
        "--report-only",
        dest="report_only",
        action="store_true",
        help="no training: figures + table from cached runs",
    )
    parser.add_argument(
        "--trainer",
        metavar="MODULE:CLASS",
        help="your trainer (a subclass of healtrl's EntropyGRPOTrainer, imported with the current folder on the "
        "path) as one more method, run beside GRPO in every regime",
    )
    parser.add_argument("--config", help="with --trainer: a YAML mapping of its config class's fields")
    return parser


def parse_args(
    argv: Sequence[str] | None = None, prog: str | None = None, command: str = "python benchmarks/toy_study.py"
) -> argparse.Namespace:
    """The command line (see the module docstring). `command` is what the report names as the command, before the
    options; `args.command` is it with the options, `args.user` the user's trainer (`methods.user_method`) or None."""
    parser = build_parser(prog)
    given = list(sys.argv[1:] if argv is None else argv)
    args = parser.parse_args(given)
    args.user = None
    if args.config is not None and args.trainer is None:
        parser.error("--config gives the fields of --trainer's config: give --trainer too.")
    if args.trainer is not None:
        try:
            args.user = user_method(args.trainer, read_fields(args.config))
        except (ValueError, OSError) as exc:
            parser.error(str(exc))
        register_user_method(args.user)
    args.pairs = _parse_pairs(parser, args.pairs, args.steps)
    if args.methods is None:
        args.methods = ["grpo"] if args.user is not None else list(DEFAULT_METHODS)
    if args.pairs is not None:
        if args.user is not None:  # the user's method in every regime the pairs name
            regimes = [r for r in REGIMES if any(r == regime for _, regime in args.pairs)]
            args.pairs = list(dict.fromkeys([*args.pairs, *((args.user["key"], r) for r in regimes)]))
        args.methods = list(dict.fromkeys(m for m, _ in args.pairs))
        args.regimes = [r for r in REGIMES if any(r == regime for _, regime in args.pairs)]
    elif args.user is not None:
        args.methods = [*args.methods, args.user["key"]]
    for name in ("steps", "jobs", "window", "smooth"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    args.methods = list(dict.fromkeys(args.methods))
    if WORLDS[args.task]["general"] is None:
        needs_general = [m for m in args.methods if METHODS[m][2] == "heal_toy" and m != "grpo"]
        if needs_general:
            parser.error(
                f"--methods {' '.join(needs_general)} need a general domain; with --task "
                f"{args.task} choose from "
                f"{', '.join(m for m in METHODS if METHODS[m][2] != 'heal_toy' or m == 'grpo')}."
            )
    if args.output_dir is None:  # each world keeps its own table, figure and run cache
        base = results_dir("--output-dir")
        sub = {"add": None, "countdown": "reasoning_study"}.get(args.task, f"{args.task}_study")
        args.output_dir = base if sub is None else os.path.join(base, sub)
    if args.work_dir is None:
        if not os.path.isdir(RESULTS_DIR) and not args.report_only:  # a report trains nothing: no scratch needed
            parser.error(f"{REPOSITORY} is no source checkout of healtrl: give --work-dir (scratch) too.")
        args.work_dir = WORK_DIR
    args.regimes = list(dict.fromkeys(args.regimes))
    args.seeds = list(dict.fromkeys(args.seeds))
    args.command = f"{command} " + " ".join(given)
    return args


def main(
    argv: Sequence[str] | None = None, prog: str | None = None, command: str = "python benchmarks/toy_study.py"
) -> dict:
    """Run the missing runs of the requested subset (in a pool of `--jobs` processes), then write figures and table.

    Args:
        argv: Command-line arguments (default: `sys.argv[1:]`).
        prog: The program name `--help` shows (default: argparse's, the script's name).
        command: What the report names as the command, before the options.

    Returns:
        `{"records": {(method, regime): [run record, ...]}, "trained": [(method, regime, seed),
        ...], "markdown": path, "png": the entropy figure's path, "figures": [every figure's path]}`.
    """
    args = parse_args(argv, prog, command)
    os.makedirs(args.output_dir, exist_ok=True)
    runs_dir = os.path.join(args.output_dir, RUNS_SUBDIR)
    start = time.perf_counter()
    tasks, records = [], {}
    for seed in args.seeds:
        for regime in args.regimes:
            for method in args.methods:
                if args.pairs is not None and (method, regime) not in args.pairs:
                    continue
                record = runs.load_run(runs.run_path(runs_dir, method, regime, seed, args.steps, args.task))
                if record is None:
                    user = args.user if args.user is not None and method == args.user["key"] else None
                    tasks.append((method, regime, seed, args.steps, args.output_dir, args.work_dir, args.task, user))
                else:
                    records.setdefault((method, regime), []).append(record)
    cached = sum(len(v) for v in records.values())
    if tasks and args.report_only:
        missing = ", ".join(f"{t[0]}/{t[1]}/seed {t[2]}" for t in tasks)
        raise SystemExit(f"--report-only: {len(tasks)} runs are not in {runs_dir} ({missing}); run without it first.")
    print(f"toy_study: {len(tasks)} runs to train, {cached} cached, {args.jobs} job(s), {args.steps} steps", flush=True)
    failures, trained = [], []

    def done(task, record, error):
        method, regime, seed = task[:3]
        if error is not None:
            failures.append((task, error))
            print(f"FAILED {method} {regime} seed {seed}:\n{error}", flush=True)
            return
        trained.append((method, regime, seed))
        records.setdefault((method, regime), []).append(record)
        s = report.run_summary(record, args.window)
        print(
            f"[{len(trained) + len(failures)}/{len(tasks)}] {method} {regime} seed {seed}: "
            f"entropy {s['entropy']:.3f} reward {s['reward']:.3f} pass@16 {s['pass@16']:.3f} "
            f"({s['seconds']:.0f} s wall, {record['seconds']['cpu']:.0f} s CPU, {s['per_step']:.3f} s/step)",
            flush=True,
        )

    runs.train_missing(tasks, args.jobs, done)
    if failures:
        names = ", ".join(f"{t[0]}/{t[1]}/seed {t[2]}" for t, _ in failures)
        raise RuntimeError(f"{len(failures)} run(s) failed: {names} (tracebacks above); finished runs are cached.")
    for found in records.values():
        found.sort(key=lambda r: r["seed"])
    markdown = report.write_report(args, records, time.perf_counter() - start, len(trained), cached)
    print("\n".join(report.fixed_steps_table(records, args.methods, args.regimes, args.steps, args.window)), flush=True)
    print(
        f"wrote {markdown} and {', '.join(os.path.join(args.output_dir, name) for name in report.FIGURES)}", flush=True
    )
    return {
        "records": records,
        "trained": trained,
        "markdown": markdown,
        "png": os.path.join(args.output_dir, "toy_study.png"),
        "figures": [os.path.join(args.output_dir, name) for name in report.FIGURES],
    }


# ---------------------------------------------------------------------------------------------------------------------
# The claims (`healtrl study --claims`, `python benchmarks/claims.py`)
# ---------------------------------------------------------------------------------------------------------------------
def claims_parser(prog: str | None = None) -> argparse.ArgumentParser:
    """The options of the claims' command (`healtrl.study.claims.judge` reads them); built here, without importing
    the claims (which import the trainers' configs), so that `--help` is cheap."""
    parser = argparse.ArgumentParser(
        prog=prog,
        description="The papers' claims that the reasoning world can test, each against its control (issues #26 and "
        "#40).",
        epilog="Verdict rule: see the module docstring of healtrl/study/claims.py.",
    )
    parser.add_argument(
        "--runs",
        nargs="+",
        default=list(DEFAULT_RUNS),
        help="study run caches (default: DEFAULT_RUNS, the reasoning study's four)",
    )
    parser.add_argument("--seeds", type=int, nargs="+", help="only these seeds (default: every cached seed)")
    parser.add_argument(
        "--output", help="write the table and the per-claim details (markdown) here, claims.json beside"
    )
    parser.add_argument(
        "--diagnostics",
        help="a markdown file (path relative to --output's folder) with a '## <claim id>' section per claim: verdicts "
        "other than 'held' link there",
    )
    parser.add_argument("--readme", help="rewrite this README's claims table from --output's table (needs --output)")
    return parser


def claims_main(
    argv: Sequence[str] | None = None, prog: str | None = None, command: str = "python benchmarks/claims.py"
) -> list:
    """Judge the claims on the cached runs (`healtrl.study.claims.judge`): print the table and, with `--output`, write
    `claims.md`, `claims.json` beside it and (with `--readme`) the README's table.

    Args:
        argv: The options (default: `sys.argv[1:]`).
        prog: The program name `--help` shows (default: argparse's, the script's name).
        command: What the written files name as the command, before the options.

    Returns:
        One `claims.Result` per claim of `claims.CLAIMS`, in order.
    """
    given = list(sys.argv[1:] if argv is None else argv)
    parser = claims_parser(prog)
    args = parser.parse_args(given)
    if args.readme and not args.output:
        parser.error("--readme rewrites the README's table from the claims file: give --output too")
    from . import claims

    return claims.judge(args, f"{command} " + " ".join(given))
