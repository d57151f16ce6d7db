"""The dry run's checks of a config's recipe fields (`train.py --dry_run`, `healtrl.cli.dry_run`): whether the saved
checkpoints serve the best-checkpoint rule, what they cost on disk and to evaluate (`checkpoint_plan`, bounded by
`healtrl.recipes.CHECKPOINT_BOUNDS`), and whether the paper's numbers belong to the run (`recipe_problems`)."""

from __future__ import annotations

import re
from dataclasses import asdict

from healtrl.recipes.comparison import describe_protocol, row_mismatches
from healtrl.recipes.recipe import (
    BYTES_PER_PARAMETER,
    CHECKPOINT_BOUNDS,
    parse_best_checkpoint,
    parse_paper_protocol,
    parse_paper_results,
)

__all__ = ["checkpoint_plan", "recipe_problems", "validation_keeps_best"]


def _parameters_from_name(name) -> float | None:
    """Billions of parameters read from a model name (`Qwen/Qwen3-4B-Base` -> 4.0), or None."""
    match = re.search(r"(?<![\d.])(\d+(?:\.\d+)?)[Bb](?![a-zA-Z])", str(name or ""))
    return float(match.group(1)) if match else None


def checkpoint_plan(script_args, trainer_args, model: str | None) -> tuple[list[str], list[str]]:
    """(report lines, problems): the disk and evaluation cost of the checkpoints the run saves, and a problem per
    bound of `CHECKPOINT_BOUNDS` it exceeds (unless `allow_large_checkpoint_plan`)."""
    strategy = str(getattr(trainer_args.save_strategy, "value", trainer_args.save_strategy))
    max_steps = getattr(trainer_args, "max_steps", -1) or -1
    if strategy != "steps" or max_steps <= 0:
        return [], []
    save_steps = int(trainer_args.save_steps)
    saves = max_steps // save_steps
    limit = getattr(trainer_args, "save_total_limit", None)
    keeps_best = validation_keeps_best(script_args, trainer_args)
    kept = saves if not limit else min(saves, limit + (1 if keeps_best else 0))
    billions = _parameters_from_name(model)
    per_param = BYTES_PER_PARAMETER["model" if getattr(trainer_args, "save_only_model", False) else "with_optimizer"]
    disk_tb = None if billions is None else kept * billions * per_param / 1000
    rule = parse_best_checkpoint(getattr(script_args, "best_checkpoint", None))
    text = f"{saves} saves (max_steps {max_steps} / save_steps {save_steps}), at most {kept} kept at once"
    text += f" (save_total_limit {limit}{' + the best' if keeps_best else ''})" if limit else " (no save_total_limit)"
    if disk_tb is not None:
        text += (
            f", ~{disk_tb:.2g} TB ({billions:g}B parameters x {per_param} bytes each per checkpoint: our estimate, "
            "healtrl.recipes.BYTES_PER_PARAMETER)"
        )
    candidates = None
    if rule is not None:
        every = rule.every_steps or save_steps
        candidates = min(kept, max_steps // every) if limit else max_steps // every
        samples = ", ".join(f"{t} x {rule.k_of(t)}" for t in rule.tasks)
        text += f"; healtrl eval --checkpoints: {candidates} candidates x ({samples}) samples per problem"
    evaluated = getattr(script_args, "eval_tasks", None) or []
    every_eval = getattr(script_args, "eval_every_steps", None)
    if evaluated and every_eval:
        text += (
            f"; in training: {max_steps // every_eval} validations x {getattr(script_args, 'eval_k', 1)} samples per "
            f"problem of {', '.join(evaluated)}"
        )
    problems = []
    over = []
    if disk_tb is not None and disk_tb > CHECKPOINT_BOUNDS["disk_tb"]:
        over.append(f"~{disk_tb:.2g} TB of checkpoints kept at once (bound {CHECKPOINT_BOUNDS['disk_tb']:g} TB)")
    if candidates is not None and candidates > CHECKPOINT_BOUNDS["checkpoints_to_evaluate"]:
        over.append(f"{candidates} checkpoints to evaluate (bound {CHECKPOINT_BOUNDS['checkpoints_to_evaluate']})")
    if over and not getattr(script_args, "allow_large_checkpoint_plan", False):
        problems.append(
            "the saved checkpoints exceed the plan's bounds (healtrl.recipes.CHECKPOINT_BOUNDS): "
            + "; ".join(over)
            + ". Raise save_steps, set save_total_limit with validation during training by the best-checkpoint rule "
            "(eval_tasks, eval_every_steps = best_checkpoint.every_steps), or set `allow_large_checkpoint_plan: "
            "true` to accept it."
        )
    elif over:
        text += " (over the bounds: " + "; ".join(over) + "; allowed by allow_large_checkpoint_plan)"
    return [f"checkpoint plan: {text}"], problems


def validation_keeps_best(script_args, trainer_args=None) -> bool:
    """Whether the run validates during training by its best-checkpoint rule: `best_checkpoint` is set, its tasks are
    among `eval_tasks` and `eval_every_steps` is its `every_steps` (checkpoints are saved at that interval, as the
    rule requires). `PeriodicEvalCallback(best_rule=...)` then records the best step, and `save_total_limit` may
    bound the other checkpoints: transformers never deletes the best one."""
    rule = parse_best_checkpoint(getattr(script_args, "best_checkpoint", None))
    if rule is None or not set(rule.tasks) <= set(getattr(script_args, "eval_tasks", None) or []):
        return False
    if (getattr(script_args, "eval_split", None) or rule.split) != rule.split:
        return False
    return rule.every_steps is not None and getattr(script_args, "eval_every_steps", None) == rule.every_steps


def recipe_problems(script_args, trainer_args=None, model: str | None = None) -> tuple[list[str], list[str]]:
    """(report lines, problems) of a config's recipe fields, for `train.py --dry_run`.

    A warning line: no `paper_results` entry belongs to the run's model (`model`) and training data (`dataset_name`),
    so `healtrl eval` will refuse the comparison (`select_paper_rows`).

    A problem: checkpoints are not saved at the interval the best-checkpoint rule validates at (`save_strategy` must
    be `steps` with `save_steps` dividing `best_checkpoint.every_steps`), or `save_total_limit` deletes candidates.
    """
    lines, problems = [], []
    rule = parse_best_checkpoint(getattr(script_args, "best_checkpoint", None))
    if rule is not None:
        lines.append(f"best checkpoint: {rule.describe()}")
        if trainer_args is not None:
            strategy = str(getattr(trainer_args.save_strategy, "value", trainer_args.save_strategy))
            save_steps = trainer_args.save_steps
            if strategy != "steps":
                problems.append(
                    f"best_checkpoint needs checkpoints to choose from, but save_strategy is '{strategy}'. Set "
                    f"`save_strategy: steps` and `save_steps: {rule.every_steps or 'N'}`."
                )
            elif rule.every_steps is not None and (save_steps != int(save_steps) or rule.every_steps % int(save_steps)):
                problems.append(
                    f"best_checkpoint.every_steps is {rule.every_steps} but save_steps is {save_steps:g}: the "
                    f"checkpoints at multiples of {rule.every_steps} steps are not all saved. Set `save_steps` to "
                    f"{rule.every_steps} (or a divisor of it)."
                )
            limit = getattr(trainer_args, "save_total_limit", None)
            if limit and not validation_keeps_best(script_args, trainer_args):
                problems.append(
                    f"save_total_limit is {limit}: transformers deletes older checkpoints, so the best-checkpoint rule "
                    "cannot see them. Remove `save_total_limit` (or set it to null), or validate during training by "
                    f"the rule (eval_tasks including {', '.join(rule.tasks)}, eval_every_steps {rule.every_steps}): "
                    "the best checkpoint so far is then never deleted."
                )
            elif limit:
                lines.append(
                    f"checkpoints kept: the best by the in-training validation ({', '.join(rule.tasks)} every "
                    f"{rule.every_steps} steps, eval_k {getattr(script_args, 'eval_k', None)}) and the "
                    f"{limit} most recent (save_total_limit {limit}); healtrl eval --checkpoints chooses among them"
                )
    if trainer_args is not None:
        plan_lines, plan_problems = checkpoint_plan(script_args, trainer_args, model)
        lines += plan_lines
        problems += plan_problems
    protocol = parse_paper_protocol(getattr(script_args, "paper_protocol", None))
    results = parse_paper_results(getattr(script_args, "paper_results", None), protocol)
    if results:
        keys = {k for r in results for k in (r.settings or {})}
        settings = {k: getattr(trainer_args, k, getattr(script_args, k, None)) for k in keys}
        run = {"model": model, "dataset": getattr(script_args, "dataset_name", None), "settings": settings}
        matching = [r for r in results if not row_mismatches(r, run)]
        benchmarks = list(dict.fromkeys(r.benchmark for r in matching or results))
        count = f"{len(matching)} number{'s' if len(matching) != 1 else ''}"
        if matching:
            others = len(results) - len(matching)
            lines.append(
                f"paper results: {count} for this model, training data and settings on {', '.join(benchmarks)}"
                + (f" ({others} more for other models, data or settings)" if others else "")
            )
        else:
            mismatch = "; ".join(dict.fromkeys(m for r in results for m in row_mismatches(r, run)))
            lines.append(
                f"paper results: warning: none of the {len(results)} numbers belongs to this run ({mismatch}): "
                "healtrl eval will refuse the comparison unless --compare_anyway"
            )
    if protocol is not None:
        lines.append("paper protocol: " + describe_protocol(asdict(protocol)))
    return lines, problems
