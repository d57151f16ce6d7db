"""The main job: what a bare `python train.py` runs. HEAL next to few-shot GRPO on the toy world, one PNG.

```bash
python train.py                      # everything below, into outputs/main/ (under 2 minutes on 2 CPU cores)
python train.py --max_steps 50       # overrides apply to both training runs
python train.py --output_dir runs/x  # another root folder
```

1. `healtrl select` with `configs/main_select.yaml` (`MAIN_SELECT_YAML`, read from the package): the 32 general-domain
   questions (toy `compare`) with the highest Uncertainty x Diversity (HEAL, arXiv:2604.17928, eq. 1) ->
   `<root>/select/selected`. Skipped when `--general_dataset_name` is given; resumed when an earlier run left its
   records.
2. HEAL with `configs/main.yaml` (the embedded default, `healtrl.cli.config.DEFAULT_CONFIG_YAML`): 8 target additions +
   the selected general data + the EDA reward -> `<root>/heal`.
3. GRPO with the same budget -> `<root>/grpo`: the same model, target data, steps, learning rate and rollouts per step
   (`per_device_train_batch_size`), without the general data and the EDA reward. Every one of TRL's generation
   batches must hold distinct prompts, and 8 target problems cannot fill the 16 prompts x 8 rollouts of HEAL's batch,
   so GRPO samples all 8 problems every step with 16 rollouts each (128 rollouts per step, like HEAL). This is
   `configs/baseline_few_shot_toy.yaml`.
4. `<root>/heal_vs_grpo.png`: entropy and reward of the target-domain rollouts of both runs against the step, and a
   summary table on stdout (the mean over the last `SUMMARY_WINDOW` logged steps).
"""

from __future__ import annotations

import dataclasses
import math
import os
import sys
from typing import Any

import yaml

from ..utils.yamlfile import load_yaml
from .config import DEFAULT_CONFIG_YAML, ConfigError, ResolvedConfig, resolve, shipped_config, split_argv

__all__ = ["MAIN_SELECT_YAML", "PANELS", "grpo_counterpart", "run_main_job", "summarize"]

DEFAULT_ROOT = "outputs/main"
PLOT_FILE = "heal_vs_grpo.png"
SUMMARY_WINDOW = 10
"""Logged steps averaged in the summary table (with logging_steps 5: the last 50 optimizer steps)."""

# Step 1 of the main job, the data selection: healtrl/configs/main_select.yaml, shipped once as package data (the
# repository's configs/ links to it); select_toy.yaml with the main job's output_dir (tests/test_main_job.py checks).
MAIN_SELECT_YAML = shipped_config("main_select.yaml")

# Panel title -> log keys, first present wins: HEAL logs its target-domain rollouts separately; every GRPO rollout is
# a target-domain rollout.
PANELS: dict[str, tuple[str, ...]] = {
    "entropy of target-domain rollouts": ("heal/entropy_target", "rollout/entropy", "entropy"),
    "accuracy reward of target-domain rollouts": ("heal/reward_target", "reward"),
}


def grpo_counterpart(heal: ResolvedConfig, output_dir: str, prog: str = "train.py") -> ResolvedConfig:
    """The GRPO run with the budget of the HEAL run `heal`: its settings without HEAL's fields, on the target data.

    The rollouts per step stay the same. When the target set has fewer rows than the prompts of one generation batch
    (TRL draws distinct prompts per batch, and would otherwise train zero steps), every batch holds each target prompt
    once and `num_generations` grows to fill the batch.
    """
    from healtrl.trainers import EntropyGRPOConfig, HEALConfig

    heal_only = {f.name for f in dataclasses.fields(HEALConfig)} - {
        f.name for f in dataclasses.fields(EntropyGRPOConfig)
    }
    values = {k: v for k, v in yaml.safe_load(heal.to_yaml()).items() if k not in heal_only and k != "trainer"}
    values["output_dir"] = output_dir
    args, script = heal.trainer_args, heal.script_args
    rollouts = args.generation_batch_size  # per generation batch, all processes (the main job runs one)
    prompts = rollouts // args.num_generations
    num_target = script.num_train_samples
    if num_target is not None and num_target < prompts:
        if rollouts % num_target:
            raise ConfigError(
                f"The main job's GRPO run cannot match HEAL's budget: {rollouts} rollouts per generation batch are not "
                f"a multiple of the {num_target} target problems (num_train_samples). Set per_device_train_batch_size "
                f"(now {args.per_device_train_batch_size}) to a multiple of num_train_samples."
            )
        values["num_generations"] = rollouts // num_target
    return resolve([], default={"trainer": "grpo", **values}, prog=prog)


def _mean_last(history: list[dict], keys: tuple[str, ...], window: int) -> float:
    from healtrl.views.curves import curve

    _, values = curve(history, keys)
    values = values[-window:]
    return sum(values) / len(values) if values else math.nan


def summarize(histories: dict[str, list[dict]], window: int = SUMMARY_WINDOW) -> str:
    """A markdown table: for each run, the first and the last-`window` mean of every panel of `PANELS`."""
    from healtrl.views.curves import curve

    header = ["run"]
    for title in PANELS:
        header += [f"{title}: first", f"last {window} logs"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for label, history in histories.items():
        row = [label]
        for keys in PANELS.values():
            _, values = curve(history, keys)
            first = values[0] if values else math.nan
            row += [f"{first:.3f}", f"{_mean_last(history, keys, window):.3f}"]
        lines.append("| " + " | ".join(row) + " |")
    return "\n".join(lines)


def _select(output_dir: str) -> None:
    from healtrl.selection.config import SelectionConfig
    from healtrl.selection.pipeline import select_general_data

    options: dict[str, Any] = load_yaml(MAIN_SELECT_YAML)
    options["output_dir"] = output_dir
    select_general_data(SelectionConfig(**options), progress=True)


def _layout(argv: list[str]) -> tuple[str, list[str], bool]:
    """(root folder, the HEAL run's command line, whether the selection runs) for the main job's overrides `argv`.

    `--output_dir` names the root (HEAL, GRPO and the selection go into sub-folders); the selection writes HEAL's
    general data unless `--general_dataset_name` is given. Overrides are read as `healtrl.cli.config` reads them
    (`--key value`, `--key=value`, `--key-name`); the last one of a key wins, so appending overrides them.
    """
    from healtrl.selection.pipeline import SELECTED_DIR

    overrides = {key: words for key, words, _ in split_argv(argv).overrides}
    root = DEFAULT_ROOT
    if "output_dir" in overrides:
        words = overrides["output_dir"]
        if not words or len(words) != 1:
            raise ConfigError("`--output_dir` needs one value, the main job's root folder: `--output_dir outputs/x`.")
        root = words[0]
    select = "general_dataset_name" not in overrides
    heal_argv = [*argv, "--output_dir", os.path.join(root, "heal")]
    if select:
        heal_argv += ["--general_dataset_name", os.path.join(root, "select", SELECTED_DIR)]
    return root, heal_argv, select


def run_main_job(argv: list[str] | None = None, prog: str = "train.py") -> int:
    """Run the main job with command-line overrides `argv` (no `--config`); return the exit code.

    Raises:
        ConfigError: For a bad override (unknown key, wrong type), naming the key and the fix.
    """
    from healtrl.views.curves import plot_curves

    from .run import run_training

    argv = list(sys.argv[1:] if argv is None else argv)
    world_size = int(os.environ.get("WORLD_SIZE", "1"))
    if world_size > 1:
        raise ConfigError(
            f"The main job (train.py without --config) runs in one process, but WORLD_SIZE is {world_size}. Launch it "
            "with `python train.py`, or give a config for a distributed run: `torchrun --nproc_per_node 2 train.py "
            "--config configs/toy_grpo.yaml`."
        )
    root, heal_argv, select = _layout(argv)
    heal = resolve(heal_argv, default=DEFAULT_CONFIG_YAML, prog=prog)  # fail on a bad override before any work
    grpo = grpo_counterpart(heal, os.path.join(root, "grpo"), prog=prog)

    steps = heal.trainer_args.max_steps
    print(f"healtrl main job -> {os.path.abspath(root)}", flush=True)
    if select:
        print("\n[1/4] Selecting general-domain data (healtrl select, configs/main_select.yaml)", flush=True)
        _select(os.path.join(root, "select"))
    else:
        print(f"\n[1/4] Selection skipped: general data from {heal.trainer_args.general_dataset_name}", flush=True)
    print(f"\n[2/4] HEAL: {steps} steps (configs/main.yaml)", flush=True)
    heal_trainer = run_training(heal)
    heal_trainer.end()
    g = grpo.trainer_args
    print(
        f"\n[3/4] GRPO, same budget: {steps} steps, {g.per_device_train_batch_size} rollouts per step "
        f"({g.per_device_train_batch_size // g.num_generations} prompts x {g.num_generations})",
        flush=True,
    )
    grpo_trainer = run_training(grpo)
    grpo_trainer.end()

    histories = {"GRPO": grpo_trainer.state.log_history, "HEAL": heal_trainer.state.log_history}
    path = plot_curves(
        histories,
        os.path.join(root, PLOT_FILE),
        panels=PANELS,
        title=f"HEAL vs few-shot GRPO ({heal.model_args.model_name_or_path}, {heal.script_args.num_train_samples} "
        "target problems, same budget)",
    )
    print(f"\n[4/4] {os.path.abspath(path)}\n\n{summarize(histories)}", flush=True)
    return 0
