"""`ScriptArguments`: the fields of a training config that are neither model (`trl.ModelConfig`) nor trainer settings.

TRL's scripts define their own `ScriptArguments` for the same purpose (`trl.ScriptArguments`: dataset name, config
and splits); healtrl's adds what its runs need beyond them: few-shot subsets (`num_train_samples`, `num_target`),
`train_repeats`, reward functions by name, the periodic evaluation, the data-hygiene switch and the paper's recipe
(`best_checkpoint`, `paper_results`, `paper_protocol`). `healtrl.cli.config` routes a flat config's keys to it.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = ["ScriptArguments"]


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
            appear in the training data (normalised question stem, `healtrl.hygiene`). Off: the run refuses, naming the
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
            `healtrl.evaluation.callback.PeriodicEvalCallback`; logs `eval/<task>/avg@k` and `eval/<task>/pass@j`. A math task
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
            (where the paper states the rule). Example (AER App. A): `{tasks: [aime25], metric: pass@1, k: 32,
            every_steps: 20}`.
        paper_results (`list[dict]`, *optional*, defaults to `[]`):
            The paper's reported numbers for this recipe, one mapping per number: `benchmark` (a task name),
            `metric` (`avg@k`, `pass@<j>`, ...), `value` (percent, as printed), `k` (samples behind the number;
            default `paper_protocol.k`), `table` (e.g. `"AER Table 1, Qwen3-4B-Base, w/ AER (Ours)"`). `healtrl
            eval` on a run of this recipe writes `paper_comparison.md`: your numbers, the paper's, the difference.
        paper_protocol (`dict`, *optional*):
            How the paper decoded `paper_results`: `k`, `temperature`, `top_p`, `max_new_tokens` (null: not stated
            by the paper), `ours` (healtrl's choice where the paper is silent), `source` (where it is stated), and
            `model` / `dataset` (the row's model and training data). Mismatches with your evaluation are flagged.
        allow_large_checkpoint_plan (`bool`, *optional*, defaults to `False`):
            Accept a plan whose saved checkpoints exceed the dry run's bounds (`healtrl.recipes.CHECKPOINT_BOUNDS`:
            the disk of the checkpoints kept at once, and the checkpoints `healtrl eval --checkpoints` would
            evaluate). Off: `--dry_run` refuses such a plan, printing its cost.
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
            "source, ours, model, dataset}; null values mean not stated by the paper."
        },
    )
    allow_large_checkpoint_plan: bool = field(
        default=False,
        metadata={
            "help": "Accept saved checkpoints over the dry run's bounds on disk and on checkpoints to evaluate "
            "(healtrl.recipes.CHECKPOINT_BOUNDS). Off: the dry run refuses such a plan, printing its cost."
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
        from healtrl.recipes.recipe import parse_best_checkpoint, parse_paper_protocol, parse_paper_results

        parse_best_checkpoint(self.best_checkpoint)  # ValueErrors name the key: best_checkpoint.<key>
        parse_paper_results(self.paper_results, parse_paper_protocol(self.paper_protocol))
