"""Paper recipes as data: the best-checkpoint rule and the paper's reported numbers of a training config.

A paper config (`configs/<paper>_*.yaml`) states, next to its training settings, how the paper picked the checkpoint it
reports and what the paper reported. Three fields of `healtrl.cli.script_args.ScriptArguments` hold them; `train.py` copies
them into the run's `config.yaml`, where `healtrl eval` reads them:

```yaml
best_checkpoint:                 # healtrl eval --checkpoints <run dir>
  tasks: [aime25]                # validation tasks (healtrl.tasks names)
  metric: pass@1                 # avg@k | pass@k | pass@<j> | avg@<k>
  k: 32                          # samples per problem: an int, or {task: int} per task
  reduce: mean                   # score of a checkpoint: the mean of the metric over the tasks
  temperature: 1.0
  top_p: 1.0
  max_new_tokens: 8192           # null: the run's max_completion_length
  every_steps: 20                # candidates: checkpoints whose step is a multiple of this (null: every checkpoint)
  source: "aer.txt App. A, Checkpoint selection"
paper_protocol:                  # how the paper decoded its reported numbers; null = not stated by the paper
  k: 32
  temperature: null
  top_p: null
  max_new_tokens: 8192
  source: "aer.txt App. A (pass@k with k = 32; decoding not stated; 8k length)"
  model: Qwen/Qwen3-4B-Base      # the model and training data the numbers belong to: healtrl eval compares a run
  dataset: task:deepscaler       # only with the entries of its own model_name_or_path and dataset_name
paper_results:                   # one entry per reported number, in percent as the paper prints it
  - {benchmark: aime24, metric: pass@1, k: 32, value: 25.2, table: "aer.txt Table 1, Qwen3-4B-Base, w/ AER (Ours)"}
  - {benchmark: aime24, metric: pass@1, k: 32, value: 31.4, model: Qwen/Qwen3-8B-Base, table: "... Qwen3-8B-Base ..."}
```

A run whose model or training data is that of no entry gets no comparison but an error naming both
(`select_paper_rows`); `healtrl eval --compare_anyway` compares anyway and marks every row.

Everything here is pure (parsing, validation, scoring, choosing, rendering, reading folders); the evaluation itself
runs in `healtrl.best_checkpoint` (`evaluate_checkpoints`, `healtrl eval`).

Metrics are computed from each task's per-problem correct counts `c` out of `k` samples: `avg@k` is the mean
correctness (mean of c / k; equals the unbiased pass@1), `pass@j` the mean over problems of the unbiased estimator
1 - C(k - c, j) / C(k, j) (Chen et al. 2021, eq. 1; `healtrl.functional.pass_at_k`), for any j <= k.

Why this module is long: it is the schema of the paper-recipe fields (`best_checkpoint`, `paper_protocol`,
`paper_results`) with their validation, and the two pure functions built on them (choosing the best checkpoint,
the comparison with the paper's numbers); the checks name every field and its fix, which takes lines.
"""

from __future__ import annotations

import json
import math
import os
import re
import warnings
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import numpy as np
import yaml

__all__ = [
    "BEST_JSON",
    "CHECKPOINT_ROWS",
    "CHECKPOINT_TABLE",
    "COMPARISON_JSON",
    "COMPARISON_MD",
    "BestCheckpointRule",
    "PaperProtocol",
    "PaperResult",
    "PaperRowMismatch",
    "choose_best",
    "compare_with_paper",
    "find_checkpoints",
    "metric_value",
    "parse_best_checkpoint",
    "parse_paper_protocol",
    "parse_paper_results",
    "read_run_config",
    "recipe_problems",
    "render_checkpoint_table",
    "render_comparison",
    "score_row",
    "select_paper_rows",
]

CHECKPOINT_ROWS = "checkpoint_eval.jsonl"
"""One JSON row per evaluated checkpoint, appended as each one finishes (what makes the evaluation resumable)."""
CHECKPOINT_TABLE = "checkpoint_eval.md"
BEST_JSON = "best_checkpoint.json"
COMPARISON_MD = "paper_comparison.md"
COMPARISON_JSON = "paper_comparison.json"
RUN_CONFIG = "config.yaml"  # written by train.py into output_dir (healtrl.cli.CONFIG_FILE)
CHECKPOINT_PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR
FINAL = "final"
REDUCTIONS = ("mean",)

_METRIC = re.compile(r"^(avg|pass)@(k|\d+)$")


def _is_int(value) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


def _is_number(value) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _check_task(name, where: str) -> None:
    from healtrl.tasks import get_task

    if not isinstance(name, str) or not name:
        raise ValueError(f"{where} must be a task name (a key of healtrl.tasks.TASKS), got {name!r}.")
    try:
        get_task(name)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


def parse_metric(metric, where: str) -> tuple[str, int | None]:
    """`"avg@k"` -> ("avg", None); `"pass@4"` -> ("pass", 4); None stands for "the k of the task"."""
    match = _METRIC.match(metric) if isinstance(metric, str) else None
    if not match:
        raise ValueError(
            f"{where} must be 'avg@k', 'pass@k', 'pass@<j>' or 'avg@<k>' (e.g. 'pass@1', 'avg@32'), got {metric!r}."
        )
    kind, j = match.group(1), match.group(2)
    if j == "k":
        return kind, None
    if int(j) < 1:
        raise ValueError(f"{where}: {metric!r} needs a number of samples >= 1.")
    return kind, int(j)


def _check_metric_against_k(kind: str, j: int | None, k: int, where: str, k_key: str) -> None:
    if j is None:
        return
    if kind == "avg" and j != k:
        raise ValueError(
            f"{where} is 'avg@{j}' but {k_key} is {k}: avg@ is the mean over all k samples. Set {k_key} to {j}, or "
            "write the metric as 'avg@k'."
        )
    if kind == "pass" and j > k:
        raise ValueError(
            f"{where} is 'pass@{j}', which needs at least {j} samples per problem, but {k_key} is {k}. Set {k_key} "
            f"to at least {j}, or use pass@j with j <= {k}."
        )


def metric_key(kind: str, j: int | None, k: int) -> str:
    """The metric's name at sample count `k` (e.g. ("avg", None, 32) -> "avg@32", ("pass", None, 8) -> "pass@8")."""
    return f"{kind}@{k if j is None else j}"


def metric_value(correct: Sequence[int], k: int, kind: str, j: int | None = None) -> float:
    """avg@k (mean of c / k) or the mean unbiased pass@j (j defaults to k) of per-problem correct counts, in [0, 1]."""
    from healtrl.functional.evaluation import pass_at_k

    counts = np.asarray(list(correct), dtype=np.int64)
    if counts.size == 0:
        return float("nan")
    if kind == "avg":
        return float(counts.mean() / k)
    j = k if j is None else j
    if j > k:
        raise ValueError(f"pass@{j} needs at least {j} samples per problem; these results have k={k}.")
    return float(np.mean(pass_at_k(k, counts, j)))


# ----------------------------------------------------------------------------------------------------------------
# The best-checkpoint rule
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class BestCheckpointRule:
    r"""
    How the paper chose the checkpoint it reports: `healtrl eval --checkpoints <run dir>` evaluates the candidate
    checkpoints on `tasks` and keeps the one with the highest score (ties: the earliest step).

    Parameters:
        tasks (`list[str]`):
            Validation tasks (`healtrl.tasks.TASKS` names), e.g. `[aime25]`.
        metric (`str`):
            `avg@k` (mean correctness over the k samples), `pass@k`, `pass@<j>` (unbiased pass@j, j <= k) or
            `avg@<k>`. pass@1 and avg@k have the same expectation; pass@1 is the name the papers use.
        k (`int` or `dict[str, int]`, *optional*, defaults to `1`):
            Samples per problem, for every task or per task (`{aime24: 32, math500: 1}`).
        reduce (`str`, *optional*, defaults to `"mean"`):
            How the tasks' values make the checkpoint's score: `mean` (unweighted mean over tasks, the papers' "Avg.").
        temperature (`float`, *optional*, defaults to `1.0`):
            Sampling temperature of the validation (0: greedy).
        top_p (`float`, *optional*, defaults to `1.0`):
            Nucleus sampling threshold of the validation.
        top_k (`int`, *optional*, defaults to `0`):
            Top-k sampling of the validation (0: off).
        max_new_tokens (`int`, *optional*):
            Most tokens per completion. Defaults to the run's `max_completion_length` (from its `config.yaml`).
        seed (`int`, *optional*, defaults to `0`):
            Sampling seed (the same for every checkpoint).
        num_problems (`int`, *optional*):
            Validate on a fixed random subset of this many problems per task. Defaults to every problem.
        split (`str`, *optional*):
            Split of the tasks. Defaults to each task's evaluation split.
        every_steps (`int`, *optional*):
            The paper's validation interval in optimizer steps: only checkpoints whose step is a multiple of it are
            candidates (save checkpoints at this interval or a divisor of it: `save_steps`). `None`: every checkpoint.
        include_final (`bool`, *optional*, defaults to `False`):
            Also evaluate the final model saved in the run folder itself (with `save_strategy: steps`, the last
            checkpoint usually holds the same weights).
        source (`str`, *optional*):
            Where the rule comes from, e.g. `"aer.txt App. A, Checkpoint selection"`; shown with the results.
    """

    tasks: list[str]
    metric: str
    k: int | dict[str, int] = 1
    reduce: str = "mean"
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0
    max_new_tokens: int | None = None
    seed: int = 0
    num_problems: int | None = None
    split: str | None = None
    every_steps: int | None = None
    include_final: bool = False
    source: str | None = None

    def __post_init__(self):
        w = "best_checkpoint"
        if isinstance(self.tasks, str):
            self.tasks = [t.strip() for t in self.tasks.split(",") if t.strip()]
        if not isinstance(self.tasks, (list, tuple)) or not self.tasks:
            raise ValueError(f"{w}.tasks must be a non-empty list of task names, e.g. [aime25]; got {self.tasks!r}.")
        self.tasks = list(self.tasks)
        for i, task in enumerate(self.tasks):
            _check_task(task, f"{w}.tasks[{i}]")
        if len(set(self.tasks)) != len(self.tasks):
            raise ValueError(f"{w}.tasks lists a task twice: {self.tasks}. List each task once.")
        kind, j = parse_metric(self.metric, f"{w}.metric")
        if isinstance(self.k, Mapping):
            missing = [t for t in self.tasks if t not in self.k]
            extra = [t for t in self.k if t not in self.tasks]
            if missing or extra:
                raise ValueError(
                    f"{w}.k is a per-task mapping but "
                    + (f"lacks {missing}" if missing else f"names tasks not in {w}.tasks: {extra}")
                    + f". Give one k for each of {self.tasks}, or a single integer."
                )
            self.k = dict(self.k)
        for task in self.tasks:
            k = self.k_of(task)
            k_key = f"{w}.k[{task}]" if isinstance(self.k, dict) else f"{w}.k"
            if not _is_int(k) or k < 1:
                raise ValueError(f"{k_key} must be a positive number of samples per problem, got {k!r}.")
            _check_metric_against_k(kind, j, k, f"{w}.metric", k_key)
        if self.reduce not in REDUCTIONS:
            raise ValueError(f"{w}.reduce must be one of {', '.join(REDUCTIONS)}, got {self.reduce!r}.")
        checks = [
            ("temperature", _is_number(self.temperature) and self.temperature >= 0, "a number >= 0 (0: greedy)"),
            ("top_p", _is_number(self.top_p) and 0 < self.top_p <= 1, "a number in (0, 1]"),
            ("top_k", _is_int(self.top_k) and self.top_k >= 0, "an integer >= 0 (0: off)"),
            ("seed", _is_int(self.seed), "an integer"),
            ("include_final", isinstance(self.include_final, bool), "true or false"),
        ]
        for name in ("max_new_tokens", "num_problems", "every_steps"):
            value = getattr(self, name)
            checks.append((name, value is None or (_is_int(value) and value >= 1), "a positive integer or null"))
        checks.append(("split", self.split is None or isinstance(self.split, str), "a split name or null"))
        checks.append(("source", self.source is None or isinstance(self.source, str), "a text or null"))
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{w}.{name} must be {expected}, got {getattr(self, name)!r}.")

    def k_of(self, task: str) -> int:
        """Samples per problem of `task`."""
        return self.k[task] if isinstance(self.k, dict) else self.k

    @property
    def parsed_metric(self) -> tuple[str, int | None]:
        return parse_metric(self.metric, "best_checkpoint.metric")

    def groups(self) -> dict[int, list[str]]:
        """k -> the tasks sampled with it (one evaluation call per k)."""
        out: dict[int, list[str]] = {}
        for task in self.tasks:
            out.setdefault(self.k_of(task), []).append(task)
        return out

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    def describe(self) -> str:
        """One line: what is validated, how, and how the best is chosen."""
        ks = {self.k_of(t) for t in self.tasks}
        k_text = f"k={ks.pop()}" if len(ks) == 1 else "k=" + ", ".join(f"{t}:{self.k_of(t)}" for t in self.tasks)
        scope = "every checkpoint" if self.every_steps is None else f"checkpoints every {self.every_steps} steps"
        text = (
            f"highest {self.reduce} {self.metric} over {', '.join(self.tasks)} ({k_text}, temperature "
            f"{self.temperature:g}, top_p {self.top_p:g}, max_new_tokens {self.max_new_tokens}) among {scope}"
        )
        if self.include_final:
            text += " and the final model"
        return text + "; ties go to the earliest step" + (f" (source: {self.source})" if self.source else "")


def _build(cls, data, where: str):
    """`cls(**data)` for a config mapping, with unknown and missing keys named as `<where>.<key>`."""
    import dataclasses
    import difflib

    if not isinstance(data, Mapping):
        raise ValueError(f"{where} must be a mapping of keys to values, got {type(data).__name__} {data!r}.")
    known = [f.name for f in fields(cls)]
    unknown = [key for key in data if key not in known]
    if unknown:
        hints = []
        for key in unknown:
            close = difflib.get_close_matches(str(key), known, n=1)
            hints.append(f"'{key}'" + (f" (did you mean '{close[0]}'?)" if close else ""))
        raise ValueError(f"{where} has unknown key(s) {', '.join(hints)}. Known keys: {', '.join(known)}.")
    required = [
        f.name
        for f in fields(cls)
        if f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING and f.name not in data
    ]
    if required:
        raise ValueError(f"{where} lacks the required key(s) {', '.join(required)}. Add them to the mapping.")
    return cls(**dict(data))


def parse_best_checkpoint(data: Mapping[str, Any] | BestCheckpointRule | None) -> BestCheckpointRule | None:
    """The validated `best_checkpoint` mapping of a config, or None when it is not set.

    Raises:
        ValueError: a key is unknown, missing or invalid; the message names it as `best_checkpoint.<key>`.
    """
    if data is None or isinstance(data, BestCheckpointRule):
        return data
    return _build(BestCheckpointRule, data, "best_checkpoint")


# ----------------------------------------------------------------------------------------------------------------
# The paper's numbers
# ----------------------------------------------------------------------------------------------------------------
_DECODING = ("k", "temperature", "top_p", "max_new_tokens")


def _check_settings(settings, where: str) -> None:
    if settings is None:
        return
    if not isinstance(settings, Mapping) or not all(isinstance(k, str) for k in settings):
        raise ValueError(f"{where} must be a mapping of config keys to values, e.g. {{lambda_mode: static}}.")
    for key, value in settings.items():
        if isinstance(value, (Mapping, list, tuple)):
            raise ValueError(f"{where}.{key} must be a single value (a number, text or true/false), got {value!r}.")


@dataclass
class PaperProtocol:
    r"""
    How the paper decoded the numbers it reports (`paper_protocol`). `None` means the paper does not state it.

    Parameters:
        k (`int`, *optional*):
            Samples per problem, when one k holds for every row (a `paper_results` entry's own `k` wins).
        temperature (`float`, *optional*):
            Sampling temperature.
        top_p (`float`, *optional*):
            Nucleus sampling threshold.
        max_new_tokens (`int`, *optional*):
            Most generated tokens per completion.
        source (`str`, *optional*):
            Where the protocol is stated, e.g. `"opefo.txt §6.1, Evaluation"`.
        model (`str`, *optional*):
            The model the paper's numbers were trained from, as `model_name_or_path` names it (e.g.
            `Qwen/Qwen3-4B-Base`): the default of every `paper_results` entry's `model`.
        dataset (`str`, *optional*):
            The training data behind the numbers, as `dataset_name` names it (e.g. `task:deepscaler`): the default of
            every entry's `dataset`.
        ours (`dict`, *optional*):
            healtrl's choice for settings the paper does not state (`null` above), e.g. `{max_new_tokens: 3000}`:
            `healtrl eval` decodes with it, and the comparison flags the setting as not stated by the paper (with our
            value). Only for settings the paper leaves null: a stated value is the paper's.
        settings (`dict`, *optional*):
            Training settings of the paper row, by config key (e.g. `{lambda_mode: adaptive, balance_sides: both}`):
            the defaults of every entry's `settings`. A run whose config has another value gets no comparison with
            that entry (as for `model` / `dataset`), so an ablation run by override is not compared with the
            full method's numbers.
    """

    k: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_new_tokens: int | None = None
    source: str | None = None
    model: str | None = None
    dataset: str | None = None
    ours: dict[str, Any] | None = None
    settings: dict[str, Any] | None = None

    def value(self, key: str) -> Any:
        """The setting to decode with: the paper's, else ours (None when neither is set)."""
        stated = getattr(self, key)
        return stated if stated is not None else (self.ours or {}).get(key)

    def __post_init__(self):
        w = "paper_protocol"
        _check_settings(self.settings, f"{w}.settings")
        if self.settings is not None:
            self.settings = dict(self.settings)
        if self.ours is not None:
            if not isinstance(self.ours, Mapping):
                raise ValueError(f"{w}.ours must be a mapping such as {{max_new_tokens: 3000}}, got {self.ours!r}.")
            self.ours = dict(self.ours)
            for key, value in self.ours.items():
                if key not in _DECODING:
                    raise ValueError(f"{w}.ours.{key}: ours holds only {', '.join(_DECODING)}.")
                if getattr(self, key) is not None:
                    raise ValueError(
                        f"{w}.ours.{key} is set but the paper states {key} ({getattr(self, key)}): ours is for "
                        f"settings the paper does not state. Set {w}.{key} to null, or drop ours.{key}."
                    )
                PaperProtocol(**{key: value})  # the same checks as the paper's value

        checks = [
            ("k", self.k is None or (_is_int(self.k) and self.k >= 1), "a positive integer or null"),
            ("temperature", self.temperature is None or (_is_number(self.temperature) and self.temperature >= 0),
             "a number >= 0 or null (not stated)"),
            ("top_p", self.top_p is None or (_is_number(self.top_p) and 0 < self.top_p <= 1),
             "a number in (0, 1] or null (not stated)"),
            ("max_new_tokens", self.max_new_tokens is None or (_is_int(self.max_new_tokens) and self.max_new_tokens >= 1),
             "a positive integer or null (not stated)"),
            ("source", self.source is None or isinstance(self.source, str), "a text or null"),
            ("model", self.model is None or (isinstance(self.model, str) and self.model), "a model name or null"),
            ("dataset", self.dataset is None or (isinstance(self.dataset, str) and self.dataset),
             "a dataset name or null"),
        ]  # fmt: skip
        for name, ok, expected in checks:
            if not ok:
                raise ValueError(f"{w}.{name} must be {expected}, got {getattr(self, name)!r}.")


@dataclass
class PaperResult:
    r"""
    One number the paper reports (an entry of `paper_results`; build and validate them with `parse_paper_results`).

    Parameters:
        benchmark (`str`):
            The healtrl task that evaluates it (`healtrl.tasks.TASKS`), e.g. `aime25`.
        metric (`str`):
            `avg@k`, `pass@k`, `pass@<j>` or `avg@<k>`, as for `best_checkpoint.metric`.
        value (`float`):
            The number in percent, as the paper prints it (e.g. `22.1`).
        k (`int`, *optional*):
            Samples per problem behind the number. Defaults to `paper_protocol.k`, else the number in the metric's
            name (`avg@32` -> 32).
        table (`str`, *optional*):
            Where it is printed, e.g. `"aer.txt Table 1, Qwen3-4B-Base, w/ AER (Ours)"`.
        model (`str`, *optional*):
            The model the number was trained from (`model_name_or_path`). Defaults to `paper_protocol.model`.
        dataset (`str`, *optional*):
            The training data behind it (`dataset_name`). Defaults to `paper_protocol.dataset`.
        settings (`dict`, *optional*):
            Training settings of its row by config key, over `paper_protocol.settings` (e.g. `{lambda_mode: static}`
            for an ablation row).
    """

    benchmark: str
    metric: str
    value: float
    k: int | None = None
    table: str | None = None
    model: str | None = None
    dataset: str | None = None
    settings: dict[str, Any] | None = None

    @property
    def label(self) -> str:
        """The metric at this entry's k: `avg@32`, `pass@1`, `pass@32`."""
        kind, j = parse_metric(self.metric, "metric")
        return metric_key(kind, j, self.k)


def parse_paper_protocol(data: Mapping[str, Any] | PaperProtocol | None) -> PaperProtocol | None:
    """The validated `paper_protocol` mapping, or None when it is not set."""
    if data is None or isinstance(data, PaperProtocol):
        return data
    return _build(PaperProtocol, data, "paper_protocol")


def parse_paper_results(
    data: Sequence[Mapping[str, Any]] | None, protocol: PaperProtocol | Mapping | None = None
) -> list[PaperResult]:
    """The validated `paper_results` list, each entry's `k` filled in (from `paper_protocol.k` or the metric's name).

    Raises:
        ValueError: an entry is invalid; the message names it as `paper_results[i].<key>`.
    """
    if data is None:
        return []
    if isinstance(data, Mapping) or not isinstance(data, (list, tuple)):
        raise ValueError(
            "paper_results must be a list of mappings, one per reported number: "
            "[{benchmark: aime25, metric: pass@1, k: 32, value: 22.1, table: '...'}, ...]."
        )
    protocol = parse_paper_protocol(protocol)
    out, seen = [], {}
    for i, entry in enumerate(data):
        where = f"paper_results[{i}]"
        if isinstance(entry, PaperResult):
            entry = asdict(entry)
        result = _build(PaperResult, entry, where)
        if not _is_number(result.value) or not 0 <= result.value <= 100:
            raise ValueError(
                f"{where}.value must be the paper's number in percent (0-100), got {result.value!r}. Write it as "
                "the paper prints it, e.g. 22.1 for 22.1%."
            )
        if result.k is not None and (not _is_int(result.k) or result.k < 1):
            raise ValueError(f"{where}.k must be a positive number of samples per problem, got {result.k!r}.")
        if result.table is not None and not isinstance(result.table, str):
            raise ValueError(f"{where}.table must be a text such as 'aer.txt Table 1, ...', got {result.table!r}.")
        for name in ("model", "dataset"):
            value = getattr(result, name)
            if value is not None and (not isinstance(value, str) or not value):
                raise ValueError(f"{where}.{name} must be a {name} name or null, got {value!r}.")
            if value is None and protocol is not None:
                setattr(result, name, getattr(protocol, name))
        _check_settings(result.settings, f"{where}.settings")
        merged = {**((protocol.settings if protocol is not None else None) or {}), **(result.settings or {})}
        result.settings = merged or None
        _check_task(result.benchmark, f"{where}.benchmark")
        kind, j = parse_metric(result.metric, f"{where}.metric")
        if result.k is None:
            result.k = protocol.k if protocol is not None and protocol.k is not None else j
        if result.k is None:
            raise ValueError(
                f"{where} has metric {result.metric!r} but no k: set {where}.k (samples per problem behind the "
                "number) or paper_protocol.k."
            )
        _check_metric_against_k(kind, j, result.k, f"{where}.metric", f"{where}.k")
        key = (
            result.benchmark,
            metric_key(kind, j, result.k),
            result.model,
            result.dataset,
            tuple(sorted((result.settings or {}).items(), key=lambda kv: kv[0])),
        )
        if key in seen:
            raise ValueError(
                f"{where} repeats {key[1]} on {key[0]} (already paper_results[{seen[key]}]); entries for another "
                "model, training data or setting say so by their own `model` / `dataset` / `settings`."
            )
        seen[key] = i
        out.append(result)
    return out


CHECKPOINT_BOUNDS = {"disk_tb": 8.0, "checkpoints_to_evaluate": 150}
"""The dry run refuses a plan whose checkpoints kept at once would take more disk than `disk_tb` (estimated), or that
leaves `healtrl eval --checkpoints` more than `checkpoints_to_evaluate` candidates, unless `allow_large_checkpoint_plan`
is set. (AER's 30 epochs saved every 20 steps with no limit: ~1,880 checkpoints of a 4B model, ~75 TB.)"""
BYTES_PER_PARAMETER = {"model": 2, "with_optimizer": 10}
"""Estimated checkpoint bytes per parameter: bf16 weights (2), plus Adam's two moments when the optimizer state is saved
(8 more, fp32). An estimate: sharded or fp32 master weights write more."""


def _parameters_from_name(name) -> float | None:
    """Billions of parameters read from a model name (`Qwen/Qwen3-4B-Base` -> 4.0), or None."""
    match = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)[Bb](?![a-zA-Z])", str(name or ""))
    return float(match.group(1)) if match else None


def checkpoint_plan(script_args, trainer_args, model: str | None) -> tuple[list[str], list[str]]:
    """(report lines, problems): the disk and evaluation cost of the checkpoints the run saves, and a problem per
    bound of `CHECKPOINT_BOUNDS` it exceeds (unless `allow_large_checkpoint_plan`)."""
    strategy = str(getattr(trainer_args.save_strategy, "value", trainer_args.save_strategy))
    max_steps = getattr(trainer_args, "max_steps", -1) or -1
    if strategy != "steps" or max_steps <= 0:
        return [], []
    save_steps = int(trainer_args.save_steps)
    saves = max_steps // save_steps
    limit = getattr(trainer_args, "save_total_limit", None)
    keeps_best = validation_keeps_best(script_args, trainer_args)
    kept = saves if not limit else min(saves, limit + (1 if keeps_best else 0))
    billions = _parameters_from_name(model)
    per_param = BYTES_PER_PARAMETER["model" if getattr(trainer_args, "save_only_model", False) else "with_optimizer"]
    disk_tb = None if billions is None else kept * billions * per_param / 1000
    rule = parse_best_checkpoint(getattr(script_args, "best_checkpoint", None))
    text = f"{saves} saves (max_steps {max_steps} / save_steps {save_steps}), at most {kept} kept at once"
    text += f" (save_total_limit {limit}{' + the best' if keeps_best else ''})" if limit else " (no save_total_limit)"
    if disk_tb is not None:
        text += (
            f", ~{disk_tb:.2g} TB ({billions:g}B parameters x {per_param} bytes each per checkpoint: our estimate, "
            "healtrl.recipes.BYTES_PER_PARAMETER)"
        )
    candidates = None
    if rule is not None:
        every = rule.every_steps or save_steps
        candidates = min(kept, max_steps // every) if limit else max_steps // every
        samples = ", ".join(f"{t} x {rule.k_of(t)}" for t in rule.tasks)
        text += f"; healtrl eval --checkpoints: {candidates} candidates x ({samples}) samples per problem"
    evaluated = getattr(script_args, "eval_tasks", None) or []
    every_eval = getattr(script_args, "eval_every_steps", None)
    if evaluated and every_eval:
        text += (
            f"; in training: {max_steps // every_eval} validations x {getattr(script_args, 'eval_k', 1)} samples per "
            f"problem of {', '.join(evaluated)}"
        )
    problems = []
    over = []
    if disk_tb is not None and disk_tb > CHECKPOINT_BOUNDS["disk_tb"]:
        over.append(f"~{disk_tb:.2g} TB of checkpoints kept at once (bound {CHECKPOINT_BOUNDS['disk_tb']:g} TB)")
    if candidates is not None and candidates > CHECKPOINT_BOUNDS["checkpoints_to_evaluate"]:
        over.append(f"{candidates} checkpoints to evaluate (bound {CHECKPOINT_BOUNDS['checkpoints_to_evaluate']})")
    if over and not getattr(script_args, "allow_large_checkpoint_plan", False):
        problems.append(
            "the saved checkpoints exceed the plan's bounds (healtrl.recipes.CHECKPOINT_BOUNDS): "
            + "; ".join(over)
            + ". Raise save_steps, set save_total_limit with validation during training by the best-checkpoint rule "
            "(eval_tasks, eval_every_steps = best_checkpoint.every_steps), or set `allow_large_checkpoint_plan: "
            "true` to accept it."
        )
    elif over:
        text += " (over the bounds: " + "; ".join(over) + "; allowed by allow_large_checkpoint_plan)"
    return [f"checkpoint plan: {text}"], problems


def validation_keeps_best(script_args, trainer_args=None) -> bool:
    """Whether the run validates during training by its best-checkpoint rule: `best_checkpoint` is set, its tasks are
    among `eval_tasks` and `eval_every_steps` is its `every_steps` (checkpoints are saved at that interval, as the
    rule requires). `PeriodicEvalCallback(best_rule=...)` then records the best step, and `save_total_limit` may
    bound the other checkpoints: transformers never deletes the best one."""
    rule = parse_best_checkpoint(getattr(script_args, "best_checkpoint", None))
    if rule is None or not set(rule.tasks) <= set(getattr(script_args, "eval_tasks", None) or []):
        return False
    if (getattr(script_args, "eval_split", None) or rule.split) != rule.split:
        return False
    return rule.every_steps is not None and getattr(script_args, "eval_every_steps", None) == rule.every_steps


def recipe_problems(script_args, trainer_args=None, model: str | None = None) -> tuple[list[str], list[str]]:
    """(report lines, problems) of a config's recipe fields, for `train.py --dry_run`.

    A warning line: no `paper_results` entry belongs to the run's model (`model`) and training data (`dataset_name`),
    so `healtrl eval` will refuse the comparison (`select_paper_rows`).

    A problem: checkpoints are not saved at the interval the best-checkpoint rule validates at (`save_strategy` must
    be `steps` with `save_steps` dividing `best_checkpoint.every_steps`), or `save_total_limit` deletes candidates.
    """
    lines, problems = [], []
    rule = parse_best_checkpoint(getattr(script_args, "best_checkpoint", None))
    if rule is not None:
        lines.append(f"best checkpoint: {rule.describe()}")
        if trainer_args is not None:
            strategy = str(getattr(trainer_args.save_strategy, "value", trainer_args.save_strategy))
            save_steps = trainer_args.save_steps
            if strategy != "steps":
                problems.append(
                    f"best_checkpoint needs checkpoints to choose from, but save_strategy is '{strategy}'. Set "
                    f"`save_strategy: steps` and `save_steps: {rule.every_steps or 'N'}`."
                )
            elif rule.every_steps is not None and (save_steps != int(save_steps) or rule.every_steps % int(save_steps)):
                problems.append(
                    f"best_checkpoint.every_steps is {rule.every_steps} but save_steps is {save_steps:g}: the "
                    f"checkpoints at multiples of {rule.every_steps} steps are not all saved. Set `save_steps` to "
                    f"{rule.every_steps} (or a divisor of it)."
                )
            limit = getattr(trainer_args, "save_total_limit", None)
            if limit and not validation_keeps_best(script_args, trainer_args):
                problems.append(
                    f"save_total_limit is {limit}: transformers deletes older checkpoints, so the best-checkpoint rule "
                    "cannot see them. Remove `save_total_limit` (or set it to null), or validate during training by "
                    f"the rule (eval_tasks including {', '.join(rule.tasks)}, eval_every_steps {rule.every_steps}): "
                    "the best checkpoint so far is then never deleted."
                )
            elif limit:
                lines.append(
                    f"checkpoints kept: the best by the in-training validation ({', '.join(rule.tasks)} every "
                    f"{rule.every_steps} steps, eval_k {getattr(script_args, 'eval_k', None)}) and the "
                    f"{limit} most recent (save_total_limit {limit}); healtrl eval --checkpoints chooses among them"
                )
    if trainer_args is not None:
        plan_lines, plan_problems = checkpoint_plan(script_args, trainer_args, model)
        lines += plan_lines
        problems += plan_problems
    protocol = parse_paper_protocol(getattr(script_args, "paper_protocol", None))
    results = parse_paper_results(getattr(script_args, "paper_results", None), protocol)
    if results:
        keys = {k for r in results for k in (r.settings or {})}
        settings = {k: getattr(trainer_args, k, getattr(script_args, k, None)) for k in keys}
        run = {"model": model, "dataset": getattr(script_args, "dataset_name", None), "settings": settings}
        matching = [r for r in results if not row_mismatches(r, run)]
        benchmarks = list(dict.fromkeys(r.benchmark for r in matching or results))
        count = f"{len(matching)} number{'s' if len(matching) != 1 else ''}"
        if matching:
            others = len(results) - len(matching)
            lines.append(
                f"paper results: {count} for this model, training data and settings on {', '.join(benchmarks)}"
                + (f" ({others} more for other models, data or settings)" if others else "")
            )
        else:
            mismatch = "; ".join(dict.fromkeys(m for r in results for m in row_mismatches(r, run)))
            lines.append(
                f"paper results: warning: none of the {len(results)} numbers belongs to this run ({mismatch}): "
                "healtrl eval will refuse the comparison unless --compare_anyway"
            )
    if protocol is not None:
        lines.append("paper protocol: " + _describe_protocol(asdict(protocol)))
    return lines, problems


# ----------------------------------------------------------------------------------------------------------------
# Run folders and checkpoints
# ----------------------------------------------------------------------------------------------------------------
def read_run_config(path: str | os.PathLike) -> dict[str, Any] | None:
    """The YAML config of a run (`<run dir>/config.yaml`, or a config file), or None when there is none."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, RUN_CONFIG)
    if not os.path.isfile(path):
        return None
    from healtrl._yamlfile import DuplicateKeyError, load_yaml

    with open(path) as f:
        try:
            data = load_yaml(f)
        except DuplicateKeyError as exc:
            raise ValueError(f"{path} sets a key twice: {exc}") from None
        except yaml.YAMLError as exc:
            raise ValueError(f"{path} is not valid YAML: {exc}. Fix the syntax at that line.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ValueError(f"{path} must be a YAML mapping of `key: value` lines, found a {type(data).__name__}.")
    return data


def run_config_for(model_path: str | os.PathLike) -> tuple[dict[str, Any] | None, str | None]:
    """(config, its path) of the run a model folder belongs to: its own `config.yaml`, or its parent's when the folder
    is a `checkpoint-N` of a run; (None, None) otherwise."""
    folder = os.fspath(model_path)
    candidates = [folder]
    if re.fullmatch(rf"{CHECKPOINT_PREFIX}-\d+", os.path.basename(os.path.normpath(folder))):
        candidates.append(os.path.dirname(os.path.normpath(folder)))
    for candidate in candidates:
        path = os.path.join(candidate, RUN_CONFIG)
        if os.path.isfile(path):
            return read_run_config(path), path
    return None, None


def _has_weights(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, name)) for name in ("config.json", "adapter_config.json"))


_MARKER = "healtrl_checkpoint.json"  # healtrl.checkpoints.MARKER_FILE: written last, once a checkpoint is complete
# Files the Trainer writes into a checkpoint after the model: a folder holding one of them but no marker was cut short.
_TRAINER_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt", "training_args.bin")


def _written_completely(path: str) -> bool:
    """A model folder saved by hand (no trainer files) counts as complete; a trainer's checkpoint needs the marker."""
    names = set(os.listdir(path))
    if _MARKER in names:
        return True
    return not any(n in names or n.startswith("rng_state") for n in _TRAINER_FILES)


def _corrupt_marker(path: str) -> str | None:
    """What is wrong with the completion marker of a checkpoint folder that has one; None when it is readable or
    absent (`healtrl.checkpoints.marker_problem`)."""
    from healtrl.checkpoints import marker_problem

    problem = marker_problem(path)
    return None if problem in (None, "missing") else problem


def find_checkpoints(run_dir: str | os.PathLike, include_final: bool = False) -> list[dict[str, Any]]:
    """The saved models of a training run, by step: `{"checkpoint": "checkpoint-N", "step": N, "path"}` for every
    `checkpoint-N` folder holding a model (`config.json`) or adapter (`adapter_config.json`), then, with
    `include_final`, the run folder's own final model as `{"checkpoint": "final", "step": <last logged step or None>}`.

    Raises:
        ValueError: the run folder does not exist, or `include_final` is set and it holds no model.
    """
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise ValueError(f"Run folder {run_dir!r} does not exist. Pass the output_dir of a training run.")
    found = []
    for name in os.listdir(run_dir):
        match = re.fullmatch(rf"{CHECKPOINT_PREFIX}-(\d+)", name)
        path = os.path.join(run_dir, name)
        if match and os.path.isdir(path) and _has_weights(path):
            corrupt = _corrupt_marker(path)
            if corrupt is not None:  # discovery skips a corrupt marker with a warning (healtrl.checkpoints)
                warnings.warn(
                    f"{os.path.join(path, _MARKER)} is corrupt: {corrupt}. {path} is not evaluated: its completion "
                    "cannot be confirmed. Pass it to `healtrl eval --model` to evaluate it anyway.",
                    UserWarning,
                    stacklevel=2,
                )
                continue
            if not _written_completely(path):
                warnings.warn(
                    f"{path} was written by a trainer but has no completion marker ({_MARKER}): a checkpoint cut short "
                    "by a kill, or one written before healtrl marked complete checkpoints. It is not evaluated; pass it "
                    "to `healtrl eval --model` to evaluate it anyway.",
                    UserWarning,
                    stacklevel=2,
                )
                continue
            found.append({"checkpoint": name, "step": int(match.group(1)), "path": path})
    found.sort(key=lambda c: c["step"])
    if include_final:
        if not _has_weights(run_dir):
            raise ValueError(
                f"include_final is set but {run_dir} holds no final model (no config.json / adapter_config.json; "
                "save_final_model false, or the run did not finish). Drop include_final."
            )
        found.append({"checkpoint": FINAL, "step": _last_logged_step(run_dir), "path": run_dir})
    return found


def _last_logged_step(run_dir: str) -> int | None:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    step = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                value = json.loads(line).get("step")
                step = value if _is_int(value) else step
    return step


def weights_signature(path: str) -> list:
    """(name, size, mtime_ns) of the weight files of a model folder: a stored row is reused only while they match."""
    names = sorted(
        n
        for n in os.listdir(path)
        if n.endswith((".safetensors", ".bin", ".pt")) and os.path.isfile(os.path.join(path, n))
    )
    signature = []
    for name in names:
        stat = os.stat(os.path.join(path, name))
        signature.append([name, stat.st_size, stat.st_mtime_ns])
    return signature


# ----------------------------------------------------------------------------------------------------------------
# Scoring and choosing
# ----------------------------------------------------------------------------------------------------------------
def score_row(row: Mapping[str, Any], rule: BestCheckpointRule) -> tuple[float, dict[str, float]]:
    """(score, {task: value}) of a checkpoint row under the rule: the metric per task, reduced over the tasks."""
    kind, j = rule.parsed_metric
    values = {}
    for task in rule.tasks:
        record = row["tasks"][task]
        values[task] = metric_value(record["correct"], record["k"], kind, j)
    return float(np.mean(list(values.values()))), values


def choose_best(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The row with the highest `score`; ties go to the earliest step (the final model, without a step, last)."""
    if not rows:
        raise ValueError("No evaluated checkpoint to choose from.")

    def key(row):
        step = row.get("step")
        return (-row["score"], math.inf if step is None else step, row["checkpoint"] == FINAL)

    return min(rows, key=key)


def render_checkpoint_table(rows: Sequence[Mapping[str, Any]], rule: BestCheckpointRule, best, run_dir: str) -> str:
    """Markdown: the rule, then one row per checkpoint (the metric per task and the score in %), the best marked."""
    lines = [
        f"# Checkpoints of `{run_dir}`",
        "",
        f"Best checkpoint: **{best['checkpoint']}**"
        + (f" (step {best['step']})" if best.get("step") is not None else "")
        + f", score {100 * best['score']:.2f}.",
        "",
        f"Rule: {rule.describe()}. Scores in %.",
        "",
    ]
    header = ["checkpoint", "step", *[f"{t} {metric_key(*rule.parsed_metric, rule.k_of(t))}" for t in rule.tasks]]
    header += [f"score ({rule.reduce})", "best"]
    lines += ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * (len(rule.tasks) + 1) + "---|"]
    for row in rows:
        cells = [f"`{row['checkpoint']}`", "" if row.get("step") is None else str(row["step"])]
        cells += [f"{100 * row['values'][t]:.2f}" for t in rule.tasks]
        cells += [f"{100 * row['score']:.2f}", "**best**" if row["checkpoint"] == best["checkpoint"] else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Your run vs the paper
# ----------------------------------------------------------------------------------------------------------------
def _describe_protocol(settings: Mapping[str, Any], ks: Sequence[int] = ()) -> str:
    ours = settings.get("ours") or {}

    def show(key):
        value = settings.get(key)
        if value is None:
            return "not stated" + (f" (ours: {ours[key]})" if ours.get(key) is not None else "")
        return f"{value:g}" if isinstance(value, float) else str(value)

    k_values = sorted(set(ks)) or ([settings["k"]] if settings.get("k") is not None else [])
    k_text = ", ".join(str(k) for k in k_values) if k_values else "not stated"
    text = (
        f"k={k_text}, temperature={show('temperature')}, top_p={show('top_p')}, max_new_tokens={show('max_new_tokens')}"
    )
    return text + (f" ({settings['source']})" if settings.get("source") else "")


def _your_tasks(results: Sequence[Mapping[str, Any]]) -> dict[str, tuple[Mapping, Mapping]]:
    """task -> (its record, the settings it was sampled with), over several `results.json` contents."""
    out = {}
    for data in results:
        settings = data.get("settings") or {}
        for task, record in (data.get("tasks") or {}).items():
            if task in out:
                raise ValueError(f"Task '{task}' appears in two evaluation results; pass each task's results once.")
            out[task] = (record, settings)
    return out


class PaperRowMismatch(ValueError):
    """The run's model or training data is not those of any `paper_results` entry: no comparison is written."""


def _same(run_value, paper_value) -> bool:
    if paper_value is None or run_value is None:
        return True
    return str(run_value).rstrip("/") == str(paper_value).rstrip("/")


def row_mismatches(entry: PaperResult, run: Mapping[str, Any] | None) -> list[str]:
    """How the run (`{"model", "dataset"}`, from its config's model_name_or_path and dataset_name) differs from the
    model and training data of a paper number: e.g. ["model Qwen/Qwen3-8B-Base vs the paper's Qwen/Qwen3-4B-Base"]."""
    if run is None:
        return []
    out = []
    for key in ("model", "dataset"):
        if not _same(run.get(key), getattr(entry, key)):
            out.append(f"{key} {run.get(key)} vs the paper's {getattr(entry, key)}")
    values = run.get("settings")
    for key, value in (entry.settings or {}).items():
        if values is None or key not in values or values[key] is None:
            continue  # the run's value is not known: not compared
        if values[key] != value:
            out.append(f"{key} {values[key]} vs the paper's {value}")
    return out


def select_paper_rows(
    paper_results: Sequence[PaperResult],
    run: Mapping[str, Any] | None,
    *,
    allow_mismatch: bool = False,
    override: str = "--compare_anyway",
) -> list[PaperResult]:
    """The paper numbers that belong to the run's model and training data.

    Args:
        paper_results: The parsed `paper_results` (each entry's `model` / `dataset` filled from `paper_protocol`).
        run: `{"model", "dataset"}` of the run (its config's `model_name_or_path` and `dataset_name`); None when
            unknown (a model that is not a `train.py` run folder): every entry is kept.
        allow_mismatch: When no entry matches, keep them all instead of raising (`compare_with_paper(run=...)` then
            marks each row's differences).
        override: How the user sets `allow_mismatch`, quoted in the error.

    Raises:
        PaperRowMismatch: no entry has the run's model and training data (and not `allow_mismatch`); the message names
            the run's and the paper's.
    """
    if run is None:
        return list(paper_results)
    matching = [e for e in paper_results if not row_mismatches(e, run)]
    if matching or not paper_results or allow_mismatch:
        return matching or list(paper_results)
    rows = sorted({(e.model, e.dataset) for e in paper_results}, key=str)
    paper = "; ".join(f"model {m or 'not stated'}, training data {d or 'not stated'}" for m, d in rows)
    differences = "; ".join(dict.fromkeys(m for e in paper_results for m in row_mismatches(e, run)))
    raise PaperRowMismatch(
        f"the run's model {run.get('model')} and training data {run.get('dataset')} are not those of the paper's "
        f"numbers in this recipe ({paper}), or its settings differ ({differences}), so no comparison is made: the "
        "numbers belong to another row of the paper. Add that row's numbers to paper_results (entries with their own `model` / `dataset`) or pass a "
        f"recipe that has them with --compare_paper, or pass {override} to compare anyway (the table marks every "
        "row)."
    )


def compare_with_paper(
    paper_results: Sequence[PaperResult],
    protocol: PaperProtocol | None,
    results: Sequence[Mapping[str, Any]],
    run: Mapping[str, Any] | None = None,
) -> list[dict[str, Any]]:
    """One comparison row per paper number: yours (from `results.json` contents of `healtrl eval`), the paper's, the
    difference in percentage points, and the protocol differences.

    Args:
        paper_results: The paper's numbers (`parse_paper_results`).
        protocol: The paper's decoding protocol (`parse_paper_protocol`); None: not stated.
        results: One or more `EvalResults.to_dict()` / `results.json` contents.
        run: `{"model", "dataset"}` of the evaluated run: a number of another model or training data is marked
            (select the rows first with `select_paper_rows`, which refuses such a comparison unless asked).

    Returns:
        Rows `{"benchmark", "metric", "paper_k", "your_k", "yours", "paper", "difference", "mismatches", "table",
        "model", "dataset"}` (the paper number's model and training data);
        `yours` and `difference` are None when the benchmark was not evaluated or your k is too small for the metric.
        `mismatches` lists each protocol setting that differs ("k 8 vs 32"); settings the paper does not state are
        listed as "temperature not stated by the paper".
    """
    protocol = protocol or PaperProtocol()
    yours = _your_tasks(results)
    rows = []
    for entry in paper_results:
        kind, j = parse_metric(entry.metric, "metric")
        row = {
            "benchmark": entry.benchmark,
            "metric": entry.label,
            "paper_k": entry.k,
            "your_k": None,
            "paper": float(entry.value),
            "yours": None,
            "difference": None,
            "mismatches": row_mismatches(entry, run),
            "table": entry.table,
            "model": entry.model,
            "dataset": entry.dataset,
        }
        found = yours.get(entry.benchmark)
        if found is None:
            row["mismatches"].append("not evaluated")
            rows.append(row)
            continue
        record, settings = found
        your_k = int(record.get("k", settings.get("k")))
        row["your_k"] = your_k
        # avg@k estimates the same quantity at any k (the mean correctness); pass@j needs j samples.
        j = (entry.k if j is None else j) if kind == "pass" else None
        if j is not None and your_k < j:
            row["mismatches"].append(f"k {your_k} < {j}: pass@{j} cannot be estimated")
        else:
            row["yours"] = 100 * metric_value(record["correct"], your_k, kind, j)
            row["difference"] = row["yours"] - row["paper"]
        if your_k != entry.k:
            row["mismatches"].append(f"k {your_k} vs {entry.k}")
        for key in ("temperature", "top_p", "max_new_tokens"):
            paper_value, your_value = getattr(protocol, key), settings.get(key)
            if paper_value is None:
                ours = (protocol.ours or {}).get(key)
                row["mismatches"].append(
                    f"{key} not stated by the paper" + (f" (ours: {ours})" if ours is not None else "")
                )
            elif your_value is None or not math.isclose(float(your_value), float(paper_value)):
                row["mismatches"].append(f"{key} {your_value} vs {paper_value}")
        rows.append(row)
    return rows


def render_comparison(
    rows: Sequence[Mapping[str, Any]],
    protocol: PaperProtocol | None,
    results: Sequence[Mapping[str, Any]],
    title: str = "Your run vs the paper",
    model: str | None = None,
    run: Mapping[str, Any] | None = None,
) -> str:
    """Markdown: both protocols above a table of benchmark, metric, yours, the paper's, the difference, and a protocol
    column that flags every mismatch (⚠) or says `same`."""
    protocol = protocol or PaperProtocol()
    your_settings = [dict(data.get("settings") or {}) for data in results]
    your_ks = [int(r["your_k"]) for r in rows if r["your_k"] is not None]
    lines = [f"# {title}", ""]
    if model:
        lines += [f"Model: `{model}`.", ""]
    paper_rows = sorted({(r.get("model"), r.get("dataset")) for r in rows}, key=str)
    if any(m or d for m, d in paper_rows):
        lines.append(
            "- Paper's model and training data: "
            + "; ".join(f"{m or 'not stated'}, {d or 'not stated'}" for m, d in paper_rows)
        )
        if run is None:
            lines.append("- Yours: not a train.py run folder, so its model and training data are not checked")
        else:
            lines.append(f"- Yours: {run.get('model')}, {run.get('dataset')}")
    lines.append(f"- Paper protocol: {_describe_protocol(asdict(protocol), [r['paper_k'] for r in rows])}")
    for settings in your_settings or [{}]:
        lines.append(f"- Your protocol: {_describe_protocol({**settings, 'source': None}, your_ks)}")
    tables = list(dict.fromkeys(r["table"] for r in rows if r["table"]))
    one_table = len(tables) <= 1 and all(r["table"] for r in rows)
    if one_table and tables:
        lines.append(f"- Paper's numbers: {tables[0]}")
    lines += [
        "",
        "Scores in %; difference = yours - paper's, in percentage points. Protocol: `same`, or ⚠ with each setting "
        "that differs (yours vs the paper's) or that the paper does not state.",
        "",
    ]
    header = ["benchmark", "metric", "yours", "paper", "difference", "protocol"] + ([] if one_table else ["source"])
    lines += ["| " + " | ".join(header) + " |", "|---|---|---:|---:|---:|---|" + ("" if one_table else "---|")]
    for row in rows:
        cells = [
            row["benchmark"],
            row["metric"],
            "—" if row["yours"] is None else f"{row['yours']:.1f}",
            f"{row['paper']:.1f}",
            "—" if row["difference"] is None else f"{row['difference']:+.1f}",
            "same" if not row["mismatches"] else "⚠ " + "; ".join(row["mismatches"]),
        ]
        if not one_table:
            cells.append(row["table"] or "")
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"
