"""Datasets and reward functions for `train.py`, selected by name.

`load_train_dataset(name, ...)` understands four kinds of names:

* task names, `task:<name>` (e.g. `task:gsm8k`, `task:commonsenseqa`, `task:rg/chain_sum`): a task of
  `healtrl.tasks` (prompts in the papers' formats with `answer`, `domain`, `task` and the reward's columns; the reward
  to use is `healtrl.tasks.get_task(name).reward`). Hub ids never contain ":", so the prefix is unambiguous;
* toy names, `healtrl-toy/<family>[+<family>...]` (e.g. `healtrl-toy/add`, `healtrl-toy/add+compare`): generated
  offline by `healtrl.toy` with columns `prompt`, `answer`, `domain`, `task`; the "test" split holds problems that
  never appear in "train";
* local files (`.json`, `.jsonl`, `.parquet`, `.csv`, `.arrow`, `.txt`) and folders (written by
  `Dataset.save_to_disk` / `DatasetDict.save_to_disk`, or holding data files such as `train.jsonl` and `test.jsonl`);
* anything else is a Hub dataset id for `datasets.load_dataset(name, config, split=split)`.

`repeat_rows(dataset, repeats, seed)` fills fixed-size prompt batches from a small set (`train_repeats` in a config):
copies of the rows, each a seeded permutation, read in order; `repeats_to_fill` is the number of copies that fills a
run (`train_repeats: auto`).

Reward functions are registered by name in `REWARD_FUNCS` together with the dataset columns they read (TRL passes
every dataset column to reward functions as a keyword argument), so a missing column is reported before training
starts (`check_columns`). A dotted import path (`my_package.rewards.my_reward`) works as a reward name too.
"""

from __future__ import annotations

import importlib
import inspect
import os
import sys
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from healtrl.utils.datafiles import LOCAL_FILE_BUILDERS, load_local, pick_split  # noqa: F401  (LOCAL_FILE_BUILDERS: public here)

__all__ = [
    "REWARD_FUNCS",
    "TASK_DATASET_PREFIX",
    "TOY_DATASET_PREFIX",
    "RewardSpec",
    "check_columns",
    "get_reward_func",
    "get_reward_funcs",
    "load_train_dataset",
    "register_reward",
    "repeat_rows",
    "repeats_to_fill",
    "reward_columns",
]

TOY_DATASET_PREFIX = "healtrl-toy/"
TASK_DATASET_PREFIX = "task:"
TOY_TRAIN_SIZE = 1000
"""Rows generated for a toy training split when `num_samples` is not given."""
TOY_TEST_SIZE = 20
"""Problems held out per toy family for the "test" split (fixed, so the train split never depends on eval settings)."""


# ----------------------------------------------------------------------------------------------------------------
# Reward registry
# ----------------------------------------------------------------------------------------------------------------
@dataclass(frozen=True)
class RewardSpec:
    """A named reward function.

    Attributes:
        name: The name used in configs (`reward_funcs: [name]`).
        load: Returns the reward callable (imports lazily, so the registry costs nothing until used).
        columns: Dataset columns the reward reads (TRL passes them as keyword arguments); None: read them off the
            function's signature when first needed.
        description: One line for listings and error messages.
    """

    name: str
    load: Callable[[], Callable]
    columns: tuple[str, ...] | None = ()
    description: str = ""


REWARD_FUNCS: dict[str, RewardSpec] = {}
"""Reward name -> `RewardSpec`. Add entries with `register_reward`."""


def register_reward(
    name: str,
    func: Callable | str | None = None,
    *,
    columns: Sequence[str] | None = None,
    description: str = "",
    overwrite: bool = False,
):
    """Register a reward function under `name`.

    `func` is a callable, or a dotted import path imported on first use. `columns` are the dataset columns it reads;
    when omitted they are read off the signature (parameters without defaults other than `prompts`, `completions`,
    `completion_ids`). Usable as a decorator: `@register_reward("mine", columns=["solution"])`.
    """

    def add(target):
        if name in REWARD_FUNCS and not overwrite:
            raise ValueError(f"A reward function is already registered as '{name}'. Pass overwrite=True to replace it.")
        if isinstance(target, str):
            path = target

            def load():
                return _import_dotted(path)

        else:

            def load():
                return target

        if columns is not None:
            cols = tuple(columns)
        else:  # a dotted path is only imported when its columns are first needed
            cols = None if isinstance(target, str) else _signature_columns(target)
        REWARD_FUNCS[name] = RewardSpec(name=name, load=load, columns=cols, description=description)
        return target

    if func is None:
        return add
    return add(func)


_TRL_KWARGS = {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "kwargs"}


def _signature_columns(func: Callable) -> tuple[str, ...]:
    """Dataset columns a reward reads: its required parameters, other than those TRL always passes."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return ()
    return tuple(
        p.name
        for p in params
        if p.name not in _TRL_KWARGS
        and p.default is inspect.Parameter.empty
        and p.kind in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )


def _import_dotted(path: str) -> Callable:
    module_name, _, attr = path.rpartition(".")
    if not module_name:
        raise ValueError(f"'{path}' is not a dotted import path such as `my_package.rewards.my_reward`.")
    if os.getcwd() not in sys.path:  # like TRL's script: let `rewards.my_reward` resolve against the working dir
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"Cannot import the reward function '{path}': {exc}.") from exc
    try:
        func = getattr(module, attr)
    except AttributeError:
        raise ValueError(f"Module '{module_name}' has no attribute '{attr}' (reward function '{path}').") from None
    if not callable(func):
        raise ValueError(f"The reward function '{path}' is a {type(func).__name__}, not a callable.")
    return func


register_reward(
    "toy",
    "healtrl.toy.toy_reward",
    columns=["answer"],
    description="Exact match of the completion against the `answer` column (healtrl.toy).",
)
register_reward(
    "math",
    "healtrl.rewards.math_reward",
    columns=["answer"],
    description="math-verify on the final answer against `answer`, read in each row's `answer_format` column (set by "
    "healtrl's math tasks), else in the boxed format.",
)
register_reward(
    "math_boxed",
    "healtrl.rewards.math_boxed_reward",
    columns=["answer"],
    description="math-verify on every \\boxed{} against `answer` (boxed format for every row).",
)
register_reward(
    "math_answer_line",
    "healtrl.rewards.math_answer_line_reward",
    columns=["answer"],
    description="math-verify on every 'Answer: ...' line (DAPO's format) against `answer`.",
)
register_reward(
    "math_lenient",
    "healtrl.rewards.math_lenient_reward",
    columns=["answer"],
    description="Opt-in lenient math: box, else 'Answer:' line, else 'the answer is', else the last LaTeX span or "
    "number; hedges still score 0.",
)
register_reward(
    "multiple_choice",
    "healtrl.rewards.multiple_choice_reward",
    columns=["answer", "choices"],
    description="Exactly one chosen option (letter or option text) against the letter in `answer`.",
)
register_reward(
    "code",
    "healtrl.rewards.code_reward",
    columns=["tests"],
    description="The completion's program passes every test in `tests`, run in healtrl's sandbox.",
)
register_reward(
    "reasoning_gym",
    "healtrl.rewards.reasoning_gym_reward",
    columns=["rg_entry"],
    description="The reasoning-gym generator's scorer on the final answer (problem named by `rg_entry`).",
)
register_reward(
    "task",
    "healtrl.rewards.task_reward",
    columns=["task"],
    description="Each row scored by the reward of its own task (`task` column): for datasets that mix tasks.",
)
register_reward(
    "accuracy_reward",
    "trl.rewards.accuracy_reward",
    columns=["solution"],
    description="TRL's math-verify accuracy against the `solution` column.",
)
register_reward(
    "reasoning_accuracy_reward",
    "trl.rewards.reasoning_accuracy_reward",
    columns=["solution"],
    description="TRL's accuracy of the text after </think> against the `solution` column.",
)
register_reward(
    "think_format_reward",
    "trl.rewards.think_format_reward",
    columns=[],
    description="TRL's reward for a <think>...</think> block at the start of the completion.",
)


def get_reward_func(name: str) -> Callable:
    """The reward callable registered as `name`, or imported from the dotted path `name`."""
    if name in REWARD_FUNCS:
        return REWARD_FUNCS[name].load()
    if "." in name:
        return _import_dotted(name)
    import difflib

    close = difflib.get_close_matches(name, list(REWARD_FUNCS), n=1)
    hint = f" Did you mean '{close[0]}'?" if close else ""
    raise ValueError(
        f"Unknown reward function '{name}'.{hint} Registered rewards: {', '.join(sorted(REWARD_FUNCS))}; a dotted "
        "import path such as `my_package.rewards.my_reward` works too."
    )


def get_reward_funcs(names: Sequence[str]) -> list[Callable]:
    """`get_reward_func` for each name."""
    return [get_reward_func(name) for name in names]


def reward_columns(names: Sequence[str]) -> dict[str, tuple[str, ...]]:
    """Reward name -> the dataset columns it reads (for dotted paths, read off the function's signature)."""
    out = {}
    for name in names:
        spec = REWARD_FUNCS.get(name)
        if spec is not None and spec.columns is not None:
            out[name] = spec.columns
        else:
            out[name] = _signature_columns(get_reward_func(name))
    return out


_lookup_reward_columns = reward_columns  # `check_columns` has a parameter of the same name


# ----------------------------------------------------------------------------------------------------------------
# Datasets
# ----------------------------------------------------------------------------------------------------------------
def is_toy_dataset(name: str) -> bool:
    return isinstance(name, str) and name.startswith(TOY_DATASET_PREFIX)


def _looks_like_path(name: str) -> bool:
    """Whether a name that does not exist was meant as a local path (Hub ids are `name` or `org/name`)."""
    return (
        name.startswith((".", "/", "~"))
        or name.count("/") > 1
        or os.path.splitext(name)[1].lower() in LOCAL_FILE_BUILDERS
    )


def _subset(dataset, num_samples: int | None, seed: int):
    if num_samples is None or num_samples >= len(dataset):
        return dataset
    if num_samples < 1:
        raise ValueError(f"num_samples must be a positive number of rows, got {num_samples}.")
    return dataset.shuffle(seed=seed).select(range(num_samples))


def _load_toy(name: str, split: str, num_samples: int | None, seed: int):
    spec = name[len(TOY_DATASET_PREFIX) :]
    families = [f for f in spec.split("+") if f]
    if not families:
        raise ValueError(f"Toy dataset name '{name}' names no task family; write e.g. `healtrl-toy/add`.")
    import healtrl.toy as toy

    make_split = getattr(toy, "make_split", None)
    if make_split is None:  # pragma: no cover - depends on what healtrl.toy exports
        from healtrl.toy.tasks import make_split
    if split not in ("train", "test"):
        raise ValueError(f"Toy dataset '{name}' has the splits 'train' and 'test', not '{split}'.")
    n_test = TOY_TEST_SIZE * len(families)
    n_train = num_samples if (split == "train" and num_samples is not None) else TOY_TRAIN_SIZE
    try:
        splits = make_split(families if len(families) > 1 else families[0], n_train, n_test, seed=seed)
    except ValueError as exc:
        raise ValueError(f"Cannot build the toy dataset '{name}': {exc}") from exc
    dataset = splits[split]
    if split == "test":
        dataset = _subset(dataset, num_samples, seed)
    return dataset


def load_train_dataset(
    name: str,
    config: str | None = None,
    split: str = "train",
    num_samples: int | None = None,
    seed: int = 0,
    **load_kwargs,
):
    """Load one split of a dataset named like `dataset_name` in a config.

    Args:
        name: A task name (`task:gsm8k`), a toy name (`healtrl-toy/add`, `healtrl-toy/add+compare`), a local file or
            folder, or a Hub id.
        config: Hub dataset configuration (`name` argument of `datasets.load_dataset`).
        split: Split to return ("train", "test", ...).
        num_samples: Keep a random subset of this many rows (drawn with `seed`). For toy training data, the number
            of rows to generate (default 1000); toy test data holds 20 held-out problems per family.
        seed: Seed of toy generation and of subsetting.
        **load_kwargs: Passed to `datasets.load_dataset` for Hub datasets (e.g. `revision`, `data_files`).

    Returns:
        A `datasets.Dataset`.
    """
    if not isinstance(name, str) or not name:
        raise ValueError("The dataset name is empty. Set `dataset_name` to a toy name, a local path or a Hub id.")
    if name.startswith(TASK_DATASET_PREFIX):
        from healtrl.tasks import load_task

        if config is not None or load_kwargs:
            raise ValueError(
                f"The task dataset '{name}' takes no `dataset_config` or loading arguments; choose the task by name."
            )
        return load_task(name[len(TASK_DATASET_PREFIX) :], split=split, num_samples=num_samples, seed=seed)
    if is_toy_dataset(name):
        return _load_toy(name, split, num_samples, seed)
    path = os.path.expanduser(name)
    if os.path.exists(path):
        dataset = load_local(path, config, split)
    elif _looks_like_path(name):
        raise ValueError(
            f"The dataset path '{name}' does not exist (working directory: {os.getcwd()}). Fix `dataset_name`, or "
            "use a toy name such as `healtrl-toy/add`."
        )
    else:
        import datasets

        try:
            dataset = datasets.load_dataset(name, config, split=split, **load_kwargs)
        except Exception as exc:
            raise ValueError(
                f"Cannot load the dataset '{name}' (config={config!r}, split={split!r}): it is not a toy name "
                f"({TOY_DATASET_PREFIX}<family>), not an existing local file or folder, and loading it from the Hub "
                f"failed with {type(exc).__name__}: {exc}"
            ) from exc
    return _subset(dataset, num_samples, seed)


def check_columns(
    dataset,
    required: Sequence[str] = ("prompt",),
    reward_columns: Mapping[str, Sequence[str]] | Sequence[str] | None = None,
    dataset_name: str | None = None,
) -> None:
    """Fail with a clear `ValueError` when `dataset` lacks a column the trainer or a reward function reads.

    Args:
        dataset: A `datasets.Dataset` (anything with `column_names`).
        required: Columns the trainer itself needs.
        reward_columns: Reward name -> the columns it reads (see `healtrl.data.reward_columns`), or a list of reward
            names to look up.
        dataset_name: Shown in the message.
    """
    if reward_columns is None:
        reward_columns = {}
    elif not isinstance(reward_columns, Mapping):
        reward_columns = _lookup_reward_columns(list(reward_columns))
    found = list(dataset.column_names or [])
    needs: dict[str, list[str]] = {}
    for col in required:
        needs.setdefault(col, []).append("the trainer")
    for reward, cols in reward_columns.items():
        for col in cols:
            needs.setdefault(col, []).append(f"reward '{reward}'")
    missing = [col for col in needs if col not in found]
    if not missing:
        return
    label = f"The dataset '{dataset_name}'" if dataset_name else "The dataset"
    what = "; ".join(f"'{col}' (needed by {', '.join(needs[col])})" for col in missing)
    expected = ", ".join(f"{col} ({', '.join(users)})" for col, users in needs.items())
    raise ValueError(
        f"{label} is missing the column{'s' if len(missing) > 1 else ''} {what}. Columns found: "
        f"{', '.join(found) or 'none'}. Expected columns: {expected}. Rename a column with "
        "`dataset.rename_column(old, new)` (or in the data files), or choose reward functions that fit the data."
    )


# ----------------------------------------------------------------------------------------------------------------
# Filling fixed-size prompt batches from a small set
# ----------------------------------------------------------------------------------------------------------------
def repeat_order(num_rows: int, repeats: int, seed: int) -> list[int]:
    """Row indices of `repeats` copies of `num_rows` rows: copy c is a permutation of every row drawn from
    `(seed, c)` (Python's `random.Random`, stable across Python versions), the copies one after the other."""
    import random

    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 1:
        raise ValueError(f"repeats must be a positive number of copies, got {repeats!r}.")
    order: list[int] = []
    for copy in range(repeats):
        rows = list(range(num_rows))
        random.Random(f"healtrl-repeat:{seed}:{copy}").shuffle(rows)
        order += rows
    return order


def repeat_rows(dataset, repeats: int, seed: int = 0):
    """Fill fixed-size prompt batches from a small training set by repetition, as verl-based few-shot recipes do by
    duplicating the data.

    The result holds `repeats` copies of the rows, each copy a permutation drawn from `(seed, copy)`, concatenated.
    Read in order (TRL's `RepeatSampler` with `shuffle_dataset=False`, which `train.py` sets with `train_repeats`),
    generation batch b holds rows [b * B, (b + 1) * B) of it: with B a multiple of the row count n, every batch holds
    each row exactly B / n times (128-prompt batches from 32 rows: 4 times each); otherwise each row appears
    floor(B / n) or ceil(B / n) times in a batch and exactly `repeats` times over the whole set. The same seed gives
    the same batches; no row is drawn twice before every row is drawn once.

    Args:
        dataset: A `datasets.Dataset`.
        repeats: Number of copies (>= 1).
        seed: Seed of the permutations (`train.py`: `dataset_seed`, else the trainer's `seed`).

    Returns:
        A `datasets.Dataset` of `repeats * len(dataset)` rows (an index mapping over `dataset`; no data is copied).
    """
    if len(dataset) == 0:
        raise ValueError("Cannot repeat an empty dataset.")
    return dataset.select(repeat_order(len(dataset), repeats, seed))


def repeats_to_fill(num_rows: int, max_steps: int, prompts_per_batch: int, steps_per_batch: float) -> int:
    """The copies of `num_rows` rows that fill every generation batch of a run of `max_steps` optimizer steps
    (`train_repeats: auto`).

    Args:
        num_rows: Rows of the training set.
        max_steps: Optimizer steps of the run.
        prompts_per_batch: Distinct prompts per generation batch (`generation_batch_size / num_generations`).
        steps_per_batch: Optimizer steps one generation batch serves (`steps_per_generation * num_iterations /
            gradient_accumulation_steps`).

    Returns:
        ceil(generation batches x prompts_per_batch / num_rows), with generation batches = ceil(max_steps /
        steps_per_batch).
    """
    import math

    if num_rows < 1:
        raise ValueError("Cannot repeat an empty dataset.")
    if max_steps is None or max_steps < 1:
        raise ValueError(
            "train_repeats: auto fills the generation batches of `max_steps` optimizer steps; set `max_steps` (> 0), "
            "or give train_repeats a number of copies."
        )
    batches = math.ceil(max_steps / steps_per_batch)
    return max(1, math.ceil(batches * prompts_per_batch / num_rows))
