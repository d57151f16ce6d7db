"""Verifiable toy tasks, and the exact-match reward that scores them.

Each task family is a finite, enumerable set of problems (`index -> (question, answer)`), tagged with a domain:
"target" families are what RL trains on, "general" families measure whether other skills survive it.

| family    | domain  | question       | answer | problems |
|-----------|---------|----------------|--------|----------|
| "add"     | target  | "3+5="         | "8"    | 100      |
| "mul"     | target  | "3*5="         | "15"   | 100      |
| "compare" | general | "max(3,7)="    | "7"    | 100      |
| "reverse" | general | "rev(abc)="    | "cba"  | 17,576   |

Answers are at most 3 characters, so `max_completion_length=4` (answer + `<|end|>`) fits every family above.

The reasoning world (`healtrl.toy.countdown`) adds two families whose answers are written-out steps (11-24
characters; `max_completion_length=32`):

| family     | domain  | question       | a correct answer         | problems |
|------------|---------|----------------|--------------------------|----------|
| "countdown"| target  | "2,5,11,12>20" | "11+2=13,12-5=7,13+7=20" | 892      |
| "sumchain" | general | "3+5+2"        | "3+5=8,8+2=10"           | 4,000    |

A Countdown problem has several correct answers: its `answer` column holds one, and the reward checks a completion
with the family's `verify` (the steps, their arithmetic, the numbers used, the target), not by exact match.
"""

from __future__ import annotations

import random
import string
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

from datasets import Dataset, DatasetDict, Features, List, Value, concatenate_datasets

from . import countdown


@dataclass(frozen=True)
class TaskFamily:
    """A finite family of verifiable problems.

    Attributes:
        name: Family name, stored in the `task` column.
        domain: "target" or "general", stored in the `domain` column.
        size: Number of distinct problems.
        problem: Maps an index in `range(size)` to `(question, answer)`; `answer` is a correct one.
        verify: `(question, completion text) -> bool` for a family with several correct answers; None scores by
            exact match with `answer`.
    """

    name: str
    domain: str
    size: int
    problem: Callable[[int], tuple[str, str]]
    verify: Callable[[str, str], bool] | None = None


def _add(index: int) -> tuple[str, str]:
    a, b = divmod(index, 10)
    return f"{a}+{b}=", str(a + b)


def _mul(index: int) -> tuple[str, str]:
    a, b = divmod(index, 10)
    return f"{a}*{b}=", str(a * b)


def _compare(index: int) -> tuple[str, str]:
    a, b = divmod(index, 10)
    return f"max({a},{b})=", str(max(a, b))


def _reverse(index: int) -> tuple[str, str]:
    letters = string.ascii_lowercase
    word = letters[index // 676] + letters[index // 26 % 26] + letters[index % 26]
    return f"rev({word})=", word[::-1]


FAMILIES: dict[str, TaskFamily] = {
    family.name: family
    for family in (
        TaskFamily("add", "target", 100, _add),
        TaskFamily("mul", "target", 100, _mul),
        TaskFamily("compare", "general", 100, _compare),
        TaskFamily("reverse", "general", 26**3, _reverse),
        TaskFamily(
            "countdown", "target", countdown.COUNTDOWN_SIZE, countdown.countdown_problem, countdown.verify_countdown
        ),
        TaskFamily("sumchain", "general", countdown.SUMCHAIN_SIZE, countdown.sumchain_problem),
    )
}


def get_family(name: str) -> TaskFamily:
    """Return the registered `TaskFamily` called `name`, or fail listing the known ones."""
    try:
        return FAMILIES[name]
    except KeyError:
        raise ValueError(f"Unknown toy task family {name!r}; choose from {sorted(FAMILIES)}.") from None


def _families(family: str | Sequence[str]) -> list[TaskFamily]:
    names = [family] if isinstance(family, str) else list(family)
    if not names:
        raise ValueError("At least one task family is needed.")
    return [get_family(name) for name in names]


def _rng(name: str, seed: int, purpose: str) -> random.Random:
    # String seeds are hashed with SHA-512 by `random`, so the stream is the same in every process and Python run.
    return random.Random(f"healtrl-toy:{purpose}:{name}:{seed}")


def _draw(pool: Sequence[int], n: int, rng: random.Random) -> list[int]:
    """`n` items of `pool`: distinct while `n <= len(pool)`, then further shuffled passes over the whole pool."""
    indices: list[int] = []
    while len(indices) < n:
        indices += rng.sample(pool, min(len(pool), n - len(indices)))
    return indices


# Explicit so that empty datasets and concatenations of families always share one schema.
FEATURES = Features(
    {
        "prompt": List({"role": Value("string"), "content": Value("string")}),
        "answer": Value("string"),
        "domain": Value("string"),
        "task": Value("string"),
    }
)


def _rows(family: TaskFamily, indices: Sequence[int]) -> Dataset:
    questions, answers = zip(*(family.problem(i) for i in indices)) if indices else ((), ())
    rows = {
        "prompt": [[{"role": "user", "content": question}] for question in questions],
        "answer": list(answers),
        "domain": [family.domain] * len(indices),
        "task": [family.name] * len(indices),
    }
    return Dataset.from_dict(rows, features=FEATURES)


def _split_counts(n: int, parts: int) -> list[int]:
    return [n // parts + (i < n % parts) for i in range(parts)]


def _mix(datasets: list[Dataset], families: list[TaskFamily], seed: int, purpose: str) -> Dataset:
    """Concatenate per-family datasets and shuffle the rows together (a seeded, reproducible order)."""
    if len(datasets) == 1:
        return datasets[0]
    mixed = concatenate_datasets(datasets)
    order = list(range(len(mixed)))
    _rng("+".join(f.name for f in families), seed, purpose).shuffle(order)
    return mixed.select(order)


def make_dataset(family: str | Sequence[str], n: int, seed: int = 0) -> Dataset:
    """Sample `n` problems of one task family, or of a mixture of families.

    Problems are drawn without replacement while `n` does not exceed the family size (so `make_dataset("add", 100)`
    holds every addition exactly once) and then in further shuffled passes over the family, so larger `n` repeats
    problems as evenly as possible. The result depends only on `family`, `n` and `seed`.

    Args:
        family: A family name (see `FAMILIES`), or a list of names: `n` is then split evenly across them and the rows
            are shuffled together.
        n: Number of rows.
        seed: Sampling seed.

    Returns:
        A `datasets.Dataset` with columns `prompt` (a conversation of one user message), `answer` (str), `domain`
        ("target" or "general") and `task` (the family name); its `info.dataset_name` is the name a config uses for it
        (`healtrl-toy/<family>[+<family>...]`), which the model card shows.
    """
    families = _families(family)
    parts = []
    for fam, count in zip(families, _split_counts(n, len(families))):
        parts.append(_rows(fam, _draw(range(fam.size), count, _rng(fam.name, seed, "dataset"))))
    dataset = _mix(parts, families, seed, "dataset")
    dataset.info.dataset_name = "healtrl-toy/" + "+".join(fam.name for fam in families)
    return dataset


def held_out_indices(family: str, n_test: int = 20, seed: int = 0) -> frozenset[int]:
    """The problem indices of `make_split(family, ..., n_test, seed)["test"]` (the task registry's `toy-<family>`
    test split: `n_test=20`, `seed=0`), for keeping other data such as warm-up demonstrations off them."""
    return frozenset(_rng(family, seed, "split").sample(range(get_family(family).size), n_test))


def make_split(family: str | Sequence[str], n_train: int, n_test: int, seed: int = 0) -> DatasetDict:
    """Train and held-out test sets whose problems never overlap.

    The test set holds `n_test` distinct problems. The train set is drawn from the remaining problems, without
    replacement while they last: a family with few problems repeats them. Single-digit addition has only 100
    problems, so `make_split("add", 1000, 20)` gives a test set of 20 additions and a train set that cycles through the
    other 80, each appearing 12 or 13 times.

    Args:
        family: A family name or a list of names (both sizes are then split evenly across the families).
        n_train: Number of training rows.
        n_test: Number of test rows; each family must keep at least one problem for training.
        seed: Sampling seed.

    Returns:
        A `datasets.DatasetDict` with "train" and "test" splits, columns as in `make_dataset`.
    """
    families = _families(family)
    train_parts, test_parts = [], []
    for fam, train_count, test_count in zip(
        families, _split_counts(n_train, len(families)), _split_counts(n_test, len(families))
    ):
        if test_count >= fam.size:
            raise ValueError(
                f"Family {fam.name!r} has {fam.size} problems: a test set of {test_count} leaves none for training."
            )
        rng = _rng(fam.name, seed, "split")
        held_out = rng.sample(range(fam.size), test_count)  # the same draw as `held_out_indices`
        excluded = set(held_out)
        train = _draw([i for i in range(fam.size) if i not in excluded], train_count, rng)
        train_parts.append(_rows(fam, train))
        test_parts.append(_rows(fam, held_out))
    return DatasetDict(train=_mix(train_parts, families, seed, "train"), test=_mix(test_parts, families, seed, "test"))


def completion_text(completion) -> str | None:
    """The text of one completion as TRL passes it to reward functions, or None when it is malformed.

    Accepts a plain string or a conversation (a list of messages, the last assistant message is used; its `content`
    may be a string or a list of `{"type": "text", "text": ...}` blocks).
    """
    if isinstance(completion, str):
        return completion
    if isinstance(completion, Mapping):
        completion = [completion]
    if not isinstance(completion, (list, tuple)):
        return None
    messages = [m for m in completion if isinstance(m, Mapping)]
    assistant = [m for m in messages if m.get("role") == "assistant"] or messages
    if not assistant:
        return None
    content = assistant[-1].get("content")
    if isinstance(content, str):
        return content
    if isinstance(content, (list, tuple)):
        parts = [p.get("text") for p in content if isinstance(p, Mapping) and p.get("type") == "text"]
        if parts and all(isinstance(p, str) for p in parts):
            return "".join(parts)
    return None


def _question(prompt) -> str | None:
    """The question of a toy prompt: the last user message of a conversation, or the text between the user and
    assistant markers of a rendered prompt."""
    if isinstance(prompt, str):
        from .tokenizer import ASSISTANT_TOKEN, USER_TOKEN

        return prompt.rpartition(USER_TOKEN)[2].partition(ASSISTANT_TOKEN)[0]
    if isinstance(prompt, Mapping):
        prompt = [prompt]
    if isinstance(prompt, (list, tuple)):
        users = [m for m in prompt if isinstance(m, Mapping) and m.get("role") == "user"]
        return completion_text([{"role": "assistant", "content": users[-1].get("content")}]) if users else None
    return None


def _score(completion, answer, task=None, prompt=None) -> float:
    try:
        text = completion_text(completion)
        # `task` is a family ("countdown", the toy datasets' column) or a registry task ("toy-countdown", the column of
        # rows loaded through healtrl.tasks): both name the same family and its verifier.
        family = FAMILIES.get(task.removeprefix("toy-")) if isinstance(task, str) else None
        question = _question(prompt) if prompt is not None else None
        if task is None and question is not None and countdown.parse_countdown(question) is not None:
            family = FAMILIES["countdown"]  # a Countdown question without its `task` column is still verified
        if family is not None and family.verify is not None:
            return 1.0 if text is not None and question is not None and family.verify(question, text) else 0.0
        if text is None or answer is None:
            return 0.0
        return 1.0 if text.strip() == str(answer).strip() else 0.0
    except Exception:  # a reward function must never take a training run down
        return 0.0


def toy_reward(prompts=None, completions=None, answer=None, task=None, **kwargs) -> list[float]:
    """Exact-match reward for the toy tasks, usable directly as a TRL reward function.

    Returns 1.0 for each completion whose text, stripped of surrounding whitespace, equals its `answer`, else 0.0; for
    the rows of a family with a `verify` (named by the `task` column, e.g. "countdown"), 1.0 when `verify` accepts the
    completion for the prompt's question, whatever `answer` holds.
    Completions may be strings or conversations (`[{"role": "assistant", "content": ...}]`); anything malformed
    (None, wrong types, missing content) scores 0.0 instead of raising. One function serves every family, since the
    expected output comes from the dataset's `answer` column. TRL logs it as `rewards/toy_reward/mean`.

    Args:
        prompts: The prompts (read only for the rows of a family with a `verify`).
        completions: One completion per sample.
        answer: The expected answers, aligned with `completions` (TRL passes the dataset's `answer` column).
        task: The dataset's `task` column (the family of each row); without it, a Countdown question is still
            recognised and verified, and every other row is scored by exact match.
        **kwargs: Other dataset columns and TRL extras, ignored.

    Returns:
        One float per completion.
    """
    completions = list(completions) if completions is not None else []

    def column(values) -> list:
        try:
            return list(values) if values is not None and not isinstance(values, str) else [values] * len(completions)
        except TypeError:
            return []

    answers, tasks, prompt_list = column(answer), column(task), column(prompts)

    def at(values, i):
        return values[i] if i < len(values) else None

    return [_score(c, at(answers, i), at(tasks, i), at(prompt_list, i)) for i, c in enumerate(completions)]
