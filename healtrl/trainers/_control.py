"""Shared plumbing of healtrl's entropy controllers (AER, Pos-Adv-Reweight, the Cov baselines).

- Controller cadence (`controller_update`): the AER and Pos-Adv-Reweight papers train with verl, whose workflow is one
  *iteration* per rollout batch: generate, then take one or more optimizer steps on mini-batches of it, then update the
  controller once (AER, arXiv:2510.10959, §4.2 "Workflow of AER", (i)-(iv); PosAdv (arXiv:2511.05993) §7.3, "training
  step k"). In TRL a rollout (generation) batch spans `steps_per_generation * num_iterations` micro-batches, i.e.
  `steps_per_generation * num_iterations / gradient_accumulation_steps` optimizer steps (4 in the AER and PosAdv
  paper configs). With `controller_update: rollout_batch` (the default) the controller moves once, after the last
  optimizer step of each rollout batch; with `optimizer_step` it moves after every optimizer step.
- The entropy H_t handed to the controller: the entropy of every training micro-batch's loss forward (the policy
  being updated, with the batch's tokens) over the whole window (the rollout batch, all its optimizer steps and all
  `num_iterations` passes, or the one optimizer step), over all processes, averaged either per token (the sum of the
  token entropies over the number of tokens) or per sequence (the sum of the per-sequence mean token entropies over
  the number of sequences with at least one token), as the `measure` given to `init_entropy_control` says. Identical on
  every rank.
- How it travels, in one accumulator: the method's lever calls `record_entropy(batch)` on every training micro-batch,
  which adds the micro-batch's [sum, count], summed over all processes, to the window (`_entropy_window`); after
  each optimizer step the base calls `optimizer_step_end`, where the mixin, at the end of a window (every step, or the
  step that ends the rollout batch: `at_rollout_boundary`), calls `update_controller(sum / count)` and empties the
  window. A method's controller therefore reads H_t as the argument of `update_controller`, and nothing else.
- Resume in the middle of a rollout batch: the checkpointed method state holds the partial window (`window_entropy`:
  [sum, count] over all processes, or null at a window's start); TRL's micro-batch count and each process's part of
  an unfinished rollout batch are checkpointed for every healtrl trainer (`TRLBoundary._save_checkpoint`,
  `_trl/checkpoint.py`), so that the resumed run takes the same updates as an uninterrupted one.
- Reproducible random streams (`RandomStreamMixin`, apart from the entropy control: the `grpo` trainer's Clip-Cov
  draws random tokens without following the entropy): a fresh `torch.Generator` per call, seeded from (seed, process,
  call counter); the counter is part of the checkpointed method state, so a resumed run draws what an uninterrupted
  run would.

Each mixin adds its own part to the checkpointed state: its `method_state` / `load_method_state` chain through
`super()`, so a trainer's own `method_state` returns `{<its own entries>, **super().method_state()}` and its
`load_method_state` calls `super().load_method_state(state)` first. The public routines here (`init_entropy_control`,
`record_entropy`, `update_controller`, `next_generator`) are part of the method contract (`contract.py`).
"""

from __future__ import annotations

from typing import Any

import torch

from ..functional.aer import sequence_entropies
from .base import ROLLOUT_BUFFER_FILE  # noqa: F401  (re-exported: the file name of the per-process rollout buffers)
from .contract import generate_every

CONTROLLER_UPDATES = ("rollout_batch", "optimizer_step")
ENTROPY_MEASURES = ("token", "sequence")


def check_controller_update(args, field_name: str = "controller_update", active: bool = True) -> None:
    """Check a config's controller cadence against its batch layout. Call after `GRPOConfig.__post_init__` (it fills
    `steps_per_generation`); the value itself is one of the field's `choices`, checked by `base.check_choices`.

    `active`: whether a controller of this config runs (e.g. PosAdv's entropy schedule); the cadence is checked against
    the batch layout only then.
    """
    value = getattr(args, field_name)
    if not active or value != "rollout_batch":
        return
    micro_steps = generate_every(args.steps_per_generation, args.num_iterations)
    accum = args.gradient_accumulation_steps
    if micro_steps % accum != 0:
        raise ValueError(
            f"{field_name}: rollout_batch needs every rollout batch to span whole optimizer steps, i.e. "
            f"steps_per_generation * num_iterations ({args.steps_per_generation} * {args.num_iterations} = "
            f"{micro_steps}) must be a multiple of gradient_accumulation_steps ({accum}). Set steps_per_generation "
            f"to a multiple of gradient_accumulation_steps, or {field_name}: optimizer_step."
        )


class EntropyControlMixin:
    """Mixin for `EntropyGRPOTrainer` subclasses whose coefficients follow the global entropy (see the module doc).

    A trainer calls `init_entropy_control(update, measure)` in its constructor, `record_entropy(batch)` from a lever on
    every training micro-batch (it adds to the controller's window), and overrides `update_controller(entropy)`, which
    the mixin calls with H_t at the end of each window (from the base's step-end hook `optimizer_step_end`). The
    partial window is checkpointed through `method_state`, which chains through `super()`.
    """

    def init_entropy_control(self, update: str = "optimizer_step", measure: str = "token") -> None:
        """Start following the global entropy: `update` is the controller's cadence, `measure` how H_t averages."""
        if update not in CONTROLLER_UPDATES:
            raise ValueError(f"controller_update must be one of {', '.join(CONTROLLER_UPDATES)}; got {update!r}.")
        if measure not in ENTROPY_MEASURES:
            raise ValueError(f"The entropy measure must be one of {', '.join(ENTROPY_MEASURES)}; got {measure!r}.")
        self._controller_update = update
        self._entropy_measure = measure
        #: The window's [sum, count] over all processes (float64), None before its first micro-batch.
        self._entropy_window: torch.Tensor | None = None

    # -- global entropy of a window ---------------------------------------------------------------------------------
    def record_entropy(self, batch) -> None:
        """Add one training micro-batch's entropy sum and count (tokens or sequences), over all processes, to the
        controller's window."""
        if batch.mode != "train":
            return
        entropies = batch.entropies.detach()
        mask = batch.mask.to(entropies.dtype)
        if self._entropy_measure == "sequence":
            counted = mask.sum(-1) > 0  # a response without loss tokens has no entropy to measure
            per_seq = sequence_entropies(entropies, mask)  # AER eq. 4
            stats = torch.stack([(per_seq * counted).sum(), counted.sum().to(per_seq.dtype)])
        else:
            stats = torch.stack([(entropies * mask).sum(), mask.sum()])
        stats = stats.double()
        if self.accelerator.num_processes > 1:
            stats = self.accelerator.reduce(stats, reduction="sum")  # every process records every micro-batch
        self._entropy_window = stats if self._entropy_window is None else self._entropy_window + stats

    def optimizer_step_end(self, step_stats: dict[str, torch.Tensor]) -> None:
        super().optimizer_step_end(step_stats)
        if self._controller_update == "rollout_batch" and not self.at_rollout_boundary():
            if self._entropy_window is None:  # a step whose loss forwards never ran: the window has begun
                self._entropy_window = torch.zeros(2, dtype=torch.float64, device=self.accelerator.device)
            return  # the rollout batch has optimizer steps left
        window, self._entropy_window = self._entropy_window, None
        if window is None or float(window[1]) <= 0:
            return  # no entropy was measured in the window
        self.update_controller(float(window[0]) / float(window[1]))

    def update_controller(self, entropy: float) -> None:
        """Update the controller from H_t, the global entropy of the window that just ended (see the module doc)."""

    # -- checkpoint / resume -------------------------------------------------------------------------------------------
    def method_state(self) -> dict[str, Any]:
        """The state of the classes after this one in the MRO, plus the partial entropy window (JSON)."""
        window = self._entropy_window
        return {**super().method_state(), "window_entropy": None if window is None else window.tolist()}

    def load_method_state(self, state: dict[str, Any]) -> None:
        super().load_method_state(state)
        window = state.get("window_entropy")
        self._entropy_window = (
            None
            if window is None
            else torch.tensor([float(window[0]), float(window[1])], dtype=torch.float64, device=self.accelerator.device)
        )


class RandomStreamMixin:
    """Mixin for `EntropyGRPOTrainer` subclasses that draw random numbers in a lever (Rand-Pos-Clip, Clip-Cov): the
    draws are reproducible under `args.seed`, per process, and across resumes: the call counter is checkpointed
    through `method_state`, which chains through `super()`."""

    _rng_calls = 0

    def next_generator(self) -> torch.Generator:
        """A generator for one random draw, reproducible under `args.seed` and across resumes."""
        gen = torch.Generator(device="cpu")
        rank = self.accelerator.process_index
        gen.manual_seed((int(self.args.seed) * 1_000_003 + rank * 7_919 + self._rng_calls * 104_729) % (2**63 - 1))
        self._rng_calls += 1
        return gen

    def method_state(self) -> dict[str, Any]:
        """The state of the classes after this one in the MRO, plus the call counter (JSON)."""
        return {**super().method_state(), "rng_calls": self._rng_calls}

    def load_method_state(self, state: dict[str, Any]) -> None:
        super().load_method_state(state)
        self._rng_calls = int(state.get("rng_calls", 0))
