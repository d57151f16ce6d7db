"""What a training run trains and evaluates on (`datasets_to_check`), and how a small training set fills its batches
(`train_repeats`: `resolve_train_repeats`, `apply_train_repeats`); shared by the training entry, the dry run and the
run-level hygiene checks (`run_hygiene`)."""

from __future__ import annotations

from .config import ConfigError, ResolvedConfig


def task_name(dataset_name: str) -> str | None:
    """The task a `dataset_name` of the form `task:<name>` refers to (see `healtrl.data.load_train_dataset`)."""
    from healtrl.data import TASK_DATASET_PREFIX

    return dataset_name[len(TASK_DATASET_PREFIX) :] if dataset_name.startswith(TASK_DATASET_PREFIX) else None


def datasets_to_check(resolved: ResolvedConfig):
    """(role, name, config, split, num_samples) of every dataset the run loads."""
    import dataclasses

    from healtrl.trainers import added_datasets

    from .script_args import ScriptArguments

    script_args, trainer_args = resolved.script_args, resolved.trainer_args
    out = [
        (
            "train",
            script_args.dataset_name,
            script_args.dataset_config,
            script_args.dataset_train_split,
            script_args.num_train_samples,
        )
    ]
    if str(getattr(trainer_args.eval_strategy, "value", trainer_args.eval_strategy)) != "no":
        name = script_args.eval_dataset_name or script_args.dataset_name
        config = script_args.dataset_config if name == script_args.dataset_name else None
        out.append(("eval", name, config, script_args.dataset_test_split, script_args.num_eval_samples))
    script_fields = {f.name for f in dataclasses.fields(ScriptArguments)}
    out.extend(added_datasets(trainer_args, exclude=script_fields))  # e.g. HEAL's general_dataset_name
    return out


def trainer_adds_data(resolved: ResolvedConfig) -> list[str]:
    """The dataset fields of the trainer's own config that are set (e.g. HEAL's `general_dataset_name`): the trainer
    mixes those rows with the training data."""
    return [name for role, name, *_ in datasets_to_check(resolved) if role not in ("train", "eval")]


def _steps_per_generation_batch(args) -> float:
    """Optimizer steps one generation batch serves in TRL: steps_per_generation x num_iterations / accumulation."""
    from healtrl.trainers.contract import generate_every

    return generate_every(args.steps_per_generation, args.num_iterations) / args.gradient_accumulation_steps


def resolve_train_repeats(resolved: ResolvedConfig, num_rows: int, prompts_per_batch: int, steps_per_batch: float):
    """(copies, whether TRL's sampler reads them in order) for `train_repeats`, or (None, False) when it is unset.

    Raises:
        ConfigError: `auto` without `max_steps` or with a trainer that adds data of its own; `shuffle_dataset: true`
            set explicitly next to `train_repeats` (it would reshuffle across the copies).
    """
    from healtrl.data import repeats_to_fill

    script_args, args = resolved.script_args, resolved.trainer_args
    repeats = script_args.train_repeats
    if repeats is None:
        return None, False
    mixed = trainer_adds_data(resolved)
    if repeats == "auto":
        if mixed:
            raise ConfigError(
                f"train_repeats: auto fills every generation batch from the training rows alone, but the trainer also "
                f"trains on {', '.join(mixed)}; give train_repeats a number of copies (the copies join the trainer's "
                "pool) or leave it unset."
            )
        try:
            repeats = repeats_to_fill(num_rows, args.max_steps, prompts_per_batch, steps_per_batch)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    in_order = not mixed
    if in_order and resolved.values.get("shuffle_dataset") is True:
        raise ConfigError(
            "train_repeats orders the training rows itself (seeded copies read one after the other, so every "
            "generation batch holds each row a fixed number of times); `shuffle_dataset: true` would reshuffle them "
            "across copies. Remove shuffle_dataset (train_repeats sets it to false) or unset train_repeats."
        )
    return repeats, in_order


def apply_train_repeats(resolved: ResolvedConfig, train_dataset):
    """`train_repeats`: the training rows as seeded copies (`healtrl.data.repeat_rows`), read in order by TRL's
    sampler (`shuffle_dataset` set to false) unless the trainer mixes in data of its own."""
    from healtrl.data import repeat_rows

    script_args, args = resolved.script_args, resolved.trainer_args
    if script_args.train_repeats is None:
        return train_dataset
    prompts_per_batch = args.generation_batch_size // args.num_generations
    repeats, in_order = resolve_train_repeats(
        resolved, len(train_dataset), prompts_per_batch, _steps_per_generation_batch(args)
    )
    if in_order:
        args.shuffle_dataset = False
    seed = script_args.dataset_seed if script_args.dataset_seed is not None else args.seed
    return repeat_rows(train_dataset, repeats, seed)
