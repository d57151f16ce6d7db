"""Config validation: the checks of a run config's values that `healtrl.cli.config.resolve` runs, and `ConfigError`.

`resolve` serves both `train.py --dry_run` and the real run, so both refuse the same configs with the same
`ConfigError`, which names the key, where it was set (file or command line) and the fix. The mistakes found while
the config is read (an unknown key or trainer, a key set twice, a second `--config`, a value outside a field's
`choices`) are raised as the same error where `healtrl.cli.config` reads it. The checks here, in the order `resolve`
runs them:

1. Types (`coerce_value`): TRL's `TrlParser` hands YAML values to the dataclasses unconverted and converts
   command-line text with argparse `type=` callables (one type per field; an error exits the process with a usage
   line). A flat healtrl config needs one conversion for both layers that raises instead, so that the caller can name
   the key, where it was set and the fix. Booleans written as text are read by transformers' own `string_to_bool`
   (the words TRL's command line accepts). `describe_type` names a type hint for the errors and `--help`.
2. Ranges (`FIELD_RANGES`, checked in one loop by `check_ranges`) on the merged values, before any dataclass is
   built. Ranges are not checked by the dataclasses of TRL and transformers, which let through values that crash the
   run later, after the model has loaded: `per_device_train_batch_size: 0` divides by zero in
   `GRPOConfig.__post_init__` (a negative one is blamed there on divisibility), `temperature: 0` divides the logits by
   zero, `torch_num_threads: 0` fails in `torch.set_num_threads`, a negative `learning_rate` trains uphill, a negative
   `seed` fails in numpy. The error names the range and the default too.
3. After the dataclasses are built: the fields a run cannot do without (`model_name_or_path`, `dataset_name`,
   `reward_funcs`, each reward known: `check_required_fields`) and an `output_dir` that can become a folder
   (`check_output_dir`).

Not repeated here, so that each rule has one home:
- TRL's own checks (`num_generations >= 2`, the divisibility of the batch sizes): `resolve` runs `GRPOConfig`'s
  `__post_init__` and reports its errors naming the values involved. The range table only keeps out of it the values
  TRL divides by before it checks them (`per_device_train_batch_size: 0`; `num_generations`, whose `>= 2` TRL checks
  only after a modulo by it).
- The fields a healtrl config class checks in its `__post_init__` (AER's `tau`, `rho`, `eta`; PosAdv's `lambda_init`,
  `lambda_step`; HEAL's `general_share`; the baselines' ratios; `ScriptArguments.eval_k`, ...): reported the same way.

Not config validation, and so not here: what the dry runs check on this machine of what a config names (the model
folder or Hub id, a sample of each dataset, the GPU and the extras: `healtrl.cli.dry_run_checks`), and the data
hygiene of a run, which compares the prompts of the loaded data (`healtrl.cli.run_hygiene`).
"""

from __future__ import annotations

import dataclasses
import difflib
import enum
import math
import os
import types
import typing
from dataclasses import dataclass
from typing import Any, Literal, Union

import yaml

from healtrl.utils.yamlfile import DuplicateKeyError, load_yaml

__all__ = [
    "FIELD_RANGES",
    "ConfigError",
    "Range",
    "accepts_bool",
    "check_output_dir",
    "check_ranges",
    "check_required_fields",
    "coerce_value",
    "describe_type",
    "to_plain",
]


class ConfigError(ValueError):
    """A configuration mistake: the message names the field, where it was set, and the fix."""


# ----------------------------------------------------------------------------------------------------------------
# Types: a config value converted to its field's type hint
# ----------------------------------------------------------------------------------------------------------------


class _Mismatch(Exception):
    """The value does not fit the type hint."""


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
    0/1 and the words of `transformers.hf_argparser.string_to_bool` (true/false, yes/no, t/f, y/n, 1/0, any case)
    to bool, numbers to str, a scalar or a comma-separated string to a one-or-more item list, enum values (HF's
    `lr_scheduler_type`, `optim`, ...) checked against their choices, and YAML's unquoted yes/no/on/off booleans to
    the matching string choice (`save_strategy: no`).
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


def _read_text(read, text: str, error: type[Exception] = ValueError):
    """`read(text)`, with its `error` turned into a mismatch."""
    try:
        return read(text)
    except error:
        raise _Mismatch from None


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
        if isinstance(value, str):
            from argparse import ArgumentTypeError

            from transformers.hf_argparser import string_to_bool

            return _read_text(string_to_bool, value.strip(), ArgumentTypeError)
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
            number = _read_text(float, text)
            if number.is_integer():
                return int(number)
        raise _Mismatch
    if hint is float:
        if isinstance(value, bool):
            raise _Mismatch
        if isinstance(value, (int, float)):
            return float(value)
        if isinstance(value, str):
            return _read_text(float, value.strip())
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
                parsed = load_yaml(value)
            except DuplicateKeyError:
                raise  # named by the caller: the text is a mapping, with a key set twice
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


def accepts_bool(hint) -> bool:
    """Whether a field of this type hint takes a boolean (a bare `--flag` on the command line sets it to true)."""
    if hint is bool or hint is Any:
        return True
    if _is_union(hint):
        return any(accepts_bool(m) for m in typing.get_args(hint))
    return False


def to_plain(value):
    """A YAML-safe copy of a coerced value (enum members to their values)."""
    if isinstance(value, enum.Enum):
        return value.value
    if isinstance(value, dict):
        return {k: to_plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_plain(v) for v in value]
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return to_plain(dataclasses.asdict(value))
    return value


# ----------------------------------------------------------------------------------------------------------------
# Ranges of numeric fields
# ----------------------------------------------------------------------------------------------------------------
# A value of `None` is never checked here (the field's type says whether null is allowed). Every bounded value must be
# finite: NaN and infinity are refused.


@dataclass(frozen=True)
class Range:
    """The values a numeric field accepts: `low` .. `high` (each bound included unless `*_open`), plus `special`
    values outside it with their meaning; `meaning` says what the field is, for the error message."""

    low: float | None = None
    high: float | None = None
    low_open: bool = False
    high_open: bool = False
    special: tuple[tuple[Any, str], ...] = ()
    meaning: str = ""

    def accepts(self, value) -> bool:
        if any(value == v and type(value) is type(v) for v, _ in self.special):
            return True
        if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
            return False
        if self.low is not None and (value <= self.low if self.low_open else value < self.low):
            return False
        if self.high is not None and (value >= self.high if self.high_open else value > self.high):
            return False
        return True

    def describe(self) -> str:
        """E.g. `>= 1`, `> 0`, `in (0, 1]`, `>= 1, or -1 (...)`."""
        if self.low is not None and self.high is not None:
            text = f"in {'(' if self.low_open else '['}{self.low:g}, {self.high:g}{')' if self.high_open else ']'}"
        elif self.low is not None:
            text = f"{'>' if self.low_open else '>='} {self.low:g}"
        else:
            text = f"{'<' if self.high_open else '<='} {self.high:g}"
        for value, why in self.special:
            text += f", or {value!r} ({why})"
        return text


def _at_least(low: float, meaning: str, **kw) -> Range:
    return Range(low=low, meaning=meaning, **kw)


def _positive(meaning: str) -> Range:
    return Range(low=0, low_open=True, meaning=meaning)


def _unit(meaning: str, low_open: bool = False, high_open: bool = False) -> Range:
    return Range(low=0, high=1, low_open=low_open, high_open=high_open, meaning=meaning)


_SEED = Range(low=0, high=2**32 - 1, meaning="numpy accepts seeds in this range only")

FIELD_RANGES: dict[str, Range] = {
    # The batch (TrainingArguments, GRPOConfig): TRL and torch divide by these.
    "per_device_train_batch_size": _at_least(1, "completions per process in one micro-batch"),
    "per_device_eval_batch_size": _at_least(1, "completions per process in one evaluation batch"),
    "gradient_accumulation_steps": _at_least(1, "micro-batches per optimizer step"),
    # TRL requires >= 2 too, but only after a modulo by it: 0 would crash there.
    "num_generations": _at_least(2, "completions per prompt, whose rewards GRPO compares"),
    "num_generations_eval": _at_least(1, "completions per prompt in evaluation"),
    "generation_batch_size": _at_least(1, "completions per generation batch"),
    "steps_per_generation": _at_least(1, "micro-batches per generation batch"),
    "num_iterations": _at_least(1, "optimizer passes over each generation batch"),
    "max_completion_length": _at_least(1, "most tokens per completion"),
    # The run's length and its periodic actions (transformers reads a value < 1 as a fraction of the run).
    "max_steps": _at_least(1, "optimizer steps of the run", special=((-1, "train for num_train_epochs instead"),)),
    "num_train_epochs": _positive("passes over the training data, when max_steps is -1"),
    "save_steps": _positive("steps between checkpoints, or a fraction of the run when < 1"),
    "logging_steps": _positive("steps between log entries, or a fraction of the run when < 1"),
    "eval_steps": _positive("steps between evaluations, or a fraction of the run when < 1"),
    "warmup_steps": _at_least(0, "learning-rate warmup steps, or a fraction of the run when < 1"),
    # The optimizer.
    "learning_rate": _at_least(0, "a negative rate climbs the loss instead of descending it"),
    "weight_decay": _at_least(0, "AdamW's decoupled weight decay"),
    "max_grad_norm": _at_least(0, "gradient clipping norm; 0 turns clipping off"),
    "adam_beta1": _unit("AdamW's first-moment decay", high_open=True),
    "adam_beta2": _unit("AdamW's second-moment decay", high_open=True),
    "adam_epsilon": _at_least(0, "AdamW's denominator term"),
    "seed": _SEED,
    "data_seed": _SEED,
    "dataloader_num_workers": _at_least(0, "data-loading worker processes; 0 loads in the main process"),
    # Sampling (GRPOConfig): the rollouts divide the logits by the temperature.
    "temperature": _positive("the logits are divided by it; sample at a small value such as 0.1 for near-greedy"),
    "top_p": _unit("nucleus sampling mass; 1 keeps every token", low_open=True),
    "top_k": _at_least(0, "tokens kept by top-k filtering; 0 turns it off"),
    "min_p": _unit("minimum token probability relative to the most likely token"),
    "repetition_penalty": _positive("1 leaves the logits as they are"),
    "vllm_gpu_memory_utilization": _unit("share of the GPU memory vLLM may take", low_open=True),
    # The loss (GRPOConfig).
    "beta": _at_least(0, "weight of the KL penalty; 0 turns it off"),
    "epsilon": _at_least(0, "lower clipping range of the ratio, 1 - epsilon"),
    "epsilon_high": _at_least(0, "upper clipping range of the ratio, 1 + epsilon_high"),
    "delta": _positive("upper bound of two-sided clipping"),
    "top_entropy_quantile": _unit("share of tokens, by entropy, kept in the loss"),
    # ScriptArguments.
    "torch_num_threads": _at_least(1, "CPU threads of each process; unset: the cores divided by the processes"),
    "num_train_samples": _at_least(1, "training rows to keep"),
    "num_target": _at_least(1, "few-shot training rows to keep"),
    "num_eval_samples": _at_least(1, "evaluation rows to keep"),
    "dataset_seed": _SEED,
    "eval_temperature": _at_least(0, "0 decodes greedily"),
    "eval_top_p": _unit("nucleus sampling mass of the periodic evaluation", low_open=True),
    # ModelConfig (LoRA).
    "lora_r": _at_least(1, "rank of the LoRA matrices"),
    "lora_alpha": _positive("LoRA scaling, alpha / r"),
    "lora_dropout": _unit("dropout probability of the LoRA layers", high_open=True),
}


def check_ranges(values: dict[str, Any]) -> tuple[str, Any, Range] | None:
    """The first `(key, value, range)` of `values` (merged, type-checked config values) outside its `FIELD_RANGES`
    entry, in the order the keys were set; None when every value is in range."""
    for key, value in values.items():
        bounds = FIELD_RANGES.get(key)
        if bounds is not None and value is not None and not bounds.accepts(value):
            return key, value, bounds
    return None


# ----------------------------------------------------------------------------------------------------------------
# Required fields and the output folder (checked on the built dataclasses)
# ----------------------------------------------------------------------------------------------------------------


def check_required_fields(script_args, model_args, sources: dict[str, str], config_path) -> None:
    """Refuse a config without a model, a dataset or a reward, or naming a reward that is not known."""
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


def check_output_dir(output_dir: str | None, sources: dict[str, str]) -> None:
    """Refuse an `output_dir` that cannot become a folder: an existing file, or a path under one (the run would fail
    at its first write, after the model has loaded)."""
    if not output_dir:
        return
    path = os.path.abspath(os.path.expanduser(output_dir))
    existing = path
    while not os.path.exists(existing):  # the deepest part of the path that exists
        parent = os.path.dirname(existing)
        if parent == existing:
            return
        existing = parent
    if os.path.isdir(existing):
        return
    what = "is an existing file" if existing == path else f"lies under {existing}, which is a file"
    raise ConfigError(
        f"Invalid value for `output_dir` {sources.get('output_dir', 'by default')}: {output_dir!r} {what}; the run "
        "writes its checkpoints, metrics and config.yaml into that folder. Set `output_dir` to a folder path (it is "
        "created if missing), or move the file away."
    )
