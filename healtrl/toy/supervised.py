"""A short supervised warm-up, so that GRPO starts from a policy that is sometimes right.

A random model never samples a correct answer, so every GRPO group would get the same reward and no gradient. The
warm-up trains with plain cross-entropy on correct `(prompt, answer + <|end|>)` pairs, in a small torch loop, and
stops as soon as the accuracy of *sampled* answers (temperature 1, like GRPO rollouts) reaches a target such as 0.2.
"""

from __future__ import annotations

import time
import warnings
from collections.abc import Sequence

import torch
from datasets import Dataset
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ._utils import torch_threads
from .tasks import make_dataset, toy_reward

IGNORE_INDEX = -100


def _prompt_ids(tokenizer: PreTrainedTokenizerBase, prompt: list[dict]) -> list[int]:
    return list(
        tokenizer.apply_chat_template(prompt, add_generation_prompt=True, tokenize=True, return_dict=True)["input_ids"]
    )


def _encode_prompts(tokenizer: PreTrainedTokenizerBase, prompts: Sequence[list[dict]]) -> list[list[int]]:
    """Chat-template ids of each prompt, rendering each distinct prompt once (toy prompts repeat a lot)."""
    cache: dict[str, list[int]] = {}
    encoded = []
    for prompt in prompts:
        key = repr(prompt)
        if key not in cache:
            cache[key] = _prompt_ids(tokenizer, prompt)
        encoded.append(cache[key])
    return encoded


def _encode_examples(tokenizer: PreTrainedTokenizerBase, dataset: Dataset) -> list[tuple[list[int], list[int]]]:
    """(prompt ids, completion ids) per row; the completion is the answer followed by the eos token."""
    cache: dict[tuple[str, str], tuple[list[int], list[int]]] = {}  # toy datasets repeat problems a lot
    examples = []
    for prompt, answer in zip(dataset["prompt"], dataset["answer"]):
        key = (repr(prompt), answer)
        if key not in cache:
            completion = tokenizer(answer, add_special_tokens=False)["input_ids"] + [tokenizer.eos_token_id]
            cache[key] = (_prompt_ids(tokenizer, prompt), completion)
        examples.append(cache[key])
    return examples


def _collate(examples: list[tuple[list[int], list[int]]], pad_token_id: int) -> dict[str, torch.Tensor]:
    """Right-padded input ids, attention mask, and labels that only score the completion tokens."""
    length = max(len(p) + len(c) for p, c in examples)
    input_ids = torch.full((len(examples), length), pad_token_id, dtype=torch.long)
    labels = torch.full((len(examples), length), IGNORE_INDEX, dtype=torch.long)
    attention_mask = torch.zeros((len(examples), length), dtype=torch.long)
    for row, (prompt, completion) in enumerate(examples):
        ids = prompt + completion
        input_ids[row, : len(ids)] = torch.tensor(ids)
        labels[row, len(prompt) : len(ids)] = torch.tensor(completion)
        attention_mask[row, : len(ids)] = 1
    return {"input_ids": input_ids, "attention_mask": attention_mask, "labels": labels}


def _left_padded(
    tokenizer: PreTrainedTokenizerBase, prompts: Sequence[list[dict]]
) -> tuple[torch.Tensor, torch.Tensor]:
    """Chat-template ids of `prompts`, left-padded (so that every row's next token is predicted at the last position),
    and their attention mask."""
    encoded = _encode_prompts(tokenizer, prompts)
    length = max(len(ids) for ids in encoded)
    input_ids = torch.full((len(encoded), length), tokenizer.pad_token_id, dtype=torch.long)
    attention_mask = torch.zeros_like(input_ids)
    for row, ids in enumerate(encoded):
        input_ids[row, length - len(ids) :] = torch.tensor(ids)
        attention_mask[row, length - len(ids) :] = 1
    return input_ids, attention_mask


@torch.no_grad()
def sample_completions(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    prompts: Sequence[list[dict]],
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    generator: torch.Generator | None = None,
    batch_size: int = 256,
) -> list[str]:
    """Sample one completion per conversational prompt, as GRPO rollouts do (no top-k/top-p filtering).

    Generation stops at the tokenizer's eos token (`<|end|>`) or after `max_new_tokens`; the returned text excludes
    special tokens. `temperature=0` decodes greedily. Pass a seeded `generator` for reproducible samples.
    """
    prompts = list(prompts)
    was_training = model.training
    model.eval()
    device = next(model.parameters()).device
    texts: list[str] = []
    for start in range(0, len(prompts), batch_size):
        input_ids, attention_mask = _left_padded(tokenizer, prompts[start : start + batch_size])
        input_ids, attention_mask = input_ids.to(device), attention_mask.to(device)
        new_tokens = []
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        past_key_values = None
        for _ in range(max_new_tokens):
            # The first call encodes the prompts; later calls feed only the last sampled token, reusing the KV cache.
            out = model(
                input_ids=input_ids,
                attention_mask=attention_mask,
                position_ids=position_ids,
                past_key_values=past_key_values,
                use_cache=True,
                logits_to_keep=1,
            )
            past_key_values, logits = out.past_key_values, out.logits[:, -1]
            if temperature == 0:
                token = logits.argmax(-1)
            else:
                probs = torch.softmax(logits.float() / temperature, dim=-1)
                token = torch.multinomial(probs.cpu(), 1, generator=generator).squeeze(1).to(device)
            new_tokens.append(token)
            input_ids = token[:, None]
            position_ids = position_ids[:, -1:] + 1
            attention_mask = torch.cat([attention_mask, torch.ones_like(input_ids)], dim=1)
        for row in torch.stack(new_tokens, dim=1).tolist():
            if tokenizer.eos_token_id in row:
                row = row[: row.index(tokenizer.eos_token_id)]
            texts.append(tokenizer.decode(row, skip_special_tokens=True))
    model.train(was_training)
    return texts


def sampled_accuracy(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    dataset: Dataset,
    max_new_tokens: int = 4,
    temperature: float = 1.0,
    seed: int = 0,
) -> float:
    """Fraction of `dataset` rows whose sampled completion earns `toy_reward` 1.0 (one sample per row)."""
    if len(dataset) == 0:
        return 0.0
    generator = torch.Generator().manual_seed(seed)
    texts = sample_completions(model, tokenizer, dataset["prompt"], max_new_tokens, temperature, generator)
    task = dataset["task"] if "task" in dataset.column_names else None
    rewards = toy_reward(prompts=dataset["prompt"], completions=texts, answer=dataset["answer"], task=task)
    return sum(rewards) / len(rewards)


def warmup(
    model: PreTrainedModel,
    tokenizer: PreTrainedTokenizerBase,
    family: str | Sequence[str] = "add",
    target_accuracy: float = 0.2,
    max_steps: int = 2000,
    batch_size: int = 64,
    lr: float = 3e-3,
    seed: int = 0,
    temperature: float = 1.0,
    eval_every: int = 5,
    probe_size: int = 512,
    max_new_tokens: int = 4,
    dataset: Dataset | None = None,
    num_threads: int | None = 1,
    lr_warmup_steps: int = 0,
) -> dict:
    """Supervised warm-up until the sampled accuracy on a fixed probe set reaches `target_accuracy`.

    Trains `model` in place with AdamW and cross-entropy on the answer tokens (and `<|end|>`) of correct examples.
    Every `eval_every` steps (and before the first one) it samples one completion per probe prompt at `temperature`,
    and stops as soon as the accuracy is at least `target_accuracy`. Deterministic for a given `seed`: batches and
    samples come from local `torch.Generator`s, and the global torch RNG is left untouched.

    Args:
        model: A causal LM, e.g. from `build_model`; trained in place.
        tokenizer: The toy tokenizer (its chat template renders the prompts).
        family: Task family name, or a list of names to warm up on a mixture.
        target_accuracy: Sampled accuracy at which to stop.
        max_steps: Give up (with a warning) after this many optimizer steps.
        batch_size: Examples per step.
        lr: AdamW learning rate.
        seed: Seed of the training data, batches and probe samples.
        temperature: Sampling temperature of the probe (1.0 matches GRPO rollouts).
        eval_every: Steps between two probe evaluations.
        probe_size: Rows of the probe set (drawn with a different seed from the training data; for a small family
            both cover all its problems).
        max_new_tokens: Completion budget of the probe samples (use GRPO's `max_completion_length`).
        dataset: Training rows (columns `prompt`, `answer`); defaults to 4096 rows of `make_dataset(family, ...)`.
        num_threads: torch intra-op threads during the warm-up (restored afterwards); `None` keeps the current
            setting. One thread is the fastest for a model this small, and by far on a busy machine.
        lr_warmup_steps: Raise the learning rate linearly from `lr / lr_warmup_steps` to `lr` over this many steps
            (0: constant from the first step). The reasoning world's 3-layer model needs it at lr 3e-3.

    Returns:
        A dict with `steps` (optimizer steps taken), `accuracy` (last probe accuracy), `reached` (whether the target
        was reached), `loss` (last training loss, None if no step was taken), `seconds`, and `history` (a list of
        `(step, accuracy)` pairs, one per probe evaluation).
    """
    start = time.perf_counter()
    with torch_threads(num_threads):
        train_rows = dataset if dataset is not None else make_dataset(family, 4096, seed=seed)
        probe = make_dataset(family, probe_size, seed=seed + 1_000_003)
        examples = _encode_examples(tokenizer, train_rows)
        device = next(model.parameters()).device
        data_generator = torch.Generator().manual_seed(seed)
        optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.0)
        schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda s: min(1.0, (s + 1) / max(1, lr_warmup_steps)))
        was_training = model.training

        def evaluate(step: int) -> float:
            return sampled_accuracy(model, tokenizer, probe, max_new_tokens, temperature, seed=seed + step)

        history = [(0, evaluate(0))]
        step, loss = 0, None
        while history[-1][1] < target_accuracy and step < max_steps:
            model.train()
            indices = torch.randint(len(examples), (batch_size,), generator=data_generator).tolist()
            batch = {
                k: v.to(device) for k, v in _collate([examples[i] for i in indices], tokenizer.pad_token_id).items()
            }
            loss = model(**batch).loss
            loss.backward()
            optimizer.step()
            schedule.step()
            optimizer.zero_grad(set_to_none=True)
            step += 1
            if step % eval_every == 0 or step == max_steps:
                history.append((step, evaluate(step)))
        model.train(was_training)
    accuracy = history[-1][1]
    reached = accuracy >= target_accuracy
    if not reached:
        warnings.warn(
            f"Warm-up stopped at max_steps={max_steps} with sampled accuracy {accuracy:.3f} < target "
            f"{target_accuracy}; raise max_steps or lr.",
            stacklevel=2,
        )
    return {
        "steps": step,
        "accuracy": accuracy,
        "reached": reached,
        "loss": None if loss is None else loss.item(),
        "seconds": time.perf_counter() - start,
        "history": history,
    }
