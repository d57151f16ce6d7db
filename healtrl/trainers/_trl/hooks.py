"""What the TRL boundary calls and reads on the trainer: every hook with its default, and the call it is inside.

`BoundaryHooks` declares, with the default each one has, every method and attribute the boundary's overrides of TRL's
private methods call on the trainer. `EntropyGRPOTrainer` (`base.py`) and the method trainers override them; none of
them is TRL's. Reading the boundary therefore needs no other file: a hook that is not declared here is not called.
Which of them a method trainer may override, and which accessors it may read, is listed once, in
`healtrl/trainers/contract.py`; the `_`-prefixed names here are the base trainer's (`base.py` sets them), not a
method's.

`TRLCall` names the TRL call the boundary is inside, and each call has a state object (`LossCall`, `GenerationCall`;
`CallState` is either) created when the call starts and dropped when it ends: everything the boundary decides or sees
inside one call (the loss batch, the rollout statistics' plan and values, the gathered rewards) lives there, never on
the trainer between calls. The boundary states the call (`BoundaryHooks._inside`) around each TRL method it wraps, so
a forward through `_get_per_token_logps_and_entropies` knows what it is from the call it runs in, never from leftover
flags: the policy forward of `_compute_loss`, the old-log-prob pass of `_generate_and_score_completions`, or a plain
forward. `BoundaryHooks._call` points at the state of the call running now: the one piece of call state on the
trainer, because TRL calls the methods the boundary overrides inside it (`_generate`, `_calculate_rewards`, the
forwards) with TRL's own arguments, through which nothing more can be passed.
"""

from __future__ import annotations

import contextlib
import dataclasses
import enum
from dataclasses import dataclass
from typing import Any, ClassVar, Protocol

import torch

from .batches import LossBatch, RolloutBatch, RolloutStats


def generate_every(steps_per_generation: int, num_iterations: int) -> int:
    """Micro-batches (`training_step` calls) one rollout batch lasts: `steps_per_generation * num_iterations`.

    The one place healtrl computes it. TRL 1.16's `GRPOTrainer._prepare_inputs` regenerates when
    `self._step % generate_every == 0` with `generate_every = args.steps_per_generation * self.num_iterations`, and
    `_generate_and_score_completions` runs the old-log-prob pass when `gradient_accumulation_steps % generate_every`
    is not 0. A rollout batch therefore serves `generate_every / gradient_accumulation_steps` optimizer steps; that
    division is left to the caller (it need not be whole).
    """
    return steps_per_generation * num_iterations


class TRLCall(enum.Enum):
    """A TRL 1.16 method the boundary wraps, as the `call` of its state (`LossCall`, `GenerationCall`) while it runs."""

    #: `GRPOTrainer._generate_and_score_completions`: `_generate`, the old-log-prob pass (when TRL runs it), the
    #: reference forward, `_calculate_rewards`, advantages.
    GENERATE_AND_SCORE = "GRPOTrainer._generate_and_score_completions"
    #: `GRPOTrainer._compute_loss`: one policy forward, then the loss from `inputs["advantages"]`.
    LOSS = "GRPOTrainer._compute_loss"


@dataclass
class LossCall:
    """One `_compute_loss` call: created by `LossCalls._compute_loss_with_levers`, read by the policy forward."""

    call: ClassVar[TRLCall] = TRLCall.LOSS
    #: The shallow copy of the micro-batch TRL's loss reads (`inputs["advantages"]` is replaced there).
    inputs: dict[str, Any]
    #: Hold TRL's adaptive entropy update after the policy forward (`defer_trl_entropy`; `LossCalls._compute_loss`).
    defer_trl_entropy: bool = False
    #: What the policy forward produced; set once, by the only forward TRL 1.16 runs in `_compute_loss`.
    batch: LossBatch | None = None


@dataclass
class GenerationCall:
    """One `_generate_and_score_completions` call and what the boundary decided and saw inside it.

    Created by `GenerationCalls` when the call starts; `_generate` fills the request and the plan, the old-log-prob pass
    or the generation hook the captured values, `_calculate_rewards` the rewards (and the statistics when the rewards
    need them); after TRL's call the batch hooks get what it holds as arguments (`rollout_columns(rewards, ...)`,
    `finish_generation_batch(batch, stats)`).
    """

    call: ClassVar[TRLCall] = TRLCall.GENERATE_AND_SCORE
    #: Whether the method's generation-batch hooks (`rollout_columns`, `finish_generation_batch`) run after TRL's call;
    #: False for `generate_and_score`.
    batch_hooks: bool = True
    #: The rollout statistics requested for this batch (`rollout_stats_needed`, plus "entropy" on the entropy views'
    #: steps); set by `_generate`.
    stats_keys: frozenset[str] = frozenset()
    #: Where they are to come from (a key of `batches.ROLLOUT_STAT_SOURCES`), None when none were requested; set by
    #: `_generate`.
    stats_plan: str | None = None
    #: (prompt_ids, completion_ids), the token-id lists `_generate` returned.
    rollout_ids: tuple[list, list] | None = None
    #: (source, per-token values) read off the generation logits or TRL's old-log-prob pass, not yet padded; taken (and
    #: cleared) when the statistics are provided.
    captured: tuple[str, dict[str, torch.Tensor]] | None = None
    #: Whether TRL's old-log-prob pass (its first policy forward here) has run.
    old_logps_done: bool = False
    #: The rollout statistics provided (None until provided, and when none were requested); handed to
    #: `finish_generation_batch`.
    rollout_stats: RolloutStats | None = None
    #: The gathered rewards (B_global, n_reward_funcs) `_calculate_rewards` returned, for `rollout_columns`.
    gathered_rewards: torch.Tensor | None = None


#: The state of the TRL call the boundary is inside.
CallState = LossCall | GenerationCall


class Guard(Protocol):
    """The divergence guard (`_guard.DivergenceGuard`), as the boundary uses it."""

    def record(self, batch: LossBatch | None, loss: torch.Tensor) -> None: ...
    def check_weights(self, trainer) -> None: ...
    def state(self) -> dict[str, Any]: ...
    def load_state(self, state: dict[str, Any]) -> None: ...


class Inspector(Protocol):
    """The training-time entropy views (`_inspect_hooks.RolloutInspector`), as the boundary uses them."""

    def wants_entropies(self, trainer) -> bool: ...
    def on_rollouts(self, trainer, prompts, completion_ids, rewards_per_func, entropies) -> None: ...


class CheckpointFiles(Protocol):
    """healtrl's checkpoint files (`healtrl.checkpoints`), as the boundary writes and reads them; `base.py` passes them
    in (`BoundaryHooks._checkpoint_files`), so that the boundary imports nothing of healtrl outside `_trl/`."""

    #: The completion marker's file name, written last into a complete checkpoint folder.
    marker_file: str

    def write_json(self, path: str, obj: Any) -> None: ...  # atomic: a reader sees the old file or the new one
    def torch_save(self, obj: Any, path: str) -> None: ...  # atomic, as `write_json`
    def sync_folder(self, path: str) -> None: ...  # fsync the folder's entries
    def marker(self, trainer, rollout: dict[str, Any]) -> dict[str, Any]: ...  # the marker's content
    def is_complete(self, folder: str) -> bool: ...
    def read_marker(self, folder: str) -> dict[str, Any]: ...


class FlowDiagnostics(Protocol):
    """The entropy-flow diagnostics (`healtrl.diagnostics.EntropyFlowDiagnostics`), as the boundary uses them."""

    estimator: str

    def update(self, trainer, batch: LossBatch) -> None: ...


def field_default(config_class: type, name: str):
    """The default of config field `name` of `config_class` (AttributeError when it has none)."""
    for f in dataclasses.fields(config_class):
        if f.name == name:
            if f.default is not dataclasses.MISSING:
                return f.default
            if f.default_factory is not dataclasses.MISSING:
                return f.default_factory()
            break
    raise AttributeError(f"{config_class.__name__} has no field '{name}' with a default.")


class BoundaryHooks:
    """Every hook and attribute the TRL boundary uses on the trainer, with its default (no-op) behaviour.

    Class-level defaults keep TRL's paths working on an instance built without `__init__` (a test double).
    """

    # -- state the trainer sets in `__init__` -----------------------------------------------------------------------
    #: The config class; `config_value` falls back to its field defaults.
    config_class: type
    #: Reward columns filled by `augment_rewards` (set from `get_reward_augmentations`).
    _augmentation_names: tuple[str, ...] | list[str] = ()
    #: Divergence guard, or None: records each training loss, checks weights before a checkpoint, is checkpointed.
    _guard: Guard | None = None
    #: Entropy views, or None: asked whether rollout entropies are wanted, handed the rollouts of a view step.
    _inspect: Inspector | None = None
    #: Entropy-flow diagnostics, or None: updated with each `LossBatch` (estimator "exact" needs the power sums).
    _entropy_flow: FlowDiagnostics | None = None
    #: healtrl's checkpoint files (marker, atomic writes): set by `EntropyGRPOTrainer`; None refuses to save or resume.
    _checkpoint_files: CheckpointFiles | None = None
    #: Extra reward columns this trainer fills in `augment_rewards`: name -> weight in the summed reward.
    reward_augmentations: dict[str, float] = {}
    #: Hold TRL's adaptive entropy coefficient update (`use_adaptive_entropy`) until the last micro-batch of each
    #: rollout batch (the `grpo` trainer's `controller_update: rollout_batch`).
    defer_trl_entropy = False

    # -- the call the boundary is inside ------------------------------------------------------------------------------
    _call: CallState | None = None

    @contextlib.contextmanager
    def _inside(self, state: CallState):
        """State that the call of `state` runs for the duration of the block (restoring the outer call after it)."""
        outer = self._call
        self._call = state
        try:
            yield state
        finally:
            self._call = outer

    def _before_trainer_callbacks(self, args) -> None:
        """Called once during construction, after TRL's `GRPOTrainer.__init__` has checked the model, PEFT and reward
        setup and before transformers' `Trainer.__init__` builds the `report_to` callbacks. `EntropyGRPOTrainer`
        checks the optional extras of the `report_to` backends here."""

    # -- accessors: config and TRL state read by every part of the boundary, and by the methods --------------------
    def config_value(self, name: str):
        """Config field `name`: `self.args.<name>`, or the field's default in `config_class` when `self.args` lacks it
        (a plain `GRPOConfig` or a test double carrying only TRL's fields), so TRL's code paths run unchanged."""
        args = getattr(self, "args", None)
        if hasattr(args, name):
            return getattr(args, name)
        return field_default(self.config_class, name)

    @property
    def mode(self) -> str:
        """The key of TRL's metric buffer now: "train" while the model is in training mode, else "eval"."""
        return "train" if self.model.training else "eval"

    def log_metric(self, name: str, value: float | torch.Tensor) -> None:
        """Log a scalar through TRL's metric buffer (averaged per logging step, sent to every `report_to` backend)."""
        if isinstance(value, torch.Tensor):
            value = value.item()
        self._metrics[self.mode][name].append(float(value))

    @property
    def micro_steps_per_rollout_batch(self) -> int:
        """Micro-batches per rollout batch (TRL generates once every this many `training_step`s): `generate_every`."""
        return generate_every(self.args.steps_per_generation, self.num_iterations)

    def at_rollout_boundary(self) -> bool:
        """Whether the micro-batches done so far (TRL's `_step`) end a rollout batch: true after the last micro-batch
        of each rollout batch (and before the first), so read after an optimizer step it says whether that step
        ended the rollout batch."""
        return self._step % self.micro_steps_per_rollout_batch == 0

    # -- lever 1 and 2: the loss forward ----------------------------------------------------------------------------
    def shape_advantages(self, advantages: torch.Tensor, batch: LossBatch) -> torch.Tensor | None:
        """Lever 1: return per-token advantages (B, T) (or (B,)) for the loss, or None to keep TRL's."""
        return None

    def extra_loss(self, batch: LossBatch) -> torch.Tensor | None:
        """Lever 2: a scalar added to TRL's loss of one micro-batch (None for nothing).

        Return it normalised as a per-micro-batch mean; the base divides it by the gradient-accumulation steps in
        training, the same scaling TRL applies to its own loss and entropy bonus.
        """
        return None

    @property
    def needs_power_sums(self) -> bool:
        """Whether the policy forward of the loss also computes the power sums (handed over in `LossBatch`)."""
        return False

    # -- lever 3: rewards -------------------------------------------------------------------------------------------
    def get_reward_augmentations(self) -> dict[str, float]:
        """Lever 3: the augmentation columns (name -> weight) this trainer adds. Defaults to `reward_augmentations`."""
        return dict(self.reward_augmentations)

    def augment_rewards(self, rollouts: RolloutBatch) -> dict[str, torch.Tensor]:
        """Lever 3: one tensor of shape (B,) per augmentation column, B = the gathered generation batch."""
        return {}

    @property
    def needs_rollout_entropies(self) -> bool:
        """Whether `augment_rewards` receives per-token rollout entropies (`RolloutBatch.entropies`)."""
        return bool(self.config_value("rollout_entropy"))

    # -- the one request for rollout statistics ---------------------------------------------------------------------
    def rollout_stats_needed(self) -> frozenset[str]:
        """The per-token statistics (keys of `batches.ROLLOUT_STAT_KEYS`) of each fresh generation batch, under the
        policy that generated it, this trainer needs; asked once per generation batch, before generating.

        The boundary provides them from the cheapest source (TRL's old-log-prob pass when TRL runs it, else the
        generation's own LM-head logits when transformers generates, else one no-grad forward), as the `stats`
        argument of `finish_generation_batch` (`batches.RolloutStats`, which names its source), and, for "entropy",
        as `RolloutBatch.entropies` for `augment_rewards` when `needs_rollout_entropies`. Default: the entropies when
        `needs_rollout_entropies`, else nothing. The entropy views add "entropy" on their steps.
        """
        return frozenset({"entropy"}) if self.needs_rollout_entropies else frozenset()

    # -- lever 4: data ----------------------------------------------------------------------------------------------
    def train_sampler(self, dataset):
        """The sampler of the training dataset, or None for TRL's (`GRPOTrainer._get_train_sampler`)."""
        return None

    # -- the generation batch ---------------------------------------------------------------------------------------
    def rollout_columns(self, rewards_per_func: torch.Tensor, num_generations: int) -> dict[str, torch.Tensor]:
        """Per-completion columns of the whole (gathered) generation batch, computed once per generation batch from
        its rewards (B_global, n_reward_funcs), identical on every process; each a (B_global,) tensor. The boundary
        stores each process's slice in its local batch."""
        return {}

    def finish_generation_batch(self, batch: dict[str, Any], stats: RolloutStats | None) -> None:
        """Called with the local generation batch (TRL's output of `_generate_and_score_completions`, after the
        `rollout_columns`) before TRL buffers it; may add per-completion or per-token entries. `stats` holds what
        `rollout_stats_needed` asked for (None when it asked for nothing)."""

    # -- checkpoints ------------------------------------------------------------------------------------------------
    def method_state(self) -> dict[str, Any]:
        """JSON-serialisable state of the method (coefficients, schedules) saved with every checkpoint."""
        return {}

    def load_method_state(self, state: dict[str, Any]) -> None:
        """Restore what `method_state` returned, when resuming from a checkpoint."""
