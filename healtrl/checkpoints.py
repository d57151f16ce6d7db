"""Crash-safe checkpoints: completion markers, resume resolution and resume compatibility checks.

transformers' `Trainer` writes a checkpoint folder `checkpoint-N` file by file; a run killed while it writes leaves a
folder that looks like a checkpoint but is not one, and `transformers.trainer_utils.get_last_checkpoint` would pick it.
healtrl's trainers (`TRLBoundary._save_checkpoint`, `trainers/_trl/checkpoint.py`) write `healtrl_checkpoint.json` into the
folder *last*, atomically, after the model, optimizer, scheduler, RNG and trainer state, the method state and the
per-process rollout buffers of every process are on disk. Only a folder holding that marker is complete:

- `resume_from_checkpoint: true` (or `latest`) resumes from the complete checkpoint of `output_dir` with the highest
  step; folders without the marker are skipped with a warning naming them (`last_complete_checkpoint`).
- `resume_from_checkpoint: <path>` refuses a folder without the marker (`resolve_resume_checkpoint`).

A marker that exists but cannot be read (not JSON, not a JSON object, unreadable: a disk fault or a hand edit) does
not mark its folder complete (`marker_problem`), and one rule holds wherever a marker is read:

- where healtrl *discovers* checkpoints, it skips such a folder with a warning naming the marker file and what is
  wrong with it: `resume_from_checkpoint: true` / `latest` (`last_complete_checkpoint`) and the best-checkpoint
  search of `healtrl eval --checkpoints` (`healtrl.evaluation.best_checkpoint.find_checkpoints`);
- where the user *names* the checkpoint (`resume_from_checkpoint: <path>`), it refuses with a `ResumeError` naming
  the file (`resolve_resume_checkpoint`); `read_marker` raises the same error, so no caller meets a JSONDecodeError.

`train.py --dry_run` resolves `resume_from_checkpoint` as the run does, so it reports the same refusal or warning.

The marker also records what the checkpoint was written with (`checkpoint_info`): the trainer, the healtrl and TRL
versions, the number of processes, where in the rollout batch the run stood, and the config fields that change the
math. `check_resume` compares them with the resuming run and refuses a mismatch with an error naming each field and
both values; `resume_allow_mismatch: [field, ...]` (a field of every healtrl trainer config) accepts the listed ones.
"""

from __future__ import annotations

import dataclasses
import enum
import json
import os
import re
import warnings
from typing import Any

MARKER_FILE = "healtrl_checkpoint.json"
"""Written last into a checkpoint folder: its presence means the checkpoint is complete."""

FORMAT_VERSION = 1

LATEST = ("true", "latest")
"""Values of `resume_from_checkpoint` that mean: the last complete checkpoint of `output_dir`."""

NO_RESUME = ("", "false", "none", "no")

_CHECKPOINT_RE = re.compile(r"^checkpoint-(\d+)$")

# GRPO fields that change what a step computes (the loss, the rollouts, the batch layout, the random streams). The
# config fields a healtrl trainer adds to TRL's (its method fields) are compared as well, except `RESUME_IGNORED`.
# Not compared: lengths of the run (`max_steps`), optimiser and schedule settings (`learning_rate`: the scheduler state
# is restored from the checkpoint), logging, saving and evaluation settings.
GRPO_MATH_FIELDS = (
    "num_generations",
    "generation_batch_size",
    "steps_per_generation",
    "num_iterations",
    "gradient_accumulation_steps",
    "beta",
    "loss_type",
    "epsilon",
    "epsilon_high",
    "delta",
    "scale_rewards",
    "importance_sampling_level",
    "multi_objective_aggregation",
    "reward_weights",
    "mask_truncated_completions",
    "top_entropy_quantile",
    "entropy_coef",
    "use_adaptive_entropy",
    "entropy_target",
    "entropy_coef_delta",
    "off_policy_mask_threshold",
    "vllm_importance_sampling_correction",
    "temperature",
    "top_p",
    "top_k",
    "min_p",
    "repetition_penalty",
    "max_completion_length",
    "seed",
)

# healtrl fields that do not change the math: diagnostics, the kernel (the same numbers up to rounding), the source
# of rollout entropies (the same values up to rounding), and the safety options themselves.
RESUME_IGNORED = frozenset(
    {
        "entropy_flow_diagnostics",
        "entropy_flow_estimator",
        "logprob_kernel",
        "rollout_entropy_source",
        "resume_allow_mismatch",
        "divergence_guard",
        "divergence_entropy_fraction",
    }
)

# Entries of `resume_allow_mismatch` that are not config fields.
VERSION_FIELDS = ("healtrl_version", "trl_version")


class ResumeError(ValueError):
    """A checkpoint cannot be resumed from: none is complete, or it was written under other settings."""


# ----------------------------------------------------------------------------------------------------------------
# Atomic writes
# ----------------------------------------------------------------------------------------------------------------
def _tmp_path(path: str) -> str:
    return f"{path}.tmp-{os.getpid()}"


def write_json_atomic(path: str, obj: Any, indent: int | None = 2) -> None:
    """Write `obj` as JSON to `path` so that a reader sees either the old file or the whole new one: a temporary file
    in the same folder, flushed to disk, then `os.replace`."""
    tmp = _tmp_path(path)
    with open(tmp, "w", encoding="utf-8") as f:
        json.dump(obj, f, indent=indent)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def torch_save_atomic(obj: Any, path: str) -> None:
    """`torch.save` through a temporary file and `os.replace` (see `write_json_atomic`)."""
    import torch

    tmp = _tmp_path(path)
    with open(tmp, "wb") as f:
        torch.save(obj, f)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path)


def fsync_dir(path: str) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:  # e.g. a platform without directory handles
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------------------------------------
# Finding complete checkpoints
# ----------------------------------------------------------------------------------------------------------------
def _load_marker(checkpoint: str) -> tuple[dict[str, Any] | None, str | None]:
    """(the marker's content, None), or (None, what is wrong with it)."""
    path = os.path.join(checkpoint, MARKER_FILE)
    if not os.path.isfile(path):
        return None, "missing"
    try:
        with open(path, encoding="utf-8") as f:
            data = json.load(f)
    except (OSError, UnicodeDecodeError) as exc:
        return None, f"unreadable ({type(exc).__name__}: {exc})"
    except json.JSONDecodeError as exc:
        return None, f"not valid JSON ({exc})"
    if not isinstance(data, dict):
        return None, f"not a JSON object (a {type(data).__name__})"
    return data, None


def marker_problem(checkpoint: str) -> str | None:
    """None when `checkpoint` holds a readable completion marker (`MARKER_FILE`); else what is wrong: "missing",
    or why the file cannot be read as the JSON object healtrl writes (a corrupt marker)."""
    return _load_marker(checkpoint)[1]


def is_complete(checkpoint: str) -> bool:
    """Whether `checkpoint` holds a readable completion marker (`MARKER_FILE`)."""
    return marker_problem(checkpoint) is None


def _corrupt_marker_message(checkpoint: str, problem: str) -> str:
    return f"{os.path.join(checkpoint, MARKER_FILE)} is corrupt: {problem}"


def read_marker(checkpoint: str) -> dict[str, Any]:
    """The content of `checkpoint`'s marker.

    Raises:
        ResumeError: the marker is missing or corrupt, naming the file.
    """
    data, problem = _load_marker(checkpoint)
    if problem == "missing":
        raise ResumeError(f"{checkpoint} has no {MARKER_FILE}: it is not a complete healtrl checkpoint.")
    if problem is not None:
        raise ResumeError(
            f"{_corrupt_marker_message(checkpoint, problem)}. healtrl writes this file last, atomically, so the "
            "checkpoint was damaged after it was written. Resume from another checkpoint."
        )
    return data


def list_checkpoints(output_dir: str) -> list[str]:
    """The `checkpoint-N` folders of `output_dir`, by increasing N."""
    if not os.path.isdir(output_dir):
        return []
    found = []
    for name in os.listdir(output_dir):
        match = _CHECKPOINT_RE.match(name)
        path = os.path.join(output_dir, name)
        if match and os.path.isdir(path):
            found.append((int(match.group(1)), path))
    return [path for _, path in sorted(found)]


def last_complete_checkpoint(output_dir: str) -> str | None:
    """The complete checkpoint of `output_dir` with the highest step, or None. Folders of higher steps without the
    marker (a run killed while writing them) or with a corrupt one are skipped with a warning naming them."""
    skipped, corrupt = [], []
    chosen = None
    for path in reversed(list_checkpoints(output_dir)):
        problem = marker_problem(path)
        if problem is None:
            chosen = path
            break
        if problem == "missing":
            skipped.append(path)
        else:
            corrupt.append(_corrupt_marker_message(path, problem))
    parts = []
    if skipped:
        parts.append(
            f"Skipping incomplete checkpoint(s) without {MARKER_FILE} (a run stopped while writing them): "
            f"{', '.join(skipped)}."
        )
    if corrupt:
        parts.append(f"Skipping checkpoint(s) whose completion marker is corrupt: {'; '.join(corrupt)}.")
    if parts:
        parts.append(f"Resuming from {chosen}." if chosen else "No complete checkpoint is left.")
        warnings.warn(" ".join(parts), RuntimeWarning, stacklevel=2)
    return chosen


def resolve_resume_checkpoint(value: str | bool | None, output_dir: str) -> str | None:
    """The checkpoint folder that `resume_from_checkpoint: value` names, or None for a fresh run.

    `true` / `latest` (any case, or Python's `True`): the last complete checkpoint of `output_dir`; a path: that
    folder, which must be complete. `None`, `false`, `""`: no resume.

    Raises:
        ResumeError: no complete checkpoint in `output_dir`; a path that does not exist or is not complete.
    """
    if value is None or value is False:
        return None
    if value is True or (isinstance(value, str) and value.strip().lower() in LATEST):
        chosen = last_complete_checkpoint(output_dir)
        if chosen is None:
            found = list_checkpoints(output_dir)
            detail = f" (incomplete ones, without a readable {MARKER_FILE}: {', '.join(found)})" if found else ""
            raise ResumeError(
                f"resume_from_checkpoint: {value!s}: no complete checkpoint in {output_dir}{detail}. Start without "
                "resume_from_checkpoint, or point it at a checkpoint folder."
            )
        return chosen
    if not isinstance(value, (str, os.PathLike)):
        raise ResumeError(f"resume_from_checkpoint must be a path, true or latest; got {value!r}.")
    path = os.fspath(value)
    if path.strip().lower() in NO_RESUME:
        return None
    if not os.path.isdir(path):
        raise ResumeError(
            f"resume_from_checkpoint: {path} is not a folder. Give a checkpoint folder (e.g. {output_dir}/checkpoint-N)"
            " or `true` for the last complete checkpoint of output_dir."
        )
    problem = marker_problem(path)
    if problem == "missing":
        raise ResumeError(
            f"resume_from_checkpoint: {path} has no {MARKER_FILE}, which healtrl writes last into every checkpoint: "
            "the folder is incomplete (the run stopped while writing it) or was not written by a healtrl trainer. "
            f"Resume from a complete checkpoint (`resume_from_checkpoint: true` picks the last one of {output_dir})."
        )
    if problem is not None:
        raise ResumeError(
            f"resume_from_checkpoint: {_corrupt_marker_message(path, problem)}. healtrl writes that file last, "
            "atomically, so the checkpoint was damaged after it was written and its state cannot be trusted. Point "
            "`resume_from_checkpoint` at another checkpoint folder (`true` picks the last complete one of "
            f"{output_dir}, skipping this one)."
        )
    return path


# ----------------------------------------------------------------------------------------------------------------
# What a checkpoint was written with
# ----------------------------------------------------------------------------------------------------------------
def _jsonable(value):
    if isinstance(value, enum.Enum):
        return _jsonable(value.value)
    if isinstance(value, dict):
        return {str(k): _jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_jsonable(v) for v in value]
    if value is None or isinstance(value, (bool, int, float, str)):
        return value
    return repr(value)


def math_fields(args) -> dict[str, Any]:
    """The config fields of `args` compared on resume: `GRPO_MATH_FIELDS` and the fields healtrl's config classes add
    to TRL's `GRPOConfig`, minus `RESUME_IGNORED`."""
    from trl import GRPOConfig

    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    names = [name for name in GRPO_MATH_FIELDS if hasattr(args, name)]
    names += [f.name for f in dataclasses.fields(args) if f.name not in trl_fields and f.name not in RESUME_IGNORED]
    return {name: _jsonable(getattr(args, name)) for name in names}


def checkpoint_info(trainer, rollout: dict[str, Any]) -> dict[str, Any]:
    """The content of `MARKER_FILE` for a checkpoint `trainer` writes now; `rollout` is where the run stands in its
    rollout batch (`micro_steps`, `micro_steps_per_rollout_batch`, `mid_rollout`)."""
    import transformers
    import trl

    from .utils.version import __version__

    return {
        "format": FORMAT_VERSION,
        "complete": True,
        "trainer": type(trainer).__name__,
        "global_step": int(trainer.state.global_step),
        "num_processes": int(trainer.accelerator.num_processes),
        **rollout,
        "healtrl_version": __version__,
        "trl_version": trl.__version__,
        "transformers_version": transformers.__version__,
        "fields": math_fields(trainer.args),
    }


def check_resume(saved: dict[str, Any], trainer, checkpoint: str) -> list[str]:
    """Refuse to resume `trainer` from `checkpoint` (whose marker holds `saved`) when it would not continue the run
    that wrote it. Returns the mismatches that `args.resume_allow_mismatch` accepted (the caller warns about them).

    Raises:
        ResumeError: another trainer class; another number of processes while the checkpoint holds a part of an
            unfinished rollout batch per process; other healtrl or TRL versions, or other values of the compared
            config fields (`math_fields`), unless listed in `resume_allow_mismatch`. Every mismatch is named with
            the checkpoint's and this run's value.
    """
    import trl

    from .utils.version import __version__

    args = trainer.args
    allowed = set(getattr(args, "resume_allow_mismatch", None) or ())
    name = type(trainer).__name__
    if saved.get("trainer") != name:
        raise ResumeError(
            f"{checkpoint} was written by {saved.get('trainer')}, this run is {name} (field `trainer`: checkpoint "
            f"{saved.get('trainer')!r}, this run {name!r}). A checkpoint resumes only with the trainer that wrote it."
        )
    processes = trainer.accelerator.num_processes
    if saved.get("mid_rollout") and int(saved.get("num_processes", processes)) != processes:
        raise ResumeError(
            f"num_processes: checkpoint {saved.get('num_processes')}, this run {processes}. {checkpoint} was written "
            "in the middle of a rollout batch, each process holding its part of the batch, which cannot be "
            f"re-sharded. Resume with {saved.get('num_processes')} processes, or from a checkpoint at a rollout-batch "
            "boundary."
        )
    mismatches = []
    current = {"healtrl_version": __version__, "trl_version": trl.__version__}
    for key in VERSION_FIELDS:
        if saved.get(key) != current[key]:
            mismatches.append((key, saved.get(key), current[key]))
    saved_fields = saved.get("fields", {})
    now = math_fields(args)
    for key in sorted(set(saved_fields) | set(now)):
        before, after = saved_fields.get(key, "<absent>"), now.get(key, "<absent>")
        if before != after:
            mismatches.append((key, before, after))
    refused = [m for m in mismatches if m[0] not in allowed]
    if refused:
        lines = "\n".join(f"  {key}: checkpoint {before!r}, this run {after!r}" for key, before, after in refused)
        keys = ", ".join(key for key, _, _ in refused)
        raise ResumeError(
            f"Resuming {name} from {checkpoint} with settings that differ from the run that wrote it:\n{lines}\n"
            "The resumed run would not continue that run. Resume with the checkpoint's values, or, if the change is "
            f"intended, accept it with `resume_allow_mismatch: [{keys}]`."
        )
    notes = [f"{key}: checkpoint {before!r}, this run {after!r}" for key, before, after in mismatches]
    if int(saved.get("num_processes", processes)) != processes:
        notes.append(
            f"num_processes: checkpoint {saved.get('num_processes')}, this run {processes} (the model and optimizer "
            "state carry over; the per-process random streams do not, so the run is not the uninterrupted one)"
        )
    return notes


class DivergenceError(RuntimeError):
    """The divergence guard stopped training (`divergence_guard`): non-finite loss/gradients or near-uniform entropy."""
