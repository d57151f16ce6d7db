"""Trainers of healtrl and the registry that `train.py` selects them from by name."""

from __future__ import annotations

from .base import EntropyGRPOConfig, EntropyGRPOTrainer, LossBatch, RolloutBatch

# name -> (trainer class, config class). Method trainers register here as they land.
TRAINERS: dict[str, tuple[type, type]] = {
    "grpo": (EntropyGRPOTrainer, EntropyGRPOConfig),
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


__all__ = ["TRAINERS", "EntropyGRPOConfig", "EntropyGRPOTrainer", "LossBatch", "RolloutBatch", "get_trainer_classes"]
