"""Evaluation of a model on verifiable tasks: k samples per problem, avg@k, pass@k and response length.

```bash
healtrl eval --model outputs/toy_grpo --tasks toy-add,toy-compare --k 8 --max_new_tokens 4
healtrl eval --model Qwen/Qwen3-4B-Base --tasks math500,aime24 --k 32 --temperature 1.0 --top_p 0.7 \
    --max_new_tokens 8192 --output_dir outputs/eval/qwen3_4b
```

For every task (`healtrl.tasks.load_task`), each problem gets `k` sampled completions: with vLLM when it is installed
and a GPU is present (`--backend auto`, the default; `--backend vllm` insists on it), else with transformers' batched
`generate` (conversational prompts go through the tokenizer's chat template, as in TRL's GRPOTrainer). The task's
registered reward (`TaskSpec.reward`, a name in `healtrl.data.REWARD_FUNCS`) scores every completion, called with
TRL's reward convention; a completion is **correct when its reward is at least `threshold`** (default 1.0: full
credit, e.g. every unit test of a code problem passing; lower it, e.g. to 0.5, for rewards that give partial credit).

Reported per task (fractions in `results.json`, percentages in `results.md`):

* `avg@k`: the mean correctness over all k samples of all problems (equals the unbiased pass@1);
* `pass@j` for j = 1, 2, 4, ... (powers of two) up to k, and k itself: the mean over problems of the unbiased
  estimator 1 - C(k - c, j) / C(k, j) (`healtrl.functional.pass_at_k`, Chen et al. 2021, eq. 1);
* `mean_response_length`: generated tokens per completion, counting the end-of-sequence token when one was generated
  (as TRL's `completions/mean_length`); `truncated_fraction`: completions that hit `max_new_tokens` without one.

`healtrl eval --checkpoints <run dir>` picks a run's best checkpoint (`healtrl.evaluation.best_checkpoint`); during training,
`healtrl.evaluation.callback.PeriodicEvalCallback` runs this evaluation every few steps. The command line is
`healtrl.cli.eval`.
"""

from __future__ import annotations

import contextlib
import json
import os
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

import numpy as np

from healtrl.functional.evaluation import pass_at_k
from healtrl.generation import (
    Completion,
    SamplingSettings,
    TransformersGenerator,
    VLLMGenerator,
)
from healtrl.utils.distributed import Processes, interleave
from healtrl.utils.numbers import is_number
from healtrl.utils.prompts import is_conversational
from healtrl.utils.prompts import tokenize_prompts as _tokenize_prompts

from .options import BACKENDS, DEFAULT_THRESHOLD

__all__ = [
    "DEFAULT_THRESHOLD",
    "Completion",
    "EvalResults",
    "SamplingSettings",
    "TaskResult",
    "TransformersGenerator",
    "VLLMGenerator",
    "evaluate",
    "evaluate_task",
    "pass_at_k_points",
    "score_completions",
    "tokenize_prompts",
]

RESULTS_JSON = "results.json"
RESULTS_MD = "results.md"


# ----------------------------------------------------------------------------------------------------------------
# Settings and results
# ----------------------------------------------------------------------------------------------------------------
def pass_at_k_points(k: int) -> list[int]:
    """The j of the reported pass@j: 1, 2, 4, ... (powers of two not above `k`), and `k` itself."""
    if not isinstance(k, int) or k < 1:
        raise ValueError(f"k must be a positive integer, got {k!r}.")
    points = [2**i for i in range(k.bit_length()) if 2**i <= k]
    return points if points[-1] == k else [*points, k]


@dataclass
class TaskResult:
    """The evaluation of one task.

    Attributes:
        task: Task name.
        split: Split evaluated.
        reward: Name of the reward that scored it.
        threshold: A completion counts as correct when its reward is at least this.
        k: Completions per problem.
        num_problems: Problems evaluated.
        correct: Correct completions of each problem (0..k).
        pass_at: j -> mean over problems of the unbiased pass@j.
        mean_response_length: Mean generated tokens per completion (counting the end-of-sequence token).
        truncated_fraction: Fraction of completions that reached `max_new_tokens` without an end-of-sequence token.
        mean_reward: Mean raw reward.
        seconds: Wall time (generation and scoring).
    """

    task: str
    split: str
    reward: str
    threshold: float
    k: int
    num_problems: int
    correct: list[int]
    pass_at: dict[int, float]
    mean_response_length: float
    truncated_fraction: float
    mean_reward: float
    seconds: float = 0.0

    @property
    def avg_at_k(self) -> float:
        """Mean correctness over every sample of every problem."""
        return float(np.mean(self.correct) / self.k) if self.num_problems else float("nan")

    def metrics(self) -> dict[str, float]:
        """Flat metrics: `avg@k`, `pass@j`, `mean_response_length`, `truncated_fraction`, `mean_reward`."""
        out = {f"avg@{self.k}": self.avg_at_k}
        out.update({f"pass@{j}": value for j, value in self.pass_at.items()})
        out["mean_response_length"] = self.mean_response_length
        out["truncated_fraction"] = self.truncated_fraction
        out["mean_reward"] = self.mean_reward
        return out

    def to_dict(self) -> dict[str, Any]:
        data = {key: value for key, value in asdict(self).items() if key != "pass_at"}
        data["metrics"] = self.metrics()
        return data


@dataclass
class EvalResults:
    """Results of `evaluate`: one `TaskResult` per task, with the model and the settings that produced them."""

    model: str
    backend: str
    settings: SamplingSettings
    tasks: dict[str, TaskResult] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        return {
            "model": self.model,
            "backend": self.backend,
            "settings": asdict(self.settings),
            "tasks": {name: result.to_dict() for name, result in self.tasks.items()},
        }

    def metrics(self, prefix: str = "") -> dict[str, float]:
        """`{prefix}<task>/<metric>` for every task and metric (e.g. `eval/toy-add/pass@8`)."""
        return {f"{prefix}{name}/{key}": value for name, r in self.tasks.items() for key, value in r.metrics().items()}

    def to_markdown(self) -> str:
        """A Markdown table, one row per task (and their unweighted average when there are several)."""
        k = self.settings.k
        points = pass_at_k_points(k)
        header = ["task", "split", "problems", f"avg@{k}", *[f"pass@{j}" for j in points], "mean length", "truncated"]
        lines = ["| " + " | ".join(header) + " |", "|" + "|".join(["---"] * 3 + ["---:"] * (len(header) - 3)) + "|"]

        def row(name, split, problems, avg, passes, length, truncated):
            cells = [name, split, str(problems), f"{100 * avg:.1f}", *[f"{100 * p:.1f}" for p in passes]]
            cells += [f"{length:.1f}", f"{100 * truncated:.1f}%"]
            return "| " + " | ".join(cells) + " |"

        results = list(self.tasks.values())
        for r in results:
            lines.append(
                row(
                    r.task,
                    r.split,
                    r.num_problems,
                    r.avg_at_k,
                    [r.pass_at[j] for j in points],
                    r.mean_response_length,
                    r.truncated_fraction,
                )
            )
        if len(results) > 1:
            lines.append(
                row(
                    "**average**",
                    "",
                    sum(r.num_problems for r in results),
                    float(np.mean([r.avg_at_k for r in results])),
                    [float(np.mean([r.pass_at[j] for r in results])) for j in points],
                    float(np.mean([r.mean_response_length for r in results])),
                    float(np.mean([r.truncated_fraction for r in results])),
                )
            )
        s = self.settings
        from healtrl.model_card import published_model_name

        intro = [
            # The model by the name a card would publish (a Hub id, `healtrl-toy/...`), never this machine's path
            f"# Evaluation of `{published_model_name(self.model)[0]}`",
            "",
            f"Backend: {self.backend}. Sampling: k={s.k}, temperature={s.temperature}, top_p={s.top_p}, "
            f"top_k={s.top_k or 'off'}, max_new_tokens={s.max_new_tokens}, seed={s.seed}. Scores in % (avg@k: mean "
            "correctness of all samples; pass@j: unbiased estimator of Chen et al. 2021); mean length in generated "
            "tokens; truncated: completions that hit max_new_tokens. The average row is the unweighted mean over tasks.",
            "",
        ]
        return "\n".join(intro + lines) + "\n"

    def write(self, output_dir: str | os.PathLike) -> tuple[str, str]:
        """Write `results.json` and `results.md` to `output_dir`; returns their paths."""
        os.makedirs(output_dir, exist_ok=True)
        json_path = os.path.join(output_dir, RESULTS_JSON)
        md_path = os.path.join(output_dir, RESULTS_MD)
        with open(json_path, "w") as f:
            json.dump(self.to_dict(), f, indent=2)
            f.write("\n")
        with open(md_path, "w") as f:
            f.write(self.to_markdown())
        return json_path, md_path


# ----------------------------------------------------------------------------------------------------------------
# Generation
# ----------------------------------------------------------------------------------------------------------------
def tokenize_prompts(tokenizer, prompts: Sequence) -> list[list[int]]:
    """Prompt token ids as TRL's GRPOTrainer builds them for generation.

    Conversational prompts (`[{"role": "user", "content": ...}]`) go through the chat template with the generation
    prompt appended; plain-text prompts are tokenized as they are.
    """
    return _tokenize_prompts(
        tokenizer,
        prompts,
        no_template_hint="Evaluate a model whose tokenizer has one (instruct and most base checkpoints do), or set "
        "`tokenizer.chat_template`.",
    )


# ----------------------------------------------------------------------------------------------------------------
# Scoring
# ----------------------------------------------------------------------------------------------------------------
def score_completions(
    dataset,
    completions: Sequence[Sequence[Completion]],
    reward_func: Callable,
    reward_name: str = "reward",
    chunk_problems: int = 64,
) -> list[list[float]]:
    """Score the k completions of every problem of `dataset` with a reward function in TRL's convention.

    The reward is called as `reward_func(prompts=..., completions=..., completion_ids=..., **columns)`, with every
    dataset column other than `prompt` repeated for each completion, exactly as TRL's GRPOTrainer calls it.
    Completions of conversational prompts are passed as `[{"role": "assistant", "content": text}]`, others as text.

    Args:
        dataset: A `datasets.Dataset` with a `prompt` column, one row per problem.
        completions: For each row, its completions.
        reward_func: The reward function.
        reward_name: Its name, for error messages.
        chunk_problems: Problems scored per call.

    Returns:
        For each row, the rewards of its completions.
    """
    if len(completions) != len(dataset):
        raise ValueError(f"Got completions for {len(completions)} problems, but the dataset has {len(dataset)} rows.")
    columns = [c for c in dataset.column_names if c != "prompt"]
    scores: list[list[float]] = []
    for start in range(0, len(dataset), chunk_problems):
        rows = dataset.select(range(start, min(start + chunk_problems, len(dataset))))
        batch = completions[start : start + len(rows)]
        prompts, texts, ids = [], [], []
        kwargs: dict[str, list] = {c: [] for c in columns}
        for row, problem_completions in zip(rows, batch):
            conversational = is_conversational(row["prompt"])
            for completion in problem_completions:
                prompts.append(row["prompt"])
                texts.append([{"role": "assistant", "content": completion.text}] if conversational else completion.text)
                ids.append(completion.token_ids)
                for c in columns:
                    kwargs[c].append(row[c])
        rewards = list(reward_func(prompts=prompts, completions=texts, completion_ids=ids, **kwargs))
        if len(rewards) != len(texts):
            raise ValueError(
                f"The reward '{reward_name}' returned {len(rewards)} rewards for {len(texts)} completions."
            )
        bad = [r for r in rewards if r is None or not is_number(float(r))]
        if bad:
            raise ValueError(
                f"The reward '{reward_name}' returned {bad[0]!r} for a completion; evaluation needs a finite number for "
                "every completion (a reward that does not apply to a task cannot score it)."
            )
        position = 0
        for problem_completions in batch:
            scores.append([float(r) for r in rewards[position : position + len(problem_completions)]])
            position += len(problem_completions)
    return scores


# ----------------------------------------------------------------------------------------------------------------
# Evaluation
# ----------------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def _seeded(seed: int):
    """Seed torch (and transformers' sampling) inside the block, restoring every RNG state afterwards."""
    import torch

    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(seed)
        yield


def evaluate_task(
    generator,
    tokenizer,
    dataset,
    settings: SamplingSettings,
    *,
    task: str,
    reward: str,
    split: str = "",
    threshold: float = DEFAULT_THRESHOLD,
    progress: bool = True,
    procs: Processes | None = None,
) -> TaskResult:
    """Sample, score and summarise one task's dataset.

    Args:
        generator: A `TransformersGenerator` or `VLLMGenerator` (anything with `generate(prompt_ids, settings,
            desc, progress) -> list[list[Completion]]`).
        tokenizer: Tokenizer of the model (builds the prompt ids).
        dataset: Rows with a `prompt` column and the columns the reward reads.
        settings: Sampling settings.
        task: Task name (shown and stored).
        reward: Name of the reward in `healtrl.data.REWARD_FUNCS` (or a dotted path).
        split: Split name (stored).
        threshold: A completion is correct when its reward is >= threshold.
        progress: Show progress bars (on the main process only).
        procs: The processes of a launch (`healtrl.utils.distributed.processes()`) that share the work; default: this one.

    Returns:
        The `TaskResult` (the same on every process, and the same as a single-process run with the same seed).
    """
    from healtrl.data import get_reward_func

    start = time.perf_counter()
    procs = procs or Processes()
    reward_func = get_reward_func(reward)
    prompt_ids = tokenize_prompts(tokenizer, dataset["prompt"])
    with _seeded(settings.seed):
        kwargs = {"procs": procs} if procs.distributed else {}
        completions = generator.generate(
            prompt_ids, settings, desc=f"{task} (k={settings.k})", progress=progress, **kwargs
        )
    # Scoring is sharded like generation: each process scores every `world`-th problem, gathered in order.
    units = len(completions)
    mine = list(procs.mine(units))
    own = score_completions(dataset.select(mine), [completions[i] for i in mine], reward_func, reward_name=reward)
    rewards = interleave(procs.gather(own), units, procs.world)
    return summarise(task, split, reward, threshold, settings.k, completions, rewards, time.perf_counter() - start)


def summarise(
    task: str,
    split: str,
    reward: str,
    threshold: float,
    k: int,
    completions: Sequence[Sequence[Completion]],
    rewards: Sequence[Sequence[float]],
    seconds: float = 0.0,
) -> TaskResult:
    """Build a `TaskResult` from the completions and rewards of every problem."""
    correct = [sum(r >= threshold for r in problem) for problem in rewards]
    counts = np.asarray(correct, dtype=np.int64)
    pass_at = {j: float(np.mean(pass_at_k(k, counts, j))) if len(counts) else float("nan") for j in pass_at_k_points(k)}
    flat = [c for problem in completions for c in problem]
    flat_rewards = [r for problem in rewards for r in problem]
    return TaskResult(
        task=task,
        split=split,
        reward=reward,
        threshold=float(threshold),
        k=k,
        num_problems=len(correct),
        correct=[int(c) for c in correct],
        pass_at=pass_at,
        mean_response_length=float(np.mean([c.num_tokens for c in flat])) if flat else float("nan"),
        truncated_fraction=float(np.mean([c.truncated for c in flat])) if flat else float("nan"),
        mean_reward=float(np.mean(flat_rewards)) if flat_rewards else float("nan"),
        seconds=round(seconds, 3),
    )


def load_eval_tasks(
    tasks: Sequence[str],
    split: str | None = None,
    num_samples: int | None = None,
    seed: int = 0,
    task_paths: dict[str, str] | None = None,
) -> dict[str, tuple[Any, Any]]:
    """Load each task's dataset: name -> (TaskSpec, dataset). Unknown names fail before anything is loaded."""
    from healtrl.tasks import get_task, load_task

    task_paths = dict(task_paths or {})
    specs = {name: get_task(name) for name in tasks}
    unknown_paths = sorted(set(task_paths) - set(specs))
    if unknown_paths:
        raise ValueError(
            f"A data path is given for {', '.join(unknown_paths)}, which is not among the tasks evaluated "
            f"({', '.join(specs)})."
        )
    return {
        name: (spec, load_task(name, split=split, num_samples=num_samples, seed=seed, path=task_paths.get(name)))
        for name, spec in specs.items()
    }


def _pick_backend(backend: str, model_is_object: bool, is_adapter: bool) -> tuple[str, str]:
    """(backend, why) for `--backend`."""
    import torch

    from healtrl.utils.compat import is_available

    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {', '.join(BACKENDS)}, got {backend!r}.")
    if backend == "transformers":
        return "transformers", "asked for"
    if backend == "vllm":
        if model_is_object:
            raise ValueError("The vLLM backend needs a model path or Hub id, not a loaded model object.")
        if is_adapter:
            raise ValueError(
                "The vLLM backend cannot load a LoRA adapter folder; merge it first "
                "(`AutoPeftModelForCausalLM.from_pretrained(path).merge_and_unload().save_pretrained(out)`) or use "
                "`--backend transformers`."
            )
        if not is_available("vllm"):
            raise ValueError("`--backend vllm` needs vLLM, which is not installed. Run: pip install healtrl[vllm]")
        return "vllm", "asked for"
    # auto
    if model_is_object:
        return "transformers", "a loaded model was given"
    if not is_available("vllm"):
        return "transformers", "vLLM is not installed"
    if not torch.cuda.is_available():
        return "transformers", "vLLM is installed but no CUDA GPU is available"
    if is_adapter:
        return "transformers", "the model is a LoRA adapter folder, which vLLM cannot load unmerged"
    return "vllm", "vLLM is installed and a GPU is available"


def load_hf_model(path: str, dtype: str, device: str, trust_remote_code: bool):
    import torch
    from transformers import AutoModelForCausalLM

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    if dtype == "auto" and device == "cpu":
        dtype = "float32"  # half precision is slow (and for fp16 lossy) on CPUs
    torch_dtype = dtype if dtype == "auto" else getattr(torch, dtype)
    if os.path.isfile(os.path.join(path, "adapter_config.json")):
        from peft import AutoPeftModelForCausalLM

        model = AutoPeftModelForCausalLM.from_pretrained(path, dtype=torch_dtype, trust_remote_code=trust_remote_code)
        model = model.merge_and_unload()
    else:
        model = AutoModelForCausalLM.from_pretrained(path, dtype=torch_dtype, trust_remote_code=trust_remote_code)
    return model.to(device)


def evaluate(
    model,
    tasks: Sequence[str],
    *,
    k: int = 1,
    tokenizer=None,
    temperature: float = 1.0,
    top_p: float = 1.0,
    top_k: int = 0,
    max_new_tokens: int = 4096,
    num_samples: int | None = None,
    split: str | None = None,
    seed: int = 0,
    batch_size: int = 64,
    threshold: float = DEFAULT_THRESHOLD,
    backend: str = "auto",
    task_paths: dict[str, str] | None = None,
    dtype: str = "auto",
    device: str = "auto",
    trust_remote_code: bool = False,
    vllm_kwargs: dict[str, Any] | None = None,
    progress: bool = True,
    procs: Processes | None = None,
) -> EvalResults:
    """Evaluate `model` on `tasks` with `k` samples per problem.

    Args:
        model: A local folder (a full model or a LoRA adapter saved by `train.py`), a Hub id, a `healtrl-toy/...` or
            `healtrl-offline/...` name, or a loaded causal LM (then `tokenizer` is required and transformers
            generates).
        tasks: Task names (`healtrl.tasks.TASKS`).
        k: Samples per problem.
        tokenizer: The tokenizer (loaded from `model` when it is a name).
        temperature, top_p, top_k, max_new_tokens: see `SamplingSettings`.
        num_samples: Evaluate a random subset of this many problems per task (drawn with `seed`).
        split: Split of every task (default: each task's evaluation split).
        seed, batch_size: see `SamplingSettings`.
        threshold: A completion is correct when its reward is >= threshold (default 1.0).
        backend: "auto" (vLLM when installed and a GPU is present, else transformers), "vllm" or "transformers".
        task_paths: Task name -> a local file in the format of the task's Hub dataset, loaded instead of the Hub.
        dtype: Model dtype for loading ("auto", "float32", "bfloat16", "float16"); "auto" means float32 on a CPU.
        device: "auto" (CUDA when available), "cpu", "cuda", "cuda:1", ...
        trust_remote_code: Passed to `from_pretrained` / vLLM.
        vllm_kwargs: Extra arguments of `vllm.LLM` (`tensor_parallel_size`, `gpu_memory_utilization`, ...).
        progress: Show progress bars.
        procs: Share the work over the processes of a launch (`healtrl.utils.distributed.processes()`; `healtrl eval` does
            this under torchrun / accelerate launch): each samples and scores its share, every process returns the
            whole result, identical to a single-process run with the same seed. Default: this process alone.

    Returns:
        `EvalResults`; write them with `.write(output_dir)` (on the main process).
    """
    procs = procs or Processes()
    progress = progress and procs.is_main
    if procs.distributed and device == "auto":
        device = procs.device()
    settings = SamplingSettings(
        k=k,
        temperature=temperature,
        top_p=top_p,
        top_k=top_k,
        max_new_tokens=max_new_tokens,
        seed=seed,
        batch_size=batch_size,
    )
    if not is_number(threshold):
        raise ValueError(f"`threshold` must be a finite number, got {threshold!r}.")
    if dtype not in ("auto", "float32", "bfloat16", "float16"):
        raise ValueError(f"`dtype` must be one of auto, float32, bfloat16, float16; got {dtype!r}.")
    tasks = list(tasks)
    if not tasks:
        raise ValueError("No task to evaluate: pass at least one task name.")
    datasets_ = load_eval_tasks(tasks, split=split, num_samples=num_samples, seed=seed, task_paths=task_paths)

    model_is_object = not isinstance(model, (str, os.PathLike))
    if model_is_object:
        if tokenizer is None:
            raise ValueError("Pass the `tokenizer` together with a loaded model.")
        model_name = getattr(getattr(model, "config", None), "_name_or_path", None) or type(model).__name__
        path = None
    else:
        from healtrl.models import resolve_model_path

        model_name = os.fspath(model)
        path = resolve_model_path(model_name)
    is_adapter = path is not None and os.path.isfile(os.path.join(path, "adapter_config.json"))
    chosen, why = _pick_backend(backend, model_is_object, is_adapter)
    if progress:
        print(f"Evaluating {model_name} with {chosen} ({why}).", file=sys.stderr)

    if tokenizer is None:
        from transformers import AutoTokenizer

        tokenizer = AutoTokenizer.from_pretrained(path, trust_remote_code=trust_remote_code)
    if chosen == "vllm":
        generator = VLLMGenerator(
            path, dtype=dtype, seed=seed, trust_remote_code=trust_remote_code, **(vllm_kwargs or {})
        )
    else:
        loaded = model if model_is_object else load_hf_model(path, dtype, device, trust_remote_code)
        generator = TransformersGenerator(loaded, tokenizer)

    results = EvalResults(model=model_name, backend=chosen, settings=settings)
    for name, (spec, dataset) in datasets_.items():
        results.tasks[name] = evaluate_task(
            generator,
            tokenizer,
            dataset,
            settings,
            task=name,
            reward=spec.reward,
            split=split or spec.split,
            threshold=threshold,
            progress=progress,
            procs=procs,
        )
    return results
