"""The `healtrl` command line and the training entry point shared with `train.py`.

```bash
healtrl train --config configs/toy_grpo.yaml --max_steps 50     # same as: python train.py --config ... --max_steps 50
healtrl train                                                   # the main job: HEAL vs GRPO (healtrl/cli/main_job.py)
python train.py --config configs/aer_qwen3_4b_deepscaler.yaml --dry_run --num_processes 32   # check, do not train
healtrl eval --model outputs/toy_grpo --tasks toy-add --k 8 --max_new_tokens 4
healtrl inspect --model healtrl-toy/qwen2-add --prompts task:toy-add --k 4 --max_new_tokens 6 --output_dir out/inspect
healtrl study --task countdown --pairs claims --seeds 0 1 2 3 4 --steps 175 --output-dir out/study   # healtrl.study
accelerate launch --config_file configs/accelerate/ddp_8gpu.yaml train.py --config my_run.yaml
torchrun --nproc_per_node 2 train.py --config configs/toy_grpo.yaml --per_device_train_batch_size 64
```

A training run parses the config (`healtrl.cli.config`), resolves the model name (`healtrl.models.resolve_model_path`:
`healtrl-toy/...` and `healtrl-offline/...` names work like Hub ids), loads the tokenizer and data
(`healtrl.data`), builds the trainer registered under `trainer:` (`healtrl.trainers.TRAINERS`), trains, and writes to
`output_dir` (main process only):

* the final model (or LoRA adapter, with `use_peft`) and tokenizer,
* `metrics.jsonl`: `trainer.state.log_history`, one JSON object per line,
* `curves.png`: entropy and reward against the step, drawn by the trainer (`save_curves`) with its model card,
* `config.yaml`: the explicitly set keys, which reproduce the run with `--config`.

With `eval_tasks` set, `healtrl.evaluation.callback.PeriodicEvalCallback` evaluates the policy on those tasks every
`eval_every_steps` steps and logs `eval/<task>/avg@k` and `eval/<task>/pass@j` with the training metrics.

Data hygiene (`healtrl.hygiene`): before training, the prompts of the evaluation data (`eval_tasks` with
`eval_split`, and the evaluation dataset) are compared with the training prompts by their normalised question stem
(options left out); a run whose training data holds evaluation questions is refused, naming the task, split and count
(`allow_eval_overlap: true` overrides); near-duplicates (character 5-gram similarity) are warned about. `healtrl eval --model <run folder>` makes the same check against the run's `config.yaml`.

`train_repeats` (N or `auto`) fills fixed-size prompt batches from a small training set by seeded copies of its rows,
read in order (`healtrl.data.repeat_rows`, `apply_train_repeats`): few-shot baselines then run the same number of
optimizer steps on full batches as the methods they are compared with.

Crash-safe runs (`healtrl.checkpoints`): every checkpoint gets `healtrl_checkpoint.json` written last, so a folder
the run was killed while writing is recognised as incomplete. `--resume_from_checkpoint true` (or `latest`) resumes
from the last complete checkpoint of `output_dir` (skipping incomplete ones with a warning); a path resumes from that
checkpoint, which must be complete. A checkpoint written by another trainer or under other settings that change the
math is refused with an error naming each field (`resume_allow_mismatch` accepts listed ones). The divergence guard
(`divergence_guard`, on by default) stops a run whose loss or gradients turn NaN/inf or whose policy entropy climbs to
near uniform; the run files are still written, and the message names the last good checkpoint (exit code 3).

`--dry_run` validates a config end to end without the Hub and without training (see `dry_run`): it parses the config,
builds the trainer's config class, checks the model name, the reward functions, the dataset mapping and the reward
columns on a local sample, the batch geometry, the run's length (optimizer steps and how often each training row is
drawn) and the data hygiene on whatever data is local, then prints what the run would do. Exit code 0 when the config
is valid, 2 otherwise.

The modules: `train` (the entry of `train.py` and `healtrl train`), `config` (a config's parsing: flat YAML plus
command-line overrides), `script_args` (`ScriptArguments`), `checks` (config validation: types, ranges, required
fields, `ConfigError`), `run` (a training run), `run_data` (what a run trains and evaluates on; `train_repeats`),
`run_hygiene` (the data hygiene of a run and of a run folder), `dry_run` and `dry_run_checks` (`--dry_run` and the
offline checks of the model and data it shares with `healtrl select --dry_run`), the other commands (`eval`, `select`,
`inspect`, `study`, `main_job`), `help_text` (the shipped `--help` texts) and `common` (what the commands share). The
command line is the top layer: it may import every other layer of healtrl (the import-linter contract in
`pyproject.toml`).
"""

from __future__ import annotations

import sys

from .common import CONFIG_FILE, CURVES_FILE, METRICS_FILE, configure_threads, print_error
from .dry_run import dry_run
from .run import run_training
from .run_data import apply_train_repeats, resolve_train_repeats
from .train import train_main

__all__ = [
    "CONFIG_FILE",
    "CURVES_FILE",
    "METRICS_FILE",
    "apply_train_repeats",
    "configure_threads",
    "dry_run",
    "main",
    "resolve_train_repeats",
    "run_training",
    "train_main",
]

SUBCOMMANDS = {
    "train": "Train a model with a healtrl trainer (same as `python train.py`).",
    "select": "Select general-domain data for HEAL by uncertainty x diversity (healtrl.selection).",
    "eval": "Evaluate a model on tasks: avg@k, pass@k and response length (healtrl.evaluation).",
    "inspect": "Sample completions and view their per-token entropies as HTML + PNG (healtrl.views.inspection).",
    "study": "Every method on a toy world over seeds, its report, and the papers' claims (healtrl.study).",
}


def _print_usage(file=None) -> None:
    file = file or sys.stdout
    print("usage: healtrl <command> [options]\n\ncommands:", file=file)
    for name, text in SUBCOMMANDS.items():
        print(f"  {name:<8}{text}", file=file)
    print("\noptions:\n  -h, --help  show this message\n  --version   print the healtrl version", file=file)
    print("\n`healtrl <command> --help` shows the options of a command.", file=file)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `healtrl` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _print_usage()
        return 0
    if argv[0] in ("-V", "--version"):
        from .common import version_text

        print(version_text())
        return 0
    command, rest = argv[0], argv[1:]
    if command == "train":
        return train_main(rest, prog="healtrl train")
    if command == "select":
        if "--version" in rest and not any(a in ("-h", "--help") for a in rest):
            from .common import version_text  # select's own parser has no --version

            print(version_text())
            return 0
        from .select import select_main

        return select_main(rest, prog="healtrl select")
    if command == "eval":
        from .eval import eval_main

        return eval_main(rest, prog="healtrl eval")
    if command == "inspect":
        from .inspect import inspect_main

        return inspect_main(rest, prog="healtrl inspect")
    if command == "study":
        from .study import study_main

        return study_main(rest, prog="healtrl study")
    import difflib

    close = difflib.get_close_matches(command, list(SUBCOMMANDS), n=1)
    hint = f" Did you mean `healtrl {close[0]}`?" if close else ""
    return print_error(f"Unknown command '{command}'.{hint} Commands: {', '.join(SUBCOMMANDS)}.")


if __name__ == "__main__":
    sys.exit(main())
