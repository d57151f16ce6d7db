"""Trainers of healtrl and the registry that `train.py` selects them from by name.

What it holds: the base trainer (`base.py`, the levers), the method contract (`contract.py`), one file per method
(`heal.py`, `aer.py`, `posadv.py`, `opefo.py`, `baselines.py`), the TRL boundary (`_trl/`) and the registry below.
What it may import: every layer below it (data, tasks, rewards, recipes, models, the card, checkpoints, the
entropy views and curves, functional, kernels, utils), never the evaluation, the selection or the command line
(`pyproject.toml`'s import contract).
"""

from __future__ import annotations

from .aer import AERConfig, AERTrainer
from .base import EntropyGRPOConfig, EntropyGRPOTrainer, LossBatch, RolloutBatch
from .baselines import GRPOBaselineConfig, GRPOBaselineTrainer
from .heal import HEALConfig, HEALTrainer
from .opefo import OPEFOConfig, OPEFOTrainer
from .posadv import PosAdvConfig, PosAdvTrainer

# name -> (trainer class, config class). `grpo` is TRL's GRPO plus the entropy baselines the papers compare against
# (Clip-Cov, KL-Cov, Entropy-Adv); with `entropy_method: none` it is EntropyGRPOTrainer, i.e. TRL's GRPO.
# A method defined outside this package is added with `register_trainer` (ARCHITECTURE.md, "Adding a method").
TRAINERS: dict[str, tuple[type, type]] = {
    "grpo": (GRPOBaselineTrainer, GRPOBaselineConfig),
    "heal": (HEALTrainer, HEALConfig),
    "aer": (AERTrainer, AERConfig),
    "posadv": (PosAdvTrainer, PosAdvConfig),
    "opefo": (OPEFOTrainer, OPEFOConfig),
}


def register_trainer(name: str, trainer_cls: type, config_cls: type) -> None:
    """Add a method to `TRAINERS` under `name`, so that `trainer: <name>` selects it in a config and every list of
    methods derived from the registry (the dry run, the tests' scans of method files, the shipped help texts' check)
    sees it.

    Checked: `name` is an identifier not registered yet; `trainer_cls` is a subclass of
    `EntropyGRPOTrainer` and `config_cls` of `EntropyGRPOConfig`; `trainer_cls.config_class` is `config_cls` (the
    config the trainer builds when given `args=None`, and the one `healtrl study --trainer` builds for it).

    Raises:
        ValueError: any of the checks fails; the registry is left unchanged.
    """
    if not isinstance(name, str) or not name.isidentifier():
        raise ValueError(
            f"register_trainer: the name must be an identifier (`trainer: <name>` in a config), got {name!r}."
        )
    if name in TRAINERS:
        raise ValueError(
            f"register_trainer: '{name}' is registered already ({TRAINERS[name][0].__name__}); choose another name."
        )
    if not (isinstance(trainer_cls, type) and issubclass(trainer_cls, EntropyGRPOTrainer)):
        raise ValueError(f"register_trainer('{name}'): {trainer_cls!r} is not a subclass of EntropyGRPOTrainer.")
    if not (isinstance(config_cls, type) and issubclass(config_cls, EntropyGRPOConfig)):
        raise ValueError(f"register_trainer('{name}'): {config_cls!r} is not a subclass of EntropyGRPOConfig.")
    declared = getattr(trainer_cls, "config_class", None)
    if declared is not config_cls:
        raise ValueError(
            f"register_trainer('{name}'): {trainer_cls.__name__}.config_class is "
            f"{getattr(declared, '__name__', declared)}, not {config_cls.__name__}; set `config_class = "
            f"{config_cls.__name__}` in the trainer class."
        )
    TRAINERS[name] = (trainer_cls, config_cls)


def get_trainer_classes(name: str) -> tuple[type, type]:
    """The (trainer, config) classes registered under `name`; a clear error listing the choices otherwise."""
    try:
        return TRAINERS[name]
    except KeyError:
        import difflib

        close = difflib.get_close_matches(str(name), TRAINERS, n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(
            f"Unknown trainer '{name}'. Available trainers: {', '.join(sorted(TRAINERS))}.{hint} Set `trainer:` in "
            "the config to one of them."
        ) from None


# ----------------------------------------------------------------------------------------------------------------
# What the command line needs to know about each trainer. It lives here, next to the registry, so that the dry run
# and the run's data checks (healtrl.cli) work for any registered trainer without naming one (tests/test_dry_run.py
# checks that they do not).
# ----------------------------------------------------------------------------------------------------------------
def added_datasets(trainer_args, exclude=()) -> list[tuple[str, str, str | None, str, int | None]]:
    """The datasets a trainer loads besides the training and evaluation data, as `(role, name, config, split,
    num_samples)`.

    A trainer declares one by a config field `<role>_dataset_name` (HEAL's `general_dataset_name`), read with
    `<role>_dataset_config`, `<role>_dataset_split` (default "train") and `num_<role>_samples` beside it when the
    config has them. Only set fields count; `exclude` names fields that are not the trainer's own (the script
    arguments' `eval_dataset_name`, should a config class define it too).
    """
    import dataclasses

    out = []
    for f in dataclasses.fields(trainer_args):
        if not f.name.endswith("dataset_name") or f.name in exclude or not getattr(trainer_args, f.name):
            continue
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


def method_fields(config_cls: type, trainer_args, set_keys=()) -> list[str]:
    """The fields of `config_cls` (beyond TRL's `GRPOConfig`) that describe the run's method, in field order.

    A method trainer's own fields (those its config adds to `EntropyGRPOConfig`) always count. The baseline trainer's
    own fields are the options of its `entropy_method`, so only `entropy_method` and the chosen method's
    `<method>_...` fields count, and only when a method is chosen. Any other healtrl field counts when `set_keys`
    (the keys the config set explicitly) holds it.
    """
    import dataclasses

    from trl import GRPOConfig

    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    shared = {f.name for f in dataclasses.fields(EntropyGRPOConfig)}
    options_only = issubclass(config_cls, GRPOBaselineConfig)
    chosen = getattr(trainer_args, "entropy_method", None)
    shown = []
    for f in dataclasses.fields(config_cls):
        if not f.init or f.name in trl_fields:
            continue
        own = f.name not in shared and not options_only
        option = chosen not in (None, "none") and (f.name == "entropy_method" or f.name.startswith(f"{chosen}_"))
        if own or option or f.name in set_keys:
            shown.append(f.name)
    return shown


def on_policy_inert(trainer_args) -> list[str]:
    """What a trainer's own settings lose with one update per rollout batch (the importance ratio is 1, logp_old =
    logp): a config class lists them by a method `on_policy_inert()` returning one text per setting; none when it has
    no such method. TRL's own ratio settings (epsilon_high, delta) are the dry run's to check."""
    method = getattr(trainer_args, "on_policy_inert", None)
    return list(method()) if callable(method) else []


__all__ = [
    "TRAINERS",
    "AERConfig",
    "AERTrainer",
    "EntropyGRPOConfig",
    "EntropyGRPOTrainer",
    "GRPOBaselineConfig",
    "GRPOBaselineTrainer",
    "HEALConfig",
    "HEALTrainer",
    "LossBatch",
    "OPEFOConfig",
    "OPEFOTrainer",
    "PosAdvConfig",
    "PosAdvTrainer",
    "RolloutBatch",
    "added_datasets",
    "get_trainer_classes",
    "method_fields",
    "on_policy_inert",
    "register_trainer",
]
