"""One training run from a resolved config (`run_training`): model, tokenizer, data, trainer, the data-hygiene check,
training, and the run files in `output_dir` (see the package docstring, `healtrl.cli`)."""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from .common import CONFIG_FILE, CURVES_FILE, METRICS_FILE, configure_threads
from .config import ConfigError, ResolvedConfig
from .run_data import apply_train_repeats, task_name, trainer_adds_data


def _model_init_kwargs(model_args, trainer_args) -> dict[str, Any]:
    """What TRL passes to `from_pretrained` when it loads the model: ModelConfig's settings under the trainer's."""
    kwargs = {
        "revision": model_args.model_revision,
        "trust_remote_code": getattr(trainer_args, "trust_remote_code", False),
        "attn_implementation": model_args.attn_implementation,
        "dtype": model_args.dtype,
    }
    kwargs = {k: v for k, v in kwargs.items() if v is not None}
    if isinstance(trainer_args.model_init_kwargs, dict):
        kwargs.update(trainer_args.model_init_kwargs)
    return kwargs


def _load_data(script_args, trainer_args):
    """Training (and, when the trainer evaluates, evaluation) data with the columns the rewards need checked."""
    from healtrl.data import check_columns, load_train_dataset, reward_columns

    seed = script_args.dataset_seed if script_args.dataset_seed is not None else trainer_args.seed
    columns = reward_columns(script_args.reward_funcs)
    train_dataset = load_train_dataset(
        script_args.dataset_name,
        script_args.dataset_config,
        split=script_args.dataset_train_split,
        num_samples=script_args.num_train_samples,
        seed=seed,
    )
    check_columns(train_dataset, reward_columns=columns, dataset_name=script_args.dataset_name)
    eval_dataset = None
    if str(getattr(trainer_args.eval_strategy, "value", trainer_args.eval_strategy)) != "no":
        eval_name = script_args.eval_dataset_name or script_args.dataset_name
        if eval_name == script_args.dataset_name and os.path.isfile(os.path.expanduser(eval_name)):
            raise ValueError(
                f"eval_strategy is '{trainer_args.eval_strategy}' but the dataset '{eval_name}' is a single file, which "
                "has one split only. Set `eval_dataset_name` to a separate evaluation file, or `eval_strategy: no`."
            )
        eval_dataset = load_train_dataset(
            eval_name,
            script_args.dataset_config if eval_name == script_args.dataset_name else None,
            split=script_args.dataset_test_split,
            num_samples=script_args.num_eval_samples,
            seed=seed,
        )
        check_columns(eval_dataset, reward_columns=columns, dataset_name=eval_name)
    return train_dataset, eval_dataset


def _load_tokenizer(model_path: str, model_args, trainer_args):
    from transformers import AutoTokenizer

    tokenizer = AutoTokenizer.from_pretrained(
        model_path,
        revision=model_args.model_revision,
        trust_remote_code=getattr(trainer_args, "trust_remote_code", False),
    )
    if tokenizer.pad_token is None:
        tokenizer.pad_token = tokenizer.eos_token
    return tokenizer


def write_run_files(trainer, resolved: ResolvedConfig, output_dir: str, draw_curves: bool) -> None:
    """metrics.jsonl and config.yaml (main process only), and with `draw_curves` curves.png.

    The trainer draws curves.png with its model card (`save_model`); set `draw_curves` when no final model was
    saved (`save_final_model: false`, a run the divergence guard stopped), and the trainer draws it here instead."""
    os.makedirs(output_dir, exist_ok=True)
    with open(os.path.join(output_dir, METRICS_FILE), "w") as f:
        for entry in trainer.state.log_history:
            f.write(json.dumps(entry) + "\n")
    if draw_curves:
        trainer.save_curves(output_dir)
    write_config_file(resolved, output_dir)


def write_config_file(resolved: ResolvedConfig, output_dir: str) -> str:
    """`config.yaml`: the explicitly set keys, which reproduce the run (and carry its recipe: best_checkpoint, ...)."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, CONFIG_FILE)
    with open(path, "w") as f:
        f.write(f"# The explicitly set keys of this run. Reproduce it with: python train.py --config {path}\n")
        f.write(resolved.to_yaml())
    return path


def _card_dataset_name(name: str) -> str:
    """The dataset name shown in the model card: a `task:<name>` dataset by its Hub id when it has one."""
    task = task_name(name)
    if task is None:
        return name
    from healtrl.tasks import get_task

    return get_task(task).hub_id or name  # the data loaded, so the task exists


def _check_extras_early(trainer_args) -> None:
    """Fail before the model and data load when the config asks for an extra that is not installed. The trainers
    check the same at construction, after TRL's own checks (a configuration TRL rejects gets TRL's error there); on
    the command line the config is already known to be valid, so the missing package is named first, at no cost.
    A Liger setting no trainer can train with (`healtrl.trainers.base.liger_conflict`, which TRL refuses at
    construction) raises `ConfigError` here, before the missing package: installing it would not help."""
    from healtrl.trainers.base import liger_conflict

    from ..utils.compat import check_report_to, is_available, missing_extra

    check_report_to(trainer_args.report_to)
    if getattr(trainer_args, "use_vllm", False) and not is_available("vllm"):
        raise missing_extra("vllm", "use_vllm=True")
    liger = liger_conflict(
        getattr(trainer_args, "use_liger_kernel", False), getattr(trainer_args, "liger_kernel_config", None)
    )
    if liger:
        raise ConfigError(liger)
    if getattr(trainer_args, "use_liger_kernel", False) and not is_available("liger"):
        raise missing_extra("liger", "use_liger_kernel=True")


def run_training(resolved: ResolvedConfig):
    """Build everything `resolved` describes, train, save, and return the trainer."""
    script_args, model_args, trainer_args = resolved.script_args, resolved.model_args, resolved.trainer_args
    configure_threads(script_args.torch_num_threads)
    from ..utils.distributed import honour_ddp_timeout

    honour_ddp_timeout(trainer_args.ddp_timeout)  # --ddp_timeout on the CPU too (transformers applies it on GPUs only)

    from trl import get_peft_config, get_quantization_config

    from healtrl.data import get_reward_funcs
    from healtrl.models import resolve_model_path
    from healtrl.trainers import get_trainer_classes

    trainer_cls, _ = get_trainer_classes(resolved.trainer_name)
    _check_extras_early(trainer_args)
    # `true` / `latest` -> the last complete checkpoint of output_dir; before loading anything, so a run with nothing
    # to resume from stops at once (healtrl.checkpoints.ResumeError).
    from healtrl.checkpoints import resolve_resume_checkpoint

    resume = resolve_resume_checkpoint(trainer_args.resume_from_checkpoint, trainer_args.output_dir)

    # The data before the model: a dataset that cannot be used (missing, empty, overlapping the evaluation) stops the
    # run before the model is built or downloaded.
    try:
        with trainer_args.main_process_first(local=True, desc="loading the datasets"):
            train_dataset, eval_dataset = _load_data(script_args, trainer_args)
            # Data hygiene (healtrl.hygiene): no evaluation row may be a training row, unless allow_eval_overlap.
            from .run_hygiene import check_training_run

            check_training_run(resolved, train_dataset, eval_dataset)
            train_dataset = apply_train_repeats(resolved, train_dataset)
        reward_funcs = get_reward_funcs(script_args.reward_funcs)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc
    # Toy models are built (and offline models converted) on first use: let the main process fill the cache first.
    with trainer_args.main_process_first(local=True, desc="resolving the model"):
        model_path = resolve_model_path(model_args.model_name_or_path)
        tokenizer = _load_tokenizer(model_path, model_args, trainer_args)

    trainer_args.model_init_kwargs = _model_init_kwargs(model_args, trainer_args)
    trainer = trainer_cls(
        model=model_path,
        reward_funcs=reward_funcs,
        args=trainer_args,
        train_dataset=train_dataset,
        eval_dataset=eval_dataset,
        processing_class=tokenizer,
        peft_config=get_peft_config(model_args) if model_args.use_peft else None,
        quantization_config=get_quantization_config(model_args),
    )
    # The model card names what the user named (a Hub id, a toy name), not resolved cache paths.
    trainer.model_card_base_model = model_args.model_name_or_path
    names = [script_args.dataset_name, *trainer_adds_data(resolved)]  # e.g. HEAL's general data
    # A task that combines Hub datasets (`medicine`) names each of them.
    trainer.model_card_datasets = [part for name in names if name for part in _card_dataset_name(name).split(",")]
    if script_args.eval_tasks:
        trainer.add_callback(periodic_eval_callback(script_args, trainer_args, trainer))
    from ..utils.distributed import sharding_not_applied

    problem = sharding_not_applied(trainer)  # e.g. use_cpu: true under an FSDP accelerate config
    if problem is not None:
        raise ConfigError(problem)
    _report_cpu_rehearsal(trainer)
    if trainer.is_world_process_zero():  # now, so that `healtrl eval --checkpoints` can read a killed run's recipe
        write_config_file(resolved, trainer_args.output_dir)
    from healtrl.checkpoints import DivergenceError

    try:
        trainer.train(resume_from_checkpoint=resume)
    except DivergenceError:
        if trainer.is_world_process_zero():  # the history up to the step that tripped the guard
            write_run_files(trainer, resolved, trainer_args.output_dir, draw_curves=True)
        raise

    output_dir = trainer_args.output_dir
    if script_args.save_final_model:
        trainer.save_model(output_dir)  # collective under FSDP / DeepSpeed: every process calls it
    if trainer.is_world_process_zero():
        if script_args.save_final_model:
            tokenizer.save_pretrained(output_dir)
        write_run_files(trainer, resolved, output_dir, draw_curves=not script_args.save_final_model)
        saved = "model, tokenizer, " if script_args.save_final_model else ""
        curves = f"{CURVES_FILE}, " if os.path.isfile(os.path.join(output_dir, CURVES_FILE)) else ""
        print(f"\nDone. Output folder: {os.path.abspath(output_dir)} ({saved}{METRICS_FILE}, {curves}{CONFIG_FILE})")
    trainer.accelerator.wait_for_everyone()
    return trainer


def _report_cpu_rehearsal(trainer) -> None:
    """In a CPU rehearsal of a sharded launch (`HEALTRL_SHARD_ON_CPU=1`, see `healtrl.utils.distributed`): once accelerate
    prepared the policy, each process prints what it became, and stops when it is not sharded as asked."""
    from transformers import TrainerCallback

    from ..utils.distributed import rehearsal_kind, rehearsal_report

    kind = rehearsal_kind()
    if kind is None:
        return

    class RehearsalReport(TrainerCallback):
        def on_train_begin(self, args, state, control, **kwargs):
            print(rehearsal_report(trainer, kind), file=sys.stderr, flush=True)

    trainer.add_callback(RehearsalReport())


def periodic_eval_callback(script_args, trainer_args, trainer=None):
    """The `PeriodicEvalCallback` that the `eval_*` script arguments describe (unset sampling settings follow the
    trainer's: `temperature`, `top_p`, `max_completion_length`)."""
    from healtrl.evaluation.callback import PeriodicEvalCallback

    def pick(value, default):
        return default if value is None else value

    return PeriodicEvalCallback(
        script_args.eval_tasks,
        k=script_args.eval_k,
        every_n_steps=script_args.eval_every_steps,
        trainer=trainer,
        eval_on_start=script_args.eval_at_start,
        temperature=pick(script_args.eval_temperature, trainer_args.temperature),
        top_p=pick(script_args.eval_top_p, trainer_args.top_p),
        max_new_tokens=pick(script_args.eval_max_new_tokens, trainer_args.max_completion_length),
        seed=trainer_args.seed,
        batch_size=script_args.eval_batch_size,
        num_samples=script_args.eval_num_problems,
        split=script_args.eval_split,
        best_rule=_best_rule_to_track(script_args),
    )


def _best_rule_to_track(script_args):
    """The best-checkpoint rule the periodic evaluation scores (so that save_total_limit keeps the best checkpoint),
    when the run validates by it (`healtrl.recipes.checks.validation_keeps_best`); else None."""
    from healtrl.recipes.checks import validation_keeps_best
    from healtrl.recipes.recipe import parse_best_checkpoint

    return parse_best_checkpoint(script_args.best_checkpoint) if validation_keeps_best(script_args) else None
