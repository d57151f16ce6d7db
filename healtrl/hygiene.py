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

import warnings
from collections.abc import Iterable, Mapping
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
