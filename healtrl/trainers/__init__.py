"""Trainers of healtrl and the registry that `train.py` selects them from by name."""

from __future__ import annotations

from .aer import AERConfig, AERTrainer
from .base import EntropyGRPOConfig, EntropyGRPOTrainer, LossBatch, RolloutBatch
from .baselines import GRPOBaselineConfig, GRPOBaselineTrainer
from .heal import HEALConfig, HEALTrainer
from .opefo import OPEFOConfig, OPEFOTrainer
from .posadv import PosAdvConfig, PosAdvTrainer

# name -> (trainer class, config class). `grpo` is TRL's GRPO plus the entropy baselines the papers compare against
# (Clip-Cov, KL-Cov, Entropy-Adv); with `entropy_method: none` it is EntropyGRPOTrainer, i.e. TRL's GRPO.
TRAINERS: dict[str, tuple[type, type]] = {
    "grpo": (GRPOBaselineTrainer, GRPOBaselineConfig),
    "heal": (HEALTrainer, HEALConfig),
    "aer": (AERTrainer, AERConfig),
    "posadv": (PosAdvTrainer, PosAdvConfig),
    "opefo": (OPEFOTrainer, OPEFOConfig),
}


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
    "get_trainer_classes",
]
