"""The best checkpoint of a run: every saved `checkpoint-N` evaluated by the recipe's `best_checkpoint` rule
(`healtrl.recipes`), one row per checkpoint written as it finishes (`checkpoint_eval.jsonl`; a killed evaluation
resumes without redoing finished checkpoints), the table `checkpoint_eval.md` with the best marked,
`best_checkpoint.json`, and a "Best checkpoint" section in the chosen folder's model card (`healtrl eval
--checkpoints <run dir>`). Each checkpoint is evaluated with `healtrl.evaluation.evaluate`.

Here too: the discovery of a run's complete checkpoints (`find_checkpoints`, `weights_signature`) and their scoring
under the rule (`score_row`, `choose_best`, `render_checkpoint_table`), pure functions of folders and rows."""

from __future__ import annotations

import contextlib
import json
import math
import os
import re
import sys
import time
import warnings
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from healtrl.evaluation import engine as evaluation
from healtrl.evaluation.engine import DEFAULT_THRESHOLD
from healtrl.recipes import recipe as recipes
from healtrl.recipes.metrics import metric_key, metric_value
from healtrl.recipes.recipe import CHECKPOINT_PREFIX, BestCheckpointRule
from healtrl.utils.distributed import Processes
from healtrl.utils.numbers import is_int

__all__ = [
    "BEST_JSON",
    "CHECKPOINT_ROWS",
    "CHECKPOINT_TABLE",
    "FINAL",
    "choose_best",
    "evaluate_checkpoints",
    "find_checkpoints",
    "render_checkpoint_table",
    "score_row",
    "weights_signature",
]

CHECKPOINT_ROWS = "checkpoint_eval.jsonl"
"""One JSON row per evaluated checkpoint, appended as each one finishes (what makes the evaluation resumable)."""
CHECKPOINT_TABLE = "checkpoint_eval.md"
BEST_JSON = "best_checkpoint.json"
FINAL = "final"


# ----------------------------------------------------------------------------------------------------------------
# Checkpoints of a run folder
# ----------------------------------------------------------------------------------------------------------------
def _has_weights(folder: str) -> bool:
    return any(os.path.isfile(os.path.join(folder, name)) for name in ("config.json", "adapter_config.json"))


_MARKER = "healtrl_checkpoint.json"  # healtrl.checkpoints.MARKER_FILE: written last, once a checkpoint is complete
# Files the Trainer writes into a checkpoint after the model: a folder holding one of them but no marker was cut short.
_TRAINER_FILES = ("trainer_state.json", "optimizer.pt", "scheduler.pt", "training_args.bin")


def _written_completely(path: str) -> bool:
    """A model folder saved by hand (no trainer files) counts as complete; a trainer's checkpoint needs the marker."""
    names = set(os.listdir(path))
    if _MARKER in names:
        return True
    return not any(n in names or n.startswith("rng_state") for n in _TRAINER_FILES)


def _corrupt_marker(path: str) -> str | None:
    """What is wrong with the completion marker of a checkpoint folder that has one; None when it is readable or
    absent (`healtrl.checkpoints.marker_problem`)."""
    from healtrl.checkpoints import marker_problem

    problem = marker_problem(path)
    return None if problem in (None, "missing") else problem


def find_checkpoints(run_dir: str | os.PathLike, include_final: bool = False) -> list[dict[str, Any]]:
    """The saved models of a training run, by step: `{"checkpoint": "checkpoint-N", "step": N, "path"}` for every
    `checkpoint-N` folder holding a model (`config.json`) or adapter (`adapter_config.json`), then, with
    `include_final`, the run folder's own final model as `{"checkpoint": "final", "step": <last logged step or None>}`.

    Raises:
        ValueError: the run folder does not exist, or `include_final` is set and it holds no model.
    """
    run_dir = os.fspath(run_dir)
    if not os.path.isdir(run_dir):
        raise ValueError(f"Run folder {run_dir!r} does not exist. Pass the output_dir of a training run.")
    found = []
    for name in os.listdir(run_dir):
        match = re.fullmatch(rf"{CHECKPOINT_PREFIX}-(\d+)", name)
        path = os.path.join(run_dir, name)
        if match and os.path.isdir(path) and _has_weights(path):
            corrupt = _corrupt_marker(path)
            if corrupt is not None:  # discovery skips a corrupt marker with a warning (healtrl.checkpoints)
                warnings.warn(
                    f"{os.path.join(path, _MARKER)} is corrupt: {corrupt}. {path} is not evaluated: its completion "
                    "cannot be confirmed. Pass it to `healtrl eval --model` to evaluate it anyway.",
                    UserWarning,
                    stacklevel=2,
                )
                continue
            if not _written_completely(path):
                warnings.warn(
                    f"{path} was written by a trainer but has no completion marker ({_MARKER}): a checkpoint cut short "
                    "by a kill, or one written before healtrl marked complete checkpoints. It is not evaluated; pass it "
                    "to `healtrl eval --model` to evaluate it anyway.",
                    UserWarning,
                    stacklevel=2,
                )
                continue
            found.append({"checkpoint": name, "step": int(match.group(1)), "path": path})
    found.sort(key=lambda c: c["step"])
    if include_final:
        if not _has_weights(run_dir):
            raise ValueError(
                f"include_final is set but {run_dir} holds no final model (no config.json / adapter_config.json; "
                "save_final_model false, or the run did not finish). Drop include_final."
            )
        found.append({"checkpoint": FINAL, "step": _last_logged_step(run_dir), "path": run_dir})
    return found


def _last_logged_step(run_dir: str) -> int | None:
    path = os.path.join(run_dir, "metrics.jsonl")
    if not os.path.isfile(path):
        return None
    step = None
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line:
                value = json.loads(line).get("step")
                step = value if is_int(value) else step
    return step


def weights_signature(path: str) -> list:
    """(name, size, mtime_ns) of the weight files of a model folder: a stored row is reused only while they match."""
    names = sorted(
        n
        for n in os.listdir(path)
        if n.endswith((".safetensors", ".bin", ".pt")) and os.path.isfile(os.path.join(path, n))
    )
    signature = []
    for name in names:
        stat = os.stat(os.path.join(path, name))
        signature.append([name, stat.st_size, stat.st_mtime_ns])
    return signature


# ----------------------------------------------------------------------------------------------------------------
# Scoring and choosing
# ----------------------------------------------------------------------------------------------------------------
def score_row(row: Mapping[str, Any], rule: BestCheckpointRule) -> tuple[float, dict[str, float]]:
    """(score, {task: value}) of a checkpoint row under the rule: the metric per task, reduced over the tasks."""
    kind, j = rule.parsed_metric
    values = {}
    for task in rule.tasks:
        record = row["tasks"][task]
        values[task] = metric_value(record["correct"], record["k"], kind, j)
    return float(np.mean(list(values.values()))), values


def choose_best(rows: Sequence[Mapping[str, Any]]) -> Mapping[str, Any]:
    """The row with the highest `score`; ties go to the earliest step (the final model, without a step, last)."""
    if not rows:
        raise ValueError("No evaluated checkpoint to choose from.")

    def key(row):
        step = row.get("step")
        return (-row["score"], math.inf if step is None else step, row["checkpoint"] == FINAL)

    return min(rows, key=key)


def render_checkpoint_table(rows: Sequence[Mapping[str, Any]], rule: BestCheckpointRule, best, run_dir: str) -> str:
    """Markdown: the rule, then one row per checkpoint (the metric per task and the score in %), the best marked."""
    lines = [
        f"# Checkpoints of `{run_dir}`",
        "",
        f"Best checkpoint: **{best['checkpoint']}**"
        + (f" (step {best['step']})" if best.get("step") is not None else "")
        + f", score {100 * best['score']:.2f}.",
        "",
        f"Rule: {rule.describe()}. Scores in %.",
        "",
    ]
    header = ["checkpoint", "step", *[f"{t} {metric_key(*rule.parsed_metric, rule.k_of(t))}" for t in rule.tasks]]
    header += [f"score ({rule.reduce})", "best"]
    lines += ["| " + " | ".join(header) + " |", "|---|---:|" + "---:|" * (len(rule.tasks) + 1) + "---|"]
    for row in rows:
        cells = [f"`{row['checkpoint']}`", "" if row.get("step") is None else str(row["step"])]
        cells += [f"{100 * row['values'][t]:.2f}" for t in rule.tasks]
        cells += [f"{100 * row['score']:.2f}", "**best**" if row["checkpoint"] == best["checkpoint"] else ""]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------------------------------------
# Best checkpoint: evaluate every saved checkpoint of a run by the recipe's rule (healtrl.recipes)
# ----------------------------------------------------------------------------------------------------------------
def _evaluation_key(rule, threshold: float, task_paths: dict[str, str] | None) -> dict[str, Any]:
    """What a checkpoint's stored row depends on: a row is reused only when this is unchanged."""
    return {
        "tasks": {task: rule.k_of(task) for task in rule.tasks},
        "temperature": rule.temperature,
        "top_p": rule.top_p,
        "top_k": rule.top_k,
        "max_new_tokens": rule.max_new_tokens,
        "seed": rule.seed,
        "num_problems": rule.num_problems,
        "split": rule.split,
        "threshold": float(threshold),
        "task_paths": dict(sorted((task_paths or {}).items())),
    }


def _read_rows(path: str) -> list[dict[str, Any]]:
    """The rows stored in `path`; a last line cut short by a kill is dropped (and the file rewritten without it)."""
    if not os.path.isfile(path):
        return []
    with open(path) as f:
        lines = [line for line in f.read().splitlines() if line.strip()]
    rows = []
    for i, line in enumerate(lines):
        try:
            rows.append(json.loads(line))
        except json.JSONDecodeError:
            if i != len(lines) - 1:
                raise ValueError(
                    f"{path} line {i + 1} is not valid JSON. It holds the rows of checkpoints already evaluated; "
                    "delete the file to evaluate every checkpoint again."
                ) from None
            _write_rows(path, rows)  # an interrupted write: drop the partial line
    return rows


def _write_rows(path: str, rows: Sequence[dict[str, Any]]) -> None:
    tmp = f"{path}.tmp"
    with open(tmp, "w") as f:
        for row in rows:
            f.write(json.dumps(row) + "\n")
    os.replace(tmp, path)


def _append_row(path: str, row: dict[str, Any]) -> None:
    with open(path, "a") as f:
        f.write(json.dumps(row) + "\n")
        f.flush()
        os.fsync(f.fileno())


def _release_accelerator_memory() -> None:
    """Free the previous checkpoint's model before the next one loads (vLLM engines hold GPU memory until cleaned)."""
    import gc

    if "vllm" in sys.modules:
        with contextlib.suppress(Exception):  # absent or renamed in some vLLM versions: gc below still runs
            from vllm.distributed import cleanup_dist_env_and_memory

            cleanup_dist_env_and_memory()
    gc.collect()
    import torch

    if torch.cuda.is_available():
        torch.cuda.empty_cache()


def evaluate_checkpoints(
    run_dir: str | os.PathLike,
    rule,
    *,
    output_dir: str | os.PathLike | None = None,
    threshold: float = DEFAULT_THRESHOLD,
    backend: str = "auto",
    task_paths: dict[str, str] | None = None,
    batch_size: int = 64,
    dtype: str = "auto",
    device: str = "auto",
    trust_remote_code: bool = False,
    vllm_kwargs: dict[str, Any] | None = None,
    update_model_cards: bool = True,
    progress: bool = True,
    procs: Processes | None = None,
) -> dict[str, Any]:
    """Evaluate the saved checkpoints of a training run by a best-checkpoint rule and mark the best.

    Every candidate (the `checkpoint-N` folders of `run_dir` whose step is a multiple of `rule.every_steps`, plus the
    run's final model with `rule.include_final`) is evaluated with `evaluate` on `rule.tasks` (one call per distinct
    k). Each finished checkpoint's row is appended to `checkpoint_eval.jsonl` at once, so a run that is killed resumes
    where it stopped: rows whose evaluation settings and weight files are unchanged are not evaluated again (changing
    only `metric`, `reduce`, `every_steps` or `include_final` re-scores the stored rows). Then the rows are scored
    (`score_row`), the best is chosen (`choose_best`: highest score, ties to the earliest step), and
    `checkpoint_eval.md` (table) and `best_checkpoint.json` are written; with `update_model_cards`, the model card
    (`README.md`) of the chosen folder gets a "Best checkpoint" section (and the run folder's card names the choice).

    Args:
        run_dir: The training run's `output_dir`.
        rule: A `healtrl.recipes.BestCheckpointRule` (or its mapping) with `max_new_tokens` set.
        output_dir: Where the rows and tables go (default: `run_dir`).
        threshold, backend, task_paths, batch_size, dtype, device, trust_remote_code, vllm_kwargs, progress: as for
            `evaluate`.
        update_model_cards: Write the "Best checkpoint" section into the model cards.

    Returns:
        `{"rows": [...], "best": row, "evaluated": [names evaluated by this call], "skipped": [names not candidates],
        "files": {name: path}}`; each row holds `checkpoint`, `step`, `path`, `tasks` (per-task results as in
        `results.json`), `values` (the metric per task) and `score`.
    """
    rule = recipes.parse_best_checkpoint(rule)
    if rule.max_new_tokens is None:
        raise ValueError(
            "best_checkpoint.max_new_tokens is not set; set it (or pass --max_new_tokens). `healtrl eval --checkpoints` "
            "takes it from the run's max_completion_length when its config.yaml sets one."
        )
    run_dir = os.fspath(run_dir)
    output_dir = os.fspath(output_dir or run_dir)
    found = find_checkpoints(run_dir, include_final=rule.include_final)
    every = rule.every_steps
    candidates = [c for c in found if c["checkpoint"] == FINAL or every is None or c["step"] % every == 0]
    skipped = [c["checkpoint"] for c in found if c not in candidates]
    if not candidates:
        saved = ", ".join(c["checkpoint"] for c in found) or "none"
        raise ValueError(
            f"No checkpoint of {run_dir} is a candidate of the rule (checkpoint-N folders with N a multiple of "
            f"every_steps={every}; found: {saved}). Save checkpoints with `save_strategy: steps` and `save_steps` "
            "dividing every_steps, or pass --every_steps to match the saved ones."
        )
    # Under a launch (`procs`) every process evaluates its share of each checkpoint; the main process writes.
    procs = procs or Processes()
    progress = progress and procs.is_main
    os.makedirs(output_dir, exist_ok=True)
    rows_path = os.path.join(output_dir, CHECKPOINT_ROWS)
    key = _evaluation_key(rule, threshold, task_paths)
    stored = _read_rows(rows_path)
    differing = [row["checkpoint"] for row in stored if row.get("evaluation") != key]
    if differing:
        old = stored[0].get("evaluation") or {}
        changes = [f"{name}: {old.get(name)!r} -> {key[name]!r}" for name in key if old.get(name) != key[name]]
        raise ValueError(
            f"{rows_path} holds rows evaluated with other settings ({'; '.join(changes) or 'unreadable settings'}). "
            "Write to another --output_dir, or delete the file to evaluate every checkpoint again with these settings."
        )
    by_name = {row["checkpoint"]: row for row in stored}

    evaluated = []
    for candidate in candidates:
        name, path = candidate["checkpoint"], candidate["path"]
        signature = weights_signature(path)
        old = by_name.get(name)
        if old is not None and old.get("weights") == signature and old.get("step") == candidate["step"]:
            continue
        if progress:
            print(f"Evaluating {name} ({path}) on {', '.join(rule.tasks)}", file=sys.stderr)
        start = time.perf_counter()
        tasks: dict[str, Any] = {}
        backend_used = None
        for k, group in rule.groups().items():
            results = evaluation.evaluate(
                path,
                group,
                k=k,
                temperature=rule.temperature,
                top_p=rule.top_p,
                top_k=rule.top_k,
                max_new_tokens=rule.max_new_tokens,
                seed=rule.seed,
                batch_size=batch_size,
                num_samples=rule.num_problems,
                split=rule.split,
                threshold=threshold,
                backend=backend,
                task_paths={t: p for t, p in (task_paths or {}).items() if t in group},
                dtype=dtype,
                device=device,
                trust_remote_code=trust_remote_code,
                vllm_kwargs=vllm_kwargs,
                progress=progress,
                procs=procs,
            )
            backend_used = results.backend
            tasks.update({task: result.to_dict() for task, result in results.tasks.items()})
            del results
            _release_accelerator_memory()
        row = {
            "checkpoint": name,
            "step": candidate["step"],
            "path": path,
            "weights": signature,
            "evaluation": key,
            "backend": backend_used,
            "tasks": tasks,
            "seconds": round(time.perf_counter() - start, 3),
        }
        if old is not None:  # the weights changed since: replace the stale row
            stored = [r for r in stored if r["checkpoint"] != name]
            if procs.is_main:
                _write_rows(rows_path, stored)
        if procs.is_main:
            _append_row(rows_path, row)
        stored.append(row)
        by_name[name] = row
        evaluated.append(name)

    rows = []
    for candidate in candidates:  # in step order; rows of folders that are gone or not candidates are left out
        row = dict(by_name[candidate["checkpoint"]])
        row["score"], row["values"] = score_row(row, rule)
        rows.append(row)
    best = choose_best(rows)
    table_path = os.path.join(output_dir, CHECKPOINT_TABLE)
    best_path = os.path.join(output_dir, BEST_JSON)
    summary = {
        "checkpoint": best["checkpoint"],
        "step": best["step"],
        "path": best["path"],
        "score": best["score"],
        "values": best["values"],
        "rule": rule.to_dict(),
        "rule_text": rule.describe(),
        "candidates": [row["checkpoint"] for row in rows],
        "not_candidates": skipped,
        "table": table_path,
    }
    if procs.is_main:
        with open(table_path, "w") as f:
            f.write(render_checkpoint_table(rows, rule, best, run_dir))
        with open(best_path, "w") as f:
            json.dump(summary, f, indent=2)
            f.write("\n")
        if update_model_cards:
            _mark_best_in_model_cards(run_dir, rows, best, rule, table_path)
    procs.barrier()
    return {
        "rows": rows,
        "best": best,
        "evaluated": evaluated,
        "skipped": skipped,
        "files": {"rows": rows_path, "table": table_path, "best": best_path},
    }


def _mark_best_in_model_cards(run_dir: str, rows, best, rule, table_path: str) -> None:
    """The "Best checkpoint" section: in the chosen folder's card, a note in the run folder's card, and removed from
    the cards of the other candidates (a previous evaluation may have chosen one of them)."""
    from healtrl.model_card import BEST_CHECKPOINT_SECTION, best_checkpoint_section, set_card_section

    def update(folder: str, body: str | None, create: bool) -> None:
        path = os.path.join(folder, "README.md")
        if not os.path.isfile(path):
            if not create:
                return
            card = f"# Model Card for {os.path.basename(os.path.normpath(folder))}\n"
        else:
            with open(path, encoding="utf-8") as f:
                card = f.read()
        new = set_card_section(card, BEST_CHECKPOINT_SECTION, body)
        if new != card:
            with open(path, "w", encoding="utf-8") as f:
                f.write(new)

    def section(folder: str, here: bool) -> str:
        return best_checkpoint_section(
            checkpoint=best["checkpoint"],
            step=best["step"],
            score=best["score"],
            values=best["values"],
            metric=rule.metric,
            rule=rule.describe(),
            candidates=len(rows),
            table=os.path.relpath(table_path, folder),
            here=here,
        )

    for row in rows:
        if row["path"] != best["path"] and os.path.normpath(row["path"]) != os.path.normpath(run_dir):
            update(row["path"], None, create=False)
    update(best["path"], section(best["path"], here=True), create=True)
    if os.path.normpath(best["path"]) != os.path.normpath(run_dir):
        update(run_dir, section(run_dir, here=False), create=False)
