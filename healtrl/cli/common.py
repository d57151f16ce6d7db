"""What the commands of the command line share: the run files' names, error printing, the `--version` text,
argparse that raises, the formatting of a value in a report, torch's CPU threads."""

from __future__ import annotations

import argparse
import os
import sys

from healtrl.recipes.recipe import CONFIG_FILE

__all__ = [
    "CONFIG_FILE",
    "CURVES_FILE",
    "METRICS_FILE",
    "RaisingParser",
    "StoreOnce",
    "UsageError",
    "add_version_option",
    "configure_threads",
    "format_value",
    "print_error",
    "version_text",
]

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "curves.png"


def _is_main_process() -> bool:
    return os.environ.get("RANK", "0") == "0"


def version_text() -> str:
    """What `--version` prints for every command: `healtrl <version>`."""
    from healtrl.utils.version import __version__

    return f"healtrl {__version__}"


def add_version_option(parser: argparse.ArgumentParser) -> None:
    """`--version`: print `version_text()` and exit 0 (argparse's `version` action, which exits through
    `parser.exit`: the commands catch that SystemExit like the one of `--help`)."""
    parser.add_argument("--version", action="version", version=version_text(), help="Print the healtrl version.")


def print_error(message: str) -> int:
    """Print `error: <message>` on stderr (on the main process only) and return the exit code of a mistake, 2."""
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


def format_value(value):
    """A config value as a report shows it: an enum as its value, a float in `%g`, a list comma-separated."""
    value = getattr(value, "value", value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(format_value(v)) for v in value) or "none"
    return value


class UsageError(Exception):
    """A command-line mistake found by argparse (unknown option, missing value); the command prints it, exit code 2."""


class RaisingParser(argparse.ArgumentParser):
    """`argparse.ArgumentParser` whose usage errors raise `error_class(message)` instead of exiting the process, so
    that `healtrl eval`, `select` and `inspect` return exit code 2 with their own message (and tests can call them)."""

    error_class: type[Exception] = UsageError

    def error(self, message):
        raise self.error_class(message)


class StoreOnce(argparse.Action):
    """argparse's `store` for an option that may be given once (`--config`): argparse keeps the last of repeated
    options silently, so that `--config a.yaml --config b.yaml` would read b.yaml alone. A second occurrence is a usage
    error naming the option and both values. The option's default must be None."""

    def __call__(self, parser, namespace, values, option_string=None):
        given = getattr(namespace, self.dest, None)
        if given is not None:
            parser.error(
                f"{option_string} is given twice ({given}, then {values}): the command reads one. Pass it once"
            )
        setattr(namespace, self.dest, values)
