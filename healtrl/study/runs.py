"""One run of the study, its cached record, and the pool of worker processes that trains the missing runs.

A run is (method, regime, seed) at a step budget in a world (`task`): `make_trainer` builds its trainer (see
`healtrl.study.methods` for what each method is), `run_one` trains it, scores it on the held-out problems and writes
its record as JSON into the cache (`<output-dir>/toy_study_runs/`, atomically: a file there is a finished run).
`load_run` reads a record back (None: not run yet; a file that is not valid JSON or of another `FORMAT` is an
error). `train_missing` trains a list of runs in `jobs` spawned processes (one torch thread each), or in this process
for one job or one run, and reports each finished or failed run through a callback; a failed run does not stop the
others.

The record: `format`, `method`, `regime`, `seed`, `steps`, `task`, `model`, `trainer`, `steps_per_generation`,
`num_iterations`, `series` (per step 1..steps, None where not logged: `SERIES` and `SUMMED_SERIES`), `held_out`
(`k`, `scorer`, `avg@k`, `pass_at`: j -> unbiased pass@j), `seconds` (`total`, `cpu`, `train`, `eval`, `per_step`),
`finished`, `pid`; a user's trainer (`healtrl study --trainer`) adds `user` (its spec and config fields).
"""

from __future__ import annotations

import concurrent.futures
import contextlib
import datetime
import json
import math
import multiprocessing
import os
import time
import traceback
import warnings
from collections.abc import Callable, Sequence

from . import methods
from .methods import METHODS, OPEFO_VARIANTS, WORLD_OVERRIDES
from .paths import RUNS_SUBDIR
from .world import GENERAL_ENTROPY, TARGET_ENTROPY, TARGET_REWARD, TASKS, WORLDS, K, regime_size

# Held-out scores of countdown runs cached before the fix of toy_reward for registry rows (shown as missing).
EXACT_MATCH_DEFECT = "exact match against one reference path (defect, fixed 2026-11-26): not used"
FORMAT = 1  # version of the cached run JSON

# Per-step series kept in a run's JSON: name -> log keys, first present wins (HEAL logs per domain).
SERIES = {
    "entropy_target": TARGET_ENTROPY,
    "entropy_general": GENERAL_ENTROPY,
    "reward_target": TARGET_REWARD,
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


# ---------------------------------------------------------------------------------------------------------------------
# Building a run's trainer
# ---------------------------------------------------------------------------------------------------------------------
def make_heal_family_trainer(method: str, regime: str, seed: int, steps: int, workdir: str, selected: dict,
                             world: str = "add", **overrides):  # fmt: skip
    """The trainer (printing callback removed) and tokenizer of a `grpo`, `hybrid` or `heal` run.

    Args:
        method: "grpo" (GRPO on the target data), "hybrid" (target + random general prompts, no EDA) or "heal"
            (target + HEAL's selection of general prompts + the EDA reward).
        regime: "few_shot" or "full" (the world's numbers of target problems).
        seed: Seed of the target subset, the general subset / selection and the trainer.
        steps: Optimizer steps.
        workdir: Folder for the trainer output and the general-data selection (`select-<seed>`).
        selected: In-process cache seed -> selected general data, filled on first use.
        world: A key of WORLDS (its model, data, general family and completion budget).
        **overrides: Further config fields of every trainer.

    Returns:
        `(trainer, tokenizer)`.
    """
    from transformers import PrinterCallback, set_seed

    from healtrl.toy import load_toy_model
    from healtrl.toy.tasks import toy_reward
    from healtrl.trainers import EntropyGRPOConfig, EntropyGRPOTrainer, HEALConfig, HEALTrainer

    from .world import general_pool, select_general, target_data, toy_args

    spec = WORLDS[world]
    model, tokenizer = load_toy_model(spec["model"])
    # GRPO needs at least a batch of distinct rows: its small target set is repeated. HEAL's pool is not (8 target
    # rows + 32 general: the paper's 32 + 384 scaled down, one shuffled pool; the reasoning world: 16 + 64).
    n_target = spec["regimes"][regime]
    n_general = 4 * spec["regimes"]["few_shot"]
    target = target_data(n_target, seed, repeat=method == "grpo", family=world)
    out = os.path.join(workdir, f"{method}-{regime}-{seed}" if world == "add" else f"{method}-{world}-{regime}-{seed}")
    set_seed(seed)
    if method == "grpo":
        trainer = EntropyGRPOTrainer(
            model=model,
            reward_funcs=toy_reward,
            args=toy_args(EntropyGRPOConfig, out, steps, seed, world, rollout_entropy=True, **overrides),
            train_dataset=target,
            processing_class=tokenizer,
        )
    else:
        if spec["general"] is None:
            raise ValueError(f"{method} needs a general domain; the {world} world has none.")
        if method == "hybrid":
            general = general_pool(world).shuffle(seed=seed).select(range(n_general))
        else:
            if seed not in selected:
                selected[seed] = select_general(seed, n_general, workdir, world)
            general = selected[seed]
        trainer = HEALTrainer(
            model=model,
            reward_funcs=toy_reward,
            args=toy_args(
                HEALConfig, out, steps, seed, world, eda_weight=0.0 if method == "hybrid" else 1.0, **overrides
            ),
            train_dataset=target,
            general_dataset=general,
            processing_class=tokenizer,
        )
    trainer.remove_callback(PrinterCallback)  # the study's tables are the output
    return trainer, tokenizer


def make_trainer(method: str, regime: str, seed: int, steps: int, workdir: str, task: str = "add",
                 user: dict | None = None):  # fmt: skip
    """The trainer and tokenizer of one run (see METHODS) on the target family `task` (see TASKS); `user`: the
    description of a user's trainer (`methods.user_method`) when `method` is its key."""
    from transformers import PrinterCallback, set_seed

    from healtrl.toy import load_toy_model
    from healtrl.toy.tasks import toy_reward
    from healtrl.trainers import OPEFOConfig, OPEFOTrainer

    from ..utils.filelock import file_lock
    from .world import select_general, target_data, toy_args

    if user is not None:
        if method != user["key"]:
            raise ValueError(f"run of {method!r} given the trainer of {user['key']!r}")
        source, runs_key = "user", None
    else:
        source, runs_key = METHODS[method][2], METHODS[method][3]
    world = WORLDS[task]
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
                selected[seed] = select_general(seed, 4 * world["regimes"]["few_shot"], workdir, task)
        trainer, tokenizer = make_heal_family_trainer(method, regime, seed, steps, workdir, selected, task, **extra)
        if method == "grpo" and not trainer.args.rollout_entropy:
            raise RuntimeError("the grpo run no longer logs rollout entropies; the study needs them.")
        return trainer, tokenizer
    if source == "opefo":
        trainer_cls, config_cls, overrides = OPEFOTrainer, OPEFOConfig, dict(OPEFO_VARIANTS[method])
    elif source == "user":
        trainer_cls = methods.load_trainer_class(user["trainer"])
        config_cls, overrides = trainer_cls.config_class, dict(user["fields"])
    else:
        trainer_cls, config_cls, overrides, _ = methods.trainer_runs()[runs_key]
    model, tokenizer = load_toy_model(TASKS[task][0])
    out = os.path.join(workdir, f"{method}-{task}-{regime}-{seed}")
    set_seed(seed)
    if not hasattr(config_cls, "entropy_flow_diagnostics"):
        extra.pop("entropy_flow_diagnostics")
    args = toy_args(config_cls, out, steps, seed, task, rollout_entropy=True, **{**overrides, **extra})
    trainer = trainer_cls(
        model=model,
        reward_funcs=toy_reward,
        args=args,
        train_dataset=target_data(regime_size(task, regime), seed, repeat=True, family=task),  # as grpo's
        processing_class=tokenizer,
    )
    trainer.remove_callback(PrinterCallback)
    return trainer, tokenizer


# ---------------------------------------------------------------------------------------------------------------------
# One run and its record
# ---------------------------------------------------------------------------------------------------------------------
def run_one(method: str, regime: str, seed: int, steps: int, output_dir: str, work_dir: str, task: str = "add",
            user: dict | None = None) -> dict:  # fmt: skip
    """Train one run, evaluate it on the held-out problems and write its JSON into the cache (atomically).

    Args:
        method: A key of METHODS (or the key of `user`).
        regime: A key of REGIMES.
        seed: Seed of the data subset and the trainer.
        steps: Optimizer steps.
        output_dir: Study output folder (the cache is its `toy_study_runs/`).
        work_dir: Scratch folder: trainer outputs, the general pool and the HEAL selection of each seed.
        task: Target family, a key of TASKS.
        user: A user's trainer (`methods.user_method`), when `method` is its key; kept in the record.

    Returns:
        The run record (also written to `run_path(...)`).
    """
    import torch

    from .world import held_out_pass_at

    torch.set_num_threads(1)
    runs_dir = os.path.join(output_dir, RUNS_SUBDIR)
    os.makedirs(runs_dir, exist_ok=True)
    os.makedirs(work_dir, exist_ok=True)
    start, cpu_start = time.perf_counter(), time.process_time()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        trainer, tokenizer = make_trainer(method, regime, seed, steps, work_dir, task, user)
        t_train = time.perf_counter()
        trainer.train()
        train_seconds = time.perf_counter() - t_train
        t_eval = time.perf_counter()
        pass_at = held_out_pass_at(trainer.model, tokenizer, seed, K, family=task)
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
    if user is not None:
        record["user"] = {"trainer": user["trainer"], "fields": user["fields"]}
    path = run_path(runs_dir, method, regime, seed, steps, task)
    tmp = f"{path}.tmp-{os.getpid()}"
    with open(tmp, "w") as f:
        json.dump(record, f, default=str)
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


# ---------------------------------------------------------------------------------------------------------------------
# The pool
# ---------------------------------------------------------------------------------------------------------------------
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


def train_missing(tasks: Sequence[tuple], jobs: int, done: Callable[[tuple, dict | None, str | None], None]) -> None:
    """Train `tasks` (each `run_one`'s arguments as a tuple): in this process when `jobs` is 1 or there is at most
    one task, else in a pool of `jobs` spawned processes (one torch thread each). `done(task, record, error)` is
    called in this process as each run ends: `record` its record and `error` None, or `record` None and `error` the
    traceback of the exception that ended it."""
    if jobs == 1 or len(tasks) <= 1:
        with _in_process():
            for task in tasks:
                done(*_worker(task))
        return
    os.environ.setdefault("OMP_NUM_THREADS", "1")  # inherited by the spawned workers
    context = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=context, initializer=_init_worker) as pool:
        for future in concurrent.futures.as_completed([pool.submit(_worker, t) for t in tasks]):
            done(*future.result())
