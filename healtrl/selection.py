"""HEAL's general-domain data selection (Liu et al., *HEALing Entropy Collapse*, §3.1): `healtrl select`.

For every question of a general-domain pool, sample N rollouts from the model, score them with a verifiable reward,
compute the exact full-vocabulary token entropies of each rollout with the policy, and rank the questions by
c(x) = Uncertainty(x) * Diversity(x) (eq. 1, `healtrl.functional.selection_scores`). The top-K questions are the
general-domain half of HEAL's hybrid training data (paper: 384 CommonsenseQA questions, 8 rollouts, temperature 0.7).

```bash
healtrl select --model healtrl-toy/qwen2-add --dataset healtrl-toy/add+compare --reward toy \\
    --num_rollouts 8 --top_k 16 --max_questions 64 --max_new_tokens 4 --temperature 1.0 --output_dir outputs/select
healtrl select --config configs/select_commonsenseqa_qwen3_1.7b.yaml --use_vllm
```

Output folder:

* `selection_settings.json`: the settings that determine the results, and their fingerprint;
* `records.jsonl`: one line per scored question (`index` = row of the loaded split, the fingerprint, the prompt's hash,
  accuracy, uncertainty, diversity, score, and per rollout its reward, length in tokens and mean entropy), appended
  after every batch: an interrupted run started again with the same settings scores only the missing questions;
* `selected/` (`Dataset.save_to_disk`) and `selected.jsonl`: the top-K rows, sorted by score (ties: lower index
  first), with the pool's columns plus `accuracy`, `uncertainty`, `diversity`, `score` and `pool_index`. When the
  pool has no `prompt` column, the prompt the rollouts were sampled from is added as `prompt`; when the reward reads
  the answer under another name (`--answer_column`), that column is added too, so the selection trains with the same
  reward as it is.

Settings that do not change what is measured may differ between an interrupted run and its resumption: `batch_size`,
`forward_batch_size`, `device`, `use_vllm` (and vLLM's settings), `top_k` and the Hub settings. Every rollout is sampled with a seed derived
from `seed` and its question (vLLM) or its batch's first question (transformers), so a run is reproducible with the
same settings; changing the batch size (or the generator) on resumption keeps the sampling distribution but not the
exact samples of an uninterrupted run.

Why this module is long: the selection is one resumable pipeline (prompts, rollouts, rewards, entropies,
scores, the record store a killed run resumes from, the settings checks that name each option), which
`select_general_data` runs as named steps in order (`_load_pool`, `_open_records`, `_score_pending`, `_top_k`,
`_write_selection`); its math is `healtrl.functional.selection`, its sampling `healtrl.generation`, its command line
`healtrl.cli.select`.
"""

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
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from types import SimpleNamespace

import torch

from healtrl._distributed import processes
from healtrl._prompts import eos_token_ids, is_conversational, tokenize_prompts
from healtrl.functional.selection import selection_scores
from healtrl.generation import SamplingSettings, TransformersGenerator, VLLMGenerator, completion_token_stats

__all__ = [
    "RECORDS_FILE",
    "SELECTED_DIR",
    "SELECTED_JSONL",
    "SETTINGS_FILE",
    "SelectionError",
    "rollout_entropies",
    "select_general_data",
]

SETTINGS_FILE = "selection_settings.json"
RECORDS_FILE = "records.jsonl"
SELECTED_DIR = "selected"
SELECTED_JSONL = "selected.jsonl"
SCORE_COLUMNS = ("accuracy", "uncertainty", "diversity", "score")
INDEX_COLUMN = "pool_index"
# Keys of TRL's reward call that are not dataset columns (TRL drops these columns before passing the rest).
_NOT_REWARD_COLUMNS = ("prompt", "completion", "completion_ids")
_FORMAT_VERSION = 1


class SelectionError(ValueError):
    """A mistake in the selection settings or data: the message names the setting and the fix."""


# ----------------------------------------------------------------------------------------------------------------
# Exact rollout entropies from the policy
# ----------------------------------------------------------------------------------------------------------------
def rollout_entropies(
    model,
    prompt_ids: Sequence[Sequence[int]],
    completion_ids: Sequence[Sequence[int]],
    *,
    temperature: float = 1.0,
    batch_size: int | None = None,
) -> list[torch.Tensor]:
    """Exact full-vocabulary entropy of the policy at every completion token, from one no-grad forward
    (`healtrl.generation.completion_token_stats`, shared with `healtrl inspect`).

    Args:
        model: A causal LM (`PreTrainedModel` with `base_model` and `get_output_embeddings()`), in eval mode.
        prompt_ids: Token ids of each prompt (no padding).
        completion_ids: Token ids of each completion (no padding; may be empty).
        temperature: Sampling temperature (> 0).
        batch_size: Sequences per forward (default: all at once).

    Returns:
        One float32 CPU tensor per sequence with one entropy per completion token.
    """
    _, entropies = completion_token_stats(
        model, prompt_ids, completion_ids, temperature=temperature, batch_size=batch_size, error=SelectionError
    )
    return entropies


# ----------------------------------------------------------------------------------------------------------------
# Prompts
# ----------------------------------------------------------------------------------------------------------------
def _render_value(value) -> str:
    """A column value inside a prompt template: multiple-choice options (CommonsenseQA / ARC layout) as lines."""
    if isinstance(value, Mapping) and isinstance(value.get("label"), list) and isinstance(value.get("text"), list):
        return "\n".join(f"{label}. {text}" for label, text in zip(value["label"], value["text"]))
    return str(value)


class _PromptBuilder:
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
        text = self.template.format(**{f: _render_value(row[f]) for f in self.fields})
        return text if self.raw else [{"role": "user", "content": text}]


def _prompt_hash(prompt) -> str:
    return hashlib.sha256(json.dumps(prompt, sort_keys=True, default=str).encode()).hexdigest()[:16]


def _tokenize_prompts(tokenizer, prompts: list) -> list[list[int]]:
    """Prompt token ids as TRL makes them (`healtrl._prompts.tokenize_prompts`), errors as `SelectionError`."""
    try:
        return tokenize_prompts(
            tokenizer,
            prompts,
            no_template_hint="Use --raw_prompt (prompt text used as it is) with --question_column / "
            "--prompt_template, or a chat model.",
        )
    except ValueError as exc:
        raise SelectionError(str(exc)) from exc


# ----------------------------------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------------------------------
def _derive_seed(seed: int, kind: str, index: int) -> int:
    digest = hashlib.sha256(f"healtrl-select:{seed}:{kind}:{index}".encode()).hexdigest()
    return int(digest[:15], 16)


def _eos_token_ids(model, tokenizer) -> list[int]:
    """Every eos id the tokenizer and the model declare (`healtrl._prompts.eos_token_ids`), errors as
    `SelectionError`."""
    try:
        return eos_token_ids(tokenizer, model)
    except ValueError as exc:
        raise SelectionError(str(exc)) from exc


# ----------------------------------------------------------------------------------------------------------------
# Rewards
# ----------------------------------------------------------------------------------------------------------------
def _call_reward(func: Callable, prompts, completions, completion_ids, columns: dict[str, list]) -> list[float]:
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
class _RecordStore:
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


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------
def _check_number(name, value, *, kind=float, low=None, high=None, low_open=False, allow_none=False):
    if value is None and allow_none:
        return
    ok_type = isinstance(value, int) if kind is int else isinstance(value, (int, float))
    if isinstance(value, bool) or not ok_type:
        raise SelectionError(f"{name} must be {'an integer' if kind is int else 'a number'}, got {value!r}")
    if kind is float and not math.isfinite(value):
        raise SelectionError(f"{name} must be finite, got {value}")
    if low is not None and (value <= low if low_open else value < low):
        raise SelectionError(f"{name} must be {'>' if low_open else '>='} {low}, got {value}")
    if high is not None and value > high:
        raise SelectionError(f"{name} must be <= {high}, got {value}")


_DTYPES = ("auto", "float32", "bfloat16", "float16")
_SETTING_CHECKS = (
    "model",
    "dataset",
    "reward",
    "output_dir",
    "num_rollouts",
    "top_k",
    "top_fraction",
    "temperature",
    "top_p",
    "max_new_tokens",
    "batch_size",
    "forward_batch_size",
    "seed",
    "max_questions",
    "correct_threshold",
    "vllm_gpu_memory_utilization",
    "vllm_max_model_len",
    "dtype",
    "push_to_hub",
    "hub_dataset_id",
)


def _check_settings(
    *,
    model,
    dataset,
    reward,
    output_dir,
    num_rollouts,
    top_k,
    top_fraction,
    temperature,
    top_p,
    max_new_tokens,
    batch_size,
    forward_batch_size,
    seed,
    max_questions,
    correct_threshold,
    vllm_gpu_memory_utilization,
    vllm_max_model_len,
    dtype,
    push_to_hub,
    hub_dataset_id,
) -> None:
    """The checks of the settings that need neither the model nor the data (shared by the run and `--dry_run`)."""
    for name, value in (("model", model), ("dataset", dataset), ("reward", reward), ("output_dir", output_dir)):
        if not isinstance(value, str) or not value:
            raise SelectionError(f"--{name} is required (got {value!r}).")
    _check_number("--num_rollouts", num_rollouts, kind=int, low=2)
    _check_number("--top_k", top_k, kind=int, low=1)
    _check_number("--top_fraction", top_fraction, low=0, low_open=True, high=1)
    _check_number("--temperature", temperature, low=0, low_open=True)
    _check_number("--top_p", top_p, low=0, low_open=True, high=1)
    _check_number("--max_new_tokens", max_new_tokens, kind=int, low=1)
    _check_number("--batch_size", batch_size, kind=int, low=1)
    _check_number("--forward_batch_size", forward_batch_size, kind=int, low=1, allow_none=True)
    _check_number("--seed", seed, kind=int)
    _check_number("--max_questions", max_questions, kind=int, low=1, allow_none=True)
    _check_number("--correct_threshold", correct_threshold)
    _check_number("--vllm_gpu_memory_utilization", vllm_gpu_memory_utilization, low=0, low_open=True, high=1)
    _check_number("--vllm_max_model_len", vllm_max_model_len, kind=int, low=1, allow_none=True)
    if dtype not in _DTYPES:
        raise SelectionError(f"--dtype must be one of {', '.join(_DTYPES)}, got {dtype!r}")
    if push_to_hub and not hub_dataset_id:
        raise SelectionError("--push_to_hub needs --hub_dataset_id (e.g. my-user/heal-general-384).")


def _pool_indices(size: int, max_questions: int | None, seed: int) -> list[int]:
    """The questions scored: all rows, or `max_questions` of them drawn with `seed` (in row order)."""
    if max_questions is None or max_questions >= size:
        return list(range(size))
    return sorted(random.Random(f"healtrl-select:{seed}").sample(range(size), max_questions))


def _reward_arguments(pool, reward: str, answer_column: str | None):
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


def select_general_data(
    model: str,
    dataset: str,
    *,
    reward: str,
    output_dir: str,
    dataset_config: str | None = None,
    split: str = "train",
    prompt_column: str | None = None,
    question_column: str | None = None,
    prompt_template: str | None = None,
    raw_prompt: bool = False,
    answer_column: str | None = None,
    correct_threshold: float = 0.5,
    num_rollouts: int = 8,
    top_k: int = 384,
    top_fraction: float = 0.2,
    temperature: float = 0.7,
    top_p: float = 1.0,
    max_new_tokens: int = 3072,
    batch_size: int = 4,
    forward_batch_size: int | None = None,
    seed: int = 0,
    max_questions: int | None = None,
    dtype: str = "auto",
    device: str | None = None,
    use_vllm: bool = False,
    vllm_gpu_memory_utilization: float = 0.5,
    vllm_max_model_len: int | None = None,
    overwrite: bool = False,
    push_to_hub: bool = False,
    hub_dataset_id: str | None = None,
    hub_private: bool = False,
    progress: bool = True,
):
    """Score every question of a general-domain pool with HEAL's c(x) (§3.1, eq. 1) and keep the top K.

    Args:
        model: Model path, Hub id, or healtrl name (`healtrl-toy/qwen2-add`, `healtrl-offline/SmolLM2-135M-Instruct`).
        dataset: Pool: a toy name, a local file or folder, or a Hub id (`healtrl.data.load_train_dataset`).
        reward: Reward name in `healtrl.data.REWARD_FUNCS` or a dotted import path; called as TRL calls rewards.
        output_dir: Folder for the records, the settings and the selected dataset (module docstring).
        dataset_config: Hub dataset configuration.
        split: Split of the pool.
        prompt_column: Column holding the prompt, used as it is (conversation: chat template; string: raw text).
            Default `prompt` when neither `question_column` nor `prompt_template` is given.
        question_column: Column holding a plain question, sent as one user message.
        prompt_template: Python format string over the row's columns, sent as one user message (e.g.
            `"{question}\\n\\n{choices}"`; a CommonsenseQA-style `{"label": [...], "text": [...]}` value renders as
            lines "A. ..."; literal braces are `{{` and `}}`).
        raw_prompt: Send the question / template text as it is, without the chat template.
        answer_column: Column with the verifiable answer, passed to the reward under the name it reads.
        correct_threshold: A rollout is correct when its reward is > this (None / NaN rewards count as incorrect).
        num_rollouts: Rollouts per question, N (paper: 8); at least 2.
        top_k: Questions kept, K (paper: 384).
        top_fraction: Share of each rollout's highest-entropy tokens in Diversity (paper: 0.2).
        temperature: Sampling temperature (paper: 0.7 for Qwen3, 0.6 for LLaMA-3.2); entropies use the same.
        top_p: Nucleus sampling (1.0: off). Entropies are those of the full tempered distribution, as in TRL.
        max_new_tokens: Longest completion (paper: 3072).
        batch_size: Questions per generation batch (batch_size x num_rollouts sequences); results are written after
            each batch.
        forward_batch_size: Sequences per entropy forward (default: a whole batch, batch_size x num_rollouts).
        seed: Seeds the sampling and the `max_questions` subset.
        max_questions: Score a random subset of this many rows (drawn with `seed`) instead of the whole split.
        dtype: Model dtype: "auto" (the checkpoint's), "float32", "bfloat16" or "float16".
        device: Torch device of the model (default: "cuda" when available, else "cpu").
        use_vllm: Sample with vLLM (`pip install healtrl[vllm]`); entropies still come from the model's forward.
        vllm_gpu_memory_utilization: Share of GPU memory vLLM may take (the model for the entropy forward shares it).
        vllm_max_model_len: vLLM's context length (default: the model's).
        overwrite: Discard earlier results in `output_dir` instead of resuming from them.
        push_to_hub: Push the selected dataset to the Hub as `hub_dataset_id` (implied by giving `hub_dataset_id`).
        hub_dataset_id: Hub dataset repository for the selection.
        hub_private: Make the Hub repository private.
        progress: Show a progress bar.

    Returns:
        The selected `datasets.Dataset` (top K, sorted by score), also saved under `output_dir`.
    """
    # The arguments as one value for the steps below (first: here, locals() is exactly the arguments)
    options = SimpleNamespace(**locals())
    _check_settings(**{name: getattr(options, name) for name in _SETTING_CHECKS})
    if use_vllm:
        from healtrl._compat import require

        require("vllm", "use_vllm=True (generation with vLLM)")
    # Under torchrun / accelerate launch the batches are shared (healtrl/_distributed.py): known before any loading, so
    # that only the main process shows the libraries' progress bars
    procs = processes()
    pool = _load_pool(options)
    records = _open_records(options, pool, procs)
    if records.pending:
        _score_pending(options, pool, records, procs)
    selected = _top_k(pool, records, top_k)
    if procs.is_main:  # the main process writes the selection, the others wait for it
        _write_selection(selected, output_dir, hub_dataset_id, hub_private)
    procs.barrier()
    return selected


# The steps of `select_general_data`, in the order it runs them; `o` is its arguments (defaults and meaning: there).
@dataclass(frozen=True)
class _Pool:
    """The loaded split, the rows scored (`indices`), and how a row becomes a prompt and the reward's columns."""

    rows: object  # datasets.Dataset
    indices: list[int]
    build_prompt: _PromptBuilder
    reward_func: Callable
    reward_mapping: dict[str, str]


def _load_pool(o: SimpleNamespace) -> _Pool:
    """Load the pool and check it against the options: enough questions for top K, the prompt, the reward's
    columns, no column the selection adds."""
    from healtrl.data import load_train_dataset

    try:
        rows = load_train_dataset(o.dataset, o.dataset_config, split=o.split, seed=o.seed)
    except ValueError as exc:
        raise SelectionError(f"--dataset: {exc}") from None
    indices = _pool_indices(len(rows), o.max_questions, o.seed)
    if o.top_k > len(indices):
        raise SelectionError(
            f"--top_k {o.top_k} is larger than the pool ({len(indices)} questions"
            f"{' after --max_questions' if o.max_questions else ''}). Lower --top_k or score more questions."
        )
    build_prompt = _PromptBuilder(
        rows.column_names, o.prompt_column, o.question_column, o.prompt_template, o.raw_prompt
    )
    reward_func, reward_mapping = _reward_arguments(rows, o.reward, o.answer_column)
    clashes = [c for c in (*SCORE_COLUMNS, INDEX_COLUMN) if c in rows.column_names]
    if clashes:
        raise SelectionError(
            f"The pool already has the column(s) {clashes}, which the selection adds. Rename them in the data first."
        )
    return _Pool(rows, indices, build_prompt, reward_func, reward_mapping)


@dataclass
class _Records:
    """The record store of a run: the finished records by question (`_score_pending` adds to them), the prompts of
    the questions scored, and those still to score."""

    store: _RecordStore
    done: dict[int, dict]
    prompts: dict[int, object]
    pending: list[int]


def _open_records(o: SimpleNamespace, pool: _Pool, procs) -> _Records:
    """Open (or start) the record store under `output_dir` on every process, and check its records against the pool."""
    settings = {  # what determines the results: a resumed run must have the same
        "format": _FORMAT_VERSION,
        "model": o.model,
        "dtype": o.dtype,
        "dataset": o.dataset,
        "dataset_config": o.dataset_config,
        "split": o.split,
        "pool_size": len(pool.rows),
        "max_questions": o.max_questions,
        "prompt_column": pool.build_prompt.column,
        "prompt_template": pool.build_prompt.template,
        "raw_prompt": o.raw_prompt,
        "reward": o.reward,
        "answer_column": o.answer_column,
        "correct_threshold": o.correct_threshold,
        "num_rollouts": o.num_rollouts,
        "top_fraction": o.top_fraction,
        "temperature": o.temperature,
        "top_p": o.top_p,
        "max_new_tokens": o.max_new_tokens,
        "seed": o.seed,
    }
    # The main process owns the folder (it overwrites, repairs and appends), the others read it once it is ready.
    if procs.is_main:
        store = _RecordStore(o.output_dir, settings, o.overwrite)
        done = store.load()
    procs.barrier()
    if not procs.is_main:
        store = _RecordStore(o.output_dir, settings, overwrite=False)
        done = store.load()
    prompts = {i: pool.build_prompt(pool.rows[i]) for i in pool.indices}
    stray = sorted(set(done) - set(pool.indices))
    changed = [i for i in done if i in prompts and done[i]["prompt_sha"] != _prompt_hash(prompts[i])]
    if stray or changed:
        raise SelectionError(
            f"The records in '{store.records_path}' do not match the pool (questions {(stray + changed)[:5]} differ): "
            "the data changed since they were written. Use a new --output_dir, or --overwrite."
        )
    return _Records(store, done, prompts, [i for i in pool.indices if i not in done])


def _load_generator(o: SimpleNamespace, procs):
    """(policy, tokenizer, generator): the model for the entropy forward, and `generator(batch, prompt_ids)`, the
    rollouts of a batch of questions ([question][rollout] -> token ids) from `healtrl.generation`."""
    from healtrl.models import load_model_and_tokenizer, resolve_model_path

    dtypes = {"auto": None, "float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}
    policy, tokenizer = load_model_and_tokenizer(o.model, dtype=dtypes[o.dtype])
    policy.to(o.device if o.device is not None else procs.device()).eval()
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    # healtrl.generation's generators, as evaluation uses them; one `generate` call per batch of questions,
    # seeded from its first question (transformers) or from each question (vLLM), so that batch size,
    # processes and resumption do not change the samples.
    sampling = SamplingSettings(
        k=o.num_rollouts,
        temperature=o.temperature,
        top_p=o.top_p,
        top_k=0,  # TRL's default: no top-k truncation
        max_new_tokens=o.max_new_tokens,
        seed=o.seed,
        batch_size=o.batch_size * o.num_rollouts,
    )
    try:
        if o.use_vllm:
            backend = VLLMGenerator(
                resolve_model_path(o.model),
                dtype=o.dtype,
                seed=o.seed,
                gpu_memory_utilization=o.vllm_gpu_memory_utilization,
                max_model_len=o.vllm_max_model_len,
                request_seed=lambda seed, index: _derive_seed(seed, "question", index),
                eos_ids=_eos_token_ids(policy, tokenizer),
                detokenize=False,
                feature="use_vllm=True (generation with vLLM)",
            )
        else:
            backend = TransformersGenerator(
                policy, tokenizer, batch_seed=lambda seed, pos: _derive_seed(seed, "batch", pos // o.num_rollouts)
            )
    except ValueError as exc:  # no end-of-sequence token
        raise SelectionError(str(exc)) from exc

    def generator(batch: list[int], prompt_ids: list[list[int]]) -> list[list[list[int]]]:
        groups = backend.generate(prompt_ids, sampling, progress=False, indices=batch)
        return [[c.token_ids for c in group] for group in groups]

    return policy, tokenizer, generator


def _score_pending(o: SimpleNamespace, pool: _Pool, records: _Records, procs) -> None:
    """Score the pending questions batch by batch, shared among the processes; after every batch the main process
    appends the gathered records to the store, and every process adds them to `records.done`."""
    from tqdm.auto import tqdm

    policy, tokenizer, generator = _load_generator(o, procs)
    done = records.done
    bar = tqdm(
        total=len(pool.indices),
        initial=len(done),
        unit="question",
        desc="healtrl select",
        disable=not (o.progress and procs.is_main),
    )
    # Batches are cut from `pending` as in a single-process run and seeded from their first question, so each
    # process scores every `world`-th one and the gathered records equal a single-process run's, in its order.
    pending = records.pending
    batches = [pending[start : start + o.batch_size] for start in range(0, len(pending), o.batch_size)]
    for first in range(0, len(batches), procs.world):
        unit = first + procs.rank
        scored = (
            []
            if unit >= len(batches)
            else _score_batch(
                batches[unit],
                pool.rows,
                records.prompts,
                tokenizer,
                policy,
                generator,
                pool.reward_func,
                pool.reward_mapping,
                num_rollouts=o.num_rollouts,
                temperature=o.temperature,
                correct_threshold=o.correct_threshold,
                top_fraction=o.top_fraction,
                forward_batch_size=o.forward_batch_size,
            )
        )
        for gathered in procs.gather(scored):  # rank order = batch order
            for record in gathered:
                record["fingerprint"] = records.store.fingerprint
            if procs.is_main and gathered:
                records.store.append(gathered)
            for record in gathered:
                done[record["index"]] = record
            bar.update(len(gathered))
    bar.close()


def _top_k(pool: _Pool, records: _Records, top_k: int):
    """The top-K rows by score (ties: lower index first), with the prompt, the reward's columns, the scores and the
    pool index added (module docstring)."""
    ranked = sorted((records.done[i] for i in pool.indices), key=lambda r: (-r["score"], r["index"]))[:top_k]
    chosen = [r["index"] for r in ranked]
    selected = pool.rows.select(chosen)
    if "prompt" not in selected.column_names:
        selected = selected.add_column("prompt", [records.prompts[i] for i in chosen])
    for name, column in pool.reward_mapping.items():
        if name not in selected.column_names:
            selected = selected.add_column(name, list(selected[column]))
    for name in SCORE_COLUMNS:
        selected = selected.add_column(name, [float(r[name]) for r in ranked])
    return selected.add_column(INDEX_COLUMN, chosen)


def _write_selection(selected, output_dir: str, hub_dataset_id: str | None, hub_private: bool) -> None:
    """Save the selection under `output_dir` (`selected/` and `selected.jsonl`), and push it to the Hub if asked."""
    selected_dir = os.path.join(output_dir, SELECTED_DIR)
    shutil.rmtree(selected_dir, ignore_errors=True)
    selected.save_to_disk(selected_dir)
    with open(os.path.join(output_dir, SELECTED_JSONL), "w") as f:  # full float precision (to_json keeps 10 digits)
        for row in selected:
            f.write(json.dumps(row, default=str) + "\n")
    if hub_dataset_id:
        selected.push_to_hub(hub_dataset_id, private=hub_private)


def _score_batch(
    batch,
    pool,
    prompts,
    tokenizer,
    policy,
    generator,
    reward_func,
    reward_mapping,
    *,
    num_rollouts,
    temperature,
    correct_threshold,
    top_fraction,
    forward_batch_size,
) -> list[dict]:
    """Generate, reward and score the questions `batch`: one record per question."""
    batch_prompts = [prompts[i] for i in batch]
    prompt_ids = _tokenize_prompts(tokenizer, batch_prompts)
    completion_ids = generator(batch, prompt_ids)  # [question][rollout] -> token ids
    flat_prompts = [p for p in batch_prompts for _ in range(num_rollouts)]
    flat_prompt_ids = [p for p in prompt_ids for _ in range(num_rollouts)]
    flat_ids = [ids for per_question in completion_ids for ids in per_question]
    texts = tokenizer.batch_decode(flat_ids, skip_special_tokens=True)
    conversational = is_conversational(batch_prompts[0])
    completions = [[{"role": "assistant", "content": t}] for t in texts] if conversational else texts
    rows = [pool[i] for i in batch]
    columns = {name: [row[col] for row in rows for _ in range(num_rollouts)] for name, col in reward_mapping.items()}
    rewards = _call_reward(reward_func, flat_prompts, completions, flat_ids, columns)
    entropies = rollout_entropies(
        policy, flat_prompt_ids, flat_ids, temperature=temperature, batch_size=forward_batch_size or len(flat_ids)
    )
    # A NaN reward (the function's None: not applicable) is not correct: NaN > threshold is False.
    correct = torch.tensor(rewards, dtype=torch.float64).view(len(batch), num_rollouts) > correct_threshold
    nested = [entropies[q * num_rollouts : (q + 1) * num_rollouts] for q in range(len(batch))]
    scores = selection_scores(correct, nested, top_fraction=top_fraction)
    records = []
    for q, index in enumerate(batch):
        ents = nested[q]
        records.append(
            {
                "index": index,
                "prompt_sha": _prompt_hash(prompts[index]),
                **{name: float(scores[name][q]) for name in SCORE_COLUMNS},
                "rewards": [None if math.isnan(r) else r for r in rewards[q * num_rollouts : (q + 1) * num_rollouts]],
                "lengths": [int(e.numel()) for e in ents],
                "mean_entropy": [float(e.double().mean()) if e.numel() else None for e in ents],
            }
        )
    return records
