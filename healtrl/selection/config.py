"""`SelectionConfig`: the settings of HEAL's general-domain data selection (HEAL, arXiv:2604.17928, §3.1, eq. 1), with
the paper's defaults. It is the one place the options of `healtrl select` are written: each field carries its
command-line help in `metadata["help"]`, as TRL's config dataclasses do, `healtrl.cli.select` builds its parser from the
fields, and `healtrl.selection.select_general_data` runs a config. `SelectionConfig.check` holds the checks that need
neither the model nor the data (shared by the run and `healtrl select --dry_run`)."""

from __future__ import annotations

import math
import typing
from dataclasses import dataclass, field

from healtrl.utils.numbers import is_int, is_number

__all__ = ["DTYPES", "SelectionConfig", "SelectionError", "option_type"]

DTYPES = ("auto", "float32", "bfloat16", "float16")


class SelectionError(ValueError):
    """A mistake in the selection settings or data: the message names the setting and the fix."""


def _option(default, text: str):
    """A field with its default and its command-line help (`metadata["help"]`, as in TRL's config dataclasses)."""
    return field(default=default, metadata={"help": text})


@dataclass
class SelectionConfig:
    r"""
    The settings of `healtrl select` / `healtrl.selection.select_general_data`: score every question of a
    general-domain pool with HEAL's c(x) = Uncertainty(x) * Diversity(x) (§3.1, eq. 1) and keep the top K.

    Parameters:
        model (`str`):
            Model path, Hub id, or healtrl name (`healtrl-toy/qwen2-add`, `healtrl-offline/SmolLM2-135M-Instruct`).
        dataset (`str`):
            Pool: a toy name, a local file or folder, or a Hub id (`healtrl.data.load_train_dataset`).
        dataset_config (`str`, *optional*):
            Hub dataset configuration.
        split (`str`, *optional*, defaults to `"train"`):
            Split of the pool.
        prompt_column (`str`, *optional*):
            Column holding the prompt, used as it is (conversation: chat template; string: raw text). Default `prompt`
            when neither `question_column` nor `prompt_template` is given.
        question_column (`str`, *optional*):
            Column holding a plain question, sent as one user message.
        prompt_template (`str`, *optional*):
            Python format string over the row's columns, sent as one user message (e.g. `"{question}\n\n{choices}"`;
            a CommonsenseQA-style `{"label": [...], "text": [...]}` value renders as lines "A. ..."; literal braces
            are `{{` and `}}`).
        raw_prompt (`bool`, *optional*, defaults to `False`):
            Send the question / template text as it is, without the chat template.
        answer_column (`str`, *optional*):
            Column with the verifiable answer, passed to the reward under the name it reads.
        reward (`str`):
            Reward name in `healtrl.data.REWARD_FUNCS` or a dotted import path; called as TRL calls rewards.
        correct_threshold (`float`, *optional*, defaults to `0.5`):
            A rollout is correct when its reward is > this (None / NaN rewards count as incorrect).
        num_rollouts (`int`, *optional*, defaults to `8`):
            Rollouts per question, N (paper: 8); at least 2.
        top_k (`int`, *optional*, defaults to `384`):
            Questions kept, K (paper: 384).
        top_fraction (`float`, *optional*, defaults to `0.2`):
            Share of each rollout's highest-entropy tokens in Diversity (paper: 0.2).
        temperature (`float`, *optional*, defaults to `0.7`):
            Sampling temperature (paper: 0.7 for Qwen3, 0.6 for LLaMA-3.2); entropies use the same.
        top_p (`float`, *optional*, defaults to `1.0`):
            Nucleus sampling (1.0: off). Entropies are those of the full tempered distribution, as in TRL.
        max_new_tokens (`int`, *optional*, defaults to `3072`):
            Longest completion (paper: 3072).
        batch_size (`int`, *optional*, defaults to `4`):
            Questions per generation batch (batch_size x num_rollouts sequences); results are written after each
            batch.
        forward_batch_size (`int`, *optional*):
            Sequences per entropy forward (default: a whole batch, batch_size x num_rollouts).
        seed (`int`, *optional*, defaults to `0`):
            Seeds the sampling and the `max_questions` subset.
        max_questions (`int`, *optional*):
            Score a random subset of this many rows (drawn with `seed`) instead of the whole split.
        dtype (`str`, *optional*, defaults to `"auto"`):
            Model dtype: "auto" (the checkpoint's), "float32", "bfloat16" or "float16".
        device (`str`, *optional*):
            Torch device of the model (default: "cuda" when available, else "cpu").
        use_vllm (`bool`, *optional*, defaults to `False`):
            Sample with vLLM (`pip install healtrl[vllm]`); entropies still come from the model's forward.
        vllm_gpu_memory_utilization (`float`, *optional*, defaults to `0.5`):
            Share of GPU memory vLLM may take (the model for the entropy forward shares it).
        vllm_max_model_len (`int`, *optional*):
            vLLM's context length (default: the model's).
        output_dir (`str`):
            Folder for the records, the settings and the selected dataset (`healtrl.selection`'s docstring).
        overwrite (`bool`, *optional*, defaults to `False`):
            Discard earlier results in `output_dir` instead of resuming from them.
        push_to_hub (`bool`, *optional*, defaults to `False`):
            Push the selected dataset to the Hub as `hub_dataset_id` (implied by giving `hub_dataset_id`).
        hub_dataset_id (`str`, *optional*):
            Hub dataset repository for the selection.
        hub_private (`bool`, *optional*, defaults to `False`):
            Make the Hub repository private.

    `model`, `dataset`, `reward` and `output_dir` are required: `check` names the one missing.
    """

    model: str | None = _option(None, "model path, Hub id, healtrl-toy/... or healtrl-offline/... name (required)")
    dataset: str | None = _option(None, "pool: toy name, local file/folder or Hub id (required)")
    dataset_config: str | None = _option(None, "Hub dataset configuration")
    split: str = _option("train", "split of the pool")
    prompt_column: str | None = _option(None, "column with the prompt used as it is (default: prompt)")
    question_column: str | None = _option(None, "column with a plain question, sent as one user message")
    prompt_template: str | None = _option(
        None, "format string over the row's columns, e.g. '{question}\\n\\n{choices}'"
    )
    raw_prompt: bool = _option(False, "send question/template text without the chat template")
    answer_column: str | None = _option(None, "column with the verifiable answer (passed under the reward's name)")
    reward: str | None = _option(None, "reward name (healtrl.data.REWARD_FUNCS) or dotted import path (required)")
    correct_threshold: float = _option(0.5, "reward > this counts as correct")
    num_rollouts: int = _option(8, "rollouts per question, N (paper: 8)")
    top_k: int = _option(384, "questions kept, K (paper: 384)")
    top_fraction: float = _option(0.2, "share of highest-entropy tokens in Diversity")
    temperature: float = _option(0.7, "sampling temperature (paper: 0.7 for Qwen3)")
    top_p: float = _option(1.0, "nucleus sampling (1.0: off)")
    max_new_tokens: int = _option(3072, "longest completion (paper: 3072)")
    batch_size: int = _option(4, "questions per generation batch")
    forward_batch_size: int | None = _option(None, "sequences per entropy forward (default: whole batch)")
    seed: int = _option(0, "seed of sampling and of the --max_questions subset")
    max_questions: int | None = _option(None, "score a random subset of this many questions")
    dtype: str = _option("auto", "auto, float32, bfloat16 or float16")
    device: str | None = _option(None, "torch device (default: cuda when available, else cpu)")
    use_vllm: bool = _option(False, "sample with vLLM (pip install healtrl[vllm])")
    vllm_gpu_memory_utilization: float = _option(0.5, "GPU memory share of vLLM")
    vllm_max_model_len: int | None = _option(None, "vLLM context length (default: the model's)")
    output_dir: str | None = _option(None, "folder for records and the selected dataset (required)")
    overwrite: bool = _option(False, "discard earlier results in --output_dir")
    push_to_hub: bool = _option(False, "push the selection to --hub_dataset_id")
    hub_dataset_id: str | None = _option(None, "Hub dataset repository for the selection (pushes when given)")
    hub_private: bool = _option(False, "make the Hub repository private")

    def check(self) -> None:
        """Raise a `SelectionError` naming the option (`--name`) and the fix for the first setting of the wrong type
        or out of range, or a required one missing; the checks that need neither the model nor the data."""
        for name in ("model", "dataset", "reward", "output_dir"):
            value = getattr(self, name)
            if not isinstance(value, str) or not value:
                raise SelectionError(f"--{name} is required (got {value!r}).")
        _check_number("--num_rollouts", self.num_rollouts, kind=int, low=2)
        _check_number("--top_k", self.top_k, kind=int, low=1)
        _check_number("--top_fraction", self.top_fraction, low=0, low_open=True, high=1)
        _check_number("--temperature", self.temperature, low=0, low_open=True)
        _check_number("--top_p", self.top_p, low=0, low_open=True, high=1)
        _check_number("--max_new_tokens", self.max_new_tokens, kind=int, low=1)
        _check_number("--batch_size", self.batch_size, kind=int, low=1)
        _check_number("--forward_batch_size", self.forward_batch_size, kind=int, low=1, allow_none=True)
        _check_number("--seed", self.seed, kind=int)
        _check_number("--max_questions", self.max_questions, kind=int, low=1, allow_none=True)
        _check_number("--correct_threshold", self.correct_threshold)
        _check_number("--vllm_gpu_memory_utilization", self.vllm_gpu_memory_utilization, low=0, low_open=True, high=1)
        _check_number("--vllm_max_model_len", self.vllm_max_model_len, kind=int, low=1, allow_none=True)
        if self.dtype not in DTYPES:
            raise SelectionError(f"--dtype must be one of {', '.join(DTYPES)}, got {self.dtype!r}")
        if self.push_to_hub and not self.hub_dataset_id:
            raise SelectionError("--push_to_hub needs --hub_dataset_id (e.g. my-user/heal-general-384).")


def option_type(name: str) -> type:
    """The type of a `SelectionConfig` field as its command-line option reads it: `bool` (a flag), `int`, `float`
    or `str` (`X | None` reads as X)."""
    hint = typing.get_type_hints(SelectionConfig)[name]
    args = [a for a in typing.get_args(hint) if a is not type(None)]
    return args[0] if args else hint


def _check_number(name, value, *, kind=float, low=None, high=None, low_open=False, allow_none=False):
    if value is None and allow_none:
        return
    ok_type = is_int(value) if kind is int else is_number(value)
    if not ok_type:
        raise SelectionError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if kind is float and not math.isfinite(value):
        raise SelectionError(f"{name} must be finite, got {value}")
    if low is not None and (value <= low if low_open else value < low):
        raise SelectionError(f"{name} must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and value > high:
        raise SelectionError(f"{name} must be <= {high}, got {value}")
