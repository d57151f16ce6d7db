"""Data hygiene: no evaluation row may appear in the training data.

`train.py` (every run, and its `--dry_run`) and `healtrl eval --model <run folder>` compare the prompts of the
evaluation data with the prompts of the training data and refuse, naming the task, the split and the number of
overlapping rows, when any evaluation prompt is also a training prompt. `allow_eval_overlap: true` (train.py) or
`--allow_eval_overlap` (healtrl eval) turns the refusal into a warning, for deliberate cases (e.g. measuring
memorisation).

How two prompts are compared (`prompt_key`):

* a conversation (TRL's conversational format, a list of `{"role", "content"}` messages) is reduced to the contents of
  its **user** messages, joined by newlines; system messages (a shared instruction, not the question) and assistant
  messages are left out. A plain string prompt is used as it is;
* the instruction texts that healtrl's task adapters wrap around a question (`INSTRUCTION_TEXTS`: the boxed-answer
  instructions of math and multiple choice, DAPO's "Answer:" wrapper) are removed, so the same question asked with a
  training prompt and with an evaluation prompt still matches;
* the text is Unicode-normalised (NFKC), lower-cased and every run of whitespace becomes one space;
* the key is the first 16 hex digits of the SHA-256 of that text.

The comparison is exact after normalisation: a paraphrase, or the same question with different option order, is not
found. It is a guard against splits that share rows (a few-shot set drawn from a benchmark's test split), not a
near-duplicate search.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from healtrl.tasks._keys import (  # noqa: F401  (public here too)
    DAPO_PREFIX,
    DAPO_SUFFIX,
    INSTRUCTION_TEXTS,
    _instruction_texts,
    normalise_prompt,
    prompt_key,
)

__all__ = [
    "INSTRUCTION_TEXTS",
    "EvalOverlapError",
    "Overlap",
    "check_no_eval_overlap",
    "check_run_folder",
    "find_overlaps",
    "normalise_prompt",
    "prompt_key",
    "prompt_keys",
]

_EXAMPLES = 3  # overlapping prompts quoted in an error message


class EvalOverlapError(ValueError):
    """Evaluation rows appear in the training data; the message names the task, the split and the count."""


def prompt_keys(dataset, column: str = "prompt") -> list[str]:
    """`prompt_key` of every row of `dataset` (anything with `column_names` and column access, or a list of rows)."""
    instructions = _instruction_texts()
    if hasattr(dataset, "column_names"):
        if column not in dataset.column_names:
            raise ValueError(
                f"The dataset has no '{column}' column to compare (columns: {', '.join(dataset.column_names)})."
            )
        prompts = dataset[column]
    else:
        prompts = [row[column] for row in dataset]
    return [prompt_key(p, instructions) for p in prompts]


@dataclass
class Overlap:
    """Rows of one evaluation set that appear in the training data.

    Attributes:
        name: The evaluation task (or dataset) name.
        split: Its split.
        count: Evaluation rows whose prompt is also a training prompt.
        total: Rows of the evaluation set.
        examples: The first few overlapping prompts, normalised and shortened.
    """

    name: str
    split: str
    count: int
    total: int
    examples: list[str] = field(default_factory=list)

    def describe(self) -> str:
        return f"'{self.name}' split '{self.split}': {self.count} of its {self.total} rows"


def find_overlaps(train_datasets, eval_sets: Mapping[tuple[str, str], object]) -> list[Overlap]:
    """The evaluation sets (`(name, split) -> dataset`) that share prompts with the training data.

    Args:
        train_datasets: A dataset, or several (e.g. HEAL's target and general data), whose `prompt` column is trained
            on.
        eval_sets: `(name, split) -> dataset` of every evaluation set.

    Returns:
        One `Overlap` per evaluation set with at least one overlapping row, in the order of `eval_sets`.
    """
    if hasattr(train_datasets, "column_names") or not isinstance(train_datasets, Iterable):
        train_datasets = [train_datasets]
    train_keys: set[str] = set()
    for data in train_datasets:
        train_keys.update(prompt_keys(data))
    out = []
    instructions = _instruction_texts()
    for (name, split), data in eval_sets.items():
        keys = prompt_keys(data)
        hits = [i for i, k in enumerate(keys) if k in train_keys]
        if hits:
            prompts = data["prompt"] if hasattr(data, "column_names") else [row["prompt"] for row in data]
            examples = [_shorten(normalise_prompt(prompts[i], instructions)) for i in hits[:_EXAMPLES]]
            out.append(Overlap(name, split, len(hits), len(keys), examples))
    return out


def _shorten(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def check_no_eval_overlap(
    train_datasets,
    eval_sets: Mapping[tuple[str, str], object],
    *,
    allow: bool = False,
    override: str = "allow_eval_overlap: true",
) -> list[Overlap]:
    """Refuse training data that holds evaluation rows.

    Args:
        train_datasets: The training dataset(s) (see `find_overlaps`).
        eval_sets: `(name, split) -> dataset` of every evaluation set.
        allow: Warn instead of raising (the explicit override).
        override: How the user sets the override, quoted in the message.

    Returns:
        The overlaps found (empty when the data is clean).

    Raises:
        EvalOverlapError: an evaluation row is a training row and `allow` is False.
    """
    overlaps = find_overlaps(train_datasets, eval_sets)
    if not overlaps:
        return overlaps
    lines = "; ".join(o.describe() for o in overlaps)
    examples = " | ".join(overlaps[0].examples)
    message = (
        f"evaluation rows appear in the training data (normalised prompt hash, healtrl.hygiene): {lines} are also "
        f"training prompts (e.g. {examples!r})."
    )
    if allow:
        warnings.warn(f"{message} Continuing because {override} is set.", stacklevel=2)
        return overlaps
    raise EvalOverlapError(
        f"{message} Evaluate on a split the training data does not draw from (for the Medicine recipes: train on "
        f"`task:medicine` split 'train' and evaluate on its 'test' split), or set `{override}` if this is deliberate."
    )


# ----------------------------------------------------------------------------------------------------------------
# What a run trains on, and what it evaluates on
# ----------------------------------------------------------------------------------------------------------------
def training_datasets(resolved, train_dataset=None) -> list:
    """Every dataset the run described by `resolved` trains on: the training data (`train_dataset` when already
    loaded) and the datasets a trainer adds (e.g. HEAL's `general_dataset_name`), loaded as the trainer loads them."""
    from healtrl.cli import _datasets_to_check
    from healtrl.data import load_train_dataset

    script_args, trainer_args = resolved.script_args, resolved.trainer_args
    seed = script_args.dataset_seed if script_args.dataset_seed is not None else trainer_args.seed
    out = []
    for role, name, config, split, num_samples in _datasets_to_check(resolved):
        if role == "eval":
            continue
        if role == "train":
            if train_dataset is None:
                train_dataset = load_train_dataset(name, config, split=split, num_samples=num_samples, seed=seed)
            out.append(train_dataset)
        else:  # a trainer's own dataset field: loaded with the trainer's seed (HEALTrainer.mix_datasets)
            out.append(load_train_dataset(name, config, split=split, num_samples=num_samples, seed=trainer_args.seed))
    return out


def evaluation_sets(resolved, eval_dataset=None, task_paths: Mapping[str, str] | None = None) -> dict:
    """`(name, split) -> dataset` of everything the run evaluates on: each of `eval_tasks` (its `eval_split`, whole)
    and the trainer's evaluation dataset (when `eval_strategy` is not "no")."""
    from healtrl.tasks import get_task, load_task

    script_args = resolved.script_args
    out = {}
    for task in script_args.eval_tasks:
        split = script_args.eval_split or get_task(task).split
        path = (task_paths or {}).get(task)
        out[(task, split)] = load_task(task, split=script_args.eval_split, path=path)
    if eval_dataset is not None:
        name = script_args.eval_dataset_name or script_args.dataset_name
        out[(name, script_args.dataset_test_split)] = eval_dataset
    return out


def check_training_run(resolved, train_dataset=None, eval_dataset=None) -> list[Overlap]:
    """The check `train.py` runs before training: `check_no_eval_overlap` of `training_datasets` against
    `evaluation_sets`, overridden by the script argument `allow_eval_overlap`."""
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
    from healtrl.cli import CONFIG_FILE

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
    from healtrl.cli import _DryRun, _environment_adjust
    from healtrl.config import ConfigError, resolve
    from healtrl.tasks import get_task, load_task

    try:  # settings this machine cannot build (a GPU dtype, vLLM) do not change the data: replaced as in --dry_run
        resolved = resolve(["--config", config_path], adjust=_environment_adjust(_DryRun()))
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
