"""The reproduction study on the toy world: every method x {few-shot, full target data} x seeds, one figure, one table.

Toy world (as `benchmarks/heal_toy.py`): `healtrl-toy/qwen2-add+compare`, a tiny Qwen2 warmed up to ~20% sampled
accuracy on single-digit addition (target domain) and max-of-two (general domain). Target data: 8 training additions
(`few_shot`) or all 80 (`full`), drawn by seed; the 20 held-out additions of the test split are never trained on.
Every run: 16 prompts x 8 generations per step, lr 5e-4 decaying linearly to 0 at `--steps`, temperature 1, no KL,
at most 4 completion tokens (`healtrl.toy.collapse.toy_grpo_config`), one torch thread. Methods (`METHODS`):

- `grpo`, `hybrid`, `heal`: `benchmarks/heal_toy.py` (GRPO on the target data; target + 32 random general prompts
  without EDA; target + the 32 general prompts `healtrl select` ranks highest + the EDA reward);
- `aer`, `posadv` (entropy-guided schedule), TRL's `entropy_loss`, `adaptive_entropy`, `clip_higher`, `80_20`, and
  `clip_cov`, `kl_cov`, `entropy_adv`: the trainers, configs and toy settings of `benchmarks/entropy_methods.py`
  (`RUNS`); `opefo`: `OPEFOTrainer` with the paper's defaults, strictly on-policy (the toy config's one update per
  rollout batch is what it requires). All trained on the same target data as `grpo`.
- Opt-in (not in the default study): PosAdv's ablations `neg_only` / `pos_only` (A<0 / A>0 tokens only), which test
  the premise of the entropy-guided schedule (training on A<0 tokens raises the entropy).

`--task countdown` runs the study in the reasoning world (`healtrl.toy.world`: Countdown with written-out steps as
the target domain, sum chains as the general one; completions up to 32 tokens; few-shot 16 / full 256 target
problems; HEAL's general data 64 prompts; Clip-Higher with 4 optimizer steps per rollout batch, DAPO's off-policy
mini-batches, so that clipping acts), into `benchmarks/results/reasoning_study/`. Every run logs the entropy flow
(`entropy_flow_diagnostics`: series `flow_net`, `flow_increase`, `flow_decrease`, `flow_upper_clipped_net`,
`flow_lower_clipped_net`), which `benchmarks/claims.py` reads for OPEFO's Figure 2 claims.

`--task mul` swaps the target family for single-digit multiplication (`healtrl-toy/qwen2-mul`, hard problems stay
longer; no general domain, so not `heal` / `hybrid`). Besides the final numbers, the report has a table of entropy and
reward at fixed steps per method and seed, with the share of zero-variance groups and AER's alpha / PosAdv's lambda at
those steps (also printed at the end of the run).

Measured per step: the mean token entropy of the step's target-domain rollouts (the generating policy's, full
vocabulary) and their mean accuracy reward. After training: avg@16 and unbiased pass@4 / pass@16 on the 20 held-out
additions (16 samples each at temperature 1; pass@1 from 16 samples equals avg@16).

Runs go to a pool of `--jobs` worker processes (spawned, one torch thread each); each finished run is cached as JSON in
`<output-dir>/toy_study_runs/` (with its wall and CPU time) and reused by later invocations, so an interrupted study
resumes where it stopped; scratch (trainer folders, HEAL's selection per seed) goes to `--work-dir`. The figures
(`toy_study.png`: entropy per step, `toy_study_reward.png`: training reward per step, `toy_study_pass_at_k.png`:
held-out pass@k for k = 1..16; one panel per regime and method group) and the table (`toy_study.md`) are written into
`--output-dir` from the cache, for the requested subset. Default: 200 steps per run, 3 seeds, 2 jobs (78 runs).

    python benchmarks/toy_study.py                                   # the whole study (3 seeds, 2 regimes, 13 methods)
    python benchmarks/toy_study.py --seeds 0 --steps 5 --methods grpo heal --regimes few_shot --output-dir /tmp/s
    python benchmarks/toy_study.py --report-only                     # figure + table from the cache, no training
    python benchmarks/toy_study.py --task mul --methods grpo aer posadv neg_only --regimes few_shot --steps 400 \
        --output-dir benchmarks/results/entropy_control_toy_mul          # the issue #4 evidence on multiplication
    python benchmarks/toy_study.py --task countdown --pairs all --seeds 0 1 2 3 4 --steps 85 --jobs 2
                                       # the reasoning world's study: every trainer and baseline in both regimes
    python benchmarks/toy_study.py --task countdown --pairs claims --seeds 0 1 2 3 4 --steps 175 --jobs 2 \
        --output-dir benchmarks/results/reasoning_study/horizon175      # issue #40 set A: AER and GRPO, 175 steps
    python benchmarks/toy_study.py --task countdown --pairs claims --seeds 0 1 2 3 4 --steps 140 --jobs 2 \
        --output-dir benchmarks/results/reasoning_study/paper_regime140 # set B + extras: PosAdv Fig. 5's regime (N4)
    python benchmarks/claims.py --output benchmarks/results/reasoning_study/claims.md --diagnostics diagnostics.md
"""

from __future__ import annotations

import argparse
import concurrent.futures
import contextlib
import datetime
import json
import math
import multiprocessing
import os
import platform
import statistics
import sys
import time
import traceback
import warnings
from collections.abc import Sequence

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
for _path in (ROOT, HERE):  # healtrl (repository root) and the sibling benchmark modules
    if _path not in sys.path:
        sys.path.insert(0, _path)

import claims  # noqa: E402
import heal_toy  # noqa: E402

REGIMES = heal_toy.REGIMES  # few_shot: 8 target problems, full: 80
# --task: target family -> (toy model, what it is). "add" is the study's world; "mul" keeps hard problems longer.
TASKS = {
    "add": (
        heal_toy.MODEL,
        "a tiny Qwen2 warmed up to ~20% sampled accuracy on single-digit addition (the target domain) and max-of-two "
        "(the general domain)",
    ),
    "mul": (
        "healtrl-toy/qwen2-mul",
        "a tiny Qwen2 warmed up to ~20% sampled accuracy on single-digit multiplication (one- and two-digit answers); "
        "no general domain, so HEAL and Hybrid do not run on it",
    ),
    "countdown": (
        heal_toy.WORLDS["countdown"]["model"],
        "the reasoning world (`healtrl.toy.world`, card: `benchmarks/results/reasoning_world.md`): a small Qwen2 warmed "
        "up on imperfect Countdown demonstrations (target domain: reach a target from 3-4 numbers with + and -, the "
        "steps written out, several correct paths) and sum chains (general domain); completions up to 32 tokens; "
        "few-shot 16 / full 256 target problems, HEAL's general data 64 prompts",
    ),
}
# Config fields a method gets in one world only (the paper's protocol needs them there). Clip-Higher acts only on
# off-policy updates: in the reasoning world it takes DAPO's several optimizer steps per rollout batch, so that the
# entropy flow of upper- / lower-clipped tokens (OPEFO Fig. 2) exists; in the add world it stays on-policy as before.
WORLD_OVERRIDES = {"countdown": {"clip_higher": {"steps_per_generation": 4}}}
# The paper regime of PosAdv's Figure 5 (App. E.2: full data, 4 optimizer steps per rollout batch) and AER's update
# count (Table 3), issue #40: method key -> (the entropy_methods.RUNS key, label, notes). Each runs with
# steps_per_generation 4 (one rollout batch of 64 prompts x 8 consumed in 4 optimizer steps); opt-in, countdown only.
N4 = {"steps_per_generation": 4}
PAPER_REGIME = {
    "grpo_n4": ("grpo", "GRPO, 4 updates/batch", "TRL GRPO, eps 0.2"),
    "posadv_n4": ("posadv_entropy", "PosAdv (entropy-guided), 4 updates/batch", "delta 0.2, Delta 0.05, lambda_0 0"),
    "neg_only_n4": ("neg_only", "A<0 tokens only, 4 updates/batch", "PosAdv's ablation, lambda = 0"),
    "pos_only_n4": ("pos_only", "A>0 tokens only, 4 updates/batch", "PosAdv's other ablation"),
    "kl_cov_paper": ("kl_cov_paper", "KL-Cov (paper k), 4 updates/batch", "kl_cov_ratio 0.002, coef 1, no clip"),
    "clip_cov_n4": ("clip_cov", "Clip-Cov, 4 updates/batch", "ratio 2e-4, cov in (1, 5), clip ratios 1"),
    "rand_pos_clip_n4": ("rand_pos_clip", "Rand-Pos-Clip, 4 updates/batch", "schedule rand_pos_clip, ratio 2e-4"),
    "entropy_adv_n4": ("entropy_adv", "Entropy-Adv, 4 updates/batch", "alpha 0.4, kappa 2"),
    "kl_cov_n4_k02": ("kl_cov_k02", "KL-Cov (k 0.02), 4 updates/batch", "deviation: kl_cov_ratio 0.02, no clip"),
    "aer_n4": ("aer", "AER, 4 updates/batch", "paper defaults, alpha updated once per rollout batch"),
}
WORLD_OVERRIDES["countdown"].update({name: dict(N4) for name in PAPER_REGIME})


def regime_size(task: str, regime: str) -> int:
    """Target problems of a data regime in the world of `task`."""
    return heal_toy.WORLDS[task]["regimes"][regime]


K = 16  # held-out samples per problem
RESULTS_DIR = os.path.join(HERE, "results")
RUNS_SUBDIR = "toy_study_runs"
# Held-out scores of countdown runs cached before the fix of toy_reward for registry rows (shown as missing).
EXACT_MATCH_DEFECT = "exact match against one reference path (defect, fixed 2026-11-26): not used"
DIAGNOSTICS = "diagnostics.md"  # hand-written, beside claims.md: one "## <claim id>" section per claim not held
FORMAT = 1  # version of the cached run JSON

# name -> (label, figure group, source, entropy_methods.RUNS key or None, notes for the table).
# source "heal_toy": built by heal_toy.make_trainer; "runs": trainer/config/overrides of entropy_methods.RUNS.
METHODS: dict[str, tuple[str, str, str, str | None, str]] = {
    "grpo": ("GRPO", "HEAL", "heal_toy", None, "TRL GRPO, target data only"),
    "hybrid": ("Hybrid", "HEAL", "heal_toy", None, "target + 32 random general prompts, shuffled, no EDA"),
    "heal": (
        "HEAL",
        "HEAL",
        "heal_toy",
        None,
        "target + top-32 general by uncertainty x diversity (8 rollouts/question) + EDA (KL, paper mode)",
    ),
    "aer": ("AER", "entropy control", "runs", "aer", "paper defaults: tau 0.4, rho 0.2, eta 0.005, alpha_0 0"),
    "posadv": (
        "PosAdv (entropy-guided)",
        "entropy control",
        "runs",
        "posadv_entropy",
        "entropy-guided lambda: delta 0.2, Delta 0.05, lambda_0 0",
    ),
    "neg_only": (
        "A<0 tokens only",
        "entropy control",
        "runs",
        "neg_only",
        "PosAdv's ablation (lambda = 0 throughout): the entropy-guided schedule's premise is that this raises entropy",
    ),
    "pos_only": ("A>0 tokens only", "entropy control", "runs", "pos_only", "PosAdv's other ablation"),
    "rand_pos_clip": (
        "Rand-Pos-Clip",
        "entropy control",
        "runs",
        "rand_pos_clip",
        "PosAdv's random baseline (arXiv:2511.05993, Fig. 5): schedule rand_pos_clip, ratio 2e-4 (entropy_methods.RUNS)",
    ),
    "opefo": (
        "OPEFO",
        "entropy control",
        "opefo",
        None,
        "strict on-policy (1 update per rollout batch, ratio 1, clipping inert), eq. 6 estimator, adaptive lambda*; "
        "lr decays linearly like every run here (opefo_toy.md: constant)",
    ),
    # OPEFO's variants (opt-in; the diagnosis of OPEFO in the reasoning world): OPEFOConfig fields in OPEFO_VARIANTS
    "opefo_exact": ("OPEFO, exact estimator", "entropy control", "opefo", None, "entropy_change_estimator exact"),
    "opefo_static": ("OPEFO, static lambda", "entropy control", "opefo", None, "Table 2: lambda fixed at 0.001"),
    "opefo_pos": ("OPEFO, S+ only", "entropy control", "opefo", None, "Table 2: lambda* rescales S+ tokens only"),
    "opefo_neg": ("OPEFO, S- only", "entropy control", "opefo", None, "Table 2: lambda* rescales S- tokens only"),
    "entropy_loss": ("Entropy loss", "TRL baselines", "runs", "entropy_loss", "TRL entropy_coef 0.01"),
    "adaptive_entropy": (
        "Adaptive entropy",
        "TRL baselines",
        "runs",
        "skywork_adaptive",
        "TRL use_adaptive_entropy (Skywork-OR1): target 0.2, delta 1e-4, coef in [0, 0.005]",
    ),
    "clip_higher": (
        "Clip-Higher",
        "TRL baselines",
        "runs",
        "clip_higher",
        "eps 0.2 / 0.28; with 1 update per batch the ratio is 1, so clipping never acts (same as GRPO)",
    ),
    "80_20": ("80/20", "TRL baselines", "runs", "80_20", "TRL top_entropy_quantile 0.2 (top-20% entropy tokens)"),
    "clip_cov": (
        "Clip-Cov",
        "Cov baselines",
        "runs",
        "clip_cov",
        "ratio 2e-4 (>= 1 token/step), cov in (1, 5), clip ratios 1",
    ),
    "kl_cov": (
        "KL-Cov",
        "Cov baselines",
        "runs",
        "kl_cov",
        "ratio 0.02 (2e-3 selects 0 of ~250 toy tokens), 2 updates per rollout batch (on-policy the KL term is 0), "
        "no clip; steps are optimizer steps, so it sees half as many rollout batches",
    ),
    "entropy_adv": ("Entropy-Adv", "Cov baselines", "runs", "entropy_adv", "alpha 0.4, kappa 2"),
    **{
        name: (label, "paper regime", "runs", key, notes + "; full data, 4 optimizer steps per rollout batch")
        for name, (key, label, notes) in PAPER_REGIME.items()
    },
}
GROUPS = ("HEAL", "entropy control", "TRL baselines", "Cov baselines", "paper regime")
# OPEFOConfig fields of each OPEFO method (the paper's defaults for "opefo")
OPEFO_VARIANTS = {
    "opefo": {},
    "opefo_exact": {"entropy_change_estimator": "exact"},
    "opefo_static": {"lambda_mode": "static"},
    "opefo_pos": {"balance_sides": "pos"},
    "opefo_neg": {"balance_sides": "neg"},
}
ABLATIONS = ("neg_only", "pos_only", "rand_pos_clip", *(m for m in OPEFO_VARIANTS if m != "opefo"), *PAPER_REGIME)
DEFAULT_METHODS = [m for m in METHODS if m not in ABLATIONS]
# `--pairs all`: every trainer and every baseline its paper compares against (Rand-Pos-Clip is PosAdv's Fig. 5
# baseline), in both regimes; the claims' pairs add PosAdv's two ablations (few-shot). OPEFO's variants stay opt-in.
STUDY_METHODS = [*DEFAULT_METHODS, "rand_pos_clip"]
GRPO_COLOR = "black"

# Per-step series kept in a run's JSON: name -> log keys, first present wins (heal_toy's keys: HEAL logs per domain).
SERIES = {
    "entropy_target": heal_toy.TARGET_ENTROPY,
    "entropy_general": heal_toy.GENERAL_ENTROPY,
    "reward_target": heal_toy.TARGET_REWARD,
    "policy_entropy": ("entropy",),  # entropy of the loss forward (all tokens of the update batch)
    # Diagnostics of the entropy controllers (absent from runs cached before they were added).
    "zero_std": ("frac_reward_zero_std",),  # share of groups whose rewards are all equal: no policy gradient
    "controller": ("aer/alpha", "posadv/lambda", "opefo/lambda"),  # AER's global alpha, PosAdv's / OPEFO's lambda
    "hard_frac": ("aer/hard_frac",),  # AER: share of prompts with group accuracy below rho
    # AER's controller input and target (eq. 10-11: H_t and H* = tau x H0, its own measure), logged at each update
    "aer_entropy": ("aer/entropy",),
    "aer_target_entropy": ("aer/target_entropy",),
    # Entropy flow (healtrl.diagnostics, `entropy_flow_diagnostics`): the step's summed predicted entropy change.
    "flow_net": ("entropy_flow/net",),
    "flow_increase": ("entropy_flow/increase",),
    "flow_decrease": ("entropy_flow/decrease",),
}
# Per-step series that are sums of logged keys (each step's value: the sum, None when a key is missing).
SUMMED_SERIES = {
    f"flow_{group}_net": (f"entropy_flow/increase/{group}", f"entropy_flow/decrease/{group}")
    for group in ("upper_clipped", "lower_clipped")
}
FIXED_STEPS = (50, 100, 200, 300, 400, 600, 800, 1000)  # the fixed-steps table (and the last step)


# ---------------------------------------------------------------------------------------------------------------------
# One run (in a worker process)
# ---------------------------------------------------------------------------------------------------------------------
def run_path(runs_dir: str, method: str, regime: str, seed: int, steps: int, task: str = "add") -> str:
    """The cache file of one run (the study's `add` runs keep their original names)."""
    name = f"{method}-{regime}" if task == "add" else f"{method}-{task}-{regime}"
    return os.path.join(runs_dir, f"{name}-seed{seed}-{steps}steps.json")


def _series(history: list[dict], keys: Sequence[str], steps: int) -> list[float | None]:
    """Value of the first of `keys` logged at each step 1..steps (None where none was logged)."""
    for key in keys:
        values = {e["step"]: e[key] for e in history if "step" in e and key in e}
        if values:
            return [None if values.get(t) is None else round(float(values[t]), 6) for t in range(1, steps + 1)]
    return [None] * steps


def _summed_series(history: list[dict], keys: Sequence[str], steps: int) -> list[float | None]:
    parts = [_series(history, (key,), steps) for key in keys]
    return [None if any(p[t] is None for p in parts) else round(sum(p[t] for p in parts), 6) for t in range(steps)]


def _make_trainer(method: str, regime: str, seed: int, steps: int, workdir: str, task: str = "add"):
    """The trainer and tokenizer of one run (see METHODS) on the target family `task` (see TASKS)."""
    from transformers import PrinterCallback, set_seed

    from healtrl import OPEFOConfig, OPEFOTrainer
    from healtrl._filelock import file_lock
    from healtrl.toy import load_toy_model
    from healtrl.toy.tasks import toy_reward

    source, runs_key = METHODS[method][2], METHODS[method][3]
    world = heal_toy.WORLDS[task]
    if world["general"] is None and source == "heal_toy":
        if method != "grpo":
            raise ValueError(f"{method} needs a general domain; --task {task} has none.")
        source, runs_key = "runs", "grpo"  # the same run as heal_toy's grpo: EntropyGRPOTrainer, rollout entropies on
    # Every run logs the entropy flow (healtrl.diagnostics; logging only, the updates are unchanged).
    extra = {"entropy_flow_diagnostics": True, **WORLD_OVERRIDES.get(task, {}).get(method, {})}
    if source == "heal_toy":
        selected: dict = {}
        if method == "heal":
            # Workers share one selection per seed: the first builds it under the lock, later ones resume from it.
            with file_lock(os.path.join(workdir, ".select.lock")):
                selected[seed] = heal_toy.select_general(seed, 4 * world["regimes"]["few_shot"], workdir, task)
        trainer, tokenizer = heal_toy.make_trainer(method, regime, seed, steps, workdir, selected, task, **extra)
        if method == "grpo" and not trainer.args.rollout_entropy:
            raise RuntimeError("heal_toy's grpo run no longer logs rollout entropies; toy_study needs them.")
        return trainer, tokenizer
    if source == "opefo":
        trainer_cls, config_cls, overrides = OPEFOTrainer, OPEFOConfig, dict(OPEFO_VARIANTS[method])
    else:
        import entropy_methods

        trainer_cls, config_cls, overrides, _ = entropy_methods.RUNS[runs_key]
    model, tokenizer = load_toy_model(TASKS[task][0])
    out = os.path.join(workdir, f"{method}-{task}-{regime}-{seed}")
    set_seed(seed)
    if not hasattr(config_cls, "entropy_flow_diagnostics"):
        extra.pop("entropy_flow_diagnostics")
    args = heal_toy.toy_args(config_cls, out, steps, seed, task, rollout_entropy=True, **{**overrides, **extra})
    trainer = trainer_cls(
        model=model,
        reward_funcs=toy_reward,
        args=args,
        train_dataset=heal_toy.target_data(regime_size(task, regime), seed, repeat=True, family=task),  # as heal_toy's
        processing_class=tokenizer,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer, tokenizer


def run_one(method: str, regime: str, seed: int, steps: int, output_dir: str, work_dir: str, task: str = "add") -> dict:
    """Train one run, evaluate it on the held-out problems and write its JSON into the cache (atomically).

    Args:
        method: A key of METHODS.
        regime: A key of REGIMES.
        seed: Seed of the data subset and the trainer.
        steps: Optimizer steps.
        output_dir: Study output folder (the cache is its `toy_study_runs/`).
        work_dir: Scratch folder: trainer outputs, the general pool and the HEAL selection of each seed.
        task: Target family, a key of TASKS.

    Returns:
        The run record (also written to `run_path(...)`).
    """
    import torch

    torch.set_num_threads(1)
    runs_dir = os.path.join(output_dir, RUNS_SUBDIR)
    os.makedirs(runs_dir, exist_ok=True)
    os.makedirs(work_dir, exist_ok=True)
    start, cpu_start = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer, tokenizer = _make_trainer(method, regime, seed, steps, work_dir, task)
        t_train = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - t_train
        t_eval = time.perf_counter()
        pass_at = heal_toy.held_out_pass_at(trainer.model, tokenizer, seed, K, family=task)
        eval_seconds = time.perf_counter() - t_eval
    history = trainer.state.log_history
    record = {
        "format": FORMAT,
        "method": method,
        "regime": regime,
        "seed": seed,
        "steps": steps,
        "task": task,
        "model": TASKS[task][0],
        "trainer": type(trainer).__name__,
        "steps_per_generation": trainer.args.steps_per_generation,  # optimizer steps per rollout batch
        "num_iterations": trainer.args.num_iterations,
        "series": {
            **{name: _series(history, keys, steps) for name, keys in SERIES.items()},
            **{name: _summed_series(history, keys, steps) for name, keys in SUMMED_SERIES.items()},
        },
        "held_out": {
            "k": K,
            "scorer": "toy_reward (the family's verifier where it has one)",
            "avg@k": pass_at[1],
            "pass_at": {str(j): v for j, v in pass_at.items()},
        },
        "seconds": {
            "total": time.perf_counter() - start,
            "cpu": time.process_time() - cpu_start,  # this process's CPU time: what a quiet core would take
            "train": train_seconds,
            "eval": eval_seconds,
            "per_step": train_seconds / steps,
        },
        "finished": datetime.datetime.now().isoformat(timespec="seconds"),
        "pid": os.getpid(),
    }
    path = run_path(runs_dir, method, regime, seed, steps, task)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(record, f)
    os.replace(tmp, path)
    return record


def load_run(path: str) -> dict | None:
    """A cached run record, or None when the file is missing; an unreadable or stale file is an error."""
    if not os.path.exists(path):
        return None
    with open(path) as f:
        try:
            record = json.load(f)
        except json.JSONDecodeError as exc:
            raise ValueError(f"Cached run {path} is not valid JSON ({exc}); delete it to rerun that run.") from None
    if record.get("format") != FORMAT:
        raise ValueError(f"Cached run {path} has format {record.get('format')}, expected {FORMAT}; delete it.")
    if record.get("task") == "countdown" and "scorer" not in record["held_out"]:
        # Evaluated before healtrl.toy.tasks verified rows of the registry task `toy-countdown`: its held-out pass@k
        # counted one reference path only. The training series are valid; the held-out numbers are not shown.
        held = record["held_out"]
        held["scorer"] = EXACT_MATCH_DEFECT
        held["avg@k"] = math.nan
        held["pass_at"] = {j: math.nan for j in held["pass_at"]}
    return record


def _init_worker():
    import datasets
    import torch
    import transformers

    torch.set_num_threads(1)
    datasets.disable_progress_bars()  # one line per finished run is the output
    transformers.utils.logging.disable_progress_bar()


@contextlib.contextmanager
def _in_process():
    """The worker settings (`_init_worker`) for runs in this process, restored afterwards (e.g. under pytest)."""
    import datasets
    import torch
    import transformers

    threads = torch.get_num_threads()
    bars = datasets.is_progress_bar_enabled(), transformers.utils.logging.is_progress_bar_enabled()
    _init_worker()
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        if bars[0]:
            datasets.enable_progress_bars()
        if bars[1]:
            transformers.utils.logging.enable_progress_bar()


def _worker(task):
    try:
        return task, run_one(*task), None
    except Exception:  # reported (with the traceback) by the parent, which fails the study at the end
        return task, None, traceback.format_exc()


# ---------------------------------------------------------------------------------------------------------------------
# Aggregation, table, figure
# ---------------------------------------------------------------------------------------------------------------------
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


def _notes(method: str, task: str) -> str:
    """The table's notes for `method`: its METHODS notes, or the world's overrides where it has some."""
    overrides = WORLD_OVERRIDES.get(task, {}).get(method)
    if overrides:
        fields = ", ".join(f"{k} {v}" for k, v in overrides.items())
        return f"in this world: {fields} (so the importance ratio departs from 1 and clipping acts)"
    return METHODS[method][4]


def write_report(args, records: dict, wall_seconds: float, trained: int, cached: int) -> str:
    """Write the figures (`FIGURES`) and the markdown table; return the markdown path."""
    import torch
    import trl

    md = os.path.join(args.output_dir, "toy_study.md")
    plot(records, args.methods, args.regimes, args.output_dir, args.smooth)
    run_seconds = [r["seconds"]["total"] for v in records.values() for r in v]
    cpu_seconds = [r["seconds"].get("cpu", math.nan) for v in records.values() for r in v]
    finished = [str(r.get("finished", "?")) for v in records.values() for r in v]
    command = "python benchmarks/toy_study.py " + " ".join(sys.argv[1:]) if args.command is None else args.command
    lines = [
        "# The reproduction study on the toy world" if args.task == "add" else f"# The study on the {args.task} world",
        "",
        f"Command: `{command}`",
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
        f"temperature 1, no KL, at most {heal_toy.WORLDS[args.task]['completion']} completion tokens; seeds "
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
                + f" | {statistics.mean(x['seconds'] for x in s):.0f} | {_notes(m, args.task)} |"
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


# ---------------------------------------------------------------------------------------------------------------------
# Driver
# ---------------------------------------------------------------------------------------------------------------------
def _parse_pairs(
    parser: argparse.ArgumentParser, values: Sequence[str] | None, steps: int = 85
) -> list[tuple[str, str]] | None:
    """`--pairs` as [(method, regime), ...] in the given order; "claims" expands to the pairs the claims read at this
    budget (`claims.claim_pairs(steps)`: at 85 steps `claims.CLAIM_PAIRS`), "all" to `STUDY_METHODS` x `REGIMES`
    followed by the claims' pairs."""
    if values is None:
        return None
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


def parse_args(argv: Sequence[str] | None = None) -> argparse.Namespace:
    """The command line (see the module docstring)."""
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--methods", nargs="+", default=DEFAULT_METHODS, choices=list(METHODS))
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
        "benchmarks/results/reasoning_study for countdown, benchmarks/results/<task>_study otherwise)",
    )
    parser.add_argument(
        "--work-dir",
        default=os.path.join(ROOT, "outputs", "toy_study_work"),
        help="scratch: trainer outputs, general pool, HEAL selections (not needed for the report)",
    )
    parser.add_argument(
        "--pairs",
        nargs="+",
        metavar="METHOD:REGIME",
        help="run these (method, regime) pairs instead of --methods x --regimes; 'claims' stands for the pairs "
        "benchmarks/claims.py reads at --steps (claims.claim_pairs: 85, 140 or 175), 'all' for every trainer and "
        "baseline (STUDY_METHODS) in both regimes plus those pairs; the claims table is benchmarks/claims.py's",
    )
    parser.add_argument("--report-only", action="store_true", help="no training: figure + table from cached runs")
    args = parser.parse_args(argv)
    args.pairs = _parse_pairs(parser, args.pairs, args.steps)
    if args.pairs is not None:
        args.methods = list(dict.fromkeys(m for m, _ in args.pairs))
        args.regimes = [r for r in REGIMES if any(r == regime for _, regime in args.pairs)]
    for name in ("steps", "jobs", "window", "smooth"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be >= 1, got {getattr(args, name)}.")
    args.methods = list(dict.fromkeys(args.methods))
    if heal_toy.WORLDS[args.task]["general"] is None:
        needs_general = [m for m in args.methods if METHODS[m][2] == "heal_toy" and m != "grpo"]
        if needs_general:
            parser.error(
                f"--methods {' '.join(needs_general)} need a general domain; with --task "
                f"{args.task} choose from "
                f"{', '.join(m for m in METHODS if METHODS[m][2] != 'heal_toy' or m == 'grpo')}."
            )
    if args.output_dir is None:  # each world keeps its own table, figure and run cache
        sub = {"add": None, "countdown": "reasoning_study"}.get(args.task, f"{args.task}_study")
        args.output_dir = RESULTS_DIR if sub is None else os.path.join(RESULTS_DIR, sub)
    args.regimes = list(dict.fromkeys(args.regimes))
    args.seeds = list(dict.fromkeys(args.seeds))
    args.command = None if argv is None else "python benchmarks/toy_study.py " + " ".join(argv)
    return args


def main(argv: Sequence[str] | None = None) -> dict:
    """Run the missing runs of the requested subset (in a pool of `--jobs` processes), then write figure and table.

    Args:
        argv: Command-line arguments (default: `sys.argv[1:]`).

    Returns:
        `{"records": {(method, regime): [run record, ...]}, "trained": [(method, regime, seed),
        ...], "markdown": path, "png": the entropy figure's path, "figures": [every figure's path]}`.
    """
    args = parse_args(argv)
    os.makedirs(args.output_dir, exist_ok=True)
    runs_dir = os.path.join(args.output_dir, RUNS_SUBDIR)
    start = time.perf_counter()
    tasks, records = [], {}
    for seed in args.seeds:
        for regime in args.regimes:
            for method in args.methods:
                if args.pairs is not None and (method, regime) not in args.pairs:
                    continue
                record = load_run(run_path(runs_dir, method, regime, seed, args.steps, args.task))
                if record is None:
                    tasks.append((method, regime, seed, args.steps, args.output_dir, args.work_dir, args.task))
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
        s = run_summary(record, args.window)
        print(
            f"[{len(trained) + len(failures)}/{len(tasks)}] {method} {regime} seed {seed}: "
            f"entropy {s['entropy']:.3f} reward {s['reward']:.3f} pass@16 {s['pass@16']:.3f} "
            f"({s['seconds']:.0f} s wall, {record['seconds']['cpu']:.0f} s CPU, {s['per_step']:.3f} s/step)",
            flush=True,
        )

    if args.jobs == 1 or len(tasks) <= 1:
        with _in_process():
            for task in tasks:
                done(*_worker(task))
    else:
        os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the spawned workers
        context = multiprocessing.get_context("spawn")
        with concurrent.futures.ProcessPoolExecutor(args.jobs, mp_context=context, initializer=_init_worker) as pool:
            for future in concurrent.futures.as_completed([pool.submit(_worker, t) for t in tasks]):
                done(*future.result())
    if failures:
        names = ", ".join(f"{t[0]}/{t[1]}/seed {t[2]}" for t, _ in failures)
        raise RuntimeError(f"{len(failures)} run(s) failed: {names} (tracebacks above); finished runs are cached.")
    for runs in records.values():
        runs.sort(key=lambda r: r["seed"])
    markdown = write_report(args, records, time.perf_counter() - start, len(trained), cached)
    print("\n".join(fixed_steps_table(records, args.methods, args.regimes, args.steps, args.window)), flush=True)
    print(f"wrote {markdown} and {', '.join(os.path.join(args.output_dir, name) for name in FIGURES)}", flush=True)
    return {
        "records": records,
        "trained": trained,
        "markdown": markdown,
        "png": os.path.join(args.output_dir, "toy_study.png"),
        "figures": [os.path.join(args.output_dir, name) for name in FIGURES],
    }


if __name__ == "__main__":
    main()
