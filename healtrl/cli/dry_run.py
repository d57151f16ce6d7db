"""`--dry_run`: validate a training config end to end without the Hub and without training (`dry_run`).

It parses the config, builds the trainer's config class, checks the model name, the reward functions, the dataset
mapping and the reward columns on a local sample, the batch geometry, the run's length (optimizer steps and how often
each training row is drawn), the data hygiene on whatever data is local and the checkpoint `resume_from_checkpoint`
names, then prints what the run would do. The config itself is checked by `resolve` (types, ranges, duplicate keys),
as the real run checks it.
"""

from __future__ import annotations

import os
import sys

from .common import format_value, print_error
from .config import DEFAULT_CONFIG_NAME, DEFAULT_CONFIG_YAML, ConfigError, ResolvedConfig, resolve, split_argv
from .dry_run_checks import (
    DryRunReport,
    check_model,
    environment_adjust,
    known_rows,
    local_task_data,
    sample_dataset,
    task_local_sample,
)
from .run_data import datasets_to_check, resolve_train_repeats

# ----------------------------------------------------------------------------------------------------------------
# --dry_run
# ----------------------------------------------------------------------------------------------------------------

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


def _geometry(resolved: ResolvedConfig, num_processes: int, report: DryRunReport, rows=None) -> int | None:
    """The batch line and the length line; returns steps_per_generation (None when the geometry is invalid)."""
    from healtrl.trainers.contract import generate_every

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
            return None
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
        return None
    per_step = per_device * n * accumulation
    updates = generate_every(steps_per_generation, args.num_iterations) / accumulation
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
    return steps_per_generation


def on_policy_equivalences(resolved: ResolvedConfig, steps_per_generation: int) -> list[str]:
    """Warnings for settings that do nothing at this config's batch geometry, each naming the fields.

    With one update per rollout batch (`gradient_accumulation_steps` a multiple of `steps_per_generation` x
    `num_iterations`: TRL runs no old-log-prob pass and uses logp_old = logp.detach()), the importance ratio is 1 at
    every update. Then the clip range never acts (Clip-Higher's `epsilon_high` != `epsilon`, or TRL's two-sided `delta`:
    the run is GRPO), and a trainer's settings listed by `healtrl.trainers.on_policy_inert` do nothing (e.g. a
    penalty on |logp - logp_old|).
    """
    from healtrl.trainers.contract import generate_every

    args = resolved.trainer_args
    accumulation, iterations = args.gradient_accumulation_steps, args.num_iterations
    per_batch = generate_every(steps_per_generation, iterations)
    if accumulation % per_batch:
        return []
    why = (
        f"one update per rollout batch (gradient_accumulation_steps {accumulation} is a multiple of "
        f"steps_per_generation {steps_per_generation} x num_iterations {iterations}), so logp_old = logp and the "
        "ratio is 1 at every update"
    )
    fix = "; raise steps_per_generation (or num_iterations) for more than one update per rollout batch"
    out = []
    epsilon, epsilon_high = args.epsilon, getattr(args, "epsilon_high", None)
    if epsilon_high is not None and epsilon_high != epsilon:
        out.append(
            f"this run is GRPO: Clip-Higher's epsilon_high {epsilon_high:g} != epsilon {epsilon:g} has no effect with "
            f"{why}: the clip never acts{fix}."
        )
    if getattr(args, "delta", None) is not None:
        out.append(f"delta {args.delta:g} (two-sided clipping) has no effect with {why}{fix}.")
    from healtrl.trainers import on_policy_inert

    for setting in on_policy_inert(args):  # the trainer's own settings, from the registry
        out.append(f"this run is GRPO: {setting} with {why}{fix}.")
    return out


def _report_length(
    resolved: ResolvedConfig, report: DryRunReport, prompts_per_batch: int, updates: float, rows
) -> None:
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


def _dry_run_hygiene(resolved: ResolvedConfig, report: DryRunReport, seed: int) -> None:
    """Data hygiene in the dry run: the evaluated tasks are `eval_tasks` and the recipe's `best_checkpoint.tasks` and
    `paper_results` benchmarks (`run_hygiene.evaluated_tasks`); a training dataset that is an evaluated task's
    evaluated split is refused outright; otherwise the prompts are compared (`healtrl.hygiene`) on whatever data is local (toy, local files,
    offline tasks, the tasks' local samples); Hub data is compared when the run starts."""
    from healtrl.data import TASK_DATASET_PREFIX, is_toy_dataset, load_train_dataset
    from healtrl.hygiene import find_near_duplicates, find_overlaps, near_duplicate_message

    from .run_hygiene import evaluated_tasks

    script_args, args = resolved.script_args, resolved.trainer_args
    named_by = evaluated_tasks(script_args)  # eval_tasks, best_checkpoint.tasks, paper_results
    evaluated = list(named_by)
    has_eval_dataset = str(getattr(args.eval_strategy, "value", args.eval_strategy)) != "no"
    if not evaluated and not has_eval_dataset:
        report.add("hygiene", "no evaluation task (eval_tasks, best_checkpoint, paper_results) and no eval dataset")
        return
    allow = script_args.allow_eval_overlap
    findings, unchecked, train_sets, how = [], [], [], set()
    for role, name, config, split, num_samples in datasets_to_check(resolved):
        if role == "eval":
            continue
        data_seed = seed if role == "train" else args.seed
        task = name[len(TASK_DATASET_PREFIX) :] if name.startswith(TASK_DATASET_PREFIX) else None
        for eval_task, eval_split in evaluated:
            if task == eval_task and split == eval_split:
                names = named_by[(eval_task, eval_split)]
                findings.append(
                    f"the {role} data is task '{task}' split '{split}', the split {' and '.join(names)} "
                    f"evaluate{'s' if len(names) == 1 else ''}: every training row is an evaluation row"
                )
        try:
            if task is not None:
                data, source = local_task_data(task, split, num_samples, data_seed)
            elif is_toy_dataset(name) or os.path.exists(os.path.expanduser(name)):
                data, source = load_train_dataset(name, config, split, num_samples, data_seed), "local data"
            else:
                data, source = None, f"{name} is Hub data"
        except Exception as exc:  # unreadable data is reported by the data check
            data, source = None, f"{name} could not be read ({type(exc).__name__})"
        if data is None:
            unchecked.append(source)
        else:
            train_sets.append((data, _one_file_sample(task)))
            how.add(source)
    eval_sets = {}
    for task, split in evaluated:
        try:
            data, source = local_task_data(task, split)
        except Exception as exc:
            data, source = None, f"task '{task}' could not be read ({type(exc).__name__})"
        if data is None:
            unchecked.append(source)
        else:
            eval_sets[(task, split)] = (data, _one_file_sample(task))
            how.add(source)
    if has_eval_dataset:
        unchecked.append("the evaluation dataset (compared when the run starts)")
    where = " (on local data)" if unchecked else ""
    near = []
    for (task, split), (data, sample) in eval_sets.items():
        # A local sample is one file that stands for every split of its task (and for tasks sharing its source): two
        # sets read from the same file offline share rows, which says nothing about the Hub data.
        against = [d for d, other in train_sets if sample is None or other != sample]
        if len(against) < len(train_sets):
            unchecked.append(
                f"task '{task}' split '{split}' against training data read from the same local sample file"
            )
        if not against:
            continue
        findings += [
            f"{o.describe()} (named by {', '.join(named_by[(o.name, o.split)])}) are training questions{where}"
            for o in find_overlaps(against, {(task, split): data})
        ]
        near += find_near_duplicates(against, {(task, split): data})
    if near:
        report.add("near-duplicates", near_duplicate_message(near))
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
        + " (normalised question stem, options left out; near-duplicates by character 5-grams; healtrl.hygiene"
        + (", allow_eval_overlap true" if allow else "")
        + ")",
    )


def _one_file_sample(task: str | None) -> str | None:
    """The local sample file `task` reads offline for every split (tasks drawn from one source, e.g. LiveCodeBench's
    releases, may share it); None otherwise (a folder such as Medicine's splits the rows itself)."""
    if task is None:
        return None
    try:
        path = task_local_sample(task)
    except Exception:
        return None
    return path if path is not None and os.path.isfile(path) else None


def _dry_run_resume(args, report: DryRunReport) -> None:
    """`resume_from_checkpoint` resolved as the run resolves it before loading anything
    (`healtrl.checkpoints.resolve_resume_checkpoint`): a refusal is a problem, a skipped checkpoint is reported."""
    import warnings

    from healtrl.checkpoints import ResumeError, resolve_resume_checkpoint

    if args.resume_from_checkpoint in (None, False):
        return
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        try:
            checkpoint = resolve_resume_checkpoint(args.resume_from_checkpoint, args.output_dir)
        except ResumeError as exc:
            report.problems.append(str(exc))
            report.add("resume", "FAILED (see the problems)")
            return
    skipped = " ".join(str(w.message) for w in caught if issubclass(w.category, RuntimeWarning))
    if checkpoint is None:
        report.add("resume", "no (resume_from_checkpoint is off)")
        return
    report.add(
        "resume",
        f"from {checkpoint} (its settings are compared with the run's when it starts)"
        + (f"; warning: {skipped}" if skipped else ""),
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
    file = file or sys.stdout
    report = DryRunReport()
    try:
        if split_argv(argv).help:  # `--dry_run --help`: the help text, before the trainers' imports
            resolve(argv, default=DEFAULT_CONFIG_YAML, prog=prog)
        from healtrl.data import check_columns, get_reward_funcs, reward_columns
        from healtrl.trainers import get_trainer_classes, method_fields

        resolved = resolve(argv, default=DEFAULT_CONFIG_YAML, prog=prog, adjust=environment_adjust(report))
    except ConfigError as exc:
        return print_error(str(exc))
    script_args, model_args, args = resolved.script_args, resolved.model_args, resolved.trainer_args
    if num_processes is None:
        num_processes = int(os.environ.get("WORLD_SIZE", "1"))
    trainer_cls, config_cls = get_trainer_classes(resolved.trainer_name)
    source = resolved.config_path or f"the embedded default ({DEFAULT_CONFIG_NAME})"

    report.add(
        "trainer", f"{resolved.trainer_name}: {trainer_cls.__name__} with {config_cls.__name__} (built and valid)"
    )
    model_text = check_model(model_args.model_name_or_path, model_args.model_revision, report)
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
    # then the configs shipped with healtrl.
    config_dirs = [os.path.dirname(os.path.abspath(resolved.config_path))] if resolved.config_path else []
    config_dirs.append(os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs"))
    rows = {}
    for role, name, config, split, num_samples in datasets_to_check(resolved):
        label = f"data ({role})"
        data_seed = seed if role in ("train", "eval") else args.seed
        try:
            rows[role] = known_rows(name, config, split, num_samples, data_seed)
        except Exception:  # the data check below reports what cannot be read
            rows[role] = None
        try:
            sample, how = sample_dataset(name, config, split, num_samples, seed, config_dirs, report)
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

    steps_per_generation = _geometry(resolved, num_processes, report, rows)
    if steps_per_generation is not None:
        for warning in on_policy_equivalences(resolved, steps_per_generation):
            report.add("equivalent", f"warning: {warning}")
    _dry_run_hygiene(resolved, report, seed)
    use_vllm = report.replaced.get("use_vllm", args.use_vllm)
    generation = f"vLLM ({format_value(args.vllm_mode)} mode)" if use_vllm else "transformers generate"
    report.add(
        "rollouts",
        f"{generation}; max_completion_length {args.max_completion_length}, temperature {args.temperature:g}, "
        f"top_p {args.top_p:g}, lr {args.learning_rate:g} ({format_value(args.lr_scheduler_type)}), seed {args.seed}",
    )
    shown = [f"{name}={format_value(getattr(args, name))}" for name in method_fields(config_cls, args, resolved.values)]
    report.add("method", ", ".join(shown) or "none: TRL's GRPO")
    always = ("loss_type", "beta", "epsilon", "epsilon_high", "num_iterations")
    trl_shown = [k for k in TRL_METHOD_FIELDS if hasattr(args, k) and (k in always or k in resolved.values)]
    report.add("TRL loss", ", ".join(f"{k}={format_value(getattr(args, k))}" for k in trl_shown))
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
    from healtrl.recipes.checks import recipe_problems

    # the fields were validated by ScriptArguments
    recipe_lines, recipe_issues = recipe_problems(script_args, args, model=model_args.model_name_or_path)
    for line in recipe_lines:
        label, _, text = line.partition(": ")
        report.add(label, text)
    report.problems.extend(recipe_issues)
    _dry_run_resume(args, report)
    report.add(
        "output",
        f"{args.output_dir} (report_to {format_value(report.replaced.get('report_to', args.report_to))}, "
        f"save_strategy {format_value(args.save_strategy)}, "
        f"logging_steps {args.logging_steps:g})",
    )

    print(report.render(f"Dry run of {source}: nothing is downloaded or trained."), file=file)
    if report.problems:
        for problem in report.problems:
            print_error(problem)
        print(f"\nDry run FAILED: {len(report.problems)} problem(s), listed on stderr.", file=file)
        return 2
    print("\nDry run OK: the config is valid.", file=file)
    return 0
