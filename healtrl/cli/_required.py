"""Checks of a resolved run config that are not about one field's type or range: the fields a run cannot do without
(`model_name_or_path`, `dataset_name`, `reward_funcs`, each reward known), and an `output_dir` that can become a
folder. Called by `healtrl.cli.config.resolve`, so the dry run and the real run refuse the same configs."""

from __future__ import annotations

import difflib
import os

from ._errors import ConfigError


def _check_required(script_args, model_args, sources: dict[str, str], config_path) -> None:
    if not model_args.model_name_or_path:
        raise ConfigError(
            "`model_name_or_path` is not set. Add e.g. `model_name_or_path: healtrl-toy/qwen2-add` to the config "
            "(a Hub id, a local folder, or a `healtrl-toy/...` / `healtrl-offline/...` name)."
        )
    if not script_args.dataset_name:
        raise ConfigError(
            "`dataset_name` is not set. Add e.g. `dataset_name: healtrl-toy/add` to the config (a toy name, a local "
            "file or folder, or a Hub dataset id)."
        )
    if not script_args.reward_funcs:
        raise ConfigError(
            "`reward_funcs` is empty: GRPO needs at least one reward. Add e.g. `reward_funcs: [toy]` to the config "
            "(a name from healtrl.data.REWARD_FUNCS or a dotted import path)."
        )
    from healtrl.data import REWARD_FUNCS

    for name in script_args.reward_funcs:
        if name in REWARD_FUNCS or "." in name:
            continue
        close = difflib.get_close_matches(name, list(REWARD_FUNCS), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        where = sources.get("reward_funcs", "by default")
        raise ConfigError(
            f"Unknown reward function '{name}' in `reward_funcs` {where}.{hint} Use a registered name "
            f"({', '.join(sorted(REWARD_FUNCS))}) or a dotted import path such as `my_package.rewards.my_reward`."
        )


def _check_output_dir(output_dir: str | None, sources: dict[str, str]) -> None:
    """Refuse an `output_dir` that cannot become a folder: an existing file, or a path under one (the run would fail
    at its first write, after the model has loaded)."""
    if not output_dir:
        return
    path = os.path.abspath(os.path.expanduser(output_dir))
    existing = path
    while not os.path.exists(existing):  # the deepest part of the path that exists
        parent = os.path.dirname(existing)
        if parent == existing:
            return
        existing = parent
    if os.path.isdir(existing):
        return
    what = "is an existing file" if existing == path else f"lies under {existing}, which is a file"
    raise ConfigError(
        f"Invalid value for `output_dir` {sources.get('output_dir', 'by default')}: {output_dir!r} {what}; the run "
        "writes its checkpoints, metrics and config.yaml into that folder. Set `output_dir` to a folder path (it is "
        "created if missing), or move the file away."
    )
