"""The method contract: what a method trainer may implement, call and set on the base trainer and the TRL boundary.

A method is a config class and a trainer class that derives from `EntropyGRPOTrainer` (`base.py`), with the mixins
of `_control.py` where it needs them. Its trainer

- overrides only the hooks in `HOOKS` (and `__init__`): no other method of the base trainer, the TRL boundary, TRL's
  `GRPOTrainer` or transformers' `Trainer`;
- calls or reads, of the base trainer, the boundary and the mixins, only the accessors in `ACCESSORS`, and sets only
  the attributes in `DECLARATIONS`;
- uses no `_`-prefixed name of the base trainer, the boundary, TRL or transformers, and imports the boundary's
  functions and types from this module (or `base.py`), never from `_trl/`.

Its config may implement the hooks in `CONFIG_HOOKS`. The public attributes TRL's `GRPOTrainer` and transformers'
`Trainer` document (`args`, `accelerator`, `model`, `state`, `num_generations`, `reward_weights`,
`reward_func_names`, `train_dataset`, `add_callback`, ...) are TRL's API, not healtrl's, and are not listed here.

A hook receives what it needs as its arguments, and a method keeps nothing of one call for the next on the trainer:
what lasts across steps is its method state (`method_state` / `load_method_state`), set in `__init__`, the hooks
that move it (`update_controller`, `before_training`) or `load_method_state` (`tests/test_trainer_state.py` checks
every assignment to `self`). The boundary's own per-call state is one object per TRL call (`_trl/hooks.py`:
`LossCall`, `GenerationCall`).

Each entry says what a hook receives and when it is called; the default of each hook (a no-op) is in the class named
as its `owner`: `BoundaryHooks` (`_trl/hooks.py`) for the hooks the boundary calls, `EntropyGRPOTrainer` (`base.py`)
for those the base calls, `EntropyControlMixin` (`_control.py`) for the controller's. `tests/test_method_contract.py`
checks the entries against the classes, scans the method files (the modules of the registered trainers and configs
and of the classes they derive from, outside the base and the boundary) and fails on any other use; it also checks
that ARCHITECTURE.md's hook table names the same hooks.
"""

from __future__ import annotations

from dataclasses import dataclass

from ._card import CardDescription
from ._trl.batches import ROLLOUT_STAT_KEYS, LossBatch, RolloutBatch, RolloutStats
from ._trl.generation import fsdp_helper  # for code beside a trainer (evaluation during training), not for methods
from ._trl.hooks import generate_every
from ._trl.loss import LOSS_TYPES, aggregate_like_policy_loss, clip_status


@dataclass(frozen=True)
class Hook:
    """A method a method trainer (or config) may override; the boundary, the base or a mixin calls it."""

    name: str
    #: The parameters after `self`, in order; None for a property (read, not called).
    arguments: tuple[str, ...] | None
    #: The class that declares it with its default.
    owner: str
    #: What it receives, and what it returns.
    receives: str
    #: When it is called.
    called: str


@dataclass(frozen=True)
class Accessor:
    """A method or attribute of the base trainer, the boundary or a mixin that a method may call or read."""

    name: str
    #: The parameters after `self`, in order; None for a property or attribute.
    arguments: tuple[str, ...] | None
    #: The class that defines it.
    owner: str
    what: str


@dataclass(frozen=True)
class Declaration:
    """A class attribute a method trainer sets (in its class body or its `__init__`)."""

    name: str
    what: str


HOOKS: tuple[Hook, ...] = (
    # -- called by the TRL boundary (`_trl/`), declared in `_trl/hooks.py` ------------------------------------------
    Hook(
        "shape_advantages",
        ("advantages", "batch"),
        "BoundaryHooks",
        "TRL's advantages of the micro-batch, (B,), and its `LossBatch` (log-probs and entropies of the policy forward, "
        "with gradients); returns per-token advantages, (B, T) or (B,), or None to keep TRL's",
        "lever 1: every loss micro-batch (training and evaluation), inside TRL's `_compute_loss`, after its policy "
        "forward and before TRL reads the advantages",
    ),
    Hook(
        "extra_loss",
        ("batch",),
        "BoundaryHooks",
        "the same `LossBatch`; returns a scalar added to TRL's loss (a per-micro-batch mean: the base divides it by the "
        "gradient-accumulation steps in training), or None",
        "lever 2: every loss micro-batch, after TRL's loss of it",
    ),
    Hook(
        "needs_power_sums",
        None,
        "BoundaryHooks",
        "nothing; True makes the loss's policy forward also compute `LossBatch.sum_p2` and `sum_p2_logp`",
        "read at every loss micro-batch, before its policy forward",
    ),
    Hook(
        "get_reward_augmentations",
        (),
        "BoundaryHooks",
        "nothing; returns the reward columns `augment_rewards` fills, name -> weight in the summed reward (default: "
        "the class attribute `reward_augmentations`)",
        "once, in the constructor, after TRL's",
    ),
    Hook(
        "augment_rewards",
        ("rollouts",),
        "BoundaryHooks",
        "the `RolloutBatch`: the generation batch gathered over processes (identical on every process), its rewards "
        "with the augmentation columns still NaN; returns one (B_global,) tensor per column",
        "lever 3: every generation batch with augmentation columns, inside TRL's `_calculate_rewards`, before TRL "
        "turns the rewards into advantages",
    ),
    Hook(
        "needs_rollout_entropies",
        None,
        "BoundaryHooks",
        "nothing; True hands `augment_rewards` the rollouts' per-token entropies (`RolloutBatch.entropies`); default: "
        "the config's `rollout_entropy`",
        "read at every generation batch (by the default `rollout_stats_needed`, and in `_calculate_rewards`)",
    ),
    Hook(
        "rollout_stats_needed",
        (),
        "BoundaryHooks",
        "nothing; returns the per-token statistics of each fresh generation batch the trainer needs, a set of "
        "`ROLLOUT_STAT_KEYS` (log p, entropy, power sums under the policy that generated it)",
        "every generation batch, before generating",
    ),
    Hook(
        "train_sampler",
        ("dataset",),
        "BoundaryHooks",
        "the dataset TRL builds a dataloader of; returns a sampler, or None for TRL's",
        "when TRL builds the training dataloader (`_get_train_sampler`)",
    ),
    Hook(
        "rollout_columns",
        ("rewards_per_func", "num_generations"),
        "BoundaryHooks",
        "the gathered rewards (B_global, n_reward_funcs), identical on every process, and the group size; returns "
        "per-completion (B_global,) columns, of which each process's slice goes into its local batch",
        "every generation batch, after TRL has scored it",
    ),
    Hook(
        "finish_generation_batch",
        ("batch", "stats"),
        "BoundaryHooks",
        "the local generation batch (TRL's output dict, with the `rollout_columns`), to which it may add entries, and "
        "the `RolloutStats` that `rollout_stats_needed` asked for (None when it asked for nothing)",
        "every generation batch, after `rollout_columns`, before TRL buffers the batch",
    ),
    Hook(
        "method_state",
        (),
        "BoundaryHooks",
        "nothing; returns the method's JSON-serialisable state, `{<own entries>, **super().method_state()}` so that "
        "the mixins add theirs",
        "at every checkpoint save (written to `healtrl_state.json`), and on resume from a checkpoint without that file "
        "(refused when the state is not empty)",
    ),
    Hook(
        "load_method_state",
        ("state",),
        "BoundaryHooks",
        "what `method_state` returned, read back from the checkpoint; calls `super().load_method_state(state)` first",
        "once, when resuming, after transformers has loaded the optimizer and scheduler",
    ),
    # -- called by the base trainer (`base.py`) ------------------------------------------------------------------------
    Hook(
        "mix_datasets",
        ("train_dataset", "args"),
        "EntropyGRPOTrainer",
        "the training dataset and the config; returns the dataset to train on",
        "lever 4: once, in the constructor, before TRL's (no trainer state is set yet)",
    ),
    Hook(
        "before_training",
        ("resume_checkpoint",),
        "EntropyGRPOTrainer",
        "the checkpoint folder the run resumes from (checked, not loaded yet), or None for a fresh run",
        "once per `train()` call, on every process, before TRL's training loop",
    ),
    Hook(
        "optimizer_step_end",
        ("step_stats",),
        "EntropyGRPOTrainer",
        "the totals `step_sums` closed during the step, by key (summed over its micro-batches and all processes); an "
        "override calls `super().optimizer_step_end(step_stats)`",
        "after every optimizer step, on every process, before logging and checkpointing",
    ),
    # -- called by the entropy-control mixin (`_control.py`) ----------------------------------------------------------
    Hook(
        "update_controller",
        ("entropy",),
        "EntropyControlMixin",
        "H_t, the global entropy of the window that just ended (a float, identical on every process): sum / count of "
        "what `record_entropy` added to the window, the mixin's one accumulator, emptied here",
        "at the end of each controller window (the rollout batch, or the optimizer step: `controller_update`), from "
        "`EntropyControlMixin.optimizer_step_end`, after the optimizer step that ends it",
    ),
)

#: Hooks of a method's config class.
CONFIG_HOOKS: tuple[Hook, ...] = (
    Hook(
        "on_policy_inert",
        (),
        "EntropyGRPOConfig",
        "nothing; returns one text per setting of the config that has no effect with one update per rollout batch",
        "by the dry run (`healtrl.trainers.on_policy_inert`), when the run is on-policy",
    ),
)

ACCESSORS: tuple[Accessor, ...] = (
    # -- the TRL boundary (`_trl/`) -----------------------------------------------------------------------------------
    Accessor(
        "config_value",
        ("name",),
        "BoundaryHooks",
        "config field `name`, or its default when `args` lacks it (a plain GRPOConfig or a test double)",
    ),
    Accessor("mode", None, "BoundaryHooks", '"train" while the model is in training mode, else "eval"'),
    Accessor("log_metric", ("name", "value"), "BoundaryHooks", "log a scalar through TRL's metric buffer"),
    Accessor(
        "micro_steps_per_rollout_batch",
        None,
        "BoundaryHooks",
        "micro-batches (`training_step` calls) one rollout batch lasts: `generate_every`",
    ),
    Accessor(
        "at_rollout_boundary",
        (),
        "BoundaryHooks",
        "whether the micro-batches done so far end a rollout batch (after an optimizer step: whether it ended one)",
    ),
    Accessor(
        "trl_computes_old_logps",
        (),
        "GenerationCalls",
        "whether TRL runs its old-log-prob pass, i.e. the rollout batch serves more than one update (or vLLM's "
        "importance-sampling correction is on); False: logp_old = logp",
    ),
    Accessor(
        "clip_status",
        ("batch",),
        "LossCalls",
        "(upper_clipped, lower_clipped) masks of a `LossBatch` under TRL's clipping rule",
    ),
    Accessor(
        "policy_forward",
        ("input_ids", "attention_mask", "logits_to_keep", "batch_size", "power_sums", "grad"),
        "LMHeadForwards",
        "one policy forward through the fused LM head: per-token log-probs, entropies (and power sums)",
    ),
    Accessor(
        "generate_and_score",
        ("inputs",),
        "GenerationCalls",
        "TRL's generation and scoring of rows, without the generation-batch hooks",
    ),
    Accessor("discarded_metrics", (), "TRLBoundary", "a block in which nothing reaches TRL's metric buffer"),
    Accessor("log_completion_columns", ("columns",), "TRLBoundary", "add columns to TRL's completions table"),
    Accessor("run_output_dir", ("trial",), "TRLBoundary", "the run's output folder, where its checkpoints are"),
    Accessor("set_trl_card", ("name", "paper", "tags"), "TRLBoundary", "set TRL's model-card class attributes"),
    Accessor("card_name", None, "TRLBoundary", "the method's name on the model card"),
    Accessor("card_paper", None, "TRLBoundary", "the method's paper on the model card"),
    Accessor("card_tags", None, "TRLBoundary", "the model card's tags"),
    # -- the base trainer (`base.py`) -----------------------------------------------------------------------------------
    Accessor(
        "step_sums",
        ("key", "local"),
        "EntropyGRPOTrainer",
        "add a micro-batch's sums to the optimizer step's; at the step's last micro-batch, the totals over the step "
        "and all processes (else None)",
    ),
    Accessor(
        "global_masked_mean",
        ("values", "mask"),
        "EntropyGRPOTrainer",
        "token-weighted mean over `mask`, reduced across all processes",
    ),
    # -- the mixins (`_control.py`) -------------------------------------------------------------------------------------
    Accessor(
        "init_entropy_control",
        ("update", "measure"),
        "EntropyControlMixin",
        "start following the global entropy: the controller's cadence and how H_t averages (in `__init__`)",
    ),
    Accessor(
        "record_entropy",
        ("batch",),
        "EntropyControlMixin",
        "add a training micro-batch's entropy [sum, count], summed over all processes, to the controller's window "
        "(from a lever, on every process and every training micro-batch; `update_controller` receives the window's "
        "mean)",
    ),
    Accessor(
        "next_generator",
        (),
        "RandomStreamMixin",
        "a torch.Generator for one random draw, reproducible under `seed`, per process and across resumes",
    ),
)

DECLARATIONS: tuple[Declaration, ...] = (
    Declaration("config_class", "the method's config class"),
    Declaration("card", "the model card's `CardDescription` (`_card.py`)"),
    Declaration("card_variant_field", "a config field whose value picks the card (with `card_variants`)"),
    Declaration("card_variants", "value of `card_variant_field` -> `CardDescription`"),
    Declaration("reward_augmentations", "name -> weight of the reward columns `augment_rewards` fills"),
    Declaration(
        "defer_trl_entropy",
        "hold TRL's adaptive entropy coefficient update (`use_adaptive_entropy`) until the rollout batch ends",
    ),
)


def hook_names() -> tuple[str, ...]:
    """The names of `HOOKS`, in order."""
    return tuple(hook.name for hook in HOOKS)


__all__ = [
    "ACCESSORS",
    "CONFIG_HOOKS",
    "DECLARATIONS",
    "HOOKS",
    "LOSS_TYPES",
    "ROLLOUT_STAT_KEYS",
    "Accessor",
    "CardDescription",
    "Declaration",
    "Hook",
    "LossBatch",
    "RolloutBatch",
    "RolloutStats",
    "aggregate_like_policy_loss",
    "clip_status",
    "fsdp_helper",
    "generate_every",
    "hook_names",
]
