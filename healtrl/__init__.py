"""healtrl: reinforcement learning from verifiable rewards without entropy collapse, on top of TRL.

The package by subject (ARCHITECTURE.md draws the layers): `trainers` (the four methods and the baselines on TRL's
`GRPOTrainer`), `functional` (the papers' equations), `kernels` (the fused LM head), `rewards`, `tasks`, `data`,
`toy` (the offline toy world), `evaluation`, `selection` (HEAL's data selection), `recipes` (the papers' recipes as
data), `views` (entropy pages, curves), `study` (the reasoning-world study), `cli` (the commands) and `utils`.

Importing the package is cheap: the trainers and their configs (`healtrl.trainers`, which imports TRL's trainer stack,
transformers and torch: seconds of CPU) are imported on the first access of one of their names, as TRL itself does
(PEP 562 module `__getattr__`). `healtrl --version` and every `--help` of the command line therefore answer without
importing torch (`tests/test_lazy_import.py`).

What stays at import time: the TRL version check. `check_trl_version` imports `trl`, whose own `__init__` is lazy
(about 0.2 s of CPU, no torch), so an untested TRL release is still refused at `import healtrl`, before anything else
runs, and `TRL_VERSION` holds the version found.
"""

from .utils.compat import check_trl_version
from .utils.version import __version__

TRL_VERSION = check_trl_version()

# The public names of `healtrl.trainers` (its `__all__`), listed here so that `__all__` and `dir()` need no import of
# the trainer stack. `tests/test_lazy_import.py` checks that the two lists are equal.
_TRAINER_NAMES = (
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
)

__all__ = [*_TRAINER_NAMES, "__version__"]


def __getattr__(name: str):
    """Import `healtrl.trainers` on the first access of one of its public names (or of the submodule itself), bind the
    name in this module so that later accesses skip this function, and return it. Any other name is an
    AttributeError, as for a module without `__getattr__`."""
    if name in _TRAINER_NAMES or name == "trainers":
        # Not `from . import trainers`: that form asks this module for `trainers` first, which calls this function.
        import healtrl.trainers as trainers  # binds `trainers` in this module, so this branch runs once for it

        if name == "trainers":
            return trainers
        value = getattr(trainers, name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    """The module's names, the trainers' public names among them before they are imported."""
    return sorted({*globals(), *_TRAINER_NAMES, "trainers"})
