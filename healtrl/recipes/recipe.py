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
  source: "AER App. A, Checkpoint selection"
paper_protocol:                  # how the paper decoded its reported numbers; null = not stated by the paper
  k: 32
  temperature: null
  top_p: null
  max_new_tokens: 8192
  source: "AER App. A (pass@k with k = 32; decoding not stated; 8k length)"
  model: Qwen/Qwen3-4B-Base      # the model and training data the numbers belong to: healtrl eval compares a run
  dataset: task:deepscaler       # only with the entries of its own model_name_or_path and dataset_name
paper_results:                   # one entry per reported number, in percent as the paper prints it
  - {benchmark: aime24, metric: pass@1, k: 32, value: 25.2, table: "AER Table 1, Qwen3-4B-Base, w/ AER (Ours)"}
  - {benchmark: aime24, metric: pass@1, k: 32, value: 31.4, model: Qwen/Qwen3-8B-Base, table: "... Qwen3-8B-Base ..."}
```

A run whose model or training data is that of no entry gets no comparison but an error naming both
(`select_paper_rows`); `healtrl eval --compare_anyway` compares anyway and marks every row.

The schema is here: the three fields' dataclasses, their parsing and validation, and the run's `config.yaml` that
holds them (`read_run_config`, `run_config_for`). Built on it: the metrics (`healtrl.recipes.metrics`), the dry run's
checks of a recipe (`healtrl.recipes.checks`), the comparison with the paper's numbers and its rendering
(`healtrl.recipes.comparison`), and the evaluation of a run's checkpoints by the rule (`healtrl.evaluation.best_checkpoint`:
checkpoint discovery, scoring, choosing, `healtrl eval --checkpoints`).
"""

from __future__ import annotations

import os
import re
from collections.abc import Mapping, Sequence
from dataclasses import asdict, dataclass, fields
from typing import Any

import yaml

from healtrl.recipes.metrics import check_metric_against_k, metric_key, metric_value, parse_metric
from healtrl.utils.numbers import is_finite_number, is_int

__all__ = [
    "BYTES_PER_PARAMETER",
    "CHECKPOINT_BOUNDS",
    "CONFIG_FILE",
    "BestCheckpointRule",
    "PaperProtocol",
    "PaperResult",
    "metric_value",
    "parse_best_checkpoint",
    "parse_metric",
    "parse_paper_protocol",
    "parse_paper_results",
    "read_run_config",
    "run_config_for",
]

CONFIG_FILE = "config.yaml"
"""The run's config, written by train.py into its output_dir (`healtrl.cli.run`): the explicitly set keys."""
CHECKPOINT_PREFIX = "checkpoint"  # transformers.trainer_utils.PREFIX_CHECKPOINT_DIR
REDUCTIONS = ("mean",)


def _check_task(name, where: str) -> None:
    from healtrl.tasks import get_task

    if not isinstance(name, str) or not name:
        raise ValueError(f"{where} must be a task name (a key of healtrl.tasks.TASKS), got {name!r}.")
    try:
        get_task(name)
    except ValueError as exc:
        raise ValueError(f"{where}: {exc}") from None


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
            Where the rule comes from, e.g. `"AER App. A, Checkpoint selection"`; shown with the results.
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
            if not is_int(k) or k < 1:
                raise ValueError(f"{k_key} must be a positive number of samples per problem, got {k!r}.")
            check_metric_against_k(kind, j, k, f"{w}.metric", k_key)
        if self.reduce not in REDUCTIONS:
            raise ValueError(f"{w}.reduce must be one of {', '.join(REDUCTIONS)}, got {self.reduce!r}.")
        checks = [
            ("temperature", is_finite_number(self.temperature) and self.temperature >= 0, "a number >= 0 (0: greedy)"),
            ("top_p", is_finite_number(self.top_p) and 0 < self.top_p <= 1, "a number in (0, 1]"),
            ("top_k", is_int(self.top_k) and self.top_k >= 0, "an integer >= 0 (0: off)"),
            ("seed", is_int(self.seed), "an integer"),
            ("include_final", isinstance(self.include_final, bool), "true or false"),
        ]
        for name in ("max_new_tokens", "num_problems", "every_steps"):
            value = getattr(self, name)
            checks.append((name, value is None or (is_int(value) and value >= 1), "a positive integer or null"))
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
            Where the protocol is stated, e.g. `"OPEFO §6.1, Evaluation"`.
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
            ("k", self.k is None or (is_int(self.k) and self.k >= 1), "a positive integer or null"),
            ("temperature", self.temperature is None or (is_finite_number(self.temperature) and self.temperature >= 0),
             "a number >= 0 or null (not stated)"),
            ("top_p", self.top_p is None or (is_finite_number(self.top_p) and 0 < self.top_p <= 1),
             "a number in (0, 1] or null (not stated)"),
            ("max_new_tokens", self.max_new_tokens is None or (is_int(self.max_new_tokens) and self.max_new_tokens >= 1),
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
            Where it is printed, e.g. `"AER Table 1, Qwen3-4B-Base, w/ AER (Ours)"`.
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
        if not is_finite_number(result.value) or not 0 <= result.value <= 100:
            raise ValueError(
                f"{where}.value must be the paper's number in percent (0-100), got {result.value!r}. Write it as "
                "the paper prints it, e.g. 22.1 for 22.1%."
            )
        if result.k is not None and (not is_int(result.k) or result.k < 1):
            raise ValueError(f"{where}.k must be a positive number of samples per problem, got {result.k!r}.")
        if result.table is not None and not isinstance(result.table, str):
            raise ValueError(f"{where}.table must be a text such as 'AER Table 1, ...', got {result.table!r}.")
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
        check_metric_against_k(kind, j, result.k, f"{where}.metric", f"{where}.k")
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


# ----------------------------------------------------------------------------------------------------------------
# The run's config
# ----------------------------------------------------------------------------------------------------------------
def read_run_config(path: str | os.PathLike) -> dict[str, Any] | None:
    """The YAML config of a run (`<run dir>/config.yaml`, or a config file), or None when there is none."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, CONFIG_FILE)
    if not os.path.isfile(path):
        return None
    from healtrl.utils.yamlfile import DuplicateKeyError, load_yaml

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
        path = os.path.join(candidate, CONFIG_FILE)
        if os.path.isfile(path):
            return read_run_config(path), path
    return None, None
