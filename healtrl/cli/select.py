"""`healtrl select`: HEAL's general-domain data selection from the command line or a YAML config (`--config`),
with `--dry_run`. The options are the fields of `healtrl.selection.config.SelectionConfig` (one option per field, with
its help and default), plus `--config`, `--no_progress` and `--dry_run`; the selection itself is
`healtrl.selection.select_general_data`."""

from __future__ import annotations

import argparse
import os
import sys
from dataclasses import fields

from healtrl.selection.config import SelectionConfig, SelectionError, option_type
from healtrl.selection.data import (
    INDEX_COLUMN,
    SCORE_COLUMNS,
    SELECTED_DIR,
    PromptBuilder,
    pool_indices,
    reward_arguments,
)

from ..utils.distributed import processes
from .common import RaisingParser, StoreOnce, UsageError


# ----------------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------------
def _build_parser(prog: str) -> RaisingParser:
    p = RaisingParser(
        prog=prog,
        description="HEAL's general-domain data selection (§3.1, eq. 1): score every question of a pool by "
        "Uncertainty x Diversity from N rollouts of a model, and keep the top K.",
        formatter_class=argparse.ArgumentDefaultsHelpFormatter,
    )
    p.add_argument(
        "--config", action=StoreOnce, help="YAML file of option: value pairs (names as below); command-line options win"
    )
    for option in fields(SelectionConfig):  # the settings: one option per field, its help and default
        kind = option_type(option.name)
        flag, default, text = f"--{option.name}", option.default, option.metadata["help"]
        if kind is bool:
            p.add_argument(flag, action="store_true", default=default, help=text)
        else:
            p.add_argument(flag, type=kind, default=default, help=text)
    p.add_argument("--no_progress", action="store_true", help="no progress bar")
    p.add_argument(
        "--dry_run",
        action="store_true",
        help="validate the options (types, model name, reward, data mapping on a local sample) without loading a "
        "model or the Hub, print what would run, and exit (0: valid, 2: not)",
    )
    return p


def _apply_yaml(parser: RaisingParser, path: str) -> None:
    """Set the parser's defaults from a flat YAML file, checking every key and value type."""
    import yaml

    from ..utils.yamlfile import DuplicateKeyError, load_yaml

    try:
        with open(path) as f:
            data = load_yaml(f)
    except OSError as exc:
        raise SelectionError(f"--config: cannot read '{path}': {exc.strerror}") from None
    except DuplicateKeyError as exc:
        raise SelectionError(f"--config: '{path}' sets a key twice: {exc}") from None
    except yaml.YAMLError as exc:
        raise SelectionError(f"--config: '{path}' is not valid YAML: {exc}") from None
    data = {} if data is None else data
    if not isinstance(data, dict):
        raise SelectionError(f"--config: '{path}' must hold `option: value` pairs, got a {type(data).__name__}")
    actions = {a.dest: a for a in parser._actions if a.dest not in ("help", "config", "dry_run")}
    defaults = {}
    for key, value in data.items():
        action = actions.get(key)
        if action is None:
            import difflib

            close = difflib.get_close_matches(str(key), list(actions), n=1)
            hint = f" Did you mean '{close[0]}'?" if close else ""
            raise SelectionError(f"--config: unknown option '{key}' in '{path}'.{hint} Options: {', '.join(actions)}.")
        if value is not None:
            if isinstance(action, argparse._StoreTrueAction):
                expected = (bool,)
            elif action.type is int:
                expected = (int,)
            elif action.type is float:
                expected = (int, float)
            else:
                expected = (str,)
            if not isinstance(value, expected) or (bool not in expected and isinstance(value, bool)):
                names = " or ".join(t.__name__ for t in expected)
                raise SelectionError(f"--config: '{key}' in '{path}' must be {names}, got {value!r}")
            if action.type is float:
                value = float(value)
        defaults[key] = value
    parser.set_defaults(**defaults)


def select_dry_run(options: dict, config_path: str | None = None, file=None) -> int:
    """`healtrl select --dry_run`: validate a selection's options like `train.py --dry_run` validates a training
    config, without loading a model and without the Hub, and print what the selection would do.

    Checks: every setting's type and range (the checks the run makes before it loads anything), the model name (a
    local folder, a healtrl name or a well-formed Hub id; `healtrl.cli.dry_run_checks.check_model`), the reward, and,
    on a local sample of the pool (toy and local data, or the task's local sample that healtrl ships for Hub tasks),
    the prompt mapping (`prompt_column` / `question_column` / `prompt_template`), the reward's columns and `top_k`
    against the pool size (toy and local pools). Hub-only pools are reported as "not checked".

    Args:
        options: The parsed options of `healtrl select` (names as `SelectionConfig`'s fields).
        config_path: The `--config` file, named in the report.
        file: Where the report goes (default stdout); problems go to stderr.

    Returns:
        0 when the options are valid, 2 otherwise.
    """
    from healtrl.data import get_reward_func, is_toy_dataset, load_train_dataset, reward_columns

    from ..utils.compat import EXTRAS, is_available
    from .dry_run_checks import DryRunReport, check_model, sample_dataset

    file = file or sys.stdout
    report = DryRunReport()
    o = dict(options)
    try:
        SelectionConfig(**{option.name: o.get(option.name) for option in fields(SelectionConfig)}).check()
    except SelectionError as exc:
        report.problems.append(str(exc))
    model, dataset, reward = o.get("model"), o.get("dataset"), o.get("reward")
    if isinstance(model, str) and model:
        extras = f"; dtype {o.get('dtype')}" if o.get("dtype") not in (None, "auto") else ""
        report.add("model", check_model(model, None, report) + extras)
    if isinstance(reward, str) and reward:
        try:
            get_reward_func(reward)
            reads = reward_columns([reward])[reward]
            report.add("reward", f"{reward} (reads {', '.join(reads) or 'no column'})")
        except (ValueError, ImportError) as exc:
            report.problems.append(f"--reward: {exc}")
    if isinstance(dataset, str) and dataset:
        split, seed = o.get("split") or "train", o.get("seed") or 0
        label = f"{dataset} [{split}]"
        try:
            sample, how = sample_dataset(dataset, o.get("dataset_config"), split, None, seed)
        except Exception as exc:  # a finding of the dry run, not a crash
            detail = str(exc) if isinstance(exc, (ValueError, ImportError, OSError)) else f"{type(exc).__name__}: {exc}"
            report.problems.append(f"--dataset '{dataset}': {detail}")
            sample, how = None, "cannot be loaded"
        text = f"{label}: {how}"
        if sample is not None and len(sample):
            try:
                build = PromptBuilder(
                    sample.column_names,
                    o.get("prompt_column"),
                    o.get("question_column"),
                    o.get("prompt_template"),
                    bool(o.get("raw_prompt")),
                )
                build(sample[0])
                _, mapping = reward_arguments(sample, reward, o.get("answer_column")) if reward else (None, {})
                clashes = [c for c in (*SCORE_COLUMNS, INDEX_COLUMN) if c in sample.column_names]
                if clashes:
                    raise SelectionError(
                        f"The pool already has the column(s) {clashes}, which the selection adds. Rename them first."
                    )
                how_prompt = build.column or f"template {build.template!r}"
                text += f"; prompt from {how_prompt}, the reward's columns are present"
            except SelectionError as exc:
                report.problems.append(str(exc))
            except (KeyError, IndexError, ValueError) as exc:
                report.problems.append(f"the prompt of the pool's first row cannot be built: {exc}")
        if is_toy_dataset(dataset) or os.path.exists(os.path.expanduser(dataset)):
            try:
                size = len(load_train_dataset(dataset, o.get("dataset_config"), split=split, seed=seed))
                questions = len(pool_indices(size, o.get("max_questions"), seed))
                text += f"; {questions} questions scored (pool of {size})"
                top_k = o.get("top_k")
                if isinstance(top_k, int) and top_k > questions:
                    report.problems.append(
                        f"--top_k {top_k} is larger than the pool ({questions} questions"
                        f"{' after --max_questions' if o.get('max_questions') else ''}). Lower --top_k or score more "
                        "questions."
                    )
            except Exception:  # already reported above
                pass
        report.add("pool", text)
    if o.get("use_vllm") and not is_available("vllm"):
        report.machine.append(f"{EXTRAS['vllm'][0]} is not installed: use_vllm needs pip install {EXTRAS['vllm'][1]}.")
    report.add(
        "rollouts",
        f"{o.get('num_rollouts')} per question with {'vLLM' if o.get('use_vllm') else 'transformers generate'}, "
        f"temperature {o.get('temperature')}, top_p {o.get('top_p')}, max_new_tokens {o.get('max_new_tokens')}, "
        f"seed {o.get('seed')}; batches of {o.get('batch_size')} questions",
    )
    report.add(
        "selection",
        f"top {o.get('top_k')} questions by Uncertainty x Diversity (HEAL eq. 1; top_fraction "
        f"{o.get('top_fraction')}) -> {os.path.join(str(o.get('output_dir')), SELECTED_DIR)}",
    )
    source = config_path or "the command-line options"
    print(
        report.render(f"Dry run of `healtrl select` with {source}: no model is loaded, nothing is downloaded."),
        file=file,
    )
    if report.problems:
        for problem in report.problems:
            print(f"error: {problem}", file=sys.stderr)
        print(f"\nDry run FAILED: {len(report.problems)} problem(s), listed on stderr.", file=file)
        return 2
    print("\nDry run OK: the selection config is valid.", file=file)
    return 0


def select_main(argv: list[str] | None = None, prog: str = "healtrl select") -> int:
    """`healtrl select [--config FILE.yaml] [--option value ...]`: run the selection and return the exit code.

    Errors in the options or the data print `error: ...` to stderr and return 2.
    """
    from ..utils.compat import MissingExtraError

    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser(prog)
    try:
        try:
            first, _ = parser.parse_known_args(argv)
            if first.config:
                _apply_yaml(parser, first.config)
            args = parser.parse_args(argv)
        except SystemExit as exc:  # --help
            return int(exc.code or 0)
        options = vars(args)
        config_path = options.pop("config")
        progress = not options.pop("no_progress")
        if options.pop("dry_run"):
            return select_dry_run(options, config_path=config_path)
        from healtrl.selection.pipeline import select_general_data  # imports torch, which `--help` does not need

        selected = select_general_data(SelectionConfig(**options), progress=progress)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    except (SelectionError, MissingExtraError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    procs = processes()
    if not procs.is_main:
        return 0
    path = os.path.join(args.output_dir, SELECTED_DIR)
    print(f"Selected {len(selected)} questions (sorted by score) -> {os.path.abspath(path)}")
    return 0


if __name__ == "__main__":  # pragma: no cover
    sys.exit(select_main())
