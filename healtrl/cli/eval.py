"""`healtrl eval`: evaluate a model (or every checkpoint of a run) on tasks and write results.json / results.md.

The evaluation itself (sampling, scoring, avg@k and pass@k, best checkpoint) is `healtrl.evaluation`; this module is
its command line: options, the run-folder hygiene check, the paper-recipe comparison and the checkpoints table.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Sequence
from dataclasses import asdict
from typing import Any

from healtrl.generation import SamplingSettings

from ..evaluation.options import BACKENDS, DEFAULT_THRESHOLD
from ..utils.distributed import processes
from .common import RaisingParser, StoreOnce, UsageError, add_version_option, configure_threads


# ----------------------------------------------------------------------------------------------------------------
# Command line
# ----------------------------------------------------------------------------------------------------------------
def _build_parser(prog: str) -> RaisingParser:
    parser = RaisingParser(
        prog=prog,
        description=(
            "Sample k completions per problem of each task, score them with the task's reward, and report avg@k, "
            "pass@j (unbiased estimator, j = 1, 2, 4, ..., k) and the mean response length. Writes results.json and "
            "results.md to --output_dir; when the model's run (its config.yaml) or --compare_paper names the paper's "
            "numbers (paper_results), also paper_comparison.md. With --checkpoints RUN_DIR: evaluates every saved "
            "checkpoint of a training run by the recipe's best_checkpoint rule (from the run's config.yaml; the "
            "flags below override it) and marks the best."
        ),
    )
    parser.add_argument("--model", default=None, help="Local folder (model or LoRA adapter), Hub id, or healtrl name.")
    parser.add_argument(
        "--tasks",
        default=None,
        help="Comma-separated task names, e.g. math500,aime24. Default: the benchmarks of the paper's numbers "
        "(paper_results) of the model's run or of --compare_paper; with --checkpoints, the rule's tasks.",
    )
    parser.add_argument("--k", type=int, default=None, help="Samples per problem (default 1).")
    parser.add_argument("--temperature", type=float, default=None, help="Sampling temperature; 0: greedy (default 1).")
    parser.add_argument("--top_p", type=float, default=None, help="Nucleus sampling threshold (default 1.0: off).")
    parser.add_argument("--top_k", type=int, default=None, help="Top-k sampling (default 0: off).")
    parser.add_argument("--max_new_tokens", type=int, default=None, help="Most tokens per completion (default 4096).")
    parser.add_argument("--seed", type=int, default=None, help="Seed of sampling and of --num_samples subsets.")
    parser.add_argument(
        "--batch_size", type=int, default=64, help="Sequences per generate call (transformers backend; default 64)."
    )
    parser.add_argument(
        "--num_samples", type=int, default=None, help="Evaluate a random subset of N problems per task."
    )
    parser.add_argument("--split", default=None, help="Split of every task (default: each task's evaluation split).")
    parser.add_argument(
        "--threshold",
        type=float,
        default=DEFAULT_THRESHOLD,
        help="A completion is correct when its reward is >= this (default 1.0).",
    )
    parser.add_argument(
        "--output_dir",
        default=None,
        help="Where to write results (default outputs/eval/<model>; with --checkpoints, the run folder).",
    )
    parser.add_argument("--backend", choices=BACKENDS, default="auto", help="Generation backend (default auto).")
    parser.add_argument("--dtype", choices=("auto", "float32", "bfloat16", "float16"), default="auto")
    parser.add_argument("--device", default="auto", help="transformers backend: auto, cpu, cuda, cuda:1, ...")
    parser.add_argument(
        "--task_path",
        action="append",
        default=[],
        metavar="TASK=PATH",
        help="Load TASK from a local file in its Hub dataset's format instead of the Hub (repeatable).",
    )
    parser.add_argument("--tensor_parallel_size", type=int, default=1, help="vLLM tensor parallelism.")
    parser.add_argument("--gpu_memory_utilization", type=float, default=0.9, help="vLLM GPU memory fraction.")
    parser.add_argument("--max_model_len", type=int, default=None, help="vLLM context length.")
    parser.add_argument("--trust_remote_code", action="store_true")
    parser.add_argument("--no_progress", action="store_true", help="Hide progress bars.")
    add_version_option(parser)
    recipe = parser.add_argument_group("recipes: best checkpoint and the paper's numbers (healtrl.recipes)")
    recipe.add_argument(
        "--checkpoints",
        metavar="RUN_DIR",
        default=None,
        help="Evaluate every checkpoint-N folder of this training run by the best-checkpoint rule; writes "
        "checkpoint_eval.jsonl/.md and best_checkpoint.json, resumes where a killed evaluation stopped.",
    )
    recipe.add_argument(
        "--compare_paper",
        "--compare-paper",
        "--config",
        dest="config",
        action=StoreOnce,
        metavar="CONFIG",
        default=None,
        help="Training YAML config whose best_checkpoint, paper_results and paper_protocol to use (default: the "
        "config.yaml of the run folder, or of the model's run).",
    )
    recipe.add_argument(
        "--results",
        default=None,
        metavar="PATHS",
        help="Comma-separated results.json files of earlier `healtrl eval` runs: write the paper comparison from them "
        "without evaluating (needs --compare_paper or a run's config).",
    )
    recipe.add_argument(
        "--compare_anyway",
        action="store_true",
        help="Compare with the paper's numbers even though the run's model or training data (its config.yaml) is not "
        "the one they belong to (paper_results / paper_protocol model and dataset); every such row is marked ⚠.",
    )
    recipe.add_argument("--metric", default=None, help="Rule metric: avg@k, pass@k or pass@<j> (--checkpoints).")
    recipe.add_argument("--reduce", default=None, help="Rule reduction over tasks: mean (--checkpoints).")
    recipe.add_argument(
        "--every_steps", type=int, default=None, help="Only checkpoints at multiples of this step (--checkpoints)."
    )
    recipe.add_argument(
        "--include_final", action="store_true", help="Also evaluate the run folder's final model (--checkpoints)."
    )
    parser.add_argument(
        "--allow_eval_overlap",
        action="store_true",
        help="Evaluate even though the run in --model (its config.yaml) trained on rows of the tasks (healtrl.hygiene).",
    )
    return parser


def _default_output_dir(model: str) -> str:
    name = re.sub(r"[^A-Za-z0-9._-]+", "_", os.path.basename(os.path.normpath(model)) or model).strip("_")
    return os.path.join("outputs", "eval", name or "model")


_SAMPLING_DEFAULTS = {"k": 1, "temperature": 1.0, "top_p": 1.0, "top_k": 0, "max_new_tokens": 4096, "seed": 0}


def _split_names(text: str | None) -> list[str] | None:
    return None if text is None else [t.strip() for t in text.split(",") if t.strip()]


def _task_paths(items: Sequence[str], problems: list[str]) -> dict[str, str]:
    task_paths = {}
    for item in items:
        name, sep, path = item.partition("=")
        if not sep or not name or not path:
            problems.append(f"--task_path expects TASK=PATH, got {item!r}.")
        else:
            task_paths[name] = path
    return task_paths


def _report(problems: Sequence[str]) -> int:
    for problem in problems:
        print(f"error: {problem}", file=sys.stderr)
    return 2


def _checked_processes(run_dir, tasks, split, task_paths, allow):
    """The processes of the launch (`processes()`, torch's CPU threads set), after the run folder's hygiene check
    (`check_run_folder`: the training data of a `train.py` run must not hold rows of the evaluated tasks); None, with
    the error printed, when the check fails."""
    from .run_hygiene import check_run_folder

    try:
        check_run_folder(run_dir, list(tasks), split=split, task_paths=task_paths, allow=allow)
    except ValueError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return None
    configure_threads()
    return processes()


def eval_main(argv: list[str] | None = None, prog: str = "healtrl eval") -> int:
    """`healtrl eval --model M --tasks a,b --k K ...` (or `--checkpoints RUN_DIR`, or `--results PATHS`): returns the
    process exit code (0, or 2 on a usage error)."""
    argv = list(sys.argv[1:] if argv is None else argv)
    parser = _build_parser(prog)
    try:
        args = parser.parse_args(argv)
    except UsageError as exc:
        print(f"error: {exc}. See `{prog} --help`.", file=sys.stderr)
        return 2
    except SystemExit as exc:  # --help, --version
        return int(exc.code or 0)
    if args.checkpoints is not None:
        return _checkpoints_main(args, prog)
    if args.results is not None:
        return _compare_results_main(args, prog)
    return _model_main(args, prog)


def _run_identity(model: str | None) -> dict[str, Any] | None:
    """`{"model", "dataset"}` of the `train.py` run a model folder belongs to (its config.yaml's model_name_or_path
    and dataset_name); None when the model is not a run folder (a Hub id, a hand-saved model)."""
    from healtrl.recipes import recipe as recipes

    if model is None or not os.path.isdir(os.path.expanduser(str(model))):
        return None
    config, _ = recipes.run_config_for(os.path.expanduser(str(model)))
    if not config:
        return None
    return {"model": config.get("model_name_or_path"), "dataset": config.get("dataset_name"), "settings": config}


def _paper_recipe(args, model: str | None) -> tuple[list, Any, str | None]:
    """(paper_results, paper_protocol, config path) from --compare_paper, else from the config.yaml of the model's
    run (a local run folder or one of its checkpoint-N folders); ([], None, None) when neither names any. The numbers
    are those of the run's model and training data (`paper_comparison.select_paper_rows`: a ValueError naming
    both when none is, unless --compare_anyway)."""
    from healtrl.recipes import comparison as paper_comparison
    from healtrl.recipes import recipe as recipes

    if args.config is not None:
        config, path = recipes.read_run_config(args.config), args.config
        if config is None:
            raise ValueError(f"--compare_paper {args.config}: no such config file.")
    elif model is not None and os.path.isdir(model):
        config, path = recipes.run_config_for(model)
    else:
        return [], None, None
    if not config:
        return [], None, path
    try:
        protocol = recipes.parse_paper_protocol(config.get("paper_protocol"))
        results = recipes.parse_paper_results(config.get("paper_results"), protocol)
        results = paper_comparison.select_paper_rows(
            results, _run_identity(model), allow_mismatch=bool(getattr(args, "compare_anyway", False))
        )
    except ValueError as exc:
        raise ValueError(f"{path}: {exc}") from None
    return results, protocol, path


def _write_comparison(output_dir: str, paper, protocol, results: Sequence[dict], model: str | None, source) -> str:
    from healtrl.recipes import comparison as paper_comparison

    run = _run_identity(model)
    rows = paper_comparison.compare_with_paper(paper, protocol, results, run=run)
    title = "Your run vs the paper" + (f" ({os.path.basename(source)})" if source else "")
    os.makedirs(output_dir, exist_ok=True)
    md_path = os.path.join(output_dir, paper_comparison.COMPARISON_MD)
    with open(md_path, "w") as f:
        f.write(paper_comparison.render_comparison(rows, protocol, results, title=title, model=model, run=run))
    with open(os.path.join(output_dir, paper_comparison.COMPARISON_JSON), "w") as f:
        json.dump({"config": source, "protocol": asdict(protocol) if protocol else None, "rows": rows}, f, indent=2)
        f.write("\n")
    return md_path


def _backend_kwargs(args, task_paths) -> dict:
    """The generation-backend arguments that `evaluate` and `evaluate_checkpoints` take from the command line."""
    return {
        "backend": args.backend,
        "task_paths": task_paths,
        "dtype": args.dtype,
        "device": args.device,
        "trust_remote_code": args.trust_remote_code,
        "vllm_kwargs": _vllm_kwargs(args),
        "progress": not args.no_progress,
    }


def _model_main(args, prog: str) -> int:
    """`healtrl eval --model M ...`: evaluate one model (and compare with the paper's numbers when a recipe has them)."""
    problems = []
    if args.model is None:
        return _report(["--model is required (or --checkpoints RUN_DIR, or --results PATHS); see `--help`."])
    try:
        paper, protocol, source = _paper_recipe(args, args.model)
    except ValueError as exc:
        return _report([str(exc)])
    tasks = _split_names(args.tasks)
    settings = {name: getattr(args, name) for name in _SAMPLING_DEFAULTS}
    if tasks is None:
        if not paper:
            return _report(["--tasks is required (e.g. `--tasks math500,aime24`): no paper_results to take them from."])
        # Evaluate as the paper did: its benchmarks, and its decoding where it states it (flags still win).
        tasks = list(dict.fromkeys(entry.benchmark for entry in paper))
        ks = sorted({entry.k for entry in paper})
        if settings["k"] is None and len(ks) > 1:
            by_k = {k: sorted({e.benchmark for e in paper if e.k == k}) for k in ks}
            runs = "; ".join(f"`--tasks {','.join(names)} --k {k}`" for k, names in by_k.items())
            return _report(
                [f"The paper's numbers in {source} use several k ({', '.join(map(str, ks))}); evaluate one k at a "
                 f"time into separate --output_dir: {runs}, then `{prog} --compare_paper {source} --results "
                 "A/results.json,B/results.json`."]
            )  # fmt: skip
        # the paper's decoding where it states it, else the recipe's own choice (paper_protocol.ours)
        paper_settings = {"k": ks[0], **{key: protocol and protocol.value(key)
                                         for key in ("temperature", "top_p", "max_new_tokens")}}  # fmt: skip
        for name, value in paper_settings.items():
            if settings[name] is None and value is not None:
                settings[name] = value
        print(f"Tasks and decoding from the paper's protocol ({source}): {', '.join(tasks)}.", file=sys.stderr)
    for name, default in _SAMPLING_DEFAULTS.items():
        if settings[name] is None:
            settings[name] = default
    if not tasks:
        problems.append("--tasks names no task; pass e.g. `--tasks math500,aime24`.")
    if settings["k"] < 1:
        problems.append(f"--k must be a positive number of samples per problem, got {settings['k']}.")
    if args.num_samples is not None and args.num_samples < 1:
        problems.append(f"--num_samples must be a positive number of problems, got {args.num_samples}.")
    task_paths = _task_paths(args.task_path, problems)
    try:
        SamplingSettings(**{**settings, "k": max(settings["k"], 1)}, batch_size=args.batch_size)
    except ValueError as exc:
        problems.append(f"--{str(exc)[1:].replace('`', '', 1)}")
    if not problems:
        from healtrl.tasks import get_task

        for name in tasks:
            try:
                get_task(name)
            except ValueError as exc:
                problems.append(str(exc))
    if problems:
        return _report(problems)

    # A run folder (config.yaml of train.py): its training data must not hold rows of the evaluated tasks. Under
    # torchrun / accelerate launch the work is shared and the main process writes.
    procs = _checked_processes(args.model, tasks, args.split, task_paths, args.allow_eval_overlap)
    if procs is None:
        return 2
    from healtrl.evaluation.engine import evaluate

    try:
        results = evaluate(
            args.model,
            tasks,
            **settings,
            batch_size=args.batch_size,
            num_samples=args.num_samples,
            split=args.split,
            threshold=args.threshold,
            procs=procs,
            **_backend_kwargs(args, task_paths),
        )
    except (ValueError, ImportError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not procs.is_main:
        return 0
    output_dir = args.output_dir or _default_output_dir(args.model)
    json_path, md_path = results.write(output_dir)
    print(results.to_markdown())
    print(f"Wrote {json_path} and {md_path}")
    if paper:
        path = _write_comparison(output_dir, paper, protocol, [results.to_dict()], args.model, source)
        with open(path) as f:
            print(f.read())
        print(f"Wrote {path} (the paper's numbers from {source})")
    return 0


def _vllm_kwargs(args) -> dict[str, Any]:
    return {
        "tensor_parallel_size": args.tensor_parallel_size,
        "gpu_memory_utilization": args.gpu_memory_utilization,
        "max_model_len": args.max_model_len,
    }


def _compare_results_main(args, prog: str) -> int:
    """`healtrl eval --results a/results.json,b/results.json --compare_paper CONFIG`: the comparison only."""
    from healtrl.model_card import read_eval_results

    paths = _split_names(args.results) or []
    if not paths:
        return _report(["--results names no file; pass e.g. `--results outputs/eval/run/results.json`."])
    results = []
    for path in paths:
        try:
            data = read_eval_results(path)
        except ValueError as exc:
            return _report([str(exc)])
        if data is None:
            return _report([f"--results: {path} does not exist (a results.json written by `{prog}`)."])
        results.append(data)
    model = results[0].get("model")
    try:
        paper, protocol, source = _paper_recipe(args, model)
    except (ValueError, ImportError) as exc:
        return _report([str(exc)])
    if not paper:
        return _report(
            ["--results needs the paper's numbers: pass --compare_paper CONFIG (a training config with paper_results)."]
        )
    output_dir = args.output_dir or os.path.dirname(os.path.abspath(paths[0]))
    try:
        path = _write_comparison(output_dir, paper, protocol, results, model, source)
    except ValueError as exc:
        return _report([str(exc)])
    with open(path) as f:
        print(f.read())
    print(f"Wrote {path}")
    return 0


def _checkpoints_main(args, prog: str) -> int:
    """`healtrl eval --checkpoints RUN_DIR [rule overrides]`: the best checkpoint of a run by the recipe's rule."""
    from healtrl.recipes import recipe as recipes

    run_dir = args.checkpoints
    if args.model is not None:
        return _report(["--model and --checkpoints exclude each other: --checkpoints evaluates the run's own folders."])
    if not os.path.isdir(run_dir):
        return _report([f"--checkpoints {run_dir}: no such folder (pass the output_dir of a training run)."])
    config_path = args.config or os.path.join(run_dir, recipes.CONFIG_FILE)
    try:
        config = recipes.read_run_config(config_path) or {}
    except ValueError as exc:
        return _report([str(exc)])
    if args.config is not None and not os.path.isfile(args.config):
        return _report([f"--config {args.config}: no such file."])
    rule_data = dict(config.get("best_checkpoint") or {})
    overrides = {
        "tasks": _split_names(args.tasks),
        "metric": args.metric,
        "k": args.k,
        "temperature": args.temperature,
        "top_p": args.top_p,
        "top_k": args.top_k,
        "max_new_tokens": args.max_new_tokens,
        "seed": args.seed,
        "num_problems": args.num_samples,
        "split": args.split,
        "every_steps": args.every_steps,
        "reduce": args.reduce,
        "include_final": True if args.include_final else None,
    }
    overrides = {key: value for key, value in overrides.items() if value is not None}
    if not rule_data and not {"tasks", "metric"} <= set(overrides):
        where = config_path if os.path.isfile(config_path) else f"{config_path} (missing)"
        return _report(
            [f"No best-checkpoint rule: {where} sets no `best_checkpoint`. Add it to the recipe (see "
             "healtrl.recipes.BestCheckpointRule) or pass the rule as flags, at least --tasks and --metric."]
        )  # fmt: skip
    rule_data.update(overrides)
    if rule_data.get("max_new_tokens") is None:
        rule_data["max_new_tokens"] = config.get("max_completion_length")
        if rule_data["max_new_tokens"] is None:
            return _report(
                [f"The rule sets no max_new_tokens and {config_path} no max_completion_length: pass --max_new_tokens "
                 "or set best_checkpoint.max_new_tokens."]
            )  # fmt: skip
    problems: list[str] = []
    task_paths = _task_paths(args.task_path, problems)
    try:
        rule = recipes.parse_best_checkpoint(rule_data)
    except ValueError as exc:
        problems.append(str(exc))
    if problems:
        return _report(problems)

    # The validation tasks must not hold rows the run trained on; under torchrun / accelerate launch each
    # checkpoint's evaluation is shared.
    procs = _checked_processes(run_dir, rule.tasks, rule.split, task_paths, args.allow_eval_overlap)
    if procs is None:
        return 2
    from healtrl.evaluation.best_checkpoint import evaluate_checkpoints

    try:
        outcome = evaluate_checkpoints(
            run_dir,
            rule,
            output_dir=args.output_dir,
            threshold=args.threshold,
            batch_size=args.batch_size,
            procs=procs,
            **_backend_kwargs(args, task_paths),
        )
    except (ValueError, ImportError, OSError) as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if not procs.is_main:
        return 0
    with open(outcome["files"]["table"]) as f:
        print(f.read())
    reused = len(outcome["rows"]) - len(outcome["evaluated"])
    print(
        f"Evaluated {len(outcome['evaluated'])} checkpoint(s), reused {reused} stored row(s)"
        + (f", not candidates: {', '.join(outcome['skipped'])}" if outcome["skipped"] else "")
        + f". Best: {outcome['best']['checkpoint']}. Wrote {outcome['files']['table']} and {outcome['files']['best']}"
    )
    return 0
