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

`select_general_data` runs the selection as named steps in order (`_load_pool`, `_open_records`, `_score_pending`,
`_top_k`, `_write_selection`). Its settings are `healtrl.selection.config.SelectionConfig` (with their checks), its
prompts, reward call and record store `healtrl.selection.data`, its math `healtrl.functional.selection`, its
sampling `healtrl.generation`, its command line `healtrl.cli.select`.
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import math
import os
import shutil
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch

from healtrl.functional.selection import selection_scores
from healtrl.generation import SamplingSettings, TransformersGenerator, VLLMGenerator, completion_token_stats
from healtrl.selection.config import SelectionConfig, SelectionError
from healtrl.selection.data import (
    INDEX_COLUMN,
    RECORDS_FILE,
    SCORE_COLUMNS,
    SELECTED_DIR,
    SELECTED_JSONL,
    SETTINGS_FILE,
    PromptBuilder,
    RecordStore,
    call_reward,
    pool_indices,
    prompt_hash,
    reward_arguments,
)
from healtrl.utils.distributed import processes
from healtrl.utils.prompts import eos_token_ids, is_conversational, tokenize_prompts

__all__ = [
    "RECORDS_FILE",
    "SELECTED_DIR",
    "SELECTED_JSONL",
    "SETTINGS_FILE",
    "SelectionConfig",
    "SelectionError",
    "rollout_entropies",
    "select_general_data",
]

_FORMAT_VERSION = 1


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


def _tokenize_prompts(tokenizer, prompts: list) -> list[list[int]]:
    """Prompt token ids as TRL makes them (`healtrl.utils.prompts.tokenize_prompts`), errors as `SelectionError`."""
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
    """Every eos id the tokenizer and the model declare (`healtrl.utils.prompts.eos_token_ids`), errors as
    `SelectionError`."""
    try:
        return eos_token_ids(tokenizer, model)
    except ValueError as exc:
        raise SelectionError(str(exc)) from exc


# ----------------------------------------------------------------------------------------------------------------
# The run
# ----------------------------------------------------------------------------------------------------------------
def select_general_data(
    config: SelectionConfig | str | None = None, dataset: str | None = None, *, progress: bool = True, **options
):
    """Score every question of a general-domain pool with HEAL's c(x) (§3.1, eq. 1) and keep the top K.

    Called with a `SelectionConfig` (`select_general_data(SelectionConfig(model=..., ...))`), or with its fields as
    arguments, the model and the pool first (`select_general_data(model, dataset, reward=..., output_dir=...,
    top_k=...)`); the fields, their defaults (the paper's) and meaning: `SelectionConfig`.

    Args:
        config: The settings, or the model (its first field) when the fields are passed as arguments.
        dataset: The pool, when the fields are passed as arguments.
        progress: Show a progress bar.
        **options: Further `SelectionConfig` fields (with a config: fields to replace in it).

    Returns:
        The selected `datasets.Dataset` (top K, sorted by score), also saved under `output_dir`.

    Raises:
        SelectionError: a setting or the data is wrong; the message names the option and the fix.
        TypeError: an argument is no `SelectionConfig` field.
    """
    o = _as_config(config, dataset, options)
    o.check()
    if o.use_vllm:
        from healtrl.utils.compat import require

        require("vllm", "use_vllm=True (generation with vLLM)")
    # Under torchrun / accelerate launch the batches are shared (healtrl/utils/distributed.py): known before any loading, so
    # that only the main process shows the libraries' progress bars
    procs = processes()
    pool = _load_pool(o)
    records = _open_records(o, pool, procs)
    if records.pending:
        _score_pending(o, pool, records, procs, progress)
    selected = _top_k(pool, records, o.top_k)
    if procs.is_main:  # the main process writes the selection, the others wait for it
        _write_selection(selected, o.output_dir, o.hub_dataset_id, o.hub_private)
    procs.barrier()
    return selected


def _as_config(config: SelectionConfig | str | None, dataset: str | None, options: dict) -> SelectionConfig:
    """The `SelectionConfig` of `select_general_data`'s arguments."""
    if dataset is not None:
        options = {**options, "dataset": dataset}
    if isinstance(config, SelectionConfig):
        return dataclasses.replace(config, **options) if options else config
    if config is not None:
        if "model" in options:
            raise TypeError("select_general_data() got multiple values for argument 'model'")
        options = {**options, "model": config}
    return SelectionConfig(**options)


# The steps of `select_general_data`, in the order it runs them; `o` is its settings (defaults and meaning:
# `SelectionConfig`).
@dataclass(frozen=True)
class _Pool:
    """The loaded split, the rows scored (`indices`), and how a row becomes a prompt and the reward's columns."""

    rows: object  # datasets.Dataset
    indices: list[int]
    build_prompt: PromptBuilder
    reward_func: Callable
    reward_mapping: dict[str, str]


def _load_pool(o: SelectionConfig) -> _Pool:
    """Load the pool and check it against the options: enough questions for top K, the prompt, the reward's
    columns, no column the selection adds."""
    from healtrl.data import load_train_dataset

    try:
        rows = load_train_dataset(o.dataset, o.dataset_config, split=o.split, seed=o.seed)
    except ValueError as exc:
        raise SelectionError(f"--dataset: {exc}") from None
    indices = pool_indices(len(rows), o.max_questions, o.seed)
    if o.top_k > len(indices):
        raise SelectionError(
            f"--top_k {o.top_k} is larger than the pool ({len(indices)} questions"
            f"{' after --max_questions' if o.max_questions else ''}). Lower --top_k or score more questions."
        )
    build_prompt = PromptBuilder(rows.column_names, o.prompt_column, o.question_column, o.prompt_template, o.raw_prompt)
    reward_func, reward_mapping = reward_arguments(rows, o.reward, o.answer_column)
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

    store: RecordStore
    done: dict[int, dict]
    prompts: dict[int, object]
    pending: list[int]


def _open_records(o: SelectionConfig, pool: _Pool, procs) -> _Records:
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
        store = RecordStore(o.output_dir, settings, o.overwrite)
        done = store.load()
    procs.barrier()
    if not procs.is_main:
        store = RecordStore(o.output_dir, settings, overwrite=False)
        done = store.load()
    prompts = {i: pool.build_prompt(pool.rows[i]) for i in pool.indices}
    stray = sorted(set(done) - set(pool.indices))
    changed = [i for i in done if i in prompts and done[i]["prompt_sha"] != prompt_hash(prompts[i])]
    if stray or changed:
        raise SelectionError(
            f"The records in '{store.records_path}' do not match the pool (questions {(stray + changed)[:5]} differ): "
            "the data changed since they were written. Use a new --output_dir, or --overwrite."
        )
    return _Records(store, done, prompts, [i for i in pool.indices if i not in done])


def _load_generator(o: SelectionConfig, procs):
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


def _score_pending(o: SelectionConfig, pool: _Pool, records: _Records, procs, progress: bool) -> None:
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
        disable=not (progress and procs.is_main),
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
    rewards = call_reward(reward_func, flat_prompts, completions, flat_ids, columns)
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
                "prompt_sha": prompt_hash(prompts[index]),
                **{name: float(scores[name][q]) for name in SCORE_COLUMNS},
                "rewards": [None if math.isnan(r) else r for r in rewards[q * num_rollouts : (q + 1) * num_rollouts]],
                "lengths": [int(e.numel()) for e in ents],
                "mean_entropy": [float(e.double().mean()) if e.numel() else None for e in ents],
            }
        )
    return records
