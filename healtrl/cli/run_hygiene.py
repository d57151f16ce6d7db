"""The data-hygiene checks of a training run and of a run folder (`healtrl.hygiene` compares the prompts):
`check_training_run` before `train.py` trains, `check_run_folder` before `healtrl eval --model <run folder>`
evaluates. They read a run's config the way the training entry does, so they live with it, in the command line."""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from healtrl.hygiene import EvalOverlapError, Overlap, check_no_eval_overlap, find_overlaps  # noqa: F401


# ----------------------------------------------------------------------------------------------------------------
# What a run trains on, and what it evaluates on
# ----------------------------------------------------------------------------------------------------------------
def training_datasets(resolved, train_dataset=None) -> list:
    """Every dataset the run described by `resolved` trains on: the training data (`train_dataset` when already
    loaded) and the datasets a trainer adds (e.g. HEAL's `general_dataset_name`), loaded as the trainer loads them."""
    from healtrl.data import load_train_dataset

    from .run_data import datasets_to_check

    script_args, trainer_args = resolved.script_args, resolved.trainer_args
    seed = script_args.dataset_seed if script_args.dataset_seed is not None else trainer_args.seed
    out = []
    for role, name, config, split, num_samples in datasets_to_check(resolved):
        if role == "eval":
            continue
        if role == "train":
            if train_dataset is None:
                train_dataset = load_train_dataset(name, config, split=split, num_samples=num_samples, seed=seed)
            out.append(train_dataset)
        else:  # a trainer's own dataset field: loaded with the trainer's seed (HEALTrainer.mix_datasets)
            out.append(load_train_dataset(name, config, split=split, num_samples=num_samples, seed=trainer_args.seed))
    return out


def evaluated_tasks(script_args) -> dict[tuple[str, str], list[str]]:
    """`(task, split) -> the fields that name it` for every task the run is evaluated on, during or after training:
    `eval_tasks` (at `eval_split`), the best-checkpoint rule's `best_checkpoint.tasks` (at its `split`) and the
    benchmarks of `paper_results` (at each task's evaluation split, as `healtrl eval` scores them)."""
    from healtrl.recipes.recipe import parse_best_checkpoint, parse_paper_protocol, parse_paper_results
    from healtrl.tasks import get_task

    out: dict[tuple[str, str], list[str]] = {}
    for task in script_args.eval_tasks:
        out.setdefault((task, script_args.eval_split or get_task(task).split), []).append("eval_tasks")
    rule = parse_best_checkpoint(getattr(script_args, "best_checkpoint", None))
    for task in rule.tasks if rule is not None else []:
        out.setdefault((task, rule.split or get_task(task).split), []).append("best_checkpoint.tasks")
    protocol = parse_paper_protocol(getattr(script_args, "paper_protocol", None))
    for entry in parse_paper_results(getattr(script_args, "paper_results", None), protocol):
        fields = out.setdefault((entry.benchmark, get_task(entry.benchmark).split), [])
        if "paper_results" not in fields:
            fields.append("paper_results")
    return out


def evaluation_sets(resolved, eval_dataset=None, task_paths: Mapping[str, str] | None = None) -> dict:
    """`(name, split) -> dataset` of everything the run is evaluated on: every task of `evaluated_tasks` (eval_tasks,
    best_checkpoint.tasks, paper_results; each split whole) and the trainer's evaluation dataset (when
    `eval_strategy` is not "no")."""
    from healtrl.tasks import load_task

    script_args = resolved.script_args
    out = {}
    for task, split in evaluated_tasks(script_args):
        path = (task_paths or {}).get(task)
        out[(task, split)] = load_task(task, split=split, path=path)
    if eval_dataset is not None:
        name = script_args.eval_dataset_name or script_args.dataset_name
        out[(name, script_args.dataset_test_split)] = eval_dataset
    return out


def check_training_run(resolved, train_dataset=None, eval_dataset=None) -> list[Overlap]:
    """The check `train.py` runs before training: `check_no_eval_overlap` of `training_datasets` against
    `evaluation_sets` (eval_tasks, the recipe's best_checkpoint.tasks and paper_results benchmarks, the evaluation
    dataset), overridden by the script argument `allow_eval_overlap`."""
    script_args = resolved.script_args
    evals = evaluation_sets(resolved, eval_dataset)
    if not evals:
        return []
    return check_no_eval_overlap(
        training_datasets(resolved, train_dataset),
        evals,
        allow=bool(getattr(script_args, "allow_eval_overlap", False)),
    )


def _run_config(model: str) -> str | None:
    """The `config.yaml` of a training run folder (or of the run a `checkpoint-N` folder belongs to)."""
    from .common import CONFIG_FILE

    path = os.path.expanduser(str(model))
    if not os.path.isdir(path):
        return None
    for folder in (path, os.path.dirname(os.path.normpath(path))):
        candidate = os.path.join(folder, CONFIG_FILE)
        if os.path.isfile(candidate):
            return candidate
    return None


def check_run_folder(
    model: str,
    tasks: Sequence[str],
    *,
    split: str | None = None,
    task_paths: Mapping[str, str] | None = None,
    allow: bool = False,
) -> list[Overlap] | None:
    """`healtrl eval --model <run folder>`: refuse evaluation tasks whose rows the run trained on.

    The run's training data is re-loaded from the `config.yaml` that `train.py` writes into its output folder (the
    same names, splits, sizes and seeds). A `--model` without a `config.yaml` (a Hub id, a model folder not written
    by `train.py`) is not checked: returns None.

    Args:
        model: The `--model` of `healtrl eval`: a run folder, a `checkpoint-N` folder inside one, or anything else.
        tasks: The evaluated task names.
        split: `--split` (None: each task's evaluation split).
        task_paths: `--task_path` overrides (task -> local file).
        allow: `--allow_eval_overlap`: warn instead of raising.

    Raises:
        EvalOverlapError: an evaluation row is a training row (and not `allow`).
        ValueError: the run's config or training data cannot be loaded.
    """
    config_path = _run_config(model)
    if config_path is None:
        return None
    from healtrl.tasks import get_task, load_task

    from .config import ConfigError, resolve
    from .dry_run_checks import DryRunReport, environment_adjust

    try:  # settings this machine cannot build (a GPU dtype, vLLM) do not change the data: replaced as in --dry_run
        resolved = resolve(["--config", config_path], adjust=environment_adjust(DryRunReport()))
        train = training_datasets(resolved)
    except (ConfigError, ValueError, OSError, ImportError) as exc:
        raise ValueError(
            f"cannot load the training data of the run '{model}' (from {config_path}) to check that the evaluation "
            f"tasks are not in it: {exc} Pass --allow_eval_overlap to evaluate without the check."
        ) from exc
    evals = {
        (task, split or get_task(task).split): load_task(task, split=split, path=(task_paths or {}).get(task))
        for task in tasks
    }
    return check_no_eval_overlap(train, evals, allow=allow, override="--allow_eval_overlap")
