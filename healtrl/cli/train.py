"""The training entry point of `train.py` and `healtrl train`: config -> model, data, trainer -> run files.

See the package docstring (`healtrl.cli`) for what a run writes and checks.
"""

from __future__ import annotations

import sys

from .common import print_error, version_text
from .config import DEFAULT_CONFIG_YAML, ConfigError, resolve, split_argv
from .run import run_training


def _pop_dry_run(argv: list[str]) -> tuple[list[str], bool, int | None]:
    """Remove `--dry_run` (and its `--num_processes N`) from `argv`."""
    rest, dry, num_processes = [], False, None
    i = 0
    while i < len(argv):
        token = argv[i]
        if token in ("--dry_run", "--dry-run"):
            dry = True
        elif token.split("=", 1)[0] in ("--num_processes", "--num-processes"):
            text = token.split("=", 1)[1] if "=" in token else (argv[i + 1] if i + 1 < len(argv) else "")
            if "=" not in token:
                i += 1
            try:
                num_processes = int(text)
                if num_processes < 1:
                    raise ValueError
            except ValueError:
                raise ConfigError(
                    f"`--num_processes` expects a positive number of training processes (GPUs), got {text!r}."
                ) from None
        else:
            rest.append(token)
        i += 1
    if num_processes is not None and not dry:
        raise ConfigError(
            "`--num_processes` only applies to `--dry_run` (the process count of a real run comes from the launcher: "
            "`accelerate launch --num_processes N` or `torchrun --nproc_per_node N`)."
        )
    return rest, dry, num_processes


def train_main(argv: list[str] | None = None, prog: str = "train.py") -> int:
    """`python train.py [--config CONFIG.yaml] [--key VALUE ...] [--dry_run [--num_processes N]]`: returns the process
    exit code. Without `--config` it runs the main job (`healtrl.cli.main_job`: HEAL next to few-shot GRPO on the toy world,
    the overrides applied to both); `--dry_run` without `--config` checks the main job's HEAL config."""
    from healtrl.checkpoints import DivergenceError, ResumeError

    from ..utils.compat import MissingExtraError

    argv = list(sys.argv[1:] if argv is None else argv)
    if "--version" in argv and not any(a in ("-h", "--help") for a in argv):
        print(version_text())
        return 0
    try:
        argv, dry, num_processes = _pop_dry_run(argv)
    except ConfigError as exc:
        return print_error(str(exc))
    if dry:
        from .dry_run import dry_run

        return dry_run(argv, prog=prog, num_processes=num_processes)
    from ..utils.distributed import ShardingUnavailableError, check_sharded_launch

    try:
        # Before anything builds an accelerate state: refuse (or, opted in, rehearse on the CPU) FSDP / DeepSpeed
        # without an accelerator, which accelerate would otherwise run unsharded without saying so.
        check_sharded_launch()
    except ShardingUnavailableError as exc:
        return print_error(str(exc))
    try:
        command_line = split_argv(argv)
        if command_line.config_path is None and not command_line.help:
            from .main_job import run_main_job

            return run_main_job(argv, prog=prog)
        resolved = resolve(argv, default=DEFAULT_CONFIG_YAML, prog=prog)
        trainer = run_training(resolved)
    except (ConfigError, MissingExtraError, ResumeError) as exc:
        return print_error(str(exc))
    except DivergenceError as exc:
        print_error(str(exc))
        return 3
    trainer.end()  # finish trackers, destroy the process group
    return 0
