"""Helpers shared by the task adapters: loading a source (Hub or local file), column resolution with clear errors,
prompt formats, subsetting."""

from __future__ import annotations

import os
import string
from collections.abc import Callable, Sequence

MATH_INSTRUCTION = "Let's think step by step and output the final answer within \\boxed{}."
"""The math prompt suffix of DeepScaleR / verl's math recipes, used by the AER, OPEFO and HEAL setups."""

MC_INSTRUCTION = "Let's think step by step and output the letter of the correct option within \\boxed{}."
"""The multiple-choice counterpart: the answer is one option letter in \\boxed{}."""

LETTERS = string.ascii_uppercase


def user_prompt(text: str) -> list[dict[str, str]]:
    """A conversation of one user message (TRL's conversational prompt format)."""
    return [{"role": "user", "content": text}]


DAPO_PREFIX = (
    "Solve the following math problem step by step. The last line of your response should be of the form Answer: "
    "$Answer (without quotes) where $Answer is the answer to the problem.\n\n"
)
DAPO_SUFFIX = '\n\nRemember to put your answer on its own line after "Answer:".'
"""DAPO-Math-17k's prompt is `DAPO_PREFIX + problem + DAPO_SUFFIX` (the `answer_line` format, graded on the "Answer:"
line), the training prompt of the PosAdv and OPEFO recipes."""

PROMPT_FORMATS = ("boxed", "answer_line")
"""Prompt formats of math tasks: each asks for the final answer in the answer format of the same name
(`healtrl.rewards.math.ANSWER_FORMATS`)."""


def math_prompt(problem: str, answer_format: str = "boxed") -> list[dict[str, str]]:
    """The math prompt of `problem` in `answer_format`: "boxed" (`problem` followed by `MATH_INSTRUCTION`) or
    "answer_line" (DAPO-Math-17k's template, `DAPO_PREFIX + problem + DAPO_SUFFIX`)."""
    if answer_format == "boxed":
        return user_prompt(f"{problem.strip()} {MATH_INSTRUCTION}")
    if answer_format == "answer_line":
        return user_prompt(f"{DAPO_PREFIX}{problem.strip()}{DAPO_SUFFIX}")
    raise ValueError(f"Unknown math prompt format {answer_format!r}: choose one of {', '.join(PROMPT_FORMATS)}.")


def math_problem(content: str, answer_format: str) -> str | None:
    """The problem of a math prompt's text written in `answer_format` (the inverse of `math_prompt`), or None when
    the text is not in that format."""
    if answer_format == "boxed" and content.endswith(MATH_INSTRUCTION):
        return content[: -len(MATH_INSTRUCTION)].strip()
    if answer_format == "answer_line" and content.startswith(DAPO_PREFIX) and content.endswith(DAPO_SUFFIX):
        return content[len(DAPO_PREFIX) : -len(DAPO_SUFFIX)].strip()
    return None


def restyle_math_prompt(prompt, source: str, target: str, task: str) -> list[dict[str, str]]:
    """A math prompt (a conversation of one user message) rewritten from the `source` format to `target`.

    Raises:
        ValueError: the prompt is not a one-message conversation in the `source` format.
    """
    if source == target:
        return prompt
    content = prompt[-1].get("content") if isinstance(prompt, list) and prompt else None
    problem = math_problem(content, source) if isinstance(content, str) else None
    if not problem or len(prompt) != 1:
        raise ValueError(
            f"Task '{task}': cannot rewrite a prompt from the {source} format to {target}: it is not a single user "
            f"message in the {source} format (text: {str(content)[:80]!r}). Load the task without the "
            f"'@{target}' suffix."
        )
    return math_prompt(problem, target)


def format_options(options: Sequence[str]) -> str:
    """ "(A) first\\n(B) second..." for the option texts in letter order."""
    return "\n".join(f"({LETTERS[k]}) {str(option).strip()}" for k, option in enumerate(options))


def mc_prompt(question: str, options: Sequence[str] | None, options_in_question: bool = False) -> list[dict[str, str]]:
    """A multiple-choice prompt: the question, its lettered options (unless the question already lists them), and
    `MC_INSTRUCTION`."""
    text = question.strip()
    if not options_in_question:
        text += "\n\nAnswer Choices:\n" + format_options(options)
    return user_prompt(f"{text}\n\n{MC_INSTRUCTION}")


def subset(dataset, num_samples: int | None, seed: int):
    """A reproducible random subset of `num_samples` rows (all rows when None or when there are fewer)."""
    if num_samples is None or num_samples >= len(dataset):
        return dataset
    return dataset.shuffle(seed=seed).select(range(num_samples))


def load_source(spec, split: str, path: str | None, config: str | None = None, data_files=None):
    """The raw rows of a task: a local file or folder (`path`, in the Hub dataset's format) or the Hub dataset.

    Args:
        spec: The task's `TaskSpec`.
        split: Split to load (a local single file is a single split and ignores it).
        path: A local file (.json, .jsonl, .parquet, .csv, .arrow) or folder, or None for the Hub.
        config: Hub configuration (default: `spec.config`).
        data_files: Hub data files instead of a configuration (paths relative to the dataset repository).

    Returns:
        A `datasets.Dataset`.
    """
    if path is not None:
        from healtrl.utils.datafiles import load_local

        expanded = os.path.expanduser(str(path))
        if not os.path.exists(expanded):
            raise ValueError(f"Task '{spec.name}': the local dataset path '{path}' does not exist.")
        return load_local(expanded, config or spec.config, split)
    if spec.hub_id is None:
        raise ValueError(f"Task '{spec.name}' has no Hub dataset; it takes no `path` other than its own sources.")
    import datasets

    try:
        if data_files is not None:
            files = [f"hf://datasets/{spec.hub_id}/{name}" for name in data_files]
            return datasets.load_dataset("json", data_files=files, split="train")
        return datasets.load_dataset(spec.hub_id, config or spec.config, split=split)
    except Exception as exc:
        raise ValueError(
            f"Task '{spec.name}': cannot load the Hub dataset '{spec.hub_id}' (config={config or spec.config!r}, "
            f"split={split!r}): {type(exc).__name__}: {exc}. Without the Hub, pass `path=` to a local copy in the "
            "same format."
        ) from exc


def resolve_column(
    dataset, candidates: Sequence[str], override: str | None, role: str, task: str, argument: str
) -> str:
    """The column holding `role` (e.g. "question"): `override` if given, else the first of `candidates` present.

    Raises:
        ValueError: the column is missing; the message names the columns found, the columns expected and the fix.
    """
    found = list(dataset.column_names)
    wanted = [override] if override else list(candidates)
    for name in wanted:
        if name in found:
            return name
    expected = f"'{override}' (from `{argument}=`)" if override else " or ".join(f"'{c}'" for c in candidates)
    raise ValueError(
        f"Task '{task}': the dataset has no {role} column. Columns found: {', '.join(found) or 'none'}. Expected: "
        f"{expected}. Rename the column, or name it with `load_task('{task}', {argument}='<column>')`."
    )


def require_columns(dataset, columns: Sequence[str], task: str) -> None:
    """Fail naming the columns found and expected when any of `columns` is missing."""
    missing = [c for c in columns if c not in dataset.column_names]
    if missing:
        raise ValueError(
            f"Task '{task}': the dataset lacks the column{'s' if len(missing) > 1 else ''} {', '.join(missing)}. "
            f"Columns found: {', '.join(dataset.column_names) or 'none'}. Expected: {', '.join(columns)}. Load a file "
            "in the same format as the task's Hub dataset."
        )


def build(dataset, row: Callable[[dict], dict | None], task: str, extra_features: dict | None = None):
    """Map raw rows to task rows with `row(example) -> {"prompt", "answer", ...}` (None drops the row).

    Raises:
        ValueError: no row is left.
    """
    import datasets

    records = []
    for example in dataset:
        mapped = row(example)
        if mapped is not None:
            records.append(mapped)
    if not records:
        raise ValueError(f"Task '{task}': no usable row in the dataset ({len(dataset)} rows read).")
    features = {
        "prompt": datasets.List({"role": datasets.Value("string"), "content": datasets.Value("string")}),
        "answer": datasets.Value("string"),
        **(extra_features or {}),
    }
    for key in records[0]:
        features.setdefault(key, datasets.Value("string"))
    columns = {key: [record.get(key) for record in records] for key in features}
    return datasets.Dataset.from_dict(columns, features=datasets.Features(features))


def reject_column_mapping(spec, question_column, answer_column, why: str = "") -> None:
    """Tasks whose source format is fixed take no `question_column` / `answer_column`; `why` ends the message."""
    if question_column or answer_column:
        raise ValueError(f"Task '{spec.name}' takes no column mapping{why}.")


def require_test_split(spec, split: str) -> None:
    """Tasks whose source has one split, 'test'."""
    if split != "test":
        raise ValueError(f"Task '{spec.name}' has one split, 'test'; got '{split}'.")
