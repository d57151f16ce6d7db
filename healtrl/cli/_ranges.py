"""The ranges of numeric config fields: one table (`FIELD_RANGES`), checked in one loop (`check_ranges`) by
`healtrl.cli.config.resolve` on the merged values, before any dataclass is built.

Types are checked by `_coerce`; ranges are not checked by the dataclasses of TRL and transformers, which let through
values that crash the run later, after the model has loaded: `per_device_train_batch_size: 0` divides by zero in
`GRPOConfig.__post_init__` (a negative one is blamed there on divisibility), `temperature: 0` divides the logits by
zero, `torch_num_threads: 0` fails in `torch.set_num_threads`, a negative `learning_rate` trains uphill, a negative
`seed` fails in numpy. Because `resolve` serves both `train.py --dry_run` and the real run, both refuse the same
values with the same error, naming the field, where it was set, the range and the default.

Not repeated here, so that each rule has one home:
- TRL's own checks (`num_generations >= 2`, the divisibility of the batch sizes): `resolve` runs `GRPOConfig`'s
  `__post_init__` and reports its errors naming the values involved. The table only keeps out of it the values TRL
  divides by before it checks them (`per_device_train_batch_size: 0`; `num_generations`, whose `>= 2` TRL checks only
  after a modulo by it).
- The fields a healtrl config class checks in its `__post_init__` (AER's `tau`, `rho`, `eta`; PosAdv's `lambda_init`,
  `lambda_step`; HEAL's `general_share`; the baselines' ratios; `ScriptArguments.eval_k`, ...): reported the same way.

A value of `None` is never checked here (the field's type says whether null is allowed). Every bounded value must be
finite: NaN and infinity are refused.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

__all__ = ["FIELD_RANGES", "Range", "check_ranges"]


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
