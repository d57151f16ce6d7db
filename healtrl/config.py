"""Configuration of `train.py`: one flat YAML file, overridable from the command line, checked field by field.

A config names its trainer and sets fields of three dataclasses, in TRL's flat style:

```yaml
trainer: grpo                              # a key of `healtrl.trainers.TRAINERS`
model_name_or_path: healtrl-toy/qwen2-add  # -> trl.ModelConfig
dataset_name: healtrl-toy/add              # -> healtrl.config.ScriptArguments
reward_funcs: [toy]
learning_rate: 5.0e-4                      # -> the trainer's config class (e.g. EntropyGRPOConfig)
```

`parse(argv)` reads `--config path.yaml`, applies `--key value` / `--key=value` overrides on top (command line wins),
and returns `(script_args, model_args, trainer_args, trainer_name)`. Unlike `trl.TrlParser` every mistake is a
`ConfigError` naming the field, where it was set and how to fix it: unknown keys (with close matches), values of the
wrong type (with the expected type), a missing or unknown trainer (with the available ones). `--help` lists the fields
of the chosen trainer. Without `--config`, `train.py` runs the main job (`healtrl.cli.main_job`), whose HEAL run is the
default, `DEFAULT_CONFIG_YAML`: `configs/main.yaml`, read from the package (`shipped_config`), so that a bare
`python train.py` works from any directory.

Values given on the command line are parsed with `yaml.safe_load` (so `--lr_scheduler_type cosine`, `--bf16 true`,
`--reward_funcs [toy,other]` and `--reward_funcs toy,other` all work) and then coerced to the field's type hint; a
string field keeps the text exactly as typed.

Why this module is long: TRL's `TrlParser` gives YAML defaults and the command line for the three dataclasses,
but not what a flat healtrl config needs on top: the `trainer:` key choosing the config class, refusal of unknown
and misplaced keys with the closest name, type coercion with errors that name the field and the fix, the
GPU-only settings a dry run replaces on a CPU, and the run's `config.yaml` that reproduces it. Cutting it down to
what TRL does not give is issue #15's open part.
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import os
import re
import sys
import textwrap
import types
import typing
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Literal, Union

import yaml

__all__ = [
    "DEFAULT_CONFIG_NAME",
    "DEFAULT_CONFIG_YAML",
    "FIELD_OWNERS",
    "ConfigError",
    "ResolvedConfig",
    "ScriptArguments",
    "coerce_value",
    "format_help",
    "parse",
    "resolve",
]


class ConfigError(ValueError):
    """A configuration mistake: the message names the field, where it was set, and the fix."""


# ----------------------------------------------------------------------------------------------------------------
# The embedded default run
# ----------------------------------------------------------------------------------------------------------------
DEFAULT_CONFIG_NAME = "configs/main.yaml"


def shipped_config(name: str) -> str:
    """The text of a config shipped with healtrl (`healtrl/configs/<name>`, package data; the repository's `configs/`
    is a link to that folder)."""
    from importlib.resources import files

    return (files("healtrl") / "configs" / name).read_text(encoding="utf-8")


# A bare `python train.py` runs it as step 2 of the main job (healtrl/cli/main_job.py), after the selection that
# writes its general data.
DEFAULT_CONFIG_YAML = shipped_config("main.yaml")


def default_config() -> dict[str, Any]:
    """The embedded default config (the content of `configs/main.yaml`) as a mapping."""
    return yaml.safe_load(DEFAULT_CONFIG_YAML)


# ----------------------------------------------------------------------------------------------------------------
# Script arguments
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class ScriptArguments:
    r"""
    Arguments of `train.py` that are neither model nor trainer settings: data, rewards and run housekeeping.

    Parameters:
        dataset_name (`str`, *optional*):
            Training data: a toy name (`healtrl-toy/add`, `healtrl-toy/add+compare`), a local file (json, jsonl,
            parquet, csv) or folder (`save_to_disk` output or a folder of data files), or a Hub dataset id.
        dataset_config (`str`, *optional*):
            Configuration name of a Hub dataset (the `name` argument of `datasets.load_dataset`).
        dataset_train_split (`str`, *optional*, defaults to `"train"`):
            Split used for training.
        dataset_test_split (`str`, *optional*, defaults to `"test"`):
            Split used for evaluation, when the trainer's `eval_strategy` is not `"no"`.
        eval_dataset_name (`str`, *optional*):
            Evaluation data, in any form `dataset_name` accepts. Defaults to `dataset_name`.
        num_train_samples (`int`, *optional*):
            Keep a random subset of this many training rows (drawn with `dataset_seed`). For toy datasets, the
            number of rows to generate (default 1000).
        num_target (`int`, *optional*):
            Few-shot target set: the same as `num_train_samples` under the name the HEAL paper's setups use
            (`--num_target 32`). Set one of the two.
        num_eval_samples (`int`, *optional*):
            Keep a random subset of this many evaluation rows. The "test" split of a toy dataset holds 20 held-out
            problems per task family.
        dataset_seed (`int`, *optional*):
            Seed of toy data generation and of subsetting. Defaults to the trainer's `seed`.
        train_repeats (`int` or `"auto"`, *optional*):
            Fill fixed-size prompt batches from a small training set by repetition (`healtrl.data.repeat_rows`): the
            rows become `train_repeats` copies, each copy a permutation of every row drawn from `dataset_seed`,
            concatenated copy after copy, and TRL's sampler reads them in that order (`shuffle_dataset` is set to
            false), so consecutive generation batches are consecutive slices of the copies: 128-prompt batches from 32
            rows hold each row exactly 4 times, and the batches are a function of the seed. `"auto"`: the copies that
            fill every generation batch of `max_steps` (as verl-based few-shot recipes duplicate the data). With a
            trainer that adds data of its own (HEAL's `general_dataset_name`) the copies join its pool instead
            (TRL's shuffling stays on) and `"auto"` is refused. `None`: no repetition (TRL's behaviour).
        allow_eval_overlap (`bool`, *optional*, defaults to `False`):
            Train even though rows of the evaluation data (`eval_tasks` with `eval_split`, and the evaluation dataset)
            appear in the training data (normalised prompt hash, `healtrl.hygiene`). Off: the run refuses, naming the
            task, split and count. Set it only for deliberate cases (e.g. measuring memorisation).
        reward_funcs (`list[str]`, *optional*, defaults to `[]`):
            Reward functions by name: a key of `healtrl.data.REWARD_FUNCS` (e.g. `toy`) or a dotted import path
            (`my_package.rewards.my_reward`).
        torch_num_threads (`int`, *optional*):
            CPU threads of each process. Defaults to the cores available divided by the processes on this machine
            (leaves the setting alone when `OMP_NUM_THREADS` is set).
        save_final_model (`bool`, *optional*, defaults to `True`):
            Save the trained model (or adapter, with `use_peft`) and tokenizer to `output_dir` at the end.
        eval_tasks (`list[str]`, *optional*, defaults to `[]`):
            Tasks (`healtrl.tasks.TASKS`) to evaluate the policy on during training with
            `healtrl.evaluation.PeriodicEvalCallback`; logs `eval/<task>/avg@k` and `eval/<task>/pass@j`. A math task
            takes the prompt format of the training data as a suffix: `aime25@answer_line` (DAPO's prompt and
            "Answer:" grader, for `task:dapo-math-17k` runs), `aime25` / `aime25@boxed` (the boxed prompt).
        eval_k (`int`, *optional*, defaults to `1`):
            Samples per problem of the periodic evaluation.
        eval_every_steps (`int`, *optional*, defaults to `100`):
            Run the periodic evaluation every this many optimizer steps (and at the last step).
        eval_at_start (`bool`, *optional*, defaults to `False`):
            Also run the periodic evaluation before the first step.
        eval_num_problems (`int`, *optional*):
            Evaluate a fixed random subset of this many problems per task. Defaults to every problem.
        eval_split (`str`, *optional*):
            Split of the evaluation tasks. Defaults to each task's evaluation split.
        eval_temperature (`float`, *optional*):
            Sampling temperature of the periodic evaluation. Defaults to the trainer's `temperature`.
        eval_top_p (`float`, *optional*):
            Nucleus sampling threshold of the periodic evaluation. Defaults to the trainer's `top_p`.
        eval_max_new_tokens (`int`, *optional*):
            Most tokens per evaluation completion. Defaults to the trainer's `max_completion_length`.
        eval_batch_size (`int`, *optional*, defaults to `64`):
            Sequences per `generate` call of the periodic evaluation.
        best_checkpoint (`dict`, *optional*):
            The paper's checkpoint-selection rule, as data: `healtrl eval --checkpoints <output_dir>` evaluates the
            saved checkpoints with it and marks the best. Keys (`healtrl.recipes.BestCheckpointRule`): `tasks` (list,
            required), `metric` (`avg@k`, `pass@k`, `pass@<j>`; required), `k` (int or `{task: int}`, default 1),
            `reduce` (`mean`), `temperature` (1.0), `top_p` (1.0), `top_k` (0), `max_new_tokens` (default: the run's
            `max_completion_length`), `seed` (0), `num_problems`, `split`, `every_steps` (only checkpoints at
            multiples of it are candidates; save checkpoints at that interval), `include_final` (false), `source`
            (where the paper states the rule). Example (aer.txt App. A): `{tasks: [aime25], metric: pass@1, k: 32,
            every_steps: 20}`.
        paper_results (`list[dict]`, *optional*, defaults to `[]`):
            The paper's reported numbers for this recipe, one mapping per number: `benchmark` (a task name),
            `metric` (`avg@k`, `pass@<j>`, ...), `value` (percent, as printed), `k` (samples behind the number;
            default `paper_protocol.k`), `table` (e.g. `"aer.txt Table 1, Qwen3-4B-Base, w/ AER (Ours)"`). `healtrl
            eval` on a run of this recipe writes `paper_comparison.md`: your numbers, the paper's, the difference.
        paper_protocol (`dict`, *optional*):
            How the paper decoded `paper_results`: `k`, `temperature`, `top_p`, `max_new_tokens` (null: not stated
            by the paper) and `source` (where it is stated). Mismatches with your evaluation are flagged.
    """

    dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "Training data: a toy name (`healtrl-toy/add`, `healtrl-toy/add+compare`), a local file (json, "
            "jsonl, parquet, csv) or folder (`save_to_disk` output or a folder of data files), or a Hub dataset id."
        },
    )
    dataset_config: str | None = field(
        default=None,
        metadata={"help": "Configuration name of a Hub dataset (the `name` argument of `datasets.load_dataset`)."},
    )
    dataset_train_split: str = field(default="train", metadata={"help": "Split used for training."})
    dataset_test_split: str = field(
        default="test",
        metadata={"help": "Split used for evaluation, when the trainer's `eval_strategy` is not 'no'."},
    )
    eval_dataset_name: str | None = field(
        default=None,
        metadata={"help": "Evaluation data, in any form `dataset_name` accepts. Defaults to `dataset_name`."},
    )
    num_train_samples: int | None = field(
        default=None,
        metadata={
            "help": "Keep a random subset of this many training rows (drawn with `dataset_seed`). For toy datasets, "
            "the number of rows to generate (default 1000)."
        },
    )
    num_target: int | None = field(
        default=None,
        metadata={
            "help": "Few-shot target set: keep this many training rows (drawn with `dataset_seed`); the same as "
            "num_train_samples, set one of the two."
        },
    )
    num_eval_samples: int | None = field(
        default=None,
        metadata={
            "help": "Keep a random subset of this many evaluation rows. The 'test' split of a toy dataset holds 20 "
            "held-out problems per task family."
        },
    )
    dataset_seed: int | None = field(
        default=None,
        metadata={"help": "Seed of toy data generation and of subsetting. Defaults to the trainer's `seed`."},
    )
    train_repeats: int | Literal["auto"] | None = field(
        default=None,
        metadata={
            "help": "Repeat the training rows: N copies, each a permutation drawn from dataset_seed, read in order "
            "(shuffle_dataset false), so every generation batch holds each row a fixed number of times; 'auto': the "
            "copies that fill every generation batch of max_steps. None: no repetition."
        },
    )
    allow_eval_overlap: bool = field(
        default=False,
        metadata={
            "help": "Train even though evaluation rows (eval_tasks, eval dataset) appear in the training data "
            "(healtrl.hygiene). Off: the run refuses, naming the task, split and count."
        },
    )
    reward_funcs: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Reward functions by name: a key of `healtrl.data.REWARD_FUNCS` (e.g. `toy`) or a dotted import "
            "path (`my_package.rewards.my_reward`)."
        },
    )
    torch_num_threads: int | None = field(
        default=None,
        metadata={
            "help": "CPU threads of each process. Defaults to the cores available divided by the processes on this "
            "machine (leaves the setting alone when `OMP_NUM_THREADS` is set)."
        },
    )
    save_final_model: bool = field(
        default=True,
        metadata={
            "help": "Save the trained model (or adapter, with `use_peft`) and tokenizer to `output_dir` at the end."
        },
    )
    eval_tasks: list[str] = field(
        default_factory=list,
        metadata={
            "help": "Tasks (healtrl.tasks.TASKS) to evaluate the policy on during training (PeriodicEvalCallback); "
            "logs `eval/<task>/avg@k` and `eval/<task>/pass@j`. `<math task>@answer_line` asks in DAPO's prompt "
            "format (for runs trained on task:dapo-math-17k), `<math task>@boxed` in the boxed one."
        },
    )
    eval_k: int = field(default=1, metadata={"help": "Samples per problem of the periodic evaluation."})
    eval_every_steps: int = field(
        default=100,
        metadata={"help": "Run the periodic evaluation every this many optimizer steps (and at the last step)."},
    )
    eval_at_start: bool = field(
        default=False, metadata={"help": "Also run the periodic evaluation before the first step."}
    )
    eval_num_problems: int | None = field(
        default=None,
        metadata={"help": "Evaluate a fixed random subset of this many problems per task. Defaults to every problem."},
    )
    eval_split: str | None = field(
        default=None,
        metadata={"help": "Split of the evaluation tasks. Defaults to each task's evaluation split."},
    )
    eval_temperature: float | None = field(
        default=None,
        metadata={"help": "Sampling temperature of the periodic evaluation. Defaults to the trainer's `temperature`."},
    )
    eval_top_p: float | None = field(
        default=None,
        metadata={"help": "Nucleus sampling threshold of the periodic evaluation. Defaults to the trainer's `top_p`."},
    )
    eval_max_new_tokens: int | None = field(
        default=None,
        metadata={"help": "Most tokens per evaluation completion. Defaults to the trainer's `max_completion_length`."},
    )
    eval_batch_size: int = field(
        default=64, metadata={"help": "Sequences per `generate` call of the periodic evaluation."}
    )
    best_checkpoint: dict | None = field(
        default=None,
        metadata={
            "help": "The paper's checkpoint-selection rule for `healtrl eval --checkpoints <output_dir>`: a mapping "
            "with `tasks`, `metric` (avg@k, pass@k, pass@<j>), `k`, `reduce`, `temperature`, `top_p`, "
            "`max_new_tokens`, `every_steps`, `include_final`, `source` (see healtrl.recipes.BestCheckpointRule)."
        },
    )
    paper_results: list[dict] = field(
        default_factory=list,
        metadata={
            "help": "The paper's reported numbers for this recipe: a list of {benchmark, metric, value (percent), k, "
            "table}; `healtrl eval` on the run writes them next to yours (paper_comparison.md)."
        },
    )
    paper_protocol: dict | None = field(
        default=None,
        metadata={
            "help": "The paper's decoding protocol of `paper_results`: {k, temperature, top_p, max_new_tokens, "
            "source}; null values mean not stated by the paper."
        },
    )

    def __post_init__(self):
        if self.num_target is not None:
            if self.num_train_samples is not None and self.num_train_samples != self.num_target:
                raise ValueError(
                    f"num_target ({self.num_target}) and num_train_samples ({self.num_train_samples}) both set the "
                    "number of training rows. Set only one of them."
                )
            self.num_train_samples = self.num_target
        if self.train_repeats is not None and self.train_repeats != "auto":
            if (
                isinstance(self.train_repeats, bool)
                or not isinstance(self.train_repeats, int)
                or self.train_repeats < 1
            ):
                raise ValueError(
                    f"train_repeats must be a positive number of copies, 'auto' or null, got {self.train_repeats!r}."
                )
        if isinstance(self.eval_tasks, str):
            self.eval_tasks = [t.strip() for t in self.eval_tasks.split(",") if t.strip()]
        for name in ("eval_k", "eval_every_steps", "eval_batch_size"):
            value = getattr(self, name)
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} must be a positive integer, got {value!r}.")
        for name in ("eval_num_problems", "eval_max_new_tokens"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, int) or value < 1):
                raise ValueError(f"{name} must be a positive integer or null, got {value!r}.")
        if self.eval_tasks:
            from healtrl.tasks import get_task

            for task in self.eval_tasks:
                get_task(task)  # ValueError naming the known tasks
        from healtrl.recipes import parse_best_checkpoint, parse_paper_protocol, parse_paper_results

        parse_best_checkpoint(self.best_checkpoint)  # ValueErrors name the key: best_checkpoint.<key>
        parse_paper_results(self.paper_results, parse_paper_protocol(self.paper_protocol))


# ----------------------------------------------------------------------------------------------------------------
# Routing keys to dataclasses
# ----------------------------------------------------------------------------------------------------------------
GROUPS = ("script", "model", "trainer")

# A key defined by several of the dataclasses goes to exactly one of them: the one named here, else the first of
# `ROUTING_PRIORITY` that defines it. The others keep their defaults.
FIELD_OWNERS: dict[str, str] = {
    "model_name_or_path": "model",
    "model_revision": "model",
    "dtype": "model",
    "dataset_name": "script",
    "dataset_config": "script",
    "reward_funcs": "script",
}
ROUTING_PRIORITY = ("model", "trainer", "script")

# Keys that are not dataclass fields.
SPECIAL_KEYS = {
    "trainer": "Name of the trainer (a key of healtrl.trainers.TRAINERS).",
    "env": "Mapping of environment variables to set before anything is built (YAML only).",
    "config": "Path of the YAML config (command line only).",
}


def _init_fields(cls) -> dict[str, dataclasses.Field]:
    return {f.name: f for f in dataclasses.fields(cls) if f.init}


_HINTS_CACHE: dict[type, dict[str, Any]] = {}


def _type_hints(cls) -> dict[str, Any]:
    """Resolved type hints of a dataclass; fields whose annotation cannot be resolved are typed `Any`."""
    if cls not in _HINTS_CACHE:
        try:
            hints = typing.get_type_hints(cls)
        except Exception:  # pragma: no cover - an unresolvable forward reference somewhere in the MRO
            hints = {}
            for klass in reversed(cls.__mro__):
                try:
                    hints.update(typing.get_type_hints(klass))
                except Exception:
                    hints.update({name: Any for name in getattr(klass, "__annotations__", {})})
        _HINTS_CACHE[cls] = hints
    return _HINTS_CACHE[cls]


def route_fields(classes: dict[str, type]) -> dict[str, str]:
    """Map every settable key to the one group (`script`, `model`, `trainer`) whose dataclass receives it."""
    owners: dict[str, list[str]] = {}
    for group, cls in classes.items():
        for name in _init_fields(cls):
            owners.setdefault(name, []).append(group)
    routes = {}
    for name, groups in owners.items():
        if len(groups) == 1:
            routes[name] = groups[0]
        elif FIELD_OWNERS.get(name) in groups:
            routes[name] = FIELD_OWNERS[name]
        else:
            routes[name] = next(g for g in ROUTING_PRIORITY if g in groups)
    return routes


# ----------------------------------------------------------------------------------------------------------------
# Coercion of values to type hints
# ----------------------------------------------------------------------------------------------------------------
class _Mismatch(Exception):
    """The value does not fit the type hint."""


_TRUE = {"true", "yes", "y", "on", "1"}
_FALSE = {"false", "no", "n", "off", "0"}
_NONE_TYPE = type(None)


def _is_union(hint) -> bool:
    return typing.get_origin(hint) in (Union, types.UnionType)


def _is_enum(hint) -> bool:
    return isinstance(hint, type) and issubclass(hint, enum.Enum)


def _union_members(hint) -> list:
    """Members of a union, with HF's `SomeEnum | str` read as "one of the enum's values"."""
    members = list(typing.get_args(hint))
    if any(_is_enum(m) for m in members) and str in members:
        members.remove(str)
    return members


def describe_type(hint) -> str:
    """Human-readable name of a type hint, for error messages and `--help`."""
    if hint is Any:
        return "any value"
    if hint is _NONE_TYPE or hint is None:
        return "null"
    if _is_union(hint):
        members = _union_members(hint)
        names = [describe_type(m) for m in members if m is not _NONE_TYPE]
        text = " or ".join(dict.fromkeys(names))
        return f"{text} or null" if _NONE_TYPE in members else text
    origin = typing.get_origin(hint)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(hint))
    if _is_enum(hint):
        return "one of " + ", ".join(repr(m.value) for m in hint)
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        return f"list of {describe_type(args[0])}" if args else "list"
    if origin is dict or hint is dict:
        return "mapping"
    if isinstance(hint, type):
        return hint.__name__
    return str(hint)


def _fits_exactly(value, hint) -> bool:
    """Whether `value` already has the type `hint` names (no conversion), for picking a union member."""
    if hint is Any:
        return True
    if hint is _NONE_TYPE:
        return value is None
    if hint is bool:
        return isinstance(value, bool)
    if hint is int:
        return isinstance(value, int) and not isinstance(value, bool)
    if hint is float:
        return isinstance(value, float)
    if hint is str:
        return isinstance(value, str)
    origin = typing.get_origin(hint)
    if origin is Literal:
        return any(value == a and type(value) is type(a) for a in typing.get_args(hint))
    if _is_enum(hint):
        return isinstance(value, hint) or any(value == m.value for m in hint)
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set):
        return isinstance(value, (list, tuple))
    if origin is dict or hint is dict:
        return isinstance(value, dict)
    if isinstance(hint, type):
        return isinstance(value, hint)
    return False


def coerce_value(value, hint, raw: str | None = None):
    """Convert `value` to the type hint `hint`, or raise `ValueError` naming the expected type.

    `raw` is the text typed on the command line (string fields keep it verbatim). Accepted conversions: strings such
    as "5e-4" to float (YAML reads `5e-4` without a dot as a string), integral floats and numeric strings to int,
    "true"/"false"/"yes"/"no"/0/1 to bool, numbers to str, a scalar or a comma-separated string to a one-or-more item
    list, enum values (HF's `lr_scheduler_type`, `optim`, ...) checked against their choices, and YAML's unquoted
    yes/no/on/off booleans to the matching string choice (`save_strategy: no`).
    """
    try:
        return _coerce(value, hint, raw)
    except _Mismatch:
        pass
    if raw is not None and raw != value:  # e.g. `--save_strategy no`: YAML reads `no` as False; the text fits
        try:
            return _coerce(raw, hint, raw)
        except _Mismatch:
            pass
    raise ValueError(f"expected {describe_type(hint)}")


def _coerce(value, hint, raw):
    if hint is Any or hint is object:
        return value
    if hint is _NONE_TYPE or hint is None:
        if value is None:
            return None
        raise _Mismatch
    if _is_union(hint):
        members = _union_members(hint)
        if value is None:
            if _NONE_TYPE in members:
                return None
            raise _Mismatch
        members = [m for m in members if m is not _NONE_TYPE]
        for member in members:  # a member the value already is, without conversion, wins
            if _fits_exactly(value, member):
                return _coerce(value, member, raw)
        for member in members:
            try:
                return _coerce(value, member, raw)
            except _Mismatch:
                continue
        raise _Mismatch
    origin = typing.get_origin(hint)
    if isinstance(value, bool) and (origin is Literal or _is_enum(hint)):
        # YAML 1.1 reads unquoted yes/no/on/off/true/false as booleans: `save_strategy: no` means the choice "no".
        choices = [m.value for m in hint] if _is_enum(hint) else list(typing.get_args(hint))
        if value not in [c for c in choices if isinstance(c, bool)]:
            spellings = ("yes", "true", "on", "y") if value else ("no", "false", "off", "n")
            for text in spellings:
                if text in choices:
                    return text
    if origin is Literal:
        for choice in typing.get_args(hint):
            if value == choice and type(value) is type(choice):
                return choice
            try:
                if _coerce(value, type(choice), raw) == choice:
                    return choice
            except _Mismatch:
                pass
        raise _Mismatch
    if _is_enum(hint):
        if isinstance(value, hint):
            return value.value
        for member in hint:
            if value == member.value or (isinstance(value, str) and value.lower() == str(member.value).lower()):
                return member.value
        raise _Mismatch
    if hint is bool:
        if isinstance(value, bool):
            return value
        if isinstance(value, int) and value in (0, 1):
            return bool(value)
        if isinstance(value, str) and value.strip().lower() in _TRUE | _FALSE:
            return value.strip().lower() in _TRUE
        raise _Mismatch
    if hint is int:
        if isinstance(value, bool):
            raise _Mismatch
        if isinstance(value, int):
            return value
        if isinstance(value, float) and value.is_integer():
            return int(value)
        if isinstance(value, str):
            text = value.strip().replace("_", "")
            try:
                return int(text)
            except ValueError:
                pass
            try:
                number = float(text)
            except ValueError:
                raise _Mismatch from None
            if number.is_integer():
                return int(number)
        raise _Mismatch
    if hint is float:
        if isinstance(value, bool):
            raise _Mismatch
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            try:
                return float(value.strip())
            except ValueError:
                raise _Mismatch from None
        raise _Mismatch
    if hint is str:
        if isinstance(value, str):
            return value
        if raw is not None and not isinstance(value, (list, dict)):
            return raw
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return str(value)
        raise _Mismatch
    if origin in (list, tuple, set, frozenset) or hint in (list, tuple, set):
        args = [a for a in typing.get_args(hint) if a is not Ellipsis]
        item_hint = args[0] if args else Any
        if isinstance(value, (list, tuple)):
            items = list(value)
        elif isinstance(value, str) and "," in value:
            items = [part.strip() for part in value.split(",") if part.strip()]
        elif value is None:
            raise _Mismatch
        else:
            items = [value]
        return [_coerce(item, item_hint, None) for item in items]
    if origin is dict or hint is dict:
        if isinstance(value, str):  # a JSON/YAML mapping written as a string
            try:
                parsed = yaml.safe_load(value)
            except yaml.YAMLError:
                raise _Mismatch from None
            value = parsed
        if not isinstance(value, dict):
            raise _Mismatch
        args = typing.get_args(hint)
        if len(args) == 2:
            return {_coerce(k, args[0], None): _coerce(v, args[1], None) for k, v in value.items()}
        return dict(value)
    if dataclasses.is_dataclass(hint) and isinstance(hint, type):
        if isinstance(value, hint):
            return value
        if isinstance(value, dict):
            try:
                return hint(**value)
            except TypeError:
                raise _Mismatch from None
        raise _Mismatch
    if isinstance(hint, type):
        if isinstance(value, hint):
            return value
        raise _Mismatch
    return value  # an exotic hint (TypeVar, Callable, ...): pass the value through


def _to_plain(value):
    """A YAML-safe copy of a coerced value (enum members to their values)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: _to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_to_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return _to_plain(dataclasses.asdict(value))
    return value


# ----------------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class _CommandLine:
    config_path: str | None = None
    help: bool = False
    # (key, raw text or None for a bare flag, the option as typed)
    overrides: list[tuple[str, list[str] | None, str]] = field(default_factory=list)


def _split_argv(argv: list[str]) -> _CommandLine:
    """Split `argv` into `--config`, `--help` and `--key value` overrides (values are kept as text)."""
    cli = _CommandLine()
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in ("-h", "--help"):
            cli.help = True
            i += 1
            continue
        if not token.startswith("--") or token == "--":
            raise ConfigError(
                f"Unexpected command-line argument {token!r}. Arguments are `--config path.yaml` and overrides of "
                "the form `--key value` or `--key=value`; quote values that contain spaces."
            )
        body = token[2:]
        if "=" in body:
            key, text = body.split("=", 1)
            values: list[str] | None = [text]
            i += 1
        else:
            key = body
            values = []
            i += 1
            while i < len(argv) and not argv[i].startswith("--") and argv[i] != "-h":
                values.append(argv[i])
                i += 1
            if not values:
                values = None
        key = key.replace("-", "_")
        if key == "config":
            if not values or len(values) != 1:
                raise ConfigError(
                    "`--config` needs exactly one value: the path of a YAML config, e.g. "
                    "`--config configs/toy_grpo.yaml`."
                )
            cli.config_path = values[0]
            continue
        cli.overrides.append((key, values, token))
    return cli


def _parse_cli_value(values: list[str]):
    """The YAML reading of one or more command-line words (several words form a list, as with nargs='+')."""

    def one(text: str):
        try:
            return yaml.safe_load(text) if text.strip() else text
        except yaml.YAMLError:
            return text

    if len(values) == 1:
        return one(values[0]), values[0]
    return [one(v) for v in values], None


# ----------------------------------------------------------------------------------------------------------------
# Resolution
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class ResolvedConfig:
    """The outcome of `resolve`: the built argument dataclasses plus where every explicitly set key came from."""

    trainer_name: str
    script_args: ScriptArguments
    model_args: Any
    trainer_args: Any
    values: dict[str, Any]
    sources: dict[str, str]
    config_path: str | None = None
    env: dict[str, str] = field(default_factory=dict)

    def as_tuple(self) -> tuple[ScriptArguments, Any, Any, str]:
        return self.script_args, self.model_args, self.trainer_args, self.trainer_name

    def to_yaml(self) -> str:
        """The explicitly set keys as a flat YAML config that reproduces the run with `--config`."""
        data: dict[str, Any] = {"trainer": self.trainer_name}
        if self.env:
            data["env"] = dict(self.env)
        data.update({k: _to_plain(v) for k, v in self.values.items() if k != "trainer"})
        return yaml.safe_dump(data, sort_keys=False)


def _trainer_registry(registry):
    if registry is not None:
        return registry
    from healtrl.trainers import TRAINERS

    return TRAINERS


def _get_trainer_classes(name, registry, source: str) -> tuple[type, type]:
    registry = _trainer_registry(registry)
    if name is None:
        raise ConfigError(
            f"No trainer is set ({source}). Add `trainer: <name>` to the YAML config or pass `--trainer <name>`; "
            f"available trainers: {', '.join(sorted(registry))}."
        )
    if not isinstance(name, str) or name not in registry:
        close = difflib.get_close_matches(str(name), list(registry), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(
            f"Unknown trainer {name!r} ({source}). Available trainers: {', '.join(sorted(registry))}.{hint} Set "
            "`trainer:` in the config (or `--trainer` on the command line) to one of them."
        )
    return registry[name]


def _load_yaml(path: str) -> dict[str, Any]:
    if not os.path.isfile(path):
        raise ConfigError(
            f"Config file {path!r} does not exist (working directory: {os.getcwd()}). Pass the path of a YAML "
            "config with `--config`, e.g. `--config configs/toy_grpo.yaml`."
        )
    with open(path) as f:
        try:
            data = yaml.safe_load(f)
        except yaml.YAMLError as exc:
            raise ConfigError(f"Config file {path!r} is not valid YAML: {exc}. Fix the syntax at that line.") from None
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(
            f"Config file {path!r} must be a YAML mapping of `key: value` lines, found a {type(data).__name__}."
        )
    return data


def _classes_for(trainer_config_cls) -> dict[str, type]:
    from trl import ModelConfig

    return {"script": ScriptArguments, "model": ModelConfig, "trainer": trainer_config_cls}


def _help_hint(config_path: str | None, prog: str = "train.py") -> str:
    where = f"--config {config_path} " if config_path else ""
    command = f"python {prog}" if prog.endswith(".py") else prog
    return f"`{command} {where}--help`"


def resolve(
    argv: list[str] | None = None,
    *,
    default: dict[str, Any] | str | None = None,
    registry: dict[str, tuple[type, type]] | None = None,
    prog: str = "train.py",
    adjust: Callable[[dict[str, Any], dict[str, str]], None] | None = None,
) -> ResolvedConfig:
    """Parse `argv` into the three argument dataclasses; see `parse`.

    Args:
        argv: Command-line words (default `sys.argv[1:]`).
        default: Config used when `argv` has no `--config`: a mapping or YAML text. `None` means no default (then
            `trainer` and the other keys must come from the command line).
        registry: Trainer registry, name -> (trainer class, config class); defaults to `healtrl.trainers.TRAINERS`.
        prog: Program name shown by `--help`.
        adjust: Called as `adjust(values, sources)` with the merged, type-checked values (key -> value) and where each
            was set, just before the dataclasses are built; it may change both in place (`train.py --dry_run` uses
            it to build GPU configs on a machine without one, and says so).
    """
    argv = list(sys.argv[1:] if argv is None else argv)
    cli = _split_argv(argv)

    # 1. The base layer: the YAML file, else the embedded default.
    if cli.config_path is not None:
        base = _load_yaml(cli.config_path)
        base_source = f"in config file {cli.config_path}"
    elif default is not None:
        base = yaml.safe_load(default) if isinstance(default, str) else dict(default)
        base_source = f"in the embedded default config ({DEFAULT_CONFIG_NAME})"
    else:
        base, base_source = {}, None

    if "config" in base:
        raise ConfigError(
            f"`config` is set {base_source}; a YAML config cannot include another. Remove the key and pass the "
            "path with `--config` on the command line."
        )
    env = base.pop("env", None)
    if env is not None:
        if not isinstance(env, dict):
            raise ConfigError(f"`env` {base_source} must be a mapping of environment variable names to values.")
        env = {str(name): str(value) for name, value in env.items()}
        os.environ.update(env)

    # 2. The trainer decides which config class the remaining keys belong to.
    trainer_name, trainer_source = base.get("trainer"), base_source or "no config file given"
    for key, values, _ in cli.overrides:
        if key == "trainer":
            if not values or len(values) != 1:
                raise ConfigError("`--trainer` needs one value, the trainer's name, e.g. `--trainer grpo`.")
            trainer_name, trainer_source = values[0], "on the command line"
    if trainer_name is None and cli.help:
        print(format_help(None, registry=registry, prog=prog))
        raise SystemExit(0)
    _, config_cls = _get_trainer_classes(trainer_name, registry, trainer_source)
    classes = _classes_for(config_cls)
    if cli.help:
        print(format_help(trainer_name, registry=registry, prog=prog))
        raise SystemExit(0)

    routes = route_fields(classes)
    fields = {group: _init_fields(cls) for group, cls in classes.items()}
    hints = {group: _type_hints(cls) for group, cls in classes.items()}
    known = sorted(set(routes) | set(SPECIAL_KEYS))

    def unknown(key: str, where: str):
        other = [
            name
            for name, (_, cls) in sorted(_trainer_registry(registry).items())
            if name != trainer_name and key in _init_fields(cls)
        ]
        close = difflib.get_close_matches(key, known, n=3, cutoff=0.6)
        if other:
            suggestion = (
                f" It is a field of the trainer{'s' if len(other) > 1 else ''} "
                + ", ".join(f"'{name}'" for name in other)
                + f"; set `trainer:` to {'one of them' if len(other) > 1 else 'it'} to use it."
            )
        elif close:
            suggestion = " Did you mean " + " or ".join(f"`{c}`" for c in close) + "?"
        else:
            suggestion = " No key has a similar name."
        return ConfigError(
            f"Unknown key `{key}` {where}.{suggestion} Keys are the fields of ScriptArguments, ModelConfig and "
            f"{config_cls.__name__} (trainer '{trainer_name}'); list them with {_help_hint(cli.config_path, prog)}."
        )

    def convert(key: str, value, raw, where: str):
        group = routes[key]
        hint = hints[group].get(key, Any)
        f = fields[group][key]
        try:
            converted = coerce_value(value, hint, raw)
        except ValueError:
            default_value = _field_default(f)
            example = f" Its default is {default_value!r}." if default_value is not _MISSING else ""
            shown = raw if raw is not None else value
            raise ConfigError(
                f"Invalid value for `{key}` {where}: expected {describe_type(hint)}, got {shown!r} "
                f"({type(value).__name__}).{example} Set `{key}` to a value of that type (quote strings in YAML; "
                f"run {_help_hint(cli.config_path, prog)} for the meaning of each field)."
            ) from None
        choices = f.metadata.get("choices")
        if choices is not None and converted is not None and converted not in list(choices):
            raise ConfigError(
                f"Invalid value for `{key}` {where}: {converted!r} is not one of "
                f"{', '.join(repr(c) for c in choices)}. Set `{key}` to one of them."
            )
        return converted

    # 3. Merge: the base layer, then the command line.
    values: dict[str, Any] = {}
    sources: dict[str, str] = {}
    for key, value in base.items():
        if key == "trainer":
            continue
        if not isinstance(key, str) or key not in routes:
            raise unknown(str(key), base_source)
        values[key] = convert(key, value, None, base_source)
        sources[key] = base_source
    for key, words, token in cli.overrides:
        if key == "trainer":
            continue
        where = f"on the command line ({token.split('=', 1)[0]})"
        if key not in routes:
            raise unknown(key, where)
        if words is None:  # a bare `--flag`
            hint = hints[routes[key]].get(key, Any)
            if not _accepts_bool(hint):
                raise ConfigError(
                    f"`--{key}` on the command line has no value; `{key}` expects {describe_type(hint)}. Pass it as "
                    f"`--{key} VALUE` or `--{key}=VALUE`."
                )
            value, raw = True, None
        else:
            value, raw = _parse_cli_value(words)
        values[key] = convert(key, value, raw, where)
        sources[key] = where

    if adjust is not None:
        adjust(values, sources)

    # 4. Build the dataclasses; their own checks (__post_init__) become ConfigErrors too.
    kwargs: dict[str, dict[str, Any]] = {group: {} for group in GROUPS}
    for key, value in values.items():
        kwargs[routes[key]][key] = value
    built = {}
    for group in GROUPS:
        cls = classes[group]
        try:
            built[group] = cls(**kwargs[group])
        except (ValueError, TypeError) as exc:
            message = str(exc).strip()
            named = [k for k in kwargs[group] if re.search(rf"\b{re.escape(k)}\b", message)]
            involved = "; ".join(f"`{k}` = {_to_plain(values[k])!r} {sources[k]}" for k in named)
            involved = f" Values involved: {involved}." if involved else ""
            if message and message[-1] not in ".!?":
                message += "."
            raise ConfigError(
                f"{cls.__name__} rejected the configuration: {message}{involved} Change these values in the config "
                "file or on the command line."
            ) from exc

    script_args, model_args = built["script"], built["model"]
    _check_required(script_args, model_args, sources, cli.config_path)
    return ResolvedConfig(
        trainer_name=trainer_name,
        script_args=script_args,
        model_args=model_args,
        trainer_args=built["trainer"],
        values=values,
        sources=sources,
        config_path=cli.config_path,
        env=env or {},
    )


def parse(
    argv: list[str] | None = None,
    *,
    default: dict[str, Any] | str | None = DEFAULT_CONFIG_YAML,
    registry: dict[str, tuple[type, type]] | None = None,
) -> tuple[ScriptArguments, Any, Any, str]:
    """Parse a YAML config plus command-line overrides into `(script_args, model_args, trainer_args, trainer_name)`.

    `argv` defaults to `sys.argv[1:]`. Without `--config`, the embedded default (`DEFAULT_CONFIG_YAML`) is the base
    layer; pass `default=None` to start from nothing. Raises `ConfigError` for any mistake; prints the fields and
    exits on `--help`.
    """
    return resolve(argv, default=default, registry=registry).as_tuple()


class _MissingType:
    def __repr__(self):
        return "<required>"


_MISSING = _MissingType()


def _field_default(f: dataclasses.Field):
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:  # type: ignore[misc]
        try:
            return f.default_factory()  # type: ignore[misc]
        except Exception:  # pragma: no cover
            return _MISSING
    return _MISSING


def _accepts_bool(hint) -> bool:
    if hint is bool or hint is Any:
        return True
    if _is_union(hint):
        return any(_accepts_bool(m) for m in typing.get_args(hint))
    return False


def _check_required(script_args: ScriptArguments, model_args, sources: dict[str, str], config_path) -> None:
    if not model_args.model_name_or_path:
        raise ConfigError(
            "`model_name_or_path` is not set. Add e.g. `model_name_or_path: healtrl-toy/qwen2-add` to the config "
            "(a Hub id, a local folder, or a `healtrl-toy/...` / `healtrl-offline/...` name)."
        )
    if not script_args.dataset_name:
        raise ConfigError(
            "`dataset_name` is not set. Add e.g. `dataset_name: healtrl-toy/add` to the config (a toy name, a local "
            "file or folder, or a Hub dataset id)."
        )
    if not script_args.reward_funcs:
        raise ConfigError(
            "`reward_funcs` is empty: GRPO needs at least one reward. Add e.g. `reward_funcs: [toy]` to the config "
            "(a name from healtrl.data.REWARD_FUNCS or a dotted import path)."
        )
    from healtrl.data import REWARD_FUNCS

    for name in script_args.reward_funcs:
        if name in REWARD_FUNCS or "." in name:
            continue
        close = difflib.get_close_matches(name, list(REWARD_FUNCS), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        where = sources.get("reward_funcs", "by default")
        raise ConfigError(
            f"Unknown reward function '{name}' in `reward_funcs` {where}.{hint} Use a registered name "
            f"({', '.join(sorted(REWARD_FUNCS))}) or a dotted import path such as `my_package.rewards.my_reward`."
        )


# ----------------------------------------------------------------------------------------------------------------
# --help
# ----------------------------------------------------------------------------------------------------------------
def _first_paragraph(text: str) -> str:
    return " ".join(text.split())


def format_help(trainer_name: str | None, *, registry=None, prog: str = "train.py") -> str:
    """The `--help` text: usage, the trainers, then every field (type, default, help) of the chosen trainer's config."""
    registry = _trainer_registry(registry)
    width = 100
    lines = [
        f"usage: {prog} [--config CONFIG.yaml] [--key VALUE ...] [--help]",
        "",
        "Train with a healtrl trainer. Keys come from a flat YAML config (--config) and are overridden by --key VALUE "
        "or --key=VALUE on the command line. Without --config the embedded default "
        f"({DEFAULT_CONFIG_NAME}) runs.",
        "",
        "trainer (--trainer NAME):",
    ]
    for name, (trainer_cls, config_cls) in sorted(registry.items()):
        mark = " (selected)" if name == trainer_name else ""
        lines.append(f"  {name}: {trainer_cls.__name__} with {config_cls.__name__}{mark}")
    if trainer_name is None:
        from trl import ModelConfig

        classes = {"script": ScriptArguments, "model": ModelConfig}
        lines += ["", "Set a trainer (--trainer NAME or `trainer:` in the config) to list the trainer's fields too."]
    else:
        classes = _classes_for(registry[trainer_name][1])
    routes = route_fields(classes)
    titles = {"script": "script arguments", "model": "model arguments", "trainer": "trainer arguments"}
    for group, cls in classes.items():
        lines += ["", f"{titles[group]} ({cls.__name__}):"]
        hints = _type_hints(cls)
        for name, f in _init_fields(cls).items():
            if routes.get(name) != group:
                continue
            default_value = _field_default(f)
            default_text = "required" if default_value is _MISSING else f"default: {_to_plain(default_value)!r}"
            lines.append(f"  --{name} ({describe_type(hints.get(name, Any))}; {default_text})")
            help_text = _first_paragraph(f.metadata.get("help", ""))
            if help_text:
                lines += textwrap.wrap(help_text, width=width, initial_indent=" " * 6, subsequent_indent=" " * 6)
    return "\n".join(lines)
