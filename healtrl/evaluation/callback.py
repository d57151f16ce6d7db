"""`PeriodicEvalCallback`: `healtrl.evaluation.evaluate` on the current policy during training.

During training, `PeriodicEvalCallback` runs the same evaluation on the current policy every `every_n_steps`
optimizer steps and logs `eval/<task>/avg@k`, `eval/<task>/pass@j`, `eval/<task>/mean_response_length` through the
trainer's logging (so they reach `metrics.jsonl`, wandb, trackio or tensorboard). From a `train.py` config, set
`eval_tasks` (and `eval_k`, `eval_every_steps`, ...; see `healtrl.cli.script_args.ScriptArguments`).
"""

from __future__ import annotations

import contextlib
import time
from collections.abc import Sequence

from healtrl.evaluation.engine import (
    DEFAULT_THRESHOLD,
    EvalResults,
    _seeded,
    load_eval_tasks,
    score_completions,
    summarise,
    tokenize_prompts,
)
from healtrl.generation import SamplingSettings, TransformersGenerator
from healtrl.utils.numbers import is_number


# ----------------------------------------------------------------------------------------------------------------
# Periodic evaluation during training
# ----------------------------------------------------------------------------------------------------------------
def _callback_base():
    from transformers import TrainerCallback

    return TrainerCallback


class PeriodicEvalCallback(_callback_base()):
    """Evaluate the policy being trained on tasks every `every_n_steps` optimizer steps, and log the scores.

    The metrics `eval/<task>/avg@k`, `eval/<task>/pass@j` (j = 1, 2, 4, ..., k), `eval/<task>/mean_response_length`
    and `eval/<task>/truncated_fraction` go through `transformers.Trainer.log`, i.e. into `trainer.state.log_history`
    (`metrics.jsonl` of `train.py`) and every `report_to` backend, as an entry of their own at that step. GRPO's
    running training metrics are left alone. Generation uses transformers' `generate` on the current weights (under
    DeepSpeed ZeRO-3 / FSDP, gathered as TRL gathers them for generation); every process samples its share of the
    problems and the counts are gathered, so all processes log the same numbers. Sampling runs under a forked RNG: the
    training run's random streams are the same with or without this callback.

    Args:
        tasks: Task names (`healtrl.tasks.TASKS`).
        k: Samples per problem.
        every_n_steps: Evaluate when the global step is a multiple of this, and at the last step.
        trainer: The trainer whose model is evaluated and whose `log` receives the metrics; or call `attach(trainer)`.
        eval_on_start: Also evaluate before the first step (logged at step 0).
        temperature, top_p, top_k, seed, batch_size: see `SamplingSettings`.
        max_new_tokens: Defaults to the trainer's `max_completion_length`.
        num_samples: Evaluate a fixed random subset of this many problems per task.
        split: Split of every task (default: each task's evaluation split).
        threshold: A completion is correct when its reward is >= threshold.
        task_paths: Task name -> local data file (see `evaluate`).
        prefix: Prefix of the logged keys.
        progress: Show progress bars (main process only).
        best_rule: A `healtrl.recipes.BestCheckpointRule` whose tasks are among `tasks`: each evaluation is scored by
            it (pass@j with j > k is scored as pass@k) and the best step becomes transformers' best checkpoint, which
            `save_total_limit` keeps (`_track_best`).

    Example:

    ```python
    trainer = EntropyGRPOTrainer(...)
    trainer.add_callback(PeriodicEvalCallback(["toy-add"], k=8, every_n_steps=50, trainer=trainer))
    trainer.train()
    ```
    """

    def __init__(
        self,
        tasks: Sequence[str],
        k: int = 1,
        every_n_steps: int = 100,
        *,
        trainer=None,
        eval_on_start: bool = False,
        temperature: float = 1.0,
        top_p: float = 1.0,
        top_k: int = 0,
        max_new_tokens: int | None = None,
        seed: int = 0,
        batch_size: int = 64,
        num_samples: int | None = None,
        split: str | None = None,
        threshold: float = DEFAULT_THRESHOLD,
        task_paths: dict[str, str] | None = None,
        prefix: str = "eval/",
        progress: bool = False,
        best_rule=None,
    ):
        from healtrl.tasks import get_task

        self.best_rule = best_rule
        if isinstance(tasks, str):
            tasks = [t for t in tasks.split(",") if t]
        self.tasks = list(tasks)
        if not self.tasks:
            raise ValueError("PeriodicEvalCallback needs at least one task in `tasks`.")
        for name in self.tasks:
            get_task(name)  # an unknown name fails now, not after hours of training
        if not isinstance(every_n_steps, int) or every_n_steps < 1:
            raise ValueError(f"`every_n_steps` must be a positive integer, got {every_n_steps!r}.")
        if not is_number(threshold):
            raise ValueError(f"`threshold` must be a finite number, got {threshold!r}.")
        self.every_n_steps = every_n_steps
        self.eval_on_start = eval_on_start
        self.settings_kwargs = dict(
            k=k, temperature=temperature, top_p=top_p, top_k=top_k, seed=seed, batch_size=batch_size
        )
        self.max_new_tokens = max_new_tokens
        SamplingSettings(**self.settings_kwargs, max_new_tokens=max_new_tokens or 1)  # validate now
        self.num_samples = num_samples
        self.split = split
        self.threshold = threshold
        self.task_paths = task_paths
        self.prefix = prefix
        self.progress = progress
        self.trainer = trainer
        self._datasets = None
        self._last_step = None
        self.history: list[tuple[int, EvalResults]] = []

    def attach(self, trainer) -> PeriodicEvalCallback:
        """Set the trainer whose model is evaluated and whose `log` receives the metrics; returns `self`."""
        self.trainer = trainer
        return self

    def _settings(self) -> SamplingSettings:
        max_new = self.max_new_tokens or getattr(self.trainer.args, "max_completion_length", None) or 256
        return SamplingSettings(**self.settings_kwargs, max_new_tokens=int(max_new))

    def evaluate_now(self) -> EvalResults:
        """Evaluate the trainer's current model on every task (collective: every process must call it)."""
        trainer = self.trainer
        if trainer is None:
            raise RuntimeError(
                "PeriodicEvalCallback has no trainer: pass `trainer=` when creating it or call `callback.attach(trainer)`."
            )
        if self._datasets is None:
            self._datasets = load_eval_tasks(
                self.tasks, split=self.split, num_samples=self.num_samples, seed=self.settings_kwargs["seed"],
                task_paths=self.task_paths,
            )  # fmt: skip
        settings = self._settings()
        accelerator = trainer.accelerator
        rank, world = accelerator.process_index, accelerator.num_processes
        tokenizer = trainer.processing_class
        tokenizer = getattr(tokenizer, "tokenizer", tokenizer)  # a processor wraps its tokenizer
        results = EvalResults(model=f"step {trainer.state.global_step}", backend="transformers", settings=settings)
        show = self.progress and accelerator.is_main_process
        with self._unwrapped_model() as model:
            generator = TransformersGenerator(model, tokenizer)
            for name, (spec, dataset) in self._datasets.items():
                start = time.perf_counter()
                shard = list(range(rank, len(dataset), world))  # this process's share of the problems
                part = dataset.select(shard)
                prompt_ids = tokenize_prompts(tokenizer, part["prompt"])
                # The seed depends on the rank so that processes do not draw the same random stream.
                with _seeded(settings.seed + rank):
                    completions = generator.generate(prompt_ids, settings, desc=f"eval {name}", progress=show)
                rewards = score_completions(part, completions, _reward(spec.reward), reward_name=spec.reward)
                local = [(i, completions[j], rewards[j]) for j, i in enumerate(shard)]
                if world > 1:
                    from accelerate.utils import gather_object

                    local = sorted(gather_object(local), key=lambda item: item[0])
                results.tasks[name] = summarise(
                    name,
                    self.split or spec.split,
                    spec.reward,
                    self.threshold,
                    settings.k,
                    [item[1] for item in local],
                    [item[2] for item in local],
                    time.perf_counter() - start,
                )
        return results

    @contextlib.contextmanager
    def _unwrapped_model(self):
        trainer = self.trainer
        try:
            from trl.models import unwrap_model_for_generation
        except ImportError:  # pragma: no cover - TRL always has it in the supported range
            yield trainer.model
            return
        wrapped = getattr(trainer, "model_wrapped", trainer.model)
        gather = getattr(trainer.args, "ds3_gather_for_generation", True)
        with contextlib.ExitStack() as stack:
            model = stack.enter_context(
                unwrap_model_for_generation(wrapped, trainer.accelerator, gather_deepspeed3_params=gather)
            )
            from healtrl.trainers.contract import fsdp_helper

            dist = fsdp_helper(trainer)  # TRL's FSDP helper: full parameters for generation
            if dist is not None and hasattr(dist, "summon_full_params"):
                stack.enter_context(dist.summon_full_params(wrapped, recurse=False))
            yield model

    def _run(self, state, control):
        if self._last_step == state.global_step:
            return control
        self._last_step = state.global_step
        results = self.evaluate_now()
        self.history.append((state.global_step, results))
        from transformers import Trainer

        # transformers' own `Trainer.log`: appends to log_history and reaches every report_to backend, without
        # flushing GRPOTrainer's running training metrics (its `log` override would). Its `on_log` event clears the
        # control flags that the step set (`should_log`, ...): restore them so that the step's own logging, saving
        # and evaluation still happen.
        flags = {name: getattr(control, name) for name in ("should_log", "should_evaluate", "should_save")}
        self._track_best(state, results)
        Trainer.log(self.trainer, results.metrics(prefix=self.prefix))
        control = self.trainer.control
        for name, value in flags.items():
            setattr(control, name, value)
        return control

    def _track_best(self, state, results) -> None:
        """With a best-checkpoint rule (`best_rule`): score this evaluation by the rule (its metric, reduced over its
        tasks, at this callback's k) and, when it is the best so far, record the step as transformers' best
        (`state.best_metric`, `state.best_global_step`). The checkpoint saved at this step then becomes
        `state.best_model_checkpoint`, which `save_total_limit`'s rotation never deletes."""
        rule = self.best_rule
        if rule is None or state.global_step == 0 or any(t not in results.tasks for t in rule.tasks):
            return
        from healtrl.recipes.metrics import metric_value

        kind, j = rule.parsed_metric
        values = []
        for task in rule.tasks:
            record = results.tasks[task]
            values.append(metric_value(record.correct, record.k, kind, None if j is None else min(j, record.k)))
        score = float(sum(values) / len(values))
        if state.best_metric is None or score > state.best_metric:  # ties: the earliest step, as choose_best
            state.best_metric = score
            state.best_global_step = state.global_step

    def on_train_begin(self, args, state, control, **kwargs):
        if self.eval_on_start:
            return self._run(state, control)
        return control

    def on_step_end(self, args, state, control, **kwargs):
        step = state.global_step
        if step % self.every_n_steps == 0 or (state.max_steps and step >= state.max_steps):
            return self._run(state, control)
        return control


def _reward(name: str):
    from healtrl.data import get_reward_func

    return get_reward_func(name)
