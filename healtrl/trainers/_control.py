"""Shared plumbing of healtrl's entropy controllers (AER, Pos-Adv-Reweight, the Cov baselines).

- The global policy entropy of each optimizer step: the token-weighted mean of the per-token entropies of the loss
  forwards of every micro-batch of the step, summed over micro-batches and reduced over processes (identical on every
  rank), handed to `after_optimizer_step(entropy)` once the optimizer has stepped.
- Reproducible random streams: a fresh `torch.Generator` per call, seeded from (seed, process, call counter); the
  counter is part of the checkpointed method state, so a resumed run draws what an uninterrupted run would.
"""

from __future__ import annotations

import weakref

import torch
from transformers import TrainerCallback


class _StepEndCallback(TrainerCallback):
    """Calls the trainer's `_end_optimizer_step` after every optimizer step (before logging and checkpointing)."""

    def __init__(self, trainer):
        self._trainer = weakref.ref(trainer)

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self._trainer()
        if trainer is not None:
            trainer._end_optimizer_step()


class EntropyControlMixin:
    """Mixin for `EntropyGRPOTrainer` subclasses whose coefficients follow the global entropy of each step."""

    def _init_control(self) -> None:
        self._step_entropy_stats: torch.Tensor | None = None
        self._rng_calls = 0
        self.add_callback(_StepEndCallback(self))

    # -- global entropy of a step ---------------------------------------------------------------------------------
    def _record_entropy(self, batch) -> None:
        """Accumulate the entropy sum and token count of one training micro-batch."""
        if batch.mode != "train":
            return
        mask = batch.mask.to(batch.entropies.dtype)
        stats = torch.stack([(batch.entropies.detach() * mask).sum(), mask.sum()]).double()
        self._step_entropy_stats = stats if self._step_entropy_stats is None else self._step_entropy_stats + stats

    def _end_optimizer_step(self) -> None:
        stats = self._step_entropy_stats
        if stats is None:  # e.g. a step whose loss forwards never ran (should not happen in training)
            stats = torch.zeros(2, dtype=torch.float64)
        stats = stats.to(self.accelerator.device)
        total = self.accelerator.reduce(stats, reduction="sum") if self.accelerator.num_processes > 1 else stats
        self._step_entropy_stats = None
        if total[1] <= 0:
            return
        self.after_optimizer_step(float(total[0] / total[1]))

    def after_optimizer_step(self, entropy: float) -> None:
        """Update the controller from the global entropy of the step that just ended."""

    # -- reproducible randomness -------------------------------------------------------------------------------------
    def _next_generator(self) -> torch.Generator:
        """A generator for one random draw, reproducible under `args.seed` and across resumes."""
        gen = torch.Generator(device="cpu")
        rank = self.accelerator.process_index
        gen.manual_seed((int(self.args.seed) * 1_000_003 + rank * 7_919 + self._rng_calls * 104_729) % (2**63 - 1))
        self._rng_calls += 1
        return gen
