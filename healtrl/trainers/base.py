"""`EntropyGRPOTrainer`: TRL's `GRPOTrainer` with four levers that the method trainers of healtrl override.

The levers (ARCHITECTURE.md, "The method contract") are hooks; the base implementation of each one is a no-op, and with all of
them off the trainer reproduces TRL's loss, gradients and metrics exactly (`tests/test_parity.py` checks it against
TRL).

1. `shape_advantages(advantages, batch)`: per-token advantage shaping. Runs after the policy forward of the training
   loss and before TRL reads `inputs["advantages"]`, so a method can weight each token by statistics of the policy that
   takes the update (log-probs, entropies). Scaling a token's advantage by w >= 0 scales its clipped surrogate by w.
2. `extra_loss(batch)`: an extra scalar loss term computed from the same forward's log-probs and entropies, with
   gradients, added to TRL's loss. No second forward pass.
3. `augment_rewards(rollouts)`: extra reward columns computed from the whole (gathered) rollout batch, before TRL
   turns rewards into advantages. Each column is logged by TRL as its own `rewards/<name>/mean`.
4. `mix_datasets(train_dataset, args)` and `train_sampler(dataset)`: data mixing and selection.

Around the training loop: `optimizer_step_end(step_stats)` after each optimizer step (the entropy controllers),
`before_training(resume_checkpoint)` once before TRL's training loop starts (AER's initial-entropy estimate), and
`method_state` / `load_method_state` for what a checkpoint carries; no method overrides `train`.

Beside the levers, the TRL boundary (`_trl/`, which this class derives from) offers hooks for what a method computes
around generation: `rollout_columns` (per-completion columns from the gathered rewards, e.g. AER's group accuracy),
`finish_generation_batch` (the local batch after scoring, e.g. OPEFO's whole-batch statistics) and
`rollout_stats_needed`, the one request for per-token statistics of the rollouts (log p, entropy, power sums), which
the boundary provides from the cheapest source and hands to `finish_generation_batch`; and one policy forward,
`policy_forward`, for any extra no-grad pass. Every hook a method may implement and every accessor it may read is
listed once, with its arguments and when it runs, in `contract.py` (`tests/test_method_contract.py` holds the method
files to it).

TRL's `_compute_loss` is never copied: the levers hook into the two things it does in a fixed order (the policy
forward, then reading `inputs["advantages"]`), which `healtrl.utils.compat` pins by refusing untested TRL releases. Every
override of TRL's private methods (and every read of its private state) is in `healtrl/trainers/_trl/`, the TRL
boundary this class derives from (which also declares the hooks it calls, levers 1-3 among them, with their defaults:
`_trl/hooks.py`); this file holds the config (its choices checked in one loop, `check_choices`), lever 4, the step
statistics and `train`. The model card is `_card.py` (`ModelCardMixin`; each method declares one `CardDescription`).

Drop-in for `trl.GRPOTrainer` (README, "TRL compatibility"; `tests/test_trl_compat.py`):

- `args=None` builds the trainer's own config class named after the model (`<model>-<method>`), as TRL builds
  `GRPOConfig(f"{model_name}-GRPO")`. A plain TRL `GRPOConfig` (or any base class of the trainer's config class) is
  converted once at construction, with a warning: every field it has is copied, the method's fields take their
  defaults. A config of an unrelated class (e.g. an `AERConfig` given to `PosAdvTrainer`) is refused with a TypeError,
  since its method fields would be lost.
- TRL's own construction errors come first: healtrl checks an optional extra where TRL or transformers would need it
  (the `report_to` backends just before transformers builds its callbacks, vLLM where TRL imports it, liger-kernel
  after TRL's constructor has validated the model, e.g. refused an adapter on the LM head).
- The overrides of TRL's methods read healtrl's fields through `config_value`, which falls back to the field's
  default, so a subclass or a test double whose `args` carries only TRL's fields takes TRL's path and meets TRL's
  errors.

Why this module is long: it is the one class every method derives from, with its config; the construction checks
(TRL's config converted, the extras, the dataset that must fill a batch, the reward augmentations' columns), lever 4
and the step statistics each read the same fields in the order TRL's constructor and training loop run them, and
read best beside that order.
"""

from __future__ import annotations

import dataclasses
import warnings
import weakref
from dataclasses import dataclass, field

import torch
from transformers import TrainerCallback
from trl import GRPOConfig
from trl.trainer.utils import get_config_model_id

from .. import checkpoints
from ..model_card import GRPO_PAPER
from ..models import liger_unsupported
from ..utils.compat import MissingExtraError, check_report_to, is_available, missing_extra, require
from ._card import CardDescription, ModelCardMixin
from ._inspect_hooks import RolloutInspector
from ._trl import ROLLOUT_BUFFER_FILE, STATE_FILE, LossBatch, RolloutBatch, TRLBoundary

__all__ = [
    "ROLLOUT_BUFFER_FILE",
    "STATE_FILE",
    "EntropyGRPOConfig",
    "EntropyGRPOTrainer",
    "LossBatch",
    "RolloutBatch",
    "convert_config",
    "default_run_name",
    "liger_conflict",
]


@dataclass
class EntropyGRPOConfig(GRPOConfig):
    r"""
    Configuration for [`EntropyGRPOTrainer`]: every field of TRL's [`~trl.GRPOConfig`], plus the switches of the base
    levers. Method trainers subclass this config and add their own fields.

    Parameters:
        rollout_entropy (`bool`, *optional*, defaults to `False`):
            Compute the exact full-vocabulary entropy of every rollout token with the policy that generated it (read
            off the generation logits, or TRL's old-log-prob pass, or one no-grad forward: see
            `rollout_entropy_source`). TRL computes no entropies at generation time, also not under vLLM. Their token mean is logged as
            `rollout/entropy`, and reward augmentations receive them (HEAL's EDA reward switches this on itself).
        rollout_entropy_source (`str`, *optional*, defaults to `"auto"`):
            Where rollout entropies come from. `"auto"`: TRL's old-log-prob pass when it runs; else, when transformers
            generates (no vLLM, no paged generation, no tools), the logits the generation computes anyway (a forward
            hook on the LM head: the same policy and temperature, no extra forward); else one no-grad forward with the
            fused kernel. `"forward"`: never from the generation logits (always a forward pass).
        resume_allow_mismatch (`list[str]`, *optional*):
            Settings that may differ from the checkpoint's when resuming. Without it, resuming refuses (naming each
            field and both values) a checkpoint written with other values of the config fields that change the math
            (`healtrl.checkpoints.math_fields`: the method's own fields and GRPO's loss, rollout and batch-layout
            fields, `seed`), or by another healtrl or TRL version (`healtrl_version`, `trl_version`). Another trainer,
            or another number of processes for a checkpoint written in the middle of a rollout batch, is always
            refused.
        divergence_guard (`bool`, *optional*, defaults to `True`):
            Before every optimizer step, stop training with `healtrl.checkpoints.DivergenceError` when the loss or a
            gradient is NaN/inf, or when the step's policy entropy exceeds `divergence_entropy_fraction` times
            log(vocabulary size) after an earlier step was below half of that (a randomly initialised model starts
            near uniform and does not trip it; `healtrl/trainers/_guard.py`). The step's update is not applied and no checkpoint of it is written; the last
            complete checkpoint stays the last good one. `divergence/nonfinite` and `divergence/entropy_fraction`
            (entropy / log V) are logged every step either way.
        divergence_entropy_fraction (`float`, *optional*, defaults to `0.95`):
            The guard's entropy threshold as a fraction of log(vocabulary size), the entropy of the uniform
            distribution. Generous by default: on the toy model (103 tokens, log V = 4.63 nats) OPEFO's highest entropy
            (4.03 nats, `benchmarks/results/toy_study.md`) is 0.87 of it.
        vllm_cpu_weight_sync (`str`, *optional*, defaults to `"auto"`):
            With `use_vllm` on a CPU, TRL's weight sync fails (colocate: vLLM's CPU backend packs its layers;
            server: TRL's NCCL engine needs CUDA). `"auto"`: replace it, only in those two cases, with vLLM's in-place
            reload (colocate) or a file handed to a server started with `python -m healtrl.vllm_serve` (server);
            checked with vLLM 0.32 (`healtrl/trainers/_trl/vllm_sync.py`), refused on other versions. `"off"`: TRL's
            own.
        vllm_weight_sync_dir (`str`, *optional*):
            Folder for the weights file of the server-mode CPU sync (trainer and server must share the file system).
            Default: a new temporary folder.
        inspect_every_steps (`int` or `None`, *optional*, defaults to `50`):
            Every this many optimizer steps (and at step 0), write the `healtrl inspect` page of a few rollouts of that
            step, tokens coloured by their exact entropy, to `output_dir/inspect/step-N.html` (with `step-N.json`),
            and send it to the `report_to` trackers that take one (wandb: the page, a table and a histogram; trackio:
            a table; tensorboard: the summary PNG and a histogram). Those steps compute rollout entropies (as
            `rollout_entropy`) and log `entropy/high_share`, `entropy/mean` and `entropy/q10`/`q50`/`q90`. `0` or
            `None`: no views.
            At 50 the step time stays within 1.05x (paired estimate 1.002x on the toy config; a tensorboard run
            also renders a PNG per view, ~0.8 s): `benchmarks/results/inspect_overhead.md`.
            `healtrl/trainers/_inspect_hooks.py`.
        inspect_num_prompts (`int`, *optional*, defaults to `2`):
            Prompt groups (each with its `num_generations` completions) of the main process's rollouts on each view.
        inspect_high_entropy (`float`, *optional*, defaults to `ln 2 = 0.6931`):
            Threshold (nats) of `entropy/high_share`, the share of completion tokens whose entropy exceeds it: ln 2
            is the entropy of a fair coin flip, a fixed scale that shows collapse across steps and runs. The metric is
            logged whenever rollout entropies are computed (`rollout_entropy`, `log_completions`, view steps).
    """

    rollout_entropy: bool = field(
        default=False,
        metadata={
            "help": "Compute exact per-token entropies of every rollout with the policy that generated it (from the "
            "generation logits, TRL's old-log-prob pass or one no-grad forward; see rollout_entropy_source)."
        },
    )

    rollout_entropy_source: str = field(
        default="auto",
        metadata={
            "help": "Source of rollout entropies: auto (TRL's old-log-prob pass if it runs, else the logits of "
            "transformers generation, else a no-grad forward) or forward (never the generation logits).",
            "choices": ["auto", "forward"],
        },
    )

    logprob_kernel: str = field(
        default="healtrl",
        metadata={
            "help": "Kernel of the fused LM head (per-token log-probs and entropies without full-vocabulary logits): "
            "'healtrl' (healtrl.kernels: Triton on CUDA, chunked torch elsewhere; also gives the power sums some "
            "methods need) or 'trl' (TRL's own). Models the healtrl kernel cannot serve exactly (logit soft-capping, a "
            "logit scale, DeepSpeed ZeRO-3) use TRL's.",
            "choices": ["healtrl", "trl"],
        },
    )

    entropy_flow_diagnostics: bool = field(
        default=False,
        metadata={
            "help": "Log, per optimizer step, the predicted entropy change of the update's tokens split into "
            "entropy-increasing and -decreasing tokens, by advantage sign and clipping status (OPEFO Figure 2; "
            "healtrl.diagnostics). Computed from the loss forward: no extra pass; nothing runs when off."
        },
    )
    entropy_flow_estimator: str = field(
        default="opefo",
        metadata={
            "help": "Estimator of the entropy-flow diagnostics: 'opefo' (OPEFO eq. 6), 'steer' or 'exact' (needs "
            "logprob_kernel 'healtrl').",
            "choices": ["opefo", "steer", "exact"],
        },
    )

    resume_allow_mismatch: list[str] | None = field(
        default=None,
        metadata={
            "help": "Settings that may differ from the checkpoint's when resuming (healtrl.checkpoints.check_resume "
            "refuses any other difference): config fields that change the math (e.g. tau, entropy_method, "
            "num_generations, seed), healtrl_version, trl_version. Only list a change you intend."
        },
    )
    divergence_guard: bool = field(
        default=True,
        metadata={
            "help": "Stop training with a clear error (DivergenceError) before an optimizer step whose loss or "
            "gradients are NaN/inf, or whose policy entropy (token mean of the loss forward, all processes) exceeds "
            "divergence_entropy_fraction * log(vocabulary size); no checkpoint of that step is written. Logs "
            "divergence/nonfinite and divergence/entropy_fraction every step either way."
        },
    )
    divergence_entropy_fraction: float = field(
        default=0.95,
        metadata={
            "help": "Entropy threshold of the divergence guard as a fraction of log(vocabulary size), the entropy of "
            "the uniform distribution (1.0: only non-finite values stop the run)."
        },
    )
    vllm_cpu_weight_sync: str = field(
        default="auto",
        metadata={
            "help": "With use_vllm on a CPU: 'auto' replaces TRL's weight sync (which fails there) with vLLM's in-place "
            "reload (colocate) or a file sync with a `python -m healtrl.vllm_serve` server; 'off' keeps TRL's.",
            "choices": ["auto", "off"],
        },
    )
    vllm_weight_sync_dir: str | None = field(
        default=None,
        metadata={"help": "Folder for the server-mode CPU weight-sync file (default: a new temporary folder)."},
    )

    inspect_every_steps: int | None = field(
        default=50,
        metadata={
            "help": "Every this many optimizer steps (and at step 0), write the per-token entropy view of a few "
            "rollouts to output_dir/inspect/step-N.html and send it to wandb/trackio/tensorboard; 0 or null: never."
        },
    )
    inspect_num_prompts: int = field(
        default=2,
        metadata={"help": "Prompt groups (with all their completions) shown on each training-time entropy view."},
    )
    inspect_high_entropy: float = field(
        default=0.6931471805599453,
        metadata={"help": "Threshold in nats of the logged entropy/high_share (default ln 2, a fair coin flip)."},
    )

    def on_policy_inert(self) -> list[str]:
        """Config hook (`contract.CONFIG_HOOKS`): a text per setting with no effect at one update per rollout batch."""
        return []

    def __post_init__(self):
        check_choices(self)  # every field with `choices` in its metadata, the method configs' included
        from ._inspect_hooks import check_inspect_fields

        check_inspect_fields(self)
        if not 0.0 < float(self.divergence_entropy_fraction) <= 1.0:
            raise ValueError(
                f"divergence_entropy_fraction must be in (0, 1] (a fraction of the uniform entropy log V); got "
                f"{self.divergence_entropy_fraction!r}. Set divergence_guard: false to switch the guard off."
            )
        if isinstance(self.resume_allow_mismatch, str):
            self.resume_allow_mismatch = [self.resume_allow_mismatch]
        super().__post_init__()
        # The optional extras (`report_to` backends, vLLM, liger-kernel) are checked by the trainer, after TRL's own
        # checks of the same configuration (see `EntropyGRPOTrainer.__init__`).
        if self.resume_allow_mismatch:
            from ..checkpoints import VERSION_FIELDS, math_fields

            known = [*math_fields(self), *VERSION_FIELDS]
            unknown = [name for name in self.resume_allow_mismatch if name not in known]
            if unknown:
                raise ValueError(
                    f"resume_allow_mismatch: {unknown} are not settings compared on resume; allowed: "
                    f"{', '.join(known)}."
                )


def check_choices(config) -> None:
    """Refuse a value outside the `choices` of its field's metadata, for every field healtrl adds to TRL's config
    (TRL checks its own fields, with its own messages)."""
    trl_fields = {f.name for f in dataclasses.fields(GRPOConfig)}
    for f in dataclasses.fields(config):
        choices = None if f.name in trl_fields else f.metadata.get("choices")
        value = getattr(config, f.name, None)
        if choices is not None and value not in choices:
            raise ValueError(f"{f.name} must be one of {', '.join(map(str, choices))}; got {value!r}.")


def liger_conflict(use_liger_kernel, liger_kernel_config) -> str | None:
    """Why a config cannot train with `use_liger_kernel`, or None when it can (every healtrl trainer, every lever).

    TRL 1.16's `GRPOTrainer` has no Liger loss: with `use_liger_kernel=True` it sets
    `liger_kernel_config["fused_linear_cross_entropy"] = False`, so transformers' `Trainer.train` patches only the
    model's layers with Liger's kernels (RMSNorm, RoPE, SwiGLU), and `_compute_loss` runs the same policy forward
    through the fused LM head as without Liger. The per-token log-probs and entropies of that forward feed every
    lever (`_trl/loss.py`), and the levers of the generation batch (rewards, rollout statistics, data) do not touch
    the loss, so all of them apply. The one combination that cannot train is `fused_linear_cross_entropy` set true
    (truthy, as TRL tests it) with `use_liger_kernel`: Liger's fused cross-entropy replaces the model's forward, which
    the fused LM head is built into. TRL's constructor refuses it with its own ValueError; this text is what the
    command line shows before a run starts (`healtrl.cli`). `liger_kernel_config` is a mapping, or its JSON text as
    given on the command line (text that is not a JSON mapping is left to the config's own check: None).
    """
    if not use_liger_kernel or not liger_kernel_config:
        return None
    config = liger_kernel_config
    if isinstance(config, str):
        import json

        try:
            config = json.loads(config)
        except ValueError:
            return None
    if not isinstance(config, dict) or not config.get("fused_linear_cross_entropy"):
        return None
    return (
        "use_liger_kernel=true with liger_kernel_config fused_linear_cross_entropy=true cannot train: Liger's fused "
        "linear cross-entropy replaces the model's forward, which bypasses the fused LM head that computes the "
        "per-token log-probs and entropies of the loss (what every healtrl lever reads: advantage shaping, extra loss "
        "terms, the entropy-flow diagnostics), and TRL 1.16's GRPOTrainer refuses it at construction. Remove "
        "fused_linear_cross_entropy from liger_kernel_config (TRL then applies Liger's layer kernels only, RMSNorm, "
        "RoPE and SwiGLU, and every lever applies), or set use_liger_kernel=false: healtrl's own fused LM head already "
        "avoids full-vocabulary logits."
    )


def _augmentation_placeholder(name: str):
    """A reward function slot for an augmentation column: TRL calls it, it abstains, the trainer fills the column."""

    def reward(prompts, **kwargs):
        return [None] * len(prompts)

    reward.__name__ = name
    return reward


def default_run_name(model, method: str) -> str:
    """`<model>-<method>`: the output folder of a trainer built with `args=None`, as TRL names `f"{model}-GRPO"`."""
    model_name = model if isinstance(model, str) else get_config_model_id(model.config)
    return f"{model_name.split('/')[-1]}-{method}"


def convert_config(args: GRPOConfig, config_class: type) -> GRPOConfig:
    """A `config_class` holding every field of `args` (an instance of a base class of `config_class`, e.g. TRL's
    `GRPOConfig`); the fields only `config_class` has take their defaults. Its `__post_init__` runs, so the method's
    own checks (e.g. OPEFO's strict on-policy rule) apply to the converted config."""
    values = {f.name: getattr(args, f.name) for f in dataclasses.fields(args) if f.init}
    # GRPOConfig.__post_init__ derived `generation_batch_size` from `steps_per_generation` (or the reverse) and refuses
    # both set; `steps_per_generation` alone gives the same generation batch again.
    values["generation_batch_size"] = None
    return config_class(**values)


class _StepEndCallback(TrainerCallback):
    """Calls `optimizer_step_end` with the step's closed `step_sums` after every optimizer step."""

    def __init__(self, trainer):
        self._trainer = weakref.ref(trainer)

    def on_step_end(self, args, state, control, **kwargs):
        trainer = self._trainer()
        if trainer is not None:
            closed, trainer._closed_step_sums = trainer._closed_step_sums, {}
            trainer.optimizer_step_end(closed)


class _CheckpointFiles:
    """healtrl's checkpoint files (`healtrl.checkpoints`: the completion marker, written last, and atomic writes), as
    the TRL boundary uses them (`_trl.hooks.CheckpointFiles`)."""

    marker_file = checkpoints.MARKER_FILE
    write_json = staticmethod(checkpoints.write_json_atomic)
    torch_save = staticmethod(checkpoints.torch_save_atomic)
    sync_folder = staticmethod(checkpoints.fsync_dir)
    marker = staticmethod(checkpoints.checkpoint_info)
    is_complete = staticmethod(checkpoints.is_complete)
    read_marker = staticmethod(checkpoints.read_marker)


class EntropyGRPOTrainer(ModelCardMixin, TRLBoundary):
    """TRL's `GRPOTrainer` with the four levers of healtrl as overridable hooks (no-ops here).

    Constructor: the same as `trl.GRPOTrainer`. `args` is an instance of `config_class`; `None` builds one named
    `<model>-<method>`, and a plain `trl.GRPOConfig` is converted with a warning (see `_resolve_args`). Subclasses
    override any of `mix_datasets`, `augment_rewards` (and list their columns in `reward_augmentations`),
    `shape_advantages`, `extra_loss`, and keep checkpointed state with `method_state` / `load_method_state`. A subclass
    refuses a TRL option it cannot honour in its `__init__`, after `super().__init__` (so TRL's own errors come first),
    with an error naming the option and the reason.
    """

    config_class = EntropyGRPOConfig
    _card_base_config = EntropyGRPOConfig
    card = CardDescription(
        name="GRPO",
        paper=GRPO_PAPER,
        description=(
            "Group Relative Policy Optimization: every prompt gets a group of sampled completions scored by "
            "verifiable rewards; each completion's advantage is its reward normalised within the group, and the "
            "policy takes a clipped policy-gradient step on it, without a value model."
        ),
    )

    # Set by `__init__`; class-level defaults keep TRL's paths working on an instance built without it (a test double).
    _open_step_sums: dict[str, torch.Tensor] = {}
    _closed_step_sums: dict[str, torch.Tensor] = {}
    _checkpoint_files = _CheckpointFiles()

    def _before_trainer_callbacks(self, args) -> None:
        check_report_to(args.report_to)  # a missing backend's extra, named before transformers builds its callbacks

    def __init__(self, model, reward_funcs=None, args: EntropyGRPOConfig | None = None, train_dataset=None, **kwargs):
        args = self._resolve_args(model, args)
        #: Training datasets named in the model card (Hub ids go into its front matter). `None`: the training
        #: dataset's `info.dataset_name` and the config fields in `_card_dataset_fields`.
        self.model_card_datasets: list[str] | None = None
        #: The base model named in the model card. `None`: the model config's `_name_or_path`.
        self.model_card_base_model: str | None = None
        info = getattr(train_dataset, "info", None)
        self._card_train_dataset_name = getattr(info, "dataset_name", None)  # before `mix_datasets` replaces it
        if train_dataset is not None:
            train_dataset = self.mix_datasets(train_dataset, args)
        if args.use_vllm and is_available("vllm"):
            from ._trl import vllm_sync

            vllm_sync.install(args)  # CPU-only replacement of TRL's weight sync; see its docstring
        try:
            super().__init__(model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset, **kwargs)
        except ImportError as exc:
            # TRL imports vLLM after its own checks of the configuration: name healtrl's extra at that same point.
            if args.use_vllm and not is_available("vllm") and not isinstance(exc, MissingExtraError):
                raise missing_extra("vllm", "use_vllm=True") from exc
            raise
        if args.use_liger_kernel:
            # TRL accepts a missing liger-kernel until `train()` (transformers applies it there); refuse it here, after
            # TRL's constructor has rejected the configurations it cannot train (a PEFT adapter on the LM head;
            # `liger_kernel_config` with `fused_linear_cross_entropy`, `liger_conflict`). Nothing else to refuse: TRL
            # 1.16 applies Liger's layer kernels only and every lever of every trainer applies (`liger_conflict`).
            require("liger", "use_liger_kernel=True")
            if unsupported := liger_unsupported(self.model):  # transformers would only log it at info level
                warnings.warn(unsupported, stacklevel=2)
        self._check_dataset_fills_a_batch()

        augmentations = self.get_reward_augmentations()
        for name, weight in augmentations.items():
            if name in self.reward_func_names:
                raise ValueError(
                    f"A reward function is already named '{name}', the name of {type(self).__name__}'s reward "
                    "augmentation column. Rename the reward function."
                )
            self.reward_funcs.append(_augmentation_placeholder(name))
            self.reward_func_names.append(name)
            self.reward_processing_classes.append(None)
            self.reward_weights = torch.cat([self.reward_weights, torch.tensor([float(weight)])])
        self._augmentation_names = list(augmentations)

        self._entropy_flow = None
        if self.config_value("entropy_flow_diagnostics"):
            from ..diagnostics import EntropyFlowDiagnostics

            self._entropy_flow = EntropyFlowDiagnostics(self.config_value("entropy_flow_estimator"))
        self._guard = None
        if self.args.divergence_guard:  # healtrl/trainers/_guard.py
            from ._guard import DivergenceGuard

            self._guard = DivergenceGuard(self, self.args.divergence_entropy_fraction)
            self.add_callback(self._guard)
        self._inspect = RolloutInspector.from_trainer(self)  # entropy views and metrics (_inspect_hooks.py)
        self._open_step_sums = {}  # `step_sums`: this process's sums of the open optimizer step, by key
        self._closed_step_sums = {}  # `step_sums`: totals of the step that just ended, for `optimizer_step_end`
        self.add_callback(_StepEndCallback(self))

    # ------------------------------------------------------------------------------------------------------------
    # Config: built, converted or checked once at construction; read through `config_value`
    # ------------------------------------------------------------------------------------------------------------
    def _resolve_args(self, model, args):
        """The config the trainer runs with, of class `config_class`.

        - `None`: `config_class("<model>-<method>")`, as TRL builds `GRPOConfig(f"{model_name}-GRPO")`.
        - an instance of `config_class` (or a subclass): itself.
        - an instance of a base class of `config_class` (TRL's `GRPOConfig`, `EntropyGRPOConfig`): converted once, with
          a warning naming the method's fields that take their defaults (`convert_config`).
        - anything else: TypeError naming the config class to use.

        Subclasses that need their config before calling `super().__init__` call this first (it is idempotent).
        """
        config_class = self.config_class
        if args is None:
            return config_class(default_run_name(model, self.card_name.replace(" ", "-")))
        if isinstance(args, config_class):
            return args
        if isinstance(args, GRPOConfig) and issubclass(config_class, type(args)):
            added = [f.name for f in dataclasses.fields(config_class) if f.init and not hasattr(args, f.name)]
            warnings.warn(
                f"{type(self).__name__} got a {type(args).__name__}; converted it to healtrl.{config_class.__name__} "
                f"with every field copied. Its own fields take their defaults ({', '.join(added)}). Pass a "
                f"healtrl.{config_class.__name__}(...) to set them and silence this warning.",
                UserWarning,
                stacklevel=3,
            )
            return convert_config(args, config_class)
        raise TypeError(
            f"{type(self).__name__} needs args of type {config_class.__name__} (got {type(args).__name__}); a base "
            f"class of it (trl.GRPOConfig) is converted, any other config would lose fields. Build the config with "
            f"healtrl.{config_class.__name__}(...)."
        )

    # ------------------------------------------------------------------------------------------------------------
    # Hooks for method trainers (all no-ops here; the hooks the TRL boundary calls, levers 1-3 among them, are
    # declared with their defaults in `_trl/hooks.py`)
    # ------------------------------------------------------------------------------------------------------------
    def mix_datasets(self, train_dataset, args: EntropyGRPOConfig):
        """Lever 4: return the training dataset to use. Called before TRL's constructor; do not use trainer state."""
        return train_dataset

    def _check_dataset_fills_a_batch(self) -> None:
        """TRL's sampler draws whole generation batches of distinct prompts and silently trains 0 steps on a dataset
        smaller than one batch (a few-shot set): refuse that at construction instead."""
        dataset = self.train_dataset
        if dataset is None or not hasattr(dataset, "__len__"):  # none, or an iterable dataset
            return
        rows = len(dataset)
        rollouts = self.args.generation_batch_size
        prompts = rollouts // self.num_generations
        if rows < prompts:
            fill = (
                f"set num_generations to {rollouts // rows} so that every batch holds each prompt once, "
                if rows and rollouts % rows == 0
                else ""
            )
            raise ValueError(
                f"train_dataset has {rows} rows, fewer than the {prompts} distinct prompts of one generation batch "
                f"(generation_batch_size {rollouts} / num_generations {self.num_generations}); TRL would train 0 "
                f"steps. Repeat the rows to fill the batches: `train_repeats: auto` with `max_steps` (train.py; in "
                "Python: healtrl.data.repeat_rows with shuffle_dataset=False; seeded copies, each batch holding each "
                "row a fixed number of times), or lower per_device_train_batch_size (or steps_per_generation), "
                f"{fill}or add rows."
            )

    def before_training(self, resume_checkpoint: str | None) -> None:
        """Hook: called by `train` on every process, once per call, just before TRL's training loop starts.

        The checkpoint to resume from is resolved and checked by then, but nothing is loaded from it yet (weights,
        optimizer, `load_method_state`). `resume_checkpoint` is its folder, or None for a fresh run. The base does
        nothing; AER estimates its initial entropy here (`initial_entropy_prompts`). Methods use it instead of
        overriding `train`."""

    # ------------------------------------------------------------------------------------------------------------
    # Helpers for method trainers
    # ------------------------------------------------------------------------------------------------------------
    def step_sums(self, key: str, local: torch.Tensor) -> torch.Tensor | None:
        """Statistics of a whole optimizer step: the one way healtrl accumulates per-step statistics.

        Adds `local` (this training micro-batch's sums on this process) to the open step's sums under `key`; on the
        step's last micro-batch (accelerate's `sync_gradients`) returns the sums over the step's micro-batches and all
        processes (identical on every rank) and closes the step, else None. Every process calls it with the same keys.
        The closed totals are also handed to `optimizer_step_end` after the optimizer step: diagnostics log them at the
        last micro-batch (while the step's learning rate is current), a method may read them again at the step end.
        """
        total = self._open_step_sums.get(key)
        total = local if total is None else total + local
        if not self.accelerator.sync_gradients:
            self._open_step_sums[key] = total
            return None
        self._open_step_sums.pop(key, None)
        total = self.accelerator.reduce(total.to(self.accelerator.device), reduction="sum")
        self._closed_step_sums[key] = total
        return total

    def optimizer_step_end(self, step_stats: dict[str, torch.Tensor]) -> None:
        """Step-end hook: called on every process after each optimizer step (before logging and checkpointing) with
        the totals `step_sums` closed during that step, by key (summed over its micro-batches and all processes).
        The entropy-control mixin (`_control.EntropyControlMixin`) ends its window and moves the controller here."""

    def global_masked_mean(self, values: torch.Tensor, mask: torch.Tensor) -> float:
        """Token-weighted mean of `values` over `mask`, reduced across all processes."""
        local = torch.stack([(values.detach() * mask).sum(), mask.sum().to(values.dtype)]).float()
        total = self.accelerator.reduce(local, reduction="sum")
        return (total[0] / total[1].clamp(min=1.0)).item()

    # ------------------------------------------------------------------------------------------------------------
    # Checkpoints: method state, resume in the middle of a rollout batch, completion marker (healtrl.checkpoints)
    # ------------------------------------------------------------------------------------------------------------

    def train(self, resume_from_checkpoint: str | bool | None = None, trial=None, ignore_keys_for_eval=None, **kwargs):
        """`transformers.Trainer.train`, with crash-safe resume (`healtrl.checkpoints`) and the `before_training` hook.

        Args:
            resume_from_checkpoint (`str` or `bool`, *optional*):
                `True`, `"true"` or `"latest"`: the last complete checkpoint of `args.output_dir` (incomplete folders
                are skipped with a warning); a path: that checkpoint, which must be complete. The checkpoint must have
                been written by this trainer under the same settings (`check_resume`; `resume_allow_mismatch`).
        """
        from ..checkpoints import check_resume, read_marker, resolve_resume_checkpoint

        checkpoint = resolve_resume_checkpoint(resume_from_checkpoint, self.args.output_dir)
        if checkpoint is not None:
            accepted = check_resume(read_marker(checkpoint), self, checkpoint)
            if accepted:
                warnings.warn(
                    f"Resuming from {checkpoint} with accepted differences: {'; '.join(accepted)}.",
                    RuntimeWarning,
                    stacklevel=2,
                )
        self.before_training(checkpoint)
        return super().train(
            resume_from_checkpoint=checkpoint, trial=trial, ignore_keys_for_eval=ignore_keys_for_eval, **kwargs
        )
