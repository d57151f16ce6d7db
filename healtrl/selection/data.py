"""The pieces of HEAL's general-domain selection (`healtrl.selection`) that `healtrl select --dry_run` shares with the
run: the output folder's file names, how a pool row becomes a prompt (`PromptBuilder`) and the reward's columns
(`reward_arguments`), the questions scored (`pool_indices`), the reward call (`call_reward`), and the record store
a killed run resumes from (`RecordStore`)."""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import math
import os
import random
import shutil
import string
from collections.abc import Callable, Mapping

from healtrl.selection.config import SelectionError

__all__ = [
    "INDEX_COLUMN",
    "RECORDS_FILE",
    "SCORE_COLUMNS",
    "SELECTED_DIR",
    "SELECTED_JSONL",
    "SETTINGS_FILE",
    "PromptBuilder",
    "RecordStore",
    "call_reward",
    "pool_indices",
    "prompt_hash",
    "render_value",
    "reward_arguments",
]

SETTINGS_FILE = "selection_settings.json"
RECORDS_FILE = "records.jsonl"
SELECTED_DIR = "selected"
SELECTED_JSONL = "selected.jsonl"
SCORE_COLUMNS = ("accuracy", "uncertainty", "diversity", "score")
INDEX_COLUMN = "pool_index"
# Keys of TRL's reward call that are not dataset columns (TRL drops these columns before passing the rest).
_NOT_REWARD_COLUMNS = ("prompt", "completion", "completion_ids")


# ----------------------------------------------------------------------------------------------------------------
# Prompts, the questions scored, the reward's columns
# ----------------------------------------------------------------------------------------------------------------
def render_value(value) -> str:
    """A column value inside a prompt template: multiple-choice options (CommonsenseQA / ARC layout) as lines."""
    if isinstance(value, Mapping) and isinstance(value.get("label"), list) and isinstance(value.get("text"), list):
        return "\n".join(f"{label}. {text}" for label, text in zip(value["label"], value["text"]))
    return str(value)


class PromptBuilder:
    """The prompt of a pool row: a column used as it is (TRL's semantics), or a template over the row's columns."""

    def __init__(self, column_names, prompt_column, question_column, prompt_template, raw_prompt):
        given = [
            f"--{name}"
            for name, value in (
                ("prompt_column", prompt_column),
                ("question_column", question_column),
                ("prompt_template", prompt_template),
            )
            if value is not None
        ]
        if len(given) > 1:
            raise SelectionError(
                f"Give one of --prompt_column (a column used as it is), --question_column (a plain question) or "
                f"--prompt_template (a format string over the row's columns); got {' and '.join(given)}."
            )
        for name, value in (("--prompt_column", prompt_column), ("--question_column", question_column)):
            if value is not None and not value:
                raise SelectionError(f"{name} is empty; name a column of the pool.")
        if prompt_template is not None and not prompt_template.strip():
            raise SelectionError("--prompt_template is empty; write e.g. '{question}'.")
        found = ", ".join(column_names)
        self.raw = raw_prompt
        if prompt_template is None and question_column is None:
            prompt_column = prompt_column or "prompt"
            if prompt_column not in column_names:
                raise SelectionError(
                    f"The pool has no prompt column '{prompt_column}'. Columns found: {found}. Set --prompt_column "
                    "(a conversation or a text used as it is), or --question_column (a plain question, wrapped as "
                    "one user message), or --prompt_template (e.g. '{question}\\n\\n{choices}')."
                )
            if raw_prompt:
                raise SelectionError(
                    "--raw_prompt applies to prompts built from --question_column or --prompt_template; a "
                    "--prompt_column is used as it is (a string without a chat template, a conversation with one)."
                )
            self.column, self.template, self.fields = prompt_column, None, ()
            return
        if prompt_template is None:
            prompt_template = "{" + question_column + "}"
        try:
            fields = {f for _, f, _, _ in string.Formatter().parse(prompt_template) if f is not None}
        except ValueError as exc:
            raise SelectionError(
                f"--prompt_template {prompt_template!r} is not a valid format string ({exc}); write literal braces "
                "as {{ and }} (e.g. \\\\boxed{{}})."
            ) from None
        bad = sorted(f for f in fields if f == "" or not f.isidentifier())
        if bad:
            raise SelectionError(
                f"--prompt_template {prompt_template!r} has fields {bad} that are not column names; name columns as "
                "{column}, write literal braces as {{ and }}."
            )
        missing = sorted(fields - set(column_names))
        if missing:
            what = "--question_column" if question_column else "--prompt_template"
            raise SelectionError(f"{what} names the column(s) {missing}, which the pool lacks. Columns found: {found}.")
        self.column, self.template, self.fields = None, prompt_template, tuple(sorted(fields))

    def __call__(self, row: Mapping):
        if self.column is not None:
            return row[self.column]
        text = self.template.format(**{f: render_value(row[f]) for f in self.fields})
        return text if self.raw else [{"role": "user", "content": text}]


def prompt_hash(prompt) -> str:
    return hashlib.sha256(json.dumps(prompt, sort_keys=True, default=str).encode()).hexdigest()[:16]


def pool_indices(size: int, max_questions: int | None, seed: int) -> list[int]:
    """The questions scored: all rows, or `max_questions` of them drawn with `seed` (in row order)."""
    if max_questions is None or max_questions >= size:
        return list(range(size))
    return sorted(random.Random(f"healtrl-select:{seed}").sample(range(size), max_questions))


def reward_arguments(pool, reward: str, answer_column: str | None):
    """(reward function, {name the reward reads: pool column}) with the columns checked."""
    from healtrl.data import get_reward_func, reward_columns

    try:
        func = get_reward_func(reward)
        reads = list(reward_columns([reward])[reward])
    except ValueError as exc:
        raise SelectionError(f"--reward: {exc}") from None
    found = pool.column_names
    mapping = {c: c for c in found if c not in _NOT_REWARD_COLUMNS}
    if answer_column is not None:
        if answer_column not in found:
            raise SelectionError(
                f"The pool has no answer column '{answer_column}' (--answer_column). Columns found: {', '.join(found)}."
            )
        if answer_column not in reads:
            if len(reads) != 1:
                raise SelectionError(
                    f"The reward '{reward}' reads the columns {reads or 'none'}, so --answer_column '{answer_column}' "
                    "cannot be passed to it under a single name. Rename the pool's columns instead (or drop "
                    "--answer_column)."
                )
            mapping[reads[0]] = answer_column
    missing = [c for c in reads if c not in mapping]
    if missing:
        raise SelectionError(
            f"The reward '{reward}' reads the column(s) {missing}, which the pool lacks. Columns found: "
            f"{', '.join(found)}. Point --answer_column at the column holding the verifiable answer."
        )
    return func, mapping


# ----------------------------------------------------------------------------------------------------------------
# Rewards
# ----------------------------------------------------------------------------------------------------------------
def call_reward(func: Callable, prompts, completions, completion_ids, columns: dict[str, list]) -> list[float]:
    """Call `func` the way TRL's GRPOTrainer calls reward functions; None (not applicable) becomes NaN."""
    result = func(
        prompts=prompts,
        completions=completions,
        completion_ids=completion_ids,
        trainer_state=None,  # no training run here
        log_extra=lambda *args, **kwargs: None,
        log_metric=lambda *args, **kwargs: None,
        **columns,
    )
    if inspect.isawaitable(result):
        result = asyncio.run(result)
    result = list(result)
    if len(result) != len(completions):
        raise SelectionError(f"The reward function returned {len(result)} rewards for {len(completions)} completions.")
    return [math.nan if r is None else float(r) for r in result]


# ----------------------------------------------------------------------------------------------------------------
# Records (resume)
# ----------------------------------------------------------------------------------------------------------------
class RecordStore:
    """`records.jsonl` under the output folder, guarded by the settings fingerprint in `selection_settings.json`."""

    def __init__(self, output_dir: str, settings: dict, overwrite: bool):
        self.dir = output_dir
        self.records_path = os.path.join(output_dir, RECORDS_FILE)
        self.settings_path = os.path.join(output_dir, SETTINGS_FILE)
        self.fingerprint = hashlib.sha256(json.dumps(settings, sort_keys=True).encode()).hexdigest()[:16]
        os.makedirs(output_dir, exist_ok=True)
        if overwrite:
            for name in (SETTINGS_FILE, RECORDS_FILE, SELECTED_JSONL):
                path = os.path.join(output_dir, name)
                if os.path.exists(path):
                    os.remove(path)
            shutil.rmtree(os.path.join(output_dir, SELECTED_DIR), ignore_errors=True)
        if os.path.exists(self.settings_path):
            with open(self.settings_path) as f:
                previous = json.load(f)
            if previous.get("fingerprint") != self.fingerprint:
                old = previous.get("settings", {})
                changed = [
                    f"{key}: {old.get(key)!r} -> {settings.get(key)!r}"
                    for key in sorted(set(old) | set(settings))
                    if old.get(key) != settings.get(key)
                ]
                raise SelectionError(
                    f"The output folder '{output_dir}' holds a selection run with other settings "
                    f"({'; '.join(changed) or 'format changed'}). Use a new --output_dir, or pass --overwrite to "
                    "discard its results."
                )
        elif os.path.exists(self.records_path):
            raise SelectionError(
                f"'{self.records_path}' exists without '{SETTINGS_FILE}', so its settings are unknown. Use a new "
                "--output_dir, or pass --overwrite to discard it."
            )
        else:
            # Atomically (temporary file + rename): a run killed here must not leave a torn settings file.
            tmp = f"{self.settings_path}.tmp-{os.getpid()}"
            with open(tmp, "w") as f:
                json.dump({"fingerprint": self.fingerprint, "settings": settings}, f, indent=2, sort_keys=True)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.replace(tmp, self.settings_path)

    def load(self) -> dict[int, dict]:
        """Finished records by question index; a torn last line (interrupted write) is cut off the file."""
        if not os.path.exists(self.records_path):
            return {}
        with open(self.records_path, "rb") as f:
            data = f.read()
        complete = data[: data.rfind(b"\n") + 1]
        if len(complete) != len(data):
            with open(self.records_path, "wb") as f:
                f.write(complete)
        records: dict[int, dict] = {}
        for number, line in enumerate(complete.decode().splitlines(), start=1):
            try:
                record = json.loads(line)
            except ValueError:
                raise SelectionError(
                    f"Line {number} of '{self.records_path}' is not valid JSON. Use a new --output_dir, or --overwrite."
                ) from None
            if record.get("fingerprint") != self.fingerprint:
                raise SelectionError(
                    f"Line {number} of '{self.records_path}' was written with other settings. Use a new --output_dir, "
                    "or --overwrite."
                )
            records.setdefault(int(record["index"]), record)
        return records

    def append(self, records: list[dict]) -> None:
        with open(self.records_path, "a") as f:
            for record in records:
                f.write(json.dumps(record, allow_nan=False) + "\n")
            f.flush()
            os.fsync(f.fileno())
