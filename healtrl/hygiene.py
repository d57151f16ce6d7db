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

Two rows are **the same question** (refused) when their normalised **question stems** are equal (`stem_key`): the
normalised text with the options of a multiple-choice prompt cut off (everything from "Answer Choices:" on). The same
question with 4 and with 5 options, or with its options reordered, is one question (issue #27: the Hub copy of
MedBullets appears to hold a 4-option and a 5-option version of each of its questions). Identical prompts have equal
stems, so the stem comparison includes the exact one.

Rows that are **near-duplicates** (warned about, not refused) have stems whose character 5-gram sets (`NGRAM`) have a
Jaccard similarity of at least `NEAR_DUPLICATE_THRESHOLD` (0.9), among stems of at least `NEAR_DUPLICATE_MIN_CHARS`
(40) characters: the same question with a typo fixed, a word changed or punctuation edited. They are a warning because
templated problems ("... divided by 7" / "... divided by 9") are similar by construction and are different questions;
read the examples the warning quotes. The candidates are found exactly (prefix filtering: a pair at the threshold
shares at least one of the rarest `|A| - ceil(t |A|) + 1` 5-grams of the evaluation stem), so every pair above the
threshold is found. A paraphrase is not.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field

from healtrl.tasks.keys import (  # noqa: F401  (public here too)
    DAPO_PREFIX,
    DAPO_SUFFIX,
    INSTRUCTION_TEXTS,
    instruction_texts,
    normalise_prompt,
    prompt_key,
    question_stem,
    stem_key,
)

__all__ = [
    "INSTRUCTION_TEXTS",
    "NEAR_DUPLICATE_THRESHOLD",
    "EvalOverlapError",
    "NearDuplicates",
    "Overlap",
    "check_no_eval_overlap",
    "find_near_duplicates",
    "find_overlaps",
    "normalise_prompt",
    "prompt_key",
    "prompt_keys",
    "question_stem",
    "stem_key",
]

_EXAMPLES = 3  # overlapping prompts quoted in an error message
NGRAM = 5
"""Character n-gram length of the near-duplicate similarity."""
NEAR_DUPLICATE_THRESHOLD = 0.9
"""Jaccard similarity of two stems' character 5-gram sets at or above which they are near-duplicates."""
NEAR_DUPLICATE_MIN_CHARS = 40
"""Stems shorter than this are not compared for near-duplicates (short texts are similar by chance)."""


class EvalOverlapError(ValueError):
    """Evaluation rows appear in the training data; the message names the task, the split and the count."""


def _prompts(dataset, column: str = "prompt") -> list:
    if hasattr(dataset, "column_names"):
        if column not in dataset.column_names:
            raise ValueError(
                f"The dataset has no '{column}' column to compare (columns: {', '.join(dataset.column_names)})."
            )
        return list(dataset[column])
    return [row[column] for row in dataset]


def prompt_keys(dataset, column: str = "prompt", key=prompt_key) -> list[str]:
    """`key` (default `prompt_key`; `stem_key` compares question stems) of every row of `dataset` (anything with
    `column_names` and column access, or a list of rows)."""
    instructions = instruction_texts()
    return [key(p, instructions) for p in _prompts(dataset, column)]


@dataclass
class Overlap:
    """Rows of one evaluation set that appear in the training data.

    Attributes:
        name: The evaluation task (or dataset) name.
        split: Its split.
        count: Evaluation rows whose question stem is also a training question stem.
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


def _as_list(train_datasets) -> list:
    if hasattr(train_datasets, "column_names") or not isinstance(train_datasets, Iterable):
        return [train_datasets]
    return list(train_datasets)


def find_overlaps(train_datasets, eval_sets: Mapping[tuple[str, str], object]) -> list[Overlap]:
    """The evaluation sets (`(name, split) -> dataset`) that share questions (equal `stem_key`) with the training
    data.

    Args:
        train_datasets: A dataset, or several (e.g. HEAL's target and general data), whose `prompt` column is trained
            on.
        eval_sets: `(name, split) -> dataset` of every evaluation set.

    Returns:
        One `Overlap` per evaluation set with at least one overlapping row, in the order of `eval_sets`.
    """
    train_keys: set[str] = set()
    for data in _as_list(train_datasets):
        train_keys.update(prompt_keys(data, key=stem_key))
    out = []
    instructions = instruction_texts()
    for (name, split), data in eval_sets.items():
        keys = prompt_keys(data, key=stem_key)
        hits = [i for i, k in enumerate(keys) if k in train_keys]
        if hits:
            prompts = _prompts(data)
            examples = [_shorten(question_stem(prompts[i], instructions)) for i in hits[:_EXAMPLES]]
            out.append(Overlap(name, split, len(hits), len(keys), examples))
    return out


@dataclass
class NearDuplicates:
    """Rows of one evaluation set whose question stem is a near-duplicate of a training stem (not the same stem).

    Attributes:
        name: The evaluation task (or dataset) name.
        split: Its split.
        count: Evaluation rows with a training stem at Jaccard similarity >= the threshold.
        total: Rows of the evaluation set.
        examples: (similarity, evaluation stem, training stem) of the first few, shortened.
    """

    name: str
    split: str
    count: int
    total: int
    examples: list[tuple[float, str, str]] = field(default_factory=list)

    def describe(self) -> str:
        return f"'{self.name}' split '{self.split}': {self.count} of its {self.total} rows"


def _grams(text: str):
    """The sorted unique ids of the character `NGRAM`-grams of `text` (a 64-bit hash of each gram's code points; a
    text shorter than `NGRAM` is one gram)."""
    import numpy as np

    points = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32).astype(np.uint64)
    n = max(1, len(points) - NGRAM + 1)
    ids = np.zeros(n, dtype=np.uint64)
    with np.errstate(over="ignore"):
        for i in range(min(NGRAM, len(points))):
            ids = ids * np.uint64(1_000_003) + points[i : i + n]
    return np.unique(ids)


def find_near_duplicates(
    train_datasets,
    eval_sets: Mapping[tuple[str, str], object],
    threshold: float = NEAR_DUPLICATE_THRESHOLD,
    min_chars: int = NEAR_DUPLICATE_MIN_CHARS,
) -> list[NearDuplicates]:
    """The evaluation sets holding rows whose question stem has a character 5-gram Jaccard similarity of at least
    `threshold` with a training stem, stems of `min_chars` characters or more, equal stems left out (those are
    `find_overlaps`'s). Exact: every pair at the threshold is found (module docstring)."""
    import math

    import numpy as np

    instructions = instruction_texts()
    stems = {question_stem(p, instructions) for d in _as_list(train_datasets) for p in _prompts(d)}
    train_stems = sorted(t for t in stems if len(t) >= min_chars)
    if not train_stems:
        return []
    train_grams = [_grams(t) for t in train_stems]
    all_grams = np.concatenate(train_grams)
    owners = np.repeat(np.arange(len(train_grams)), [len(g) for g in train_grams])
    order = np.argsort(all_grams, kind="stable")
    all_grams, owners = all_grams[order], owners[order]  # (gram, train row) pairs by gram: the inverted index
    out = []
    for (name, split), data in eval_sets.items():
        prompts = _prompts(data)
        found = []
        for prompt in prompts:
            stem = question_stem(prompt, instructions)
            if len(stem) < min_chars:
                continue
            grams = _grams(stem)
            starts = np.searchsorted(all_grams, grams, side="left")
            ends = np.searchsorted(all_grams, grams, side="right")
            rare = np.argsort(ends - starts, kind="stable")  # the rarest grams in the training stems first
            prefix = len(grams) - math.ceil(threshold * len(grams)) + 1
            candidates = np.unique(
                np.concatenate([owners[starts[k] : ends[k]] for k in rare[:prefix]] or [np.zeros(0, np.int64)])
            )
            best, best_i = 0.0, None
            for i in candidates.tolist():
                if train_stems[i] == stem:
                    continue
                shared = len(np.intersect1d(grams, train_grams[i], assume_unique=True))
                similarity = shared / (len(grams) + len(train_grams[i]) - shared)
                if similarity > best:
                    best, best_i = similarity, i
            if best_i is not None and best >= threshold:
                found.append((round(best, 3), _shorten(stem), _shorten(train_stems[best_i])))
        if found:
            out.append(NearDuplicates(name, split, len(found), len(prompts), found[:_EXAMPLES]))
    return out


def _shorten(text: str, width: int = 80) -> str:
    return text if len(text) <= width else text[: width - 3] + "..."


def near_duplicate_message(near: Sequence[NearDuplicates]) -> str:
    """The warning about near-duplicate evaluation rows: each set's count and the closest pairs quoted."""
    first = near[0].examples[0]
    return (
        f"near-duplicates of training questions in the evaluation data (character {NGRAM}-gram Jaccard >= "
        f"{NEAR_DUPLICATE_THRESHOLD:g} of the question stems, healtrl.hygiene): "
        + "; ".join(n.describe() for n in near)
        + f" (e.g. {first[0]:.2f}: {first[1]!r} vs training {first[2]!r}). Not refused: read the pairs, and drop them "
        "from the training data if they are the same question."
    )


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

    Near-duplicates (`find_near_duplicates`) are warned about, never refused.

    Returns:
        The overlaps found (empty when the data is clean).

    Raises:
        EvalOverlapError: an evaluation row is a training row and `allow` is False.
    """
    overlaps = find_overlaps(train_datasets, eval_sets)
    near = find_near_duplicates(train_datasets, eval_sets)
    if near:
        warnings.warn(near_duplicate_message(near), UserWarning, stacklevel=2)
    if not overlaps:
        return overlaps
    lines = "; ".join(o.describe() for o in overlaps)
    examples = " | ".join(overlaps[0].examples)
    message = (
        f"evaluation rows appear in the training data (normalised question stem, healtrl.hygiene): {lines} are also "
        f"training questions (e.g. {examples!r})."
    )
    if allow:
        warnings.warn(f"{message} Continuing because {override} is set.", stacklevel=2)
        return overlaps
    raise EvalOverlapError(
        f"{message} Evaluate on a split the training data does not draw from (for the Medicine recipes: train on "
        f"`task:medicine` split 'train' and evaluate on its 'test' split), or set `{override}` if this is deliberate."
    )
