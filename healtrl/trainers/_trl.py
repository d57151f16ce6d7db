"""The TRL boundary: every use of TRL's (and transformers `Trainer`'s) private API in healtrl, in one file.

TRL reshapes `GRPOTrainer`'s private methods (`_generate_and_score_completions`, `_compute_loss`,
`_get_per_token_logps_and_entropies`, ...) from one release to the next. healtrl rides on them, so it keeps every such
use here: the overrides of TRL's and transformers' private methods, the reads and writes of their private state
(`_metrics`, `_step`, `_buffered_inputs`, ...), the imports of private names, and the functions that mirror TRL's
internal logic, each citing the TRL 1.16 function it follows. Everything else in healtrl talks to the public hooks and
accessors of `TRLBoundary`; `tests/test_trl_boundary.py` fails when another module names a TRL-private attribute.
A TRL upgrade is: read this file against the new release, run the suite (`healtrl._compat` refuses untested releases).

`TRLBoundary(GRPOTrainer)` overrides each private method once and calls hooks that `EntropyGRPOTrainer`
(`base.py`: the four levers) and the method trainers implement:

- the levers' hooks, defined by `EntropyGRPOTrainer`: `shape_advantages`, `extra_loss` (in the loss forward),
  `augment_rewards` (on the gathered rewards), `method_state` / `load_method_state` (checkpoints), `needs_power_sums`;
- `train_sampler(dataset)`: the training sampler (HEAL's domain mixing), or None for TRL's;
- `rollout_columns(rewards_per_func, num_generations)`: per-completion columns computed once per generation batch from
  the gathered rewards (AER's group accuracy); the boundary puts each process's slice into its local batch, where TRL
  splits, shuffles and buffers it with the rest;
- `finish_generation_batch(batch)`: the local generation batch after scoring (OPEFO's whole-batch statistics);
- `generate_rollouts(generate, prompts)`: wraps TRL's generation call (OPEFO records statistics off the LM head);
- `old_logps_pass_request()` / `receive_old_logps_stats(stats)`: statistics taken from TRL's no-grad old-log-prob
  pass over fresh rollouts, when TRL runs it (OPEFO);
- `defer_trl_entropy`: hold TRL's adaptive entropy coefficient (`use_adaptive_entropy`) until the rollout batch ends.

and offers accessors for TRL's private state: `log_metric`, `discarded_metrics`, `policy_forward`, `generate_and_score`,
`run_output_dir`, `log_completion_columns`, `clip_status`, `card_name` / `card_paper` / `card_tags`; and, for the
vLLM weight sync of `_vllm_sync.py`, `vllm_named_params`.

Why this module is long: it is, by design, all of healtrl's contact with TRL's private API (the loss forward and its
levers, rollout entropies, reward augmentation, generation-batch columns, checkpoints in the middle of a rollout batch,
the fused LM head swap); splitting it would spread what a TRL upgrade has to re-read over several files.
"""

from __future__ import annotations

import contextlib
import copy
import json
import os
import warnings
from typing import Any, NamedTuple

import torch
import trl.trainer.utils as trl_utils
from transformers.trainer_utils import PREFIX_CHECKPOINT_DIR
from trl import GRPOTrainer
from trl.kernels.chunked_logprob import _use_triton
from trl.models.utils import disable_gradient_checkpointing
from trl.trainer.base_trainer import _BaseTrainer
from trl.trainer.utils import pad

from .._compat import check_report_to
from ._batches import LossBatch, RolloutBatch
from ._kernel_bridge import HealtrlLogProbFunction

STATE_FILE = "healtrl_state.json"
ROLLOUT_BUFFER_FILE = "healtrl_rollout_buffer_rank{rank}.pt"


# ----------------------------------------------------------------------------------------------------------------
# The fused LM head (TRL 1.16 `trl.trainer.utils.add_fused_lm_head` -> `_ChunkedLogProbFunction.apply`)
# ----------------------------------------------------------------------------------------------------------------
@contextlib.contextmanager
def healtrl_lm_head(power_sums: bool = False):
    """Within the block, TRL's fused LM head computes through healtrl's kernel; yields the function (its captures).

    TRL 1.16's fused forward calls `trl.trainer.utils._ChunkedLogProbFunction.apply`; the block swaps that module
    attribute for `HealtrlLogProbFunction` (`_kernel_bridge.py`) and restores it after.
    """
    original = trl_utils._ChunkedLogProbFunction
    if isinstance(original, HealtrlLogProbFunction):  # nested: reuse the active one
        yield original
        return
    function = HealtrlLogProbFunction(original=original, power_sums=power_sums)
    trl_utils._ChunkedLogProbFunction = function
    try:
        yield function
    finally:
        trl_utils._ChunkedLogProbFunction = original


def scatter_power_sums(captured, input_ids, attention_mask, logits_to_keep, batch_size):
    """Rebuild (B, logits_to_keep) tensors of the captured power sums, as TRL lays out its per-token outputs.

    Mirrors TRL 1.16's `_get_per_token_logps_and_entropies` (labels: -100 on padding and prompt) and `_fused_forward`
    (scored positions: all of them, flattened, off Triton devices; the valid ones only, compacted, on Triton devices).
    """
    sum_p2, sum_p2_logp = [], []
    batch_size = batch_size or input_ids.size(0)
    chunks = list(range(0, input_ids.size(0), batch_size))
    if len(captured) != len(chunks):
        raise RuntimeError(f"Expected {len(chunks)} LM-head calls, saw {len(captured)}.")
    compact = _use_triton(input_ids.device)
    for (p2, p2l), start in zip(captured, chunks):
        ids = input_ids[start : start + batch_size]
        attn = attention_mask[start : start + batch_size]
        labels = ids.masked_fill(attn == 0, -100)
        labels[:, :-logits_to_keep] = -100
        mask = labels[:, 1:] != -100
        if compact:
            p2 = p2.new_zeros(mask.shape).masked_scatter(mask, p2)
            p2l = p2l.new_zeros(mask.shape).masked_scatter(mask, p2l)
        else:
            p2 = p2.view(mask.shape).masked_fill(~mask, 0)
            p2l = p2l.view(mask.shape).masked_fill(~mask, 0)
        sum_p2.append(p2[:, -logits_to_keep:])
        sum_p2_logp.append(p2l[:, -logits_to_keep:])
    return torch.cat(sum_p2, dim=0), torch.cat(sum_p2_logp, dim=0)


# ----------------------------------------------------------------------------------------------------------------
# vLLM weight sync (`_vllm_sync.py` replaces TRL 1.16's `VLLMGeneration.sync_weights` on CPU engines)
# ----------------------------------------------------------------------------------------------------------------
def vllm_named_params(generation):
    """The (name, tensor) pairs TRL 1.16's `VLLMGeneration.sync_weights` sends to vLLM: its private
    `VLLMGeneration._iter_named_params` (gathers FSDP / ZeRO-3 shards, merges PEFT adapters, names as vLLM expects).
    Every process must iterate it: the gathers are collective."""
    return generation._iter_named_params()


def fsdp_helper(trainer):
    """TRL 1.16's FSDP helper of a trainer (`GRPOTrainer._dist`, whose `summon_full_params` gathers the parameters for
    generation), or None (no FSDP, or a trainer without one)."""
    return getattr(trainer, "_dist", None)


# ----------------------------------------------------------------------------------------------------------------
# Logic that mirrors TRL's loss
# ----------------------------------------------------------------------------------------------------------------
def clip_status(
    per_token_logps: torch.Tensor,
    old_per_token_logps: torch.Tensor,
    advantages: torch.Tensor,
    mask: torch.Tensor,
    epsilon_low: float,
    epsilon_high: float,
    importance_sampling_level: str = "token",
) -> tuple[torch.Tensor, torch.Tensor]:
    """(upper_clipped, lower_clipped) boolean (B, T) masks, as TRL 1.16's `GRPOTrainer._compute_loss` defines them.

    coef = exp(logp - old_logp) per token, or of the masked sequence mean of the log-ratio when
    `importance_sampling_level="sequence"`; upper-clipped: coef > 1 + epsilon_high and A > 0; lower-clipped:
    coef < 1 - epsilon_low and A < 0.
    """
    log_ratio = (per_token_logps.detach() - old_per_token_logps.detach()).float()
    if importance_sampling_level == "sequence":
        log_ratio = ((log_ratio * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).unsqueeze(-1)
    coef = torch.exp(log_ratio)
    adv = advantages.detach()
    if adv.dim() == 1:
        adv = adv.unsqueeze(1)
    upper = (coef > 1 + epsilon_high) & (adv > 0)
    lower = (coef < 1 - epsilon_low) & (adv < 0)
    shape = per_token_logps.shape
    return upper.expand(shape), lower.expand(shape)


def aggregate_like_policy_loss(trainer, per_token: torch.Tensor, mask: torch.Tensor, batch: LossBatch):
    """Aggregate a per-token term with the normaliser TRL 1.16's `GRPOTrainer._compute_loss` applies to its policy loss
    for `loss_type`, before the division by the gradient-accumulation steps (which the base trainer applies to
    `extra_loss`)."""
    mask = mask.to(per_token.dtype)
    loss_type = trainer.loss_type
    if loss_type in ("grpo", "sapo"):
        return ((per_token * mask).sum(-1) / mask.sum(-1).clamp(min=1.0)).mean()
    if loss_type == "bnpo":
        return (per_token * mask).sum() / mask.sum().clamp(min=1.0)
    if loss_type == "dr_grpo":
        return (per_token * mask).sum() / (per_token.size(0) * trainer.max_completion_length)
    if loss_type in ("cispo", "dapo", "vespo"):
        normalizer = batch.inputs["num_items_in_batch"].clamp(min=1.0) / trainer.accelerator.num_processes
        if batch.mode == "train":
            normalizer = normalizer / trainer.args.steps_per_generation
        return (per_token * mask).sum() / normalizer
    return (per_token * mask).sum(-1).mean()  # luspo


class PolicyForward(NamedTuple):
    """Per-token outputs of one policy forward, (B, T) over completion tokens; the power sums are None unless asked."""

    logps: torch.Tensor
    entropies: torch.Tensor
    sum_p2: torch.Tensor | None = None
    sum_p2_logp: torch.Tensor | None = None


class _ExtrasAfterTRLChecks(_BaseTrainer):
    """Runs between TRL's `GRPOTrainer.__init__` and transformers' `Trainer.__init__` (it follows `GRPOTrainer` in the
    MRO of `TRLBoundary`): TRL has validated the model, PEFT and reward setup by then, and transformers is about to
    build the `report_to` callbacks, which would fail on a missing backend with its own message."""

    def __init__(self, *args, **kwargs):
        training_args = kwargs.get("args")
        if training_args is not None:
            check_report_to(training_args.report_to)
        super().__init__(*args, **kwargs)


class TRLBoundary(GRPOTrainer, _ExtrasAfterTRLChecks):
    """TRL's `GRPOTrainer` with its private methods overridden once, calling public hooks (see the module docstring).

    Not used alone: `EntropyGRPOTrainer` (`base.py`) defines the levers' hooks this class calls (`shape_advantages`,
    `extra_loss`, `augment_rewards`, `get_reward_augmentations`, `needs_power_sums`, `method_state`, ...) and the
    state it reads (`_guard`, `_inspect`, `_entropy_flow`).
    """

    # Class-level defaults keep TRL's paths working on an instance built without `__init__` (a test double).
    _loss_ctx: dict[str, Any] | None = None
    _rollout_ids: tuple[list, list] | None = None
    _rollout_entropies: torch.Tensor | None = None
    _capture_rollout_entropy = False
    _warned_generation_entropy = False
    _gathered_rewards: torch.Tensor | None = None
    _skip_batch_hooks = False
    _deferring = False
    #: Hold TRL's adaptive entropy coefficient update (`use_adaptive_entropy`) until the last micro-batch of each
    #: rollout batch (the `grpo` trainer's `controller_update: rollout_batch`).
    defer_trl_entropy = False

    # ------------------------------------------------------------------------------------------------------------
    # Public hooks (no-ops here)
    # ------------------------------------------------------------------------------------------------------------
    def train_sampler(self, dataset):
        """The sampler of the training dataset, or None for TRL's (`GRPOTrainer._get_train_sampler`)."""
        return None

    def rollout_columns(self, rewards_per_func: torch.Tensor, num_generations: int) -> dict[str, torch.Tensor]:
        """Per-completion columns of the whole (gathered) generation batch, computed once per generation batch from
        its rewards (B_global, n_reward_funcs), identical on every process; each a (B_global,) tensor. The boundary
        stores each process's slice in its local batch."""
        return {}

    def finish_generation_batch(self, batch: dict[str, Any]) -> None:
        """Called with the local generation batch (TRL's output of `_generate_and_score_completions`, after the
        `rollout_columns`) before TRL buffers it; may add per-completion or per-token entries."""

    def generate_rollouts(self, generate, prompts: list):
        """Wraps the generation of one batch: `generate(prompts)` is TRL's (with healtrl's rollout-entropy capture)."""
        return generate(prompts)

    def old_logps_pass_request(self) -> dict[str, bool] | None:
        """Whether the next no-grad forward TRL runs over fresh rollouts (its old-log-prob pass) should hand its
        statistics to `receive_old_logps_stats`: None, or `{"power_sums": bool}`. Asked once per such forward."""
        return None

    def receive_old_logps_stats(self, stats: dict[str, torch.Tensor]) -> None:
        """Per-token `logp`, `entropy` (and `sum_p2`, `sum_p2_logp`) of TRL's old-log-prob pass, as requested."""

    # ------------------------------------------------------------------------------------------------------------
    # Accessors of TRL's private state
    # ------------------------------------------------------------------------------------------------------------
    @property
    def _mode(self) -> str:
        return "train" if self.model.training else "eval"

    def log_metric(self, name: str, value: float | torch.Tensor) -> None:
        """Log a scalar through TRL's metric buffer (averaged per logging step, sent to every `report_to` backend)."""
        if isinstance(value, torch.Tensor):
            value = value.item()
        self._metrics[self._mode][name].append(float(value))

    @contextlib.contextmanager
    def discarded_metrics(self):
        """Within the block, nothing reaches TRL's metric buffer (`GRPOTrainer._metrics`): restored on exit."""
        saved = copy.deepcopy(self._metrics)
        try:
            yield
        finally:
            self._metrics.clear()
            self._metrics.update(saved)

    def log_completion_columns(self, columns: dict[str, list]) -> None:
        """Add columns (one value per local completion) to TRL's `log_completions` table.

        `GRPOTrainer._log_completion_extra` is the function TRL 1.16 hands reward functions as `log_extra`; TRL gathers
        its values across processes after the rewards and adds them as columns of the completions table.
        """
        for name, values in columns.items():
            self._log_completion_extra(name, values)

    def run_output_dir(self, trial=None) -> str:
        """The run's output folder (transformers' `Trainer._get_output_dir`), where its checkpoints are."""
        return self._get_output_dir(trial=trial)

    def clip_status(self, batch: LossBatch) -> tuple[torch.Tensor, torch.Tensor]:
        """(upper_clipped, lower_clipped) masks of a loss batch under this trainer's clipping (`clip_status`)."""
        return clip_status(
            batch.per_token_logps,
            batch.old_per_token_logps,
            batch.advantages,
            batch.mask,
            self.epsilon_low,
            self.epsilon_high,
            self.importance_sampling_level,
        )

    # TRL's model-card class attributes (`_name`, `_paper`, `_tag_names`, as every TRL trainer sets them).
    @property
    def card_name(self) -> str:
        return self._name

    @property
    def card_paper(self) -> dict[str, Any]:
        return self._paper

    @property
    def card_tags(self) -> list[str]:
        return list(self._tag_names)

    # ------------------------------------------------------------------------------------------------------------
    # Policy forwards
    # ------------------------------------------------------------------------------------------------------------
    def _trl_forward(self, model, input_ids, attention_mask, logits_to_keep, *args, power_sums=False, **kwargs):
        """TRL 1.16's `_get_per_token_logps_and_entropies` under the kernel of `logprob_kernel`, plus the power sums:
        (logps, entropies, aux, sum_p2, sum_p2_logp)."""
        with self._lm_head(power_sums) as head:
            logps, entropies, aux = super()._get_per_token_logps_and_entropies(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
        sum_p2 = sum_p2_logp = None
        if power_sums:
            sum_p2, sum_p2_logp = scatter_power_sums(
                head.captured, input_ids, attention_mask, logits_to_keep, kwargs.get("batch_size")
            )
        return logps, entropies, aux, sum_p2, sum_p2_logp

    def policy_forward(
        self, input_ids, attention_mask, logits_to_keep: int, *, batch_size=None, power_sums=False, grad=False
    ) -> PolicyForward:
        """Per-token log-probs and entropies (and power sums) of the completion tokens under the policy, one forward
        through the fused LM head (TRL's `_get_per_token_logps_and_entropies`, no healtrl lever). `grad=False`: no
        gradients and no gradient checkpointing, as TRL's own no-grad passes."""
        with contextlib.ExitStack() as stack:
            if not grad:
                stack.enter_context(torch.no_grad())
                stack.enter_context(disable_gradient_checkpointing(self.model, self.args.gradient_checkpointing_kwargs))
            logps, entropies, _, sum_p2, sum_p2_logp = self._trl_forward(
                self.model,
                input_ids,
                attention_mask,
                logits_to_keep,
                power_sums=power_sums,
                batch_size=batch_size,
                compute_entropy=True,
            )
        return PolicyForward(logps, entropies, sum_p2, sum_p2_logp)

    def generate_and_score(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's `_generate_and_score_completions` of `inputs` (rows, each repeated per completion), without the
        method's generation-batch hooks (`rollout_columns`, `finish_generation_batch`)."""
        self._skip_batch_hooks = True
        try:
            return self._generate_and_score_completions(inputs)
        finally:
            self._skip_batch_hooks = False

    # ------------------------------------------------------------------------------------------------------------
    # The loss: TRL 1.16 `GRPOTrainer._compute_loss`, never copied
    # ------------------------------------------------------------------------------------------------------------
    # The levers hook into the two things `_compute_loss` does in a fixed order: it calls
    # `_get_per_token_logps_and_entropies` once for the policy (the branch with `_loss_ctx` below), then reads
    # `inputs["advantages"]`.
    def _compute_loss(self, model, inputs):
        # `defer_trl_entropy`: TRL 1.16 updates its adaptive entropy coefficient (and logs `entropy_coef`) inside
        # `_compute_loss` when `accelerator.sync_gradients` is true. On a micro-batch that ends an optimizer step but
        # not the rollout batch, report sync false to TRL's loss code after the policy forward (every healtrl lever
        # and diagnostic has seen the true state by then) and restore it before the backward pass.
        self._deferring = (
            self.defer_trl_entropy
            and self.model.training
            and self.accelerator.sync_gradients
            and (self._step + 1) % self._generate_every != 0  # this micro-batch does not end the rollout batch
        )
        if not self._deferring:
            return self._compute_loss_with_levers(model, inputs)
        state = self.accelerator.gradient_state
        try:
            loss = self._compute_loss_with_levers(model, inputs)
        finally:
            self._deferring = False
            state._set_sync_gradients(True)
        # TRL logs the coefficient at the end of every optimizer step; it skipped this one.
        self._metrics["train"]["entropy_coef"].append(self.entropy_coef)
        return loss

    def _compute_loss_with_levers(self, model, inputs):
        # TRL reads `inputs["advantages"]` after its policy forward; a shallow copy lets lever 1 replace them there
        # without touching the buffered generation batch (reused across `num_iterations`).
        inputs = dict(inputs)
        self._loss_ctx = {"inputs": inputs, "batch": None}
        try:
            loss = super()._compute_loss(model, inputs)
            batch = self._loss_ctx["batch"]
        finally:
            self._loss_ctx = None
        extra = self.extra_loss(batch) if batch is not None else None
        if extra is not None:
            normalizer = self.current_gradient_accumulation_steps if batch.mode == "train" else 1.0
            loss = loss + extra / normalizer
        if self._guard is not None and self._mode == "train":
            self._guard.record(batch, loss)
        return loss

    def _lm_head(self, power_sums: bool = False):
        """Context in which TRL's fused LM head computes with the kernel chosen by `logprob_kernel`."""
        if self._arg("logprob_kernel") == "trl":
            if power_sums:
                raise ValueError(
                    f"{type(self).__name__} needs the power sums sum_v p^2 and sum_v p^2 log p, which only healtrl's "
                    "kernel computes. Set `logprob_kernel: healtrl`."
                )
            return contextlib.nullcontext(None)
        return healtrl_lm_head(power_sums=power_sums)

    def _get_per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        out = self._per_token_logps_and_entropies(model, input_ids, attention_mask, logits_to_keep, *args, **kwargs)
        if self._deferring and self._loss_ctx is not None and self._loss_ctx["batch"] is not None:
            # The policy forward of the loss has run (and with it every healtrl lever and diagnostic, which see the
            # true sync state); from here to the end of TRL's loss code, only TRL's adaptive entropy update and its
            # `entropy_coef` log read `sync_gradients`: hold them until the rollout batch ends.
            self.accelerator.gradient_state._set_sync_gradients(False)
        return out

    def _per_token_logps_and_entropies(self, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        ctx = self._loss_ctx
        if ctx is None and model is self.model:
            request = self.old_logps_pass_request()
            if request is not None:
                # TRL's old-log-prob pass over the fresh rollouts (no grad, the policy that takes the update): the
                # method takes the entropies (and power sums) from the same forward.
                kwargs["compute_entropy"] = True
                power_sums = bool(request.get("power_sums"))
                logps, entropies, aux, sum_p2, sum_p2_logp = self._trl_forward(
                    model, input_ids, attention_mask, logits_to_keep, *args, power_sums=power_sums, **kwargs
                )
                stats = {"logp": logps, "entropy": entropies}
                if power_sums:
                    stats["sum_p2"], stats["sum_p2_logp"] = sum_p2, sum_p2_logp
                self.receive_old_logps_stats(stats)
                if self._capture_rollout_entropy:  # `rollout_entropy` wants this pass's entropies too
                    self._capture_rollout_entropy = False
                    self._rollout_entropies = entropies
                return logps, entropies, aux
        if ctx is not None and ctx["batch"] is None:
            # The policy forward of the training loss: the only model call inside `_compute_loss`.
            flow = self._entropy_flow
            power_sums = self.needs_power_sums or (flow is not None and flow.estimator == "exact")
            logps, entropies, aux, sum_p2, sum_p2_logp = self._trl_forward(
                model, input_ids, attention_mask, logits_to_keep, *args, power_sums=power_sums, **kwargs
            )
            inputs = ctx["inputs"]
            mask = inputs["completion_mask"]
            if "tool_mask" in inputs:
                mask = mask * inputs["tool_mask"]
            batch = LossBatch(
                per_token_logps=logps,
                entropies=entropies,
                mask=mask,
                advantages=inputs["advantages"],
                inputs=inputs,
                mode=self._mode,
                sum_p2=sum_p2,
                sum_p2_logp=sum_p2_logp,
            )
            ctx["batch"] = batch
            if flow is not None:
                flow.update(self, batch)
            shaped = self.shape_advantages(inputs["advantages"], batch)
            if shaped is not None:
                inputs["advantages"] = shaped
            return logps, entropies, aux
        if self._capture_rollout_entropy and model is self.model:
            # TRL's old-log-prob pass over the fresh rollouts: take the entropies from the same forward.
            self._capture_rollout_entropy = False
            kwargs["compute_entropy"] = True
            logps, entropies, aux, _, _ = self._trl_forward(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
            self._rollout_entropies = entropies
            return logps, entropies, aux
        logps, entropies, aux, _, _ = self._trl_forward(
            model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
        )
        return logps, entropies, aux

    def _trl_computes_old_logps(self) -> bool:
        # Mirrors the condition in TRL 1.16's `_generate_and_score_completions` under which it runs a no-grad policy
        # forward over the rollouts (old log-probs); `tests/test_levers.py` checks the entropies match either way.
        generate_every = self.args.steps_per_generation * self.num_iterations
        return self.args.gradient_accumulation_steps % generate_every != 0 or (
            self.use_vllm and self.vllm_importance_sampling_correction
        )

    def _entropies_from_generation(self) -> bool:
        # transformers' plain `generate`, one turn per rollout: each decoding step calls the LM head once. A
        # `rollout_func` generates elsewhere (checked first: nothing else is read then, so TRL's own checks of its
        # output run as in TRL); TRL's old-log-prob pass, when it runs, gives the entropies without any hook.
        return (
            getattr(self, "rollout_func", None) is None
            and self._arg("rollout_entropy_source") == "auto"
            and not getattr(self, "use_vllm", False)
            and not getattr(self, "use_transformers_paged", False)
            and not getattr(self, "use_transformers_continuous_batching", False)
            and not getattr(self, "tools", None)
            and not getattr(self, "_is_vlm", False)
            and not self._trl_computes_old_logps()
        )

    # ------------------------------------------------------------------------------------------------------------
    # Generation and rewards: TRL 1.16 `_generate_and_score_completions` calls `_generate`, then `_calculate_rewards`
    # ------------------------------------------------------------------------------------------------------------
    def _generate(self, prompts: list):
        return self.generate_rollouts(self._generate_with_entropies, prompts)

    def _generate_with_entropies(self, prompts: list):
        if not self._computes_rollout_entropies():
            return super()._generate(prompts)
        steps: list[torch.Tensor] | None = None
        if self._entropies_from_generation():
            steps = []
            head = self.accelerator.unwrap_model(self.model).get_output_embeddings()
            temperature = self.temperature

            def record(module, args, output):
                logits = (output[0] if isinstance(output, tuple) else output)[:, -1, :].float() / temperature
                logp = torch.log_softmax(logits, dim=-1)
                steps.append(-(logp.exp() * logp).sum(dim=-1))

            handle = head.register_forward_hook(record)
            try:
                outputs = super()._generate(prompts)
            finally:
                handle.remove()
        else:
            outputs = super()._generate(prompts)
        self._rollout_ids = (outputs[0], outputs[1])
        self._rollout_entropies = None
        self._capture_rollout_entropy = self._trl_computes_old_logps()
        if steps is not None:
            completion_ids = outputs[1]
            longest = max((len(c) for c in completion_ids), default=0)
            if steps and len(steps) >= longest and all(s.size(0) == len(completion_ids) for s in steps):
                # Step t's logits give the distribution of completion token t (prefill = the first token).
                self._rollout_entropies = torch.stack(steps[:longest], dim=1) if longest else None
            elif not self._warned_generation_entropy:
                self._warned_generation_entropy = True
                warnings.warn(
                    f"The LM head was called {len(steps)} times while generating completions of up to {longest} "
                    "tokens, so rollout entropies cannot be read off the generation logits; computing them with a "
                    "no-grad forward instead (set rollout_entropy_source: forward to skip this attempt).",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return outputs

    def _pad_ids(self, ids_list: list[list[int]], side: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and their mask, padded as TRL pads prompts (left) and completions (right)."""
        kwargs = dict(padding_side=side, pad_to_multiple_of=self.pad_to_multiple_of)
        ids = pad([torch.tensor(x) for x in ids_list], padding_value=self._tokenizer.pad_token_id, **kwargs)
        mask = pad([torch.ones(len(x), dtype=torch.long) for x in ids_list], padding_value=0, **kwargs)
        return ids.to(self.accelerator.device), mask.to(self.accelerator.device)

    def _rollout_entropy_pass(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Per-token entropies (B_local, T) of the last rollouts and their completion mask."""
        prompt_ids_list, completion_ids_list = self._rollout_ids
        completion_ids, completion_mask = self._pad_ids(completion_ids_list, "right")
        entropies = self._rollout_entropies
        if entropies is None:
            prompt_ids, prompt_mask = self._pad_ids(prompt_ids_list, "left")
            batch_size = (
                self.args.per_device_train_batch_size if self._mode == "train" else self.args.per_device_eval_batch_size
            )
            entropies = self.policy_forward(
                torch.cat([prompt_ids, completion_ids], dim=1),
                torch.cat([prompt_mask, completion_mask], dim=1),
                completion_ids.size(1),
                batch_size=batch_size,
            ).entropies
        self._rollout_entropies = None
        entropies = entropies.float().to(completion_mask.device)
        width = completion_mask.size(1)
        if entropies.size(1) < width:  # generation-time entropies stop at the longest completion, before padding
            entropies = torch.nn.functional.pad(entropies, (0, width - entropies.size(1)))
        return entropies[:, :width], completion_mask

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        self._step_entropies = None
        rewards_per_func = self._augmented_rewards(inputs, prompts, completions, completion_ids_list)
        if self._inspect is not None and self._step_entropies is not None:
            self._inspect.on_rollouts(self, prompts, completion_ids_list, rewards_per_func, self._step_entropies)
        self._gathered_rewards = rewards_per_func  # for `rollout_columns`
        return rewards_per_func

    def _augmented_rewards(self, inputs, prompts, completions, completion_ids_list):
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        if not (self._augmentation_names or self._computes_rollout_entropies()):
            return rewards_per_func

        entropies = entropy_mask = None
        if self._computes_rollout_entropies():
            if self._rollout_ids is None:
                raise RuntimeError("Rollout entropies were requested but no rollouts were recorded by `_generate`.")
            local_entropies, local_mask = self._rollout_entropy_pass()
            local_entropies = local_entropies * local_mask
            entropies = self.accelerator.gather(self.accelerator.pad_across_processes(local_entropies, dim=1))
            entropy_mask = self.accelerator.gather(self.accelerator.pad_across_processes(local_mask, dim=1))
            if self.needs_rollout_entropies:  # a metric of every step; the views' steps log `entropy/mean` instead
                self.log_metric("rollout/entropy", (entropies * entropy_mask).sum() / entropy_mask.sum().clamp(min=1))
            self._step_entropies = (local_entropies, local_mask, entropies, entropy_mask)
        if not self._augmentation_names:
            return rewards_per_func  # `rollout_entropy` alone: the entropies are logged as `rollout/entropy`

        from accelerate.utils import gather_object

        rollouts = RolloutBatch(
            prompts=gather_object(list(prompts)),
            completions=gather_object(list(completions)),
            completion_ids=gather_object([list(ids) for ids in completion_ids_list]),
            inputs=gather_object(list(inputs)),
            rewards_per_func=rewards_per_func,
            reward_func_names=list(self.reward_func_names),
            num_generations=self.num_generations if self._mode == "train" else self.num_generations_eval,
            entropies=entropies if self.needs_rollout_entropies else None,
            entropy_mask=entropy_mask if self.needs_rollout_entropies else None,
        )
        augmented = self.augment_rewards(rollouts)
        missing = set(self._augmentation_names) - set(augmented)
        if missing:
            raise RuntimeError(f"{type(self).__name__}.augment_rewards returned no values for {sorted(missing)}.")
        rewards_per_func = rewards_per_func.clone()
        for name in self._augmentation_names:
            values = torch.as_tensor(augmented[name], dtype=torch.float32, device=rewards_per_func.device)
            if values.shape != (rewards_per_func.size(0),):
                raise RuntimeError(
                    f"augment_rewards['{name}'] has shape {tuple(values.shape)}; expected "
                    f"({rewards_per_func.size(0)},), one value per completion of the gathered batch."
                )
            rewards_per_func[:, self.reward_func_names.index(name)] = values
        return rewards_per_func

    def _generate_and_score_completions(self, inputs):
        self._gathered_rewards = None
        output = super()._generate_and_score_completions(inputs)
        rewards, self._gathered_rewards = self._gathered_rewards, None
        if self._skip_batch_hooks:
            return output
        num_generations = self.num_generations if self._mode == "train" else self.num_generations_eval
        columns = self.rollout_columns(rewards, num_generations) if rewards is not None else {}
        if columns:
            local = output["advantages"].size(0)
            start = self.accelerator.process_index * local
            for name, values in columns.items():
                output[name] = values[start : start + local].to(output["advantages"].device)
        self.finish_generation_batch(output)
        return output

    def _get_train_sampler(self, dataset=None):
        sampler = self.train_sampler(dataset)
        return super()._get_train_sampler(dataset) if sampler is None else sampler

    # ------------------------------------------------------------------------------------------------------------
    # Checkpoints: method state, resume in the middle of a rollout batch, completion marker (healtrl.checkpoints)
    # ------------------------------------------------------------------------------------------------------------
    # TRL keeps the rollout batch in `_buffered_inputs` and counts micro-batches in `_step`, neither of which it
    # checkpoints, so a run resumed in the middle of a rollout batch would generate a new batch at once and restart the
    # count. The marker records the count and the batch layout; when a checkpoint falls inside a rollout batch every
    # process also saves its part of the batch (`healtrl_rollout_buffer_rank{r}.pt`), so that the resumed run takes
    # the same updates as an uninterrupted one.
    @property
    def _generate_every(self) -> int:
        """Micro-batches per rollout batch (TRL generates once every this many `training_step`s)."""
        return self.args.steps_per_generation * self.num_iterations

    def _at_rollout_boundary(self) -> bool:
        """Whether the micro-batches done so far (TRL's `_step`) end a rollout batch."""
        return self._step % self._generate_every == 0

    def _rollout_position(self) -> dict[str, Any]:
        return {
            "micro_steps": int(self._step),
            "micro_steps_per_rollout_batch": self._generate_every,
            "mid_rollout": not self._at_rollout_boundary() and self._buffered_inputs is not None,
        }

    def _mid_rollout_state(self) -> dict[str, Any]:
        """What this process holds of an unfinished rollout batch, beyond the JSON state (torch-saved per rank)."""
        state = {"buffered_inputs": self._buffered_inputs}
        if self.defer_trl_entropy:
            # TRL's entropy window of this process (`_entropy_window_stats`), open since the rollout batch began (TRL
            # checkpoints only the coefficient and the last window's entropy).
            state["trl_entropy_window"] = self._entropy_window_stats
        return state

    def _load_mid_rollout_state(self, state: dict[str, Any]) -> None:
        self._buffered_inputs = state["buffered_inputs"]
        if self.defer_trl_entropy:
            self._entropy_window_stats = state.get("trl_entropy_window")

    def _rollout_buffer_path(self, checkpoint: str) -> str:
        return os.path.join(checkpoint, ROLLOUT_BUFFER_FILE.format(rank=self.accelerator.process_index))

    def _save_checkpoint(self, model, trial):
        from transformers.trainer import rotate_checkpoints

        from ..checkpoints import MARKER_FILE, _fsync_dir, checkpoint_info, torch_save_atomic, write_json_atomic

        run_dir = self._get_output_dir(trial=trial)
        output_dir = os.path.join(run_dir, f"{PREFIX_CHECKPOINT_DIR}-{self.state.global_step}")
        marker = os.path.join(output_dir, MARKER_FILE)
        if self._guard is not None:
            self._guard.check_weights(self)  # never write a checkpoint of a model with NaN/inf weights
        if self.args.should_save and os.path.exists(marker):
            os.remove(marker)  # a folder of an earlier attempt at this step: incomplete until this save ends
        # transformers deletes old checkpoints (`save_total_limit`) at the end of its save: only once this one is
        # complete here, so that a run killed while saving keeps its last complete checkpoints.
        limit = self.args.save_total_limit
        self.args.save_total_limit = None
        try:
            super()._save_checkpoint(model, trial)
        finally:
            self.args.save_total_limit = limit
        state = self.method_state()
        if state and self.args.should_save:
            write_json_atomic(os.path.join(output_dir, STATE_FILE), state)
        rollout = self._rollout_position()
        if rollout["mid_rollout"]:
            os.makedirs(output_dir, exist_ok=True)
            torch_save_atomic(self._mid_rollout_state(), self._rollout_buffer_path(output_dir))
        self.accelerator.wait_for_everyone()  # every process's files are written
        if self.args.should_save:
            _fsync_dir(output_dir)
            extra = {"guard": self._guard.state()} if self._guard is not None else {}
            write_json_atomic(marker, checkpoint_info(self, {**rollout, **extra}))
            _fsync_dir(output_dir)
            rotate_checkpoints(
                output_dir=run_dir,
                save_total_limit=limit,
                best_model_checkpoint=self.state.best_model_checkpoint,
                use_mtime=True,
            )

    def _load_optimizer_and_scheduler(self, checkpoint):
        super()._load_optimizer_and_scheduler(checkpoint)
        if checkpoint is None:
            return
        from ..checkpoints import is_complete, read_marker

        path = os.path.join(checkpoint, STATE_FILE)
        if os.path.exists(path):
            with open(path) as f:
                self.load_method_state(json.load(f))
        elif self.method_state():
            raise FileNotFoundError(
                f"Resuming {type(self).__name__} from {checkpoint}, which has no {STATE_FILE}: the method's state "
                "(coefficients, schedules) cannot be restored. Resume from a checkpoint this trainer wrote."
            )
        if is_complete(checkpoint):
            self._restore_rollout_position(read_marker(checkpoint), checkpoint)

    def _restore_rollout_position(self, info: dict[str, Any], checkpoint: str) -> None:
        if self._guard is not None and info.get("guard"):
            self._guard.load_state(info["guard"])
        micro_steps = int(info.get("micro_steps", 0))
        saved_every = int(info.get("micro_steps_per_rollout_batch", self._generate_every))
        if not info.get("mid_rollout"):  # saved at a rollout-batch boundary: the next step generates
            self._step = micro_steps if micro_steps % self._generate_every == 0 else 0
            return
        if saved_every != self._generate_every:
            raise ValueError(
                f"The checkpoint was written in the middle of a rollout batch of {saved_every} micro-batches, but this "
                f"run's rollout batches have {self._generate_every} (steps_per_generation * num_iterations). Resume "
                "with the checkpoint's steps_per_generation and num_iterations."
            )
        path = self._rollout_buffer_path(checkpoint)
        if not os.path.exists(path):
            raise FileNotFoundError(
                f"{checkpoint} was saved in the middle of a rollout batch, but {os.path.basename(path)} (this "
                "process's part of that batch) is missing: the run cannot continue the batch. Resume with as many "
                "processes as wrote the checkpoint, or from a checkpoint at a rollout-batch boundary."
            )
        self._step = micro_steps  # TRL's counter: where in the rollout batch the run stands
        # Onto the CPU first: tensors saved by a CPU process of a gloo group carry the location tag "cpu:0", which
        # torch.load cannot map to a device by itself; then onto this process's device.
        state = torch.load(path, map_location="cpu", weights_only=True)
        device = self.accelerator.device

        def to_device(value):
            if isinstance(value, torch.Tensor):
                return value.to(device)
            if isinstance(value, dict):
                return {key: to_device(item) for key, item in value.items()}
            if isinstance(value, (list, tuple)):
                return type(value)(to_device(item) for item in value)
            return value

        self._load_mid_rollout_state(to_device(state))
