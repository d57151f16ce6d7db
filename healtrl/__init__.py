"""healtrl: reinforcement learning from verifiable rewards without entropy collapse, on top of TRL."""

from ._compat import check_trl_version

__version__ = "0.1.0.dev0"
TRL_VERSION = check_trl_version()

from .trainers import (  # noqa: E402
    TRAINERS,
    AERConfig,
    AERTrainer,
    EntropyGRPOConfig,
    EntropyGRPOTrainer,
    GRPOBaselineConfig,
    GRPOBaselineTrainer,
    LossBatch,
    OPEFOConfig,
    OPEFOTrainer,
    PosAdvConfig,
    PosAdvTrainer,
    RolloutBatch,
    get_trainer_classes,
)

__all__ = [
    "TRAINERS",
    "AERConfig",
    "AERTrainer",
    "EntropyGRPOConfig",
    "EntropyGRPOTrainer",
    "GRPOBaselineConfig",
    "GRPOBaselineTrainer",
    "LossBatch",
    "OPEFOConfig",
    "OPEFOTrainer",
    "PosAdvConfig",
    "PosAdvTrainer",
    "RolloutBatch",
    "get_trainer_classes",
    "__version__",
]
