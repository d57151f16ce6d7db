"""The `healtrl` command line and the training entry point shared with `train.py`.

```bash
healtrl train --config configs/toy_grpo.yaml --max_steps 50     # same as: python train.py --config ... --max_steps 50
healtrl train                                                   # the embedded default (configs/toy_grpo.yaml)
accelerate launch --config_file configs/accelerate/ddp_8gpu.yaml train.py --config my_run.yaml
torchrun --nproc_per_node 2 train.py --config configs/toy_grpo.yaml --per_device_train_batch_size 64
```

A training run parses the config (`healtrl.config`), resolves the model name (`healtrl.models.resolve_model_path`:
`healtrl-toy/...` and `healtrl-offline/...` names work like Hub ids), loads the tokenizer and data
(`healtrl.data`), builds the trainer registered under `trainer:` (`healtrl.trainers.TRAINERS`), trains, and writes to
`output_dir` (main process only):

* the final model (or LoRA adapter, with `use_peft`) and tokenizer,
* `metrics.jsonl`: `trainer.state.log_history`, one JSON object per line,
* `curves.png`: entropy and reward against the step (`healtrl.plotting.plot_curves`),
* `config.yaml`: the explicitly set keys, which reproduce the run with `--config`.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from healtrl.config import DEFAULT_CONFIG_YAML, ConfigError, ResolvedConfig, resolve

__all__ = ["configure_threads", "main", "run_training", "train_main"]

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "curves.png"
CONFIG_FILE = "config.yaml"

SUBCOMMANDS = {
    "train": "Train a model with a healtrl trainer (same as `python train.py`).",
    "select": "Select training data (not available yet).",
    "eval": "Evaluate a trained model (not available yet).",
}


def _is_main_process() -> bool:
    return os.environ.get("RANK", "0") == "0"


def _error(message: str) -> int:
    if _is_main_process():
        print(f"error: {message}", file=sys.stderr)
    return 2


def configure_threads(num_threads: int | None = None) -> int:
    """Set torch's CPU threads for this process and return the number.

    `num_threads` wins; else an explicit `OMP_NUM_THREADS` is left alone; else the cores this process may use,
    divided by the processes started on this machine (`LOCAL_WORLD_SIZE`, set by torchrun and accelerate launch).
    """
    import torch

    if num_threads is None:
        if os.environ.get("OMP_NUM_THREADS"):
            return torch.get_num_threads()
        try:
            cores = len(os.sched_getaffinity(0))
        except AttributeError:  # pragma: no cover - macOS, Windows
            cores = os.cpu_count() or 1
        local_procs = max(1, int(os.environ.get("LOCAL_WORLD_SIZE", "1")))
        num_threads = max(1, cores // local_procs)
    torch.set_num_threads(num_threads)
    return num_threads


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


def write_run_files(trainer, resolved: ResolvedConfig, output_dir: str) -> None:
    """metrics.jsonl, curves.png and config.yaml (main process only)."""
    from healtrl.plotting import plot_curves

    os.makedirs(output_dir, exist_ok=True)
    history = trainer.state.log_history
    with open(os.path.join(output_dir, METRICS_FILE), "w") as f:
        for entry in history:
            f.write(json.dumps(entry) + "\n")
    title = f"{resolved.trainer_name}: {resolved.model_args.model_name_or_path} on {resolved.script_args.dataset_name}"
    plot_curves(history, os.path.join(output_dir, CURVES_FILE), title=title)
    path = os.path.join(output_dir, CONFIG_FILE)
    with open(path, "w") as f:
        f.write(f"# The explicitly set keys of this run. Reproduce it with: python train.py --config {path}\n")
        f.write(resolved.to_yaml())


def run_training(resolved: ResolvedConfig):
    """Build everything `resolved` describes, train, save, and return the trainer."""
    script_args, model_args, trainer_args = resolved.script_args, resolved.model_args, resolved.trainer_args
    configure_threads(script_args.torch_num_threads)

    from trl import get_peft_config, get_quantization_config

    from healtrl.data import get_reward_funcs
    from healtrl.models import resolve_model_path
    from healtrl.trainers import get_trainer_classes

    trainer_cls, _ = get_trainer_classes(resolved.trainer_name)

    # Toy models are built (and offline models converted) on first use: let the main process fill the cache first.
    with trainer_args.main_process_first(local=True, desc="resolving the model"):
        model_path = resolve_model_path(model_args.model_name_or_path)
        tokenizer = _load_tokenizer(model_path, model_args, trainer_args)
    try:
        with trainer_args.main_process_first(local=True, desc="loading the datasets"):
            train_dataset, eval_dataset = _load_data(script_args, trainer_args)
        reward_funcs = get_reward_funcs(script_args.reward_funcs)
    except ValueError as exc:
        raise ConfigError(str(exc)) from exc

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
    trainer.train(resume_from_checkpoint=trainer_args.resume_from_checkpoint)

    output_dir = trainer_args.output_dir
    if script_args.save_final_model:
        trainer.save_model(output_dir)  # collective under FSDP / DeepSpeed: every process calls it
    if trainer.is_world_process_zero():
        if script_args.save_final_model:
            tokenizer.save_pretrained(output_dir)
        write_run_files(trainer, resolved, output_dir)
        saved = "model, tokenizer, " if script_args.save_final_model else ""
        print(
            f"\nDone. Output folder: {os.path.abspath(output_dir)} ({saved}{METRICS_FILE}, {CURVES_FILE}, {CONFIG_FILE})"
        )
    trainer.accelerator.wait_for_everyone()
    return trainer


def train_main(argv: list[str] | None = None, prog: str = "train.py") -> int:
    """`python train.py [--config CONFIG.yaml] [--key VALUE ...]`: returns the process exit code."""
    try:
        resolved = resolve(argv, default=DEFAULT_CONFIG_YAML, prog=prog)
        trainer = run_training(resolved)
    except ConfigError as exc:
        return _error(str(exc))
    trainer.end()  # finish trackers, destroy the process group
    return 0


def _print_usage(file=None) -> None:
    file = file or sys.stdout
    print("usage: healtrl <command> [options]\n\ncommands:", file=file)
    for name, text in SUBCOMMANDS.items():
        print(f"  {name:<8}{text}", file=file)
    print("\n`healtrl <command> --help` shows the options of a command.", file=file)


def main(argv: list[str] | None = None) -> int:
    """Entry point of the `healtrl` console script."""
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help"):
        _print_usage()
        return 0
    command, rest = argv[0], argv[1:]
    if command == "train":
        return train_main(rest, prog="healtrl train")
    if command in SUBCOMMANDS:
        return _error(f"`healtrl {command}` is not available yet. Available now: `healtrl train`.")
    import difflib

    close = difflib.get_close_matches(command, list(SUBCOMMANDS), n=1)
    hint = f" Did you mean `healtrl {close[0]}`?" if close else ""
    return _error(f"Unknown command '{command}'.{hint} Commands: {', '.join(SUBCOMMANDS)}.")


if __name__ == "__main__":
    sys.exit(main())
