"""One call that reproduces entropy collapse: plain GRPO on the warmed-up toy "add" model.

With the defaults (Qwen2, hidden 128, 2 layers, warmed up to ~0.25 sampled accuracy; GRPO at lr 5e-4 with 16 prompts
x 8 generations per step, temperature 1, no KL) the policy entropy falls from ~0.78 to ~0.05 over 1000 steps while the
reward climbs from ~0.26 to ~0.98: the policy stops exploring. A step takes ~0.12 s on one CPU thread.
"""

from __future__ import annotations

import contextlib
import tempfile
from collections.abc import Iterable, Sequence

from transformers import PrinterCallback
from trl import GRPOConfig, GRPOTrainer

from ._utils import torch_threads
from .cache import load_toy_model, parse_toy_model_name
from .tasks import make_dataset, toy_reward


def toy_grpo_config(output_dir: str, steps: int = 1000, seed: int = 0, config_cls=GRPOConfig, **overrides):
    """The GRPO configuration of the entropy-collapse experiment, for a CPU run without checkpoints or reporting.

    16 prompts x 8 generations per step (`per_device_train_batch_size=128`, `num_generations=8`), lr 5e-4 decaying
    linearly to 0 at `steps` (TRL's default schedule, so shorter runs decay faster; a constant lr destabilises the
    run after ~700 steps), temperature 1, `beta=0` (no reference model), at most 4 completion tokens (an answer plus
    `<|end|>`), fp32 on the CPU, a log entry every step. `overrides` replace any of these, or set other fields of
    `config_cls`.

    Args:
        output_dir: Trainer output folder (nothing is saved there with the default `save_strategy="no"`).
        steps: Optimizer steps (`max_steps`).
        seed: Trainer seed (sampling, data order).
        config_cls: `trl.GRPOConfig` or a subclass, e.g. healtrl's `EntropyGRPOConfig`.
        **overrides: Any config field.
    """
    kwargs = {
        "output_dir": output_dir,
        "max_steps": steps,
        "seed": seed,
        "learning_rate": 5e-4,
        "lr_scheduler_type": "linear",
        "per_device_train_batch_size": 128,
        "num_generations": 8,
        "gradient_accumulation_steps": 1,
        "temperature": 1.0,
        "beta": 0.0,
        "max_completion_length": 4,
        "use_vllm": False,
        "use_cpu": True,
        "bf16": False,
        "activation_checkpointing": False,
        "logging_steps": 1,
        "save_strategy": "no",
        "report_to": "none",
        "disable_tqdm": True,
        "dataloader_num_workers": 0,
    }
    kwargs.update(overrides)
    return config_cls(**kwargs)


def reproduce_entropy_collapse(
    steps: int = 1000,
    seed: int = 0,
    output_dir: str | None = None,
    trainer_cls=None,
    *,
    model_name: str = "healtrl-toy/qwen2-add",
    cache_dir: str | None = None,
    model_kwargs: dict | None = None,
    num_threads: int | None = 1,
    config_cls=GRPOConfig,
    callbacks: Sequence | None = None,
    verbose: bool = False,
    **config_overrides,
) -> list[dict]:
    """Run GRPO on a warmed-up toy model and return the trainer's log history.

    Measured on one CPU thread (with the TRL release `healtrl.utils.compat` accepts), the defaults take ~0.12 s per step; averaged over 50 steps, entropy falls
    from 0.78 (steps 1-50) to 0.05 (steps 951-1000) and the reward rises from 0.26 to 0.98 (checked by the slow test
    `tests/test_toy.py::test_entropy_collapse_1000_steps`).

    Args:
        steps: GRPO optimizer steps.
        seed: Trainer seed; the training prompts are `make_dataset(<families of model_name>, 1600, seed)`.
        output_dir: Trainer output folder; a temporary folder (removed afterwards) if None.
        trainer_cls: Trainer class with `trl.GRPOTrainer`'s constructor; defaults to `trl.GRPOTrainer` itself
            (healtrl's `EntropyGRPOTrainer` with every lever off is the same trainer: tests/test_parity.py).
        model_name: Toy model to start from (built and cached on first use, see `load_toy_model`).
        cache_dir: Toy-model cache root.
        model_kwargs: Build and warm-up parameters of the toy model (see `toy_model_path`), e.g. `{"seed": 1}`.
        num_threads: torch intra-op threads during the run (restored afterwards); `None` keeps the current setting.
        config_cls: Config class built by `toy_grpo_config` (`trl.GRPOConfig` or a subclass).
        callbacks: Extra `transformers.TrainerCallback`s.
        verbose: Print the trainer's log dict at every step (by default the run is silent).
        **config_overrides: Fields of the GRPO config to change, e.g. `learning_rate=1e-4`.

    Returns:
        `trainer.state.log_history`: one dict per logged step with, among others, `step`, `reward`, `reward_std`,
        `entropy`, `rewards/toy_reward/mean`, `loss`, `learning_rate`; the last entry holds the run summary
        (`train_runtime`, ...).
    """
    if trainer_cls is None:
        trainer_cls = GRPOTrainer  # the toy world sits below healtrl's trainers: it does not import them
    _, families = parse_toy_model_name(model_name)
    with torch_threads(num_threads), contextlib.ExitStack() as stack:
        if output_dir is None:
            output_dir = stack.enter_context(tempfile.TemporaryDirectory(prefix="healtrl-collapse-"))
        model, tokenizer = load_toy_model(model_name, cache_dir, **(model_kwargs or {}))
        trainer = trainer_cls(
            model=model,
            reward_funcs=toy_reward,
            args=toy_grpo_config(output_dir, steps=steps, seed=seed, config_cls=config_cls, **config_overrides),
            train_dataset=make_dataset(families, 1600, seed=seed),
            processing_class=tokenizer,
            callbacks=list(callbacks) if callbacks else None,
        )
        if not verbose:
            trainer.remove_callback(PrinterCallback)
        trainer.train()
        return trainer.state.log_history


def history_points(
    log_history: list[dict], steps: Iterable[int], keys: Sequence[str] = ("entropy", "reward")
) -> dict[int, dict[str, float]]:
    """Pick `keys` at the given steps out of a trainer log history (steps that were not logged are skipped)."""
    by_step = {entry["step"]: entry for entry in log_history if "step" in entry and keys[0] in entry}
    return {step: {key: by_step[step].get(key) for key in keys} for step in steps if step in by_step}
