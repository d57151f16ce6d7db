"""The study's methods: what each one is, how it is built, and the config fields it runs with in each world.

`METHODS`: method key -> (label, figure group, source, `RUN_CONFIGS` key or None, notes for the table). The source
says how the run is built (`healtrl.study.runs.make_trainer`):

- `heal_toy`: `grpo`, `hybrid`, `heal` (GRPO on the target data; target + random general prompts without EDA; target
  + the general prompts `healtrl select` ranks highest + the EDA reward), by `runs.make_heal_family_trainer`;
- `runs`: the trainer, config and toy settings of `RUN_CONFIGS[key]` (the table `benchmarks/entropy_methods.py`
  prints), trained on the same target data as `grpo`;
- `opefo`: `OPEFOTrainer` with the fields of `OPEFO_VARIANTS[method]` (the paper's defaults for `opefo`);
- `user`: a trainer given on the command line (`healtrl study --trainer module:Class`, `user_method`).

`WORLD_OVERRIDES`: config fields a method gets in one world only (the paper's protocol needs them there). The paper
regime (`PAPER_REGIME`, issue #40) runs methods with 4 optimizer steps per rollout batch. `DEFAULT_METHODS` are the
study's default set, `STUDY_METHODS` what `--pairs all` runs in both regimes; `ABLATIONS` stay opt-in.

The table is explicit (each method's label, settings and notes are chosen for the study): `unstudied_trainers()`
names a registered trainer (`healtrl.trainers.TRAINERS`) that no method here runs, and `tests/test_fifth_method.py`
fails on it; until it has an entry, `healtrl study --trainer module:Class` runs it.

Imports no trainer at import time: `trainer_runs()` resolves the classes named in `RUN_CONFIGS` on first use, so that
the command line's `--help` stays cheap.
"""

from __future__ import annotations

import hashlib
import importlib
import json
import os
import sys

# Config fields a method gets in one world only (the paper's protocol needs them there). Clip-Higher acts only on
# off-policy updates: in the reasoning world it takes DAPO's several optimizer steps per rollout batch, so that the
# entropy flow of upper- / lower-clipped tokens (OPEFO Fig. 2) exists; in the add world it stays on-policy as before.
WORLD_OVERRIDES = {"countdown": {"clip_higher": {"steps_per_generation": 4}}}
# The paper regime of PosAdv's Figure 5 (App. E.2: full data, 4 optimizer steps per rollout batch) and AER's update
# count (Table 3), issue #40: method key -> (the RUN_CONFIGS key, label, notes). Each runs with
# steps_per_generation 4 (one rollout batch of 64 prompts x 8 consumed in 4 optimizer steps); opt-in, countdown only.
N4 = {"steps_per_generation": 4}
PAPER_REGIME = {
    "grpo_n4": ("grpo", "GRPO, 4 updates/batch", "TRL GRPO, eps 0.2"),
    "posadv_n4": ("posadv_entropy", "PosAdv (entropy-guided), 4 updates/batch", "delta 0.2, Delta 0.05, lambda_0 0"),
    "neg_only_n4": ("neg_only", "A<0 tokens only, 4 updates/batch", "PosAdv's ablation, lambda = 0"),
    "pos_only_n4": ("pos_only", "A>0 tokens only, 4 updates/batch", "PosAdv's other ablation"),
    "kl_cov_paper": ("kl_cov_paper", "KL-Cov (paper k), 4 updates/batch", "kl_cov_ratio 0.002, coef 1, no clip"),
    "clip_cov_n4": ("clip_cov", "Clip-Cov, 4 updates/batch", "ratio 2e-4, cov in (1, 5), clip ratios 1"),
    "rand_pos_clip_n4": ("rand_pos_clip", "Rand-Pos-Clip, 4 updates/batch", "schedule rand_pos_clip, ratio 2e-4"),
    "entropy_adv_n4": ("entropy_adv", "Entropy-Adv, 4 updates/batch", "alpha 0.4, kappa 2"),
    "kl_cov_n4_k02": ("kl_cov_k02", "KL-Cov (k 0.02), 4 updates/batch", "deviation: kl_cov_ratio 0.02, no clip"),
    "aer_n4": ("aer", "AER, 4 updates/batch", "paper defaults, alpha updated once per rollout batch"),
}
WORLD_OVERRIDES["countdown"].update({name: dict(N4) for name in PAPER_REGIME})

# name -> (label, figure group, source, RUN_CONFIGS key or None, notes for the table).
# source "heal_toy": built by runs.make_heal_family_trainer; "runs": trainer/config/overrides of RUN_CONFIGS.
METHODS: dict[str, tuple[str, str, str, str | None, str]] = {
    "grpo": ("GRPO", "HEAL", "heal_toy", None, "TRL GRPO, target data only"),
    "hybrid": ("Hybrid", "HEAL", "heal_toy", None, "target + 32 random general prompts, shuffled, no EDA"),
    "heal": (
        "HEAL",
        "HEAL",
        "heal_toy",
        None,
        "target + top-32 general by uncertainty x diversity (8 rollouts/question) + EDA (KL, paper mode)",
    ),
    "aer": ("AER", "entropy control", "runs", "aer", "paper defaults: tau 0.4, rho 0.2, eta 0.005, alpha_0 0"),
    "posadv": (
        "PosAdv (entropy-guided)",
        "entropy control",
        "runs",
        "posadv_entropy",
        "entropy-guided lambda: delta 0.2, Delta 0.05, lambda_0 0",
    ),
    "neg_only": (
        "A<0 tokens only",
        "entropy control",
        "runs",
        "neg_only",
        "PosAdv's ablation (lambda = 0 throughout): the entropy-guided schedule's premise is that this raises entropy",
    ),
    "pos_only": ("A>0 tokens only", "entropy control", "runs", "pos_only", "PosAdv's other ablation"),
    "rand_pos_clip": (
        "Rand-Pos-Clip",
        "entropy control",
        "runs",
        "rand_pos_clip",
        "PosAdv's random baseline (arXiv:2511.05993, Fig. 5): schedule rand_pos_clip, ratio 2e-4 "
        "(entropy_methods.RUNS)",
    ),
    "opefo": (
        "OPEFO",
        "entropy control",
        "opefo",
        None,
        "strict on-policy (1 update per rollout batch, ratio 1, clipping inert), eq. 6 estimator, adaptive lambda*; "
        "lr decays linearly like every run here (opefo_toy.md: constant)",
    ),
    # OPEFO's variants (opt-in; the diagnosis of OPEFO in the reasoning world): OPEFOConfig fields in OPEFO_VARIANTS
    "opefo_exact": ("OPEFO, exact estimator", "entropy control", "opefo", None, "entropy_change_estimator exact"),
    "opefo_static": ("OPEFO, static lambda", "entropy control", "opefo", None, "Table 2: lambda fixed at 0.001"),
    "opefo_pos": ("OPEFO, S+ only", "entropy control", "opefo", None, "Table 2: lambda* rescales S+ tokens only"),
    "opefo_neg": ("OPEFO, S- only", "entropy control", "opefo", None, "Table 2: lambda* rescales S- tokens only"),
    "entropy_loss": ("Entropy loss", "TRL baselines", "runs", "entropy_loss", "TRL entropy_coef 0.01"),
    "adaptive_entropy": (
        "Adaptive entropy",
        "TRL baselines",
        "runs",
        "skywork_adaptive",
        "TRL use_adaptive_entropy (Skywork-OR1): target 0.2, delta 1e-4, coef in [0, 0.005]",
    ),
    "clip_higher": (
        "Clip-Higher",
        "TRL baselines",
        "runs",
        "clip_higher",
        "eps 0.2 / 0.28; with 1 update per batch the ratio is 1, so clipping never acts (same as GRPO)",
    ),
    "80_20": ("80/20", "TRL baselines", "runs", "80_20", "TRL top_entropy_quantile 0.2 (top-20% entropy tokens)"),
    "clip_cov": (
        "Clip-Cov",
        "Cov baselines",
        "runs",
        "clip_cov",
        "ratio 2e-4 (>= 1 token/step), cov in (1, 5), clip ratios 1",
    ),
    "kl_cov": (
        "KL-Cov",
        "Cov baselines",
        "runs",
        "kl_cov",
        "ratio 0.02 (2e-3 selects 0 of ~250 toy tokens), 2 updates per rollout batch (on-policy the KL term is 0), "
        "no clip; steps are optimizer steps, so it sees half as many rollout batches",
    ),
    "entropy_adv": ("Entropy-Adv", "Cov baselines", "runs", "entropy_adv", "alpha 0.4, kappa 2"),
    **{
        name: (label, "paper regime", "runs", key, notes + "; full data, 4 optimizer steps per rollout batch")
        for name, (key, label, notes) in PAPER_REGIME.items()
    },
}
USER_GROUP = "your trainer"  # the figure group of a trainer given with `--trainer`
GROUPS = ("HEAL", "entropy control", "TRL baselines", "Cov baselines", "paper regime", USER_GROUP)
# OPEFOConfig fields of each OPEFO method (the paper's defaults for "opefo")
OPEFO_VARIANTS = {
    "opefo": {},
    "opefo_exact": {"entropy_change_estimator": "exact"},
    "opefo_static": {"lambda_mode": "static"},
    "opefo_pos": {"balance_sides": "pos"},
    "opefo_neg": {"balance_sides": "neg"},
}
ABLATIONS = ("neg_only", "pos_only", "rand_pos_clip", *(m for m in OPEFO_VARIANTS if m != "opefo"), *PAPER_REGIME)
DEFAULT_METHODS = [m for m in METHODS if m not in ABLATIONS]
# `--pairs all`: every trainer and every baseline its paper compares against (Rand-Pos-Clip is PosAdv's Fig. 5
# baseline), in both regimes; the claims' pairs add PosAdv's two ablations (few-shot). OPEFO's variants stay opt-in.
STUDY_METHODS = [*DEFAULT_METHODS, "rand_pos_clip"]

# The entropy methods' runs on the toy world: name -> (trainer class, config class, config fields, note), the classes
# named as `healtrl.trainers` exports them (`trainer_runs` resolves them).
RUN_CONFIGS: dict[str, tuple[str, str, dict, str]] = {
    "grpo": ("EntropyGRPOTrainer", "EntropyGRPOConfig", {}, "TRL GRPO"),
    "aer": ("AERTrainer", "AERConfig", {}, "tau 0.4, rho 0.2, eta 0.005, alpha_0 0"),
    "aer_fast": ("AERTrainer", "AERConfig", {"alpha_init": 0.01, "eta": 0.02}, "toy-tuned: alpha_0 0.01, eta 0.02"),
    "posadv_entropy": ("PosAdvTrainer", "PosAdvConfig", {"schedule": "entropy"}, "delta 0.2, Delta 0.05, lambda_0 0"),
    "posadv_stage": ("PosAdvTrainer", "PosAdvConfig", {"schedule": "stage"}, ""),
    "posadv_epoch": ("PosAdvTrainer", "PosAdvConfig", {"schedule": "epoch"}, "100 steps per epoch"),
    "pos_only": ("PosAdvTrainer", "PosAdvConfig", {"schedule": "positive_only"}, "A>0 tokens only"),
    "neg_only": ("PosAdvTrainer", "PosAdvConfig", {"schedule": "negative_only"}, "A<0 tokens only"),
    "rand_pos_clip": ("PosAdvTrainer", "PosAdvConfig", {"schedule": "rand_pos_clip"}, "ratio 2e-4 (1 token/step)"),
    "clip_cov": (
        "GRPOBaselineTrainer",
        "GRPOBaselineConfig",
        {"entropy_method": "clip_cov", "epsilon": 1.0, "epsilon_high": 1.0},
        "ratio 2e-4, cov in (1, 5), clip 1",
    ),
    "kl_cov": (
        "GRPOBaselineTrainer",
        "GRPOBaselineConfig",
        {"entropy_method": "kl_cov", "kl_cov_ratio": 0.02, "num_iterations": 2, "epsilon": 1e4, "epsilon_high": 1e4},
        "ratio 0.02 (2e-3 selects 0 of ~250 tokens), 2 updates/batch, no clip",
    ),
    # KL-Cov at the paper's k (Cui et al. 2025, Table 5: kl_cov_ratio 0.002, coefficient 1) and without ratio
    # clipping; the off-policy updates that make its KL term non-zero come from the caller (steps_per_generation).
    "kl_cov_paper": (
        "GRPOBaselineTrainer",
        "GRPOBaselineConfig",
        {"entropy_method": "kl_cov", "kl_cov_ratio": 0.002, "epsilon": 1e4, "epsilon_high": 1e4},
        "ratio 0.002 (paper), no clip",
    ),
    "kl_cov_k02": (
        "GRPOBaselineTrainer",
        "GRPOBaselineConfig",
        {"entropy_method": "kl_cov", "kl_cov_ratio": 0.02, "epsilon": 1e4, "epsilon_high": 1e4},
        "ratio 0.02, no clip",
    ),
    "entropy_adv": (
        "GRPOBaselineTrainer",
        "GRPOBaselineConfig",
        {"entropy_method": "entropy_adv"},
        "alpha 0.4, kappa 2",
    ),
    "entropy_loss": ("EntropyGRPOTrainer", "EntropyGRPOConfig", {"entropy_coef": 0.01}, "TRL entropy_coef 0.01"),
    "skywork_adaptive": (
        "EntropyGRPOTrainer",
        "EntropyGRPOConfig",
        {
            "use_adaptive_entropy": True,
            "entropy_target": 0.2,
            "entropy_coef": 0.0,
            "entropy_coef_delta": 1e-4,
            "entropy_coef_min": 0.0,
            "entropy_coef_max": 0.005,
        },
        "target 0.2, delta 1e-4, max 0.005",
    ),
    "clip_higher": ("EntropyGRPOTrainer", "EntropyGRPOConfig", {"epsilon_high": 0.28}, "eps 0.2 / 0.28"),
    "80_20": ("EntropyGRPOTrainer", "EntropyGRPOConfig", {"top_entropy_quantile": 0.2}, "top 20% entropy tokens"),
}


def trainer_runs() -> dict[str, tuple[type, type, dict, str]]:
    """`RUN_CONFIGS` with the classes imported: name -> (trainer class, config class, config fields, note). The
    fields are copies, so a caller may change them."""
    import healtrl.trainers as trainers

    return {
        name: (getattr(trainers, trainer), getattr(trainers, config), dict(fields), note)
        for name, (trainer, config, fields, note) in RUN_CONFIGS.items()
    }


# The trainers the study's sources other than `runs` build (`runs.make_trainer`, `runs.make_heal_family_trainer`):
# source -> the trainer classes, named as `healtrl.trainers` exports them.
SOURCE_TRAINERS = {"heal_toy": ("EntropyGRPOTrainer", "HEALTrainer"), "opefo": ("OPEFOTrainer",)}


def studied_trainers() -> dict[str, list[str]]:
    """Trainer class name -> the study methods (`METHODS`, a user's trainer left out) that run it."""
    found: dict[str, list[str]] = {}
    for method, (_, _, source, runs_key, _) in METHODS.items():
        if source == "user":
            continue
        names = (RUN_CONFIGS[runs_key][0],) if source == "runs" else SOURCE_TRAINERS[source]
        for name in names:
            found.setdefault(name, []).append(method)
    return found


def unstudied_trainers(registry: dict | None = None) -> list[str]:
    """The registered trainers (`healtrl.trainers.TRAINERS`, or `registry`) that no study method runs: a method
    registered without a `METHODS` entry (and its `RUN_CONFIGS` settings) is named here, and
    `tests/test_fifth_method.py` fails on it. `healtrl study --trainer module:Class` runs such a trainer meanwhile."""
    if registry is None:
        from healtrl.trainers import TRAINERS as registry
    studied = studied_trainers()
    return sorted(name for name, (trainer, _) in registry.items() if trainer.__name__ not in studied)


def notes(method: str, task: str) -> str:
    """The table's notes for `method`: its METHODS notes, or the world's overrides where it has some."""
    overrides = WORLD_OVERRIDES.get(task, {}).get(method)
    if overrides:
        fields = ", ".join(f"{k} {v}" for k, v in overrides.items())
        return f"in this world: {fields} (so the importance ratio departs from 1 and clipping acts)"
    return METHODS[method][4]


# ---------------------------------------------------------------------------------------------------------------------
# A user's trainer (`healtrl study --trainer module:Class --config fields.yaml`)
# ---------------------------------------------------------------------------------------------------------------------
def load_trainer_class(spec: str) -> type:
    """The class `spec` names (`package.module:Class`), imported with the current folder on `sys.path` (as
    `python -m` has it), checked to be a healtrl trainer: a subclass of `EntropyGRPOTrainer` with a `config_class`.

    Raises:
        ValueError: `spec` is not `module:Class`, the module or class is missing, or the class is no healtrl trainer.
    """
    module_name, sep, class_name = spec.partition(":")
    if not sep or not module_name or not class_name:
        raise ValueError(f"--trainer {spec!r}: write MODULE:CLASS, e.g. mypkg.methods:MyTrainer.")
    if os.getcwd() not in sys.path:
        sys.path.insert(0, os.getcwd())
    try:
        module = importlib.import_module(module_name)
    except ImportError as exc:
        raise ValueError(f"--trainer {spec!r}: cannot import {module_name} ({exc}).") from None
    cls = getattr(module, class_name, None)
    if cls is None:
        raise ValueError(f"--trainer {spec!r}: {module_name} has no attribute {class_name}.")
    from healtrl.trainers import EntropyGRPOTrainer

    if not (isinstance(cls, type) and issubclass(cls, EntropyGRPOTrainer)):
        raise ValueError(f"--trainer {spec!r}: {cls!r} is not a subclass of healtrl's EntropyGRPOTrainer.")
    return cls


def read_fields(path: str | None) -> dict:
    """The config fields of a YAML file (a mapping of field -> value; nested `trainer:` keys are not read), {} when
    `path` is None."""
    if path is None:
        return {}
    import yaml

    with open(path) as f:
        fields = yaml.safe_load(f)
    if fields is None:
        return {}
    if not isinstance(fields, dict) or not all(isinstance(k, str) for k in fields):
        raise ValueError(f"--config {path}: expected a mapping of config field -> value, got {type(fields).__name__}.")
    return fields


# Config fields the study sets for every method alike (the budget, the world, the seeds and what every run logs):
# a user's `--config` may not change them, so that the user's trainer runs beside GRPO on the same terms.
STUDY_FIXED_FIELDS = frozenset(
    {
        "output_dir", "max_steps", "seed", "learning_rate", "lr_scheduler_type", "per_device_train_batch_size",
        "num_generations", "gradient_accumulation_steps", "temperature", "beta", "max_completion_length", "use_vllm",
        "use_cpu", "bf16", "logging_steps", "save_strategy", "report_to", "disable_tqdm", "dataloader_num_workers",
        "rollout_entropy", "entropy_flow_diagnostics", "steps_per_generation", "num_iterations",
    }
)  # fmt: skip


def user_method(spec: str, fields: dict) -> dict:
    """The study's description of a user's trainer: its method key (the class name and a digest of `spec`, `fields`
    and the source file of the trainer's module, so that a changed config or trainer is a new method with its own
    cached runs), label, notes, the trainer spec and the config fields, each checked to be a field of the trainer's
    `config_class` and not one the study fixes for every method (`STUDY_FIXED_FIELDS`).

    Raises:
        ValueError: as `load_trainer_class`, a field the config class does not have or the study fixes, or a trainer
            whose module's source file cannot be read (its runs could not be told apart from an edited trainer's).
    """
    import dataclasses
    import inspect

    cls = load_trainer_class(spec)
    config_cls = cls.config_class
    known = {f.name for f in dataclasses.fields(config_cls)}
    unknown = sorted(set(fields) - known)
    if unknown:
        raise ValueError(f"--config: {', '.join(unknown)} are not fields of {config_cls.__name__}.")
    fixed = sorted(set(fields) & STUDY_FIXED_FIELDS)
    if fixed:
        raise ValueError(
            f"--config: {', '.join(fixed)} are set by the study for every method alike (budget, world, seeds, "
            "logging), so that your trainer runs beside GRPO on the same terms; remove them."
        )
    try:
        with open(inspect.getfile(sys.modules[cls.__module__]), "rb") as f:
            source = hashlib.sha256(f.read()).hexdigest()
    except (OSError, TypeError, KeyError) as exc:
        raise ValueError(f"--trainer {spec!r}: cannot read its module's source file ({exc}).") from None
    key = json.dumps([spec, fields, source], sort_keys=True, default=str)
    digest = hashlib.sha256(key.encode()).hexdigest()[:8]
    described = ", ".join(f"{k} {v}" for k, v in fields.items()) or "its config's defaults"
    return {
        "key": f"{cls.__name__}-{digest}",
        "label": cls.__name__,
        "notes": f"`{spec}` ({config_cls.__name__}): {described}",
        "trainer": spec,
        "fields": dict(fields),
    }


def register_user_method(user: dict) -> str:
    """Add a user's trainer (`user_method`'s description) to `METHODS` under its key (group `USER_GROUP`, source
    `user`); returns the key. Registering the same key again is a no-op."""
    METHODS.setdefault(user["key"], (user["label"], USER_GROUP, "user", None, user["notes"]))
    return user["key"]
