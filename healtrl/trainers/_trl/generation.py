"""Generation and rewards: TRL 1.16 `_generate_and_score_completions` calls `_generate`, then `_calculate_rewards`.

`GenerationCalls` (a part of `TRLBoundary`) creates one `GenerationCall` (`hooks.py`) per call, states it
(`TRLCall.GENERATE_AND_SCORE`) and, inside it:

- provides the rollout statistics the trainer asks for (`rollout_stats_needed`, plus "entropy" on the entropy views'
  steps) from the cheapest source, decided in `_generate` (`GenerationCall.stats_plan`): TRL's old-log-prob pass when
  TRL runs it (its first policy forward in the call, `trl_computes_old_logps`, taken through `_old_logps_forward`),
  else the generation's own LM-head logits when transformers generates (`generation_stats.GenerationStats` hooks the
  LM head around `_generate`), else one no-grad forward over the rollouts; what it provided (a `RolloutStats`, naming
  its source) is kept in the call's state (`GenerationCall.rollout_stats`) and handed to `finish_generation_batch`;
- adds the reward augmentations (lever 3) to `_calculate_rewards`' gathered rewards, and hands the entropy views the
  rollouts with their entropies (`RolloutInspector.on_rollouts`, arguments only);
- puts `rollout_columns` (from the gathered rewards, `GenerationCall.gathered_rewards`) into the local batch and calls
  `finish_generation_batch(batch, stats)` before TRL buffers it.

Nothing of one generation batch stays on the trainer after its call: the state is the call's. The trainer keeps only
what lasts for its lifetime: whether the generation-logits warning was given and which statistics sources were logged
(each once per trainer).

`generate_and_score` runs the call without the batch hooks; `fsdp_helper` hands out TRL's FSDP helper.
"""

from __future__ import annotations

import logging
import warnings
from typing import Any

import torch
from trl.trainer.utils import pad

from .batches import ROLLOUT_STAT_KEYS, ROLLOUT_STAT_SOURCES, RolloutBatch, RolloutStats
from .generation_stats import GenerationStats
from .hooks import CallState, GenerationCall
from .lm_head import LMHeadForwards

logger = logging.getLogger(__name__)
POWER_SUM_KEYS = frozenset({"sum_p2", "sum_p2_logp"})


def fsdp_helper(trainer):
    """TRL 1.16's FSDP helper of a trainer (`GRPOTrainer._dist`, whose `summon_full_params` gathers the parameters for
    generation), or None (no FSDP, or a trainer without one)."""
    return getattr(trainer, "_dist", None)


class GenerationCalls(LMHeadForwards):
    """`GRPOTrainer._generate_and_score_completions` and what it calls, with the hooks (a part of `TRLBoundary`)."""

    # Once per trainer (class-level defaults keep TRL's paths working on an instance built without `__init__`).
    _warned_generation_stats = False  # the warning that the generation logits could not be read was given
    _stats_sources_logged: frozenset = frozenset()  # the sources of rollout statistics logged so far

    def generate_and_score(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's `_generate_and_score_completions` of `inputs` (rows, each repeated per completion), without the
        method's generation-batch hooks (`rollout_columns`, `finish_generation_batch`)."""
        return self._scored_generation_batch(inputs, GenerationCall(batch_hooks=False))

    def _generate_and_score_completions(self, inputs):
        return self._scored_generation_batch(inputs, GenerationCall())

    def _scored_generation_batch(self, inputs, call: GenerationCall) -> dict[str, Any]:
        """TRL's `_generate_and_score_completions` inside `call`, then (with `call.batch_hooks`) the batch hooks, each
        handed what the call gathered."""
        with self._inside(call):
            output = super()._generate_and_score_completions(inputs)
        if not call.batch_hooks:
            return output
        stats = call.rollout_stats
        if call.stats_keys and stats is None:  # not needed by the rewards: provide it now
            stats = self._provide_rollout_stats(call)
        num_generations = self.num_generations if self.mode == "train" else self.num_generations_eval
        rewards = call.gathered_rewards
        columns = self.rollout_columns(rewards, num_generations) if rewards is not None else {}
        if columns:
            local = output["advantages"].size(0)
            start = self.accelerator.process_index * local
            for name, values in columns.items():
                output[name] = values[start : start + local].to(output["advantages"].device)
        self.finish_generation_batch(output, stats)
        return output

    def _get_train_sampler(self, dataset=None):
        sampler = self.train_sampler(dataset)
        return super()._get_train_sampler(dataset) if sampler is None else sampler

    # ------------------------------------------------------------------------------------------------------------
    # TRL's old-log-prob pass
    # ------------------------------------------------------------------------------------------------------------
    def _is_old_logps_pass(self, call: CallState, model) -> bool:
        """Whether a forward TRL runs now is its old-log-prob pass: the first policy forward of
        `_generate_and_score_completions`, which TRL 1.16 runs (before the reference forward) only when
        `trl_computes_old_logps`."""
        return (
            isinstance(call, GenerationCall)
            and not call.old_logps_done
            and model is self.model
            and self.trl_computes_old_logps()
        )

    def _old_logps_forward(
        self, call: GenerationCall, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
    ):
        """TRL's old-log-prob pass over the fresh rollouts (no grad, the policy that takes the update): when the rollout
        statistics are to come from it, the same forward also computes the entropies (and power sums)."""
        call.old_logps_done = True
        if call.stats_plan != "old_logps":
            logps, entropies, aux, _, _ = self._trl_forward(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
            return logps, entropies, aux
        kwargs["compute_entropy"] = True
        power_sums = bool(call.stats_keys & POWER_SUM_KEYS)
        logps, entropies, aux, sum_p2, sum_p2_logp = self._trl_forward(
            model, input_ids, attention_mask, logits_to_keep, *args, power_sums=power_sums, **kwargs
        )
        values = {"logp": logps, "entropy": entropies, "sum_p2": sum_p2, "sum_p2_logp": sum_p2_logp}
        call.captured = ("old_logps", values)
        return logps, entropies, aux

    def trl_computes_old_logps(self) -> bool:
        """Whether TRL runs its old-log-prob pass over each rollout batch: when the batch serves more than one update
        (`gradient_accumulation_steps` is not a multiple of `micro_steps_per_rollout_batch`) or vLLM's
        importance-sampling correction is on. False: every update is on-policy, logp_old = logp."""
        # Mirrors the condition in TRL 1.16's `_generate_and_score_completions` under which it runs a no-grad policy
        # forward over the rollouts (old log-probs); `tests/test_levers.py` checks the entropies match either way.
        return self.args.gradient_accumulation_steps % self.micro_steps_per_rollout_batch != 0 or (
            self.use_vllm and self.vllm_importance_sampling_correction
        )

    def _generation_logits_readable(self) -> bool:
        # transformers' plain `generate`, one turn per rollout: each decoding step calls the LM head once. A
        # `rollout_func` generates elsewhere (checked first: nothing else is read then, so TRL's own checks of its
        # output run as in TRL); TRL's old-log-prob pass, when it runs, gives the statistics without any hook.
        return (
            getattr(self, "rollout_func", None) is None
            and self.config_value("rollout_entropy_source") == "auto"
            and not getattr(self, "use_vllm", False)
            and not getattr(self, "use_transformers_paged", False)
            and not getattr(self, "use_transformers_continuous_batching", False)
            and not getattr(self, "tools", None)
            and not getattr(self, "_is_vlm", False)
            and not self.trl_computes_old_logps()
        )

    # ------------------------------------------------------------------------------------------------------------
    # The rollout statistics
    # ------------------------------------------------------------------------------------------------------------
    def _rollout_stats_wanted(self) -> frozenset[str]:
        keys = set(self.rollout_stats_needed())
        unknown = keys - set(ROLLOUT_STAT_KEYS)
        if unknown:
            raise ValueError(
                f"{type(self).__name__}.rollout_stats_needed asked for {sorted(unknown)}; the boundary provides "
                f"{list(ROLLOUT_STAT_KEYS)}."
            )
        if self._inspect is not None and self._inspect.wants_entropies(self):
            keys.add("entropy")  # the entropy views and metrics (not handed to lever 3)
        return frozenset(keys)

    def _generate(self, prompts: list):
        # Inside `_generate_and_score_completions` (where TRL 1.16 calls it) the request, the plan and what generation
        # captured go into that call's state. A direct call (tests and benchmarks generate with it) records into a
        # state of its own, which nothing reads afterwards: it generates, and hooks the LM head, exactly as in a call.
        call = self._call if isinstance(self._call, GenerationCall) else GenerationCall(batch_hooks=False)
        call.captured = None
        call.stats_keys = self._rollout_stats_wanted()
        # The generation logits are the cheapest source, and must be known before generating (to hook the LM head); the
        # others are decided after it, so that a failing `rollout_func` raises its own error first.
        readable = bool(call.stats_keys) and self._generation_logits_readable()
        if not readable:
            outputs = super()._generate(prompts)
        else:
            model = self.accelerator.unwrap_model(self.model)
            power_sums = bool(call.stats_keys & POWER_SUM_KEYS)
            with GenerationStats(model, self.temperature, power_sums=power_sums) as recorder:
                outputs = super()._generate(prompts)
            values = recorder.per_token(outputs[1])
            if values is not None:
                call.captured = ("generation", values)
            elif not self._warned_generation_stats:
                self._warned_generation_stats = True
                warnings.warn(
                    f"The LM head was called {len(recorder.steps)} times while generating completions that do not line "
                    "up with those calls, so the rollout statistics cannot be read off the generation logits; "
                    "computing them with a no-grad forward instead (set rollout_entropy_source: forward to skip this "
                    "attempt).",
                    RuntimeWarning,
                    stacklevel=2,
                )
        call.stats_plan = None
        if call.stats_keys:
            call.stats_plan = "generation" if readable else "old_logps" if self.trl_computes_old_logps() else "forward"
        call.rollout_ids = (outputs[0], outputs[1])
        return outputs

    def _provide_rollout_stats(self, call: GenerationCall) -> RolloutStats:
        """The statistics `call` requested of its rollouts (B_local, T), from what it captured (taken from the call),
        else one no-grad forward (the plan's "forward", or a generation whose LM-head calls did not line up)."""
        if call.rollout_ids is None:
            raise RuntimeError("Rollout statistics were requested but no rollouts were recorded by `_generate`.")
        prompt_ids_list, completion_ids_list = call.rollout_ids
        completion_ids, completion_mask = self._pad_ids(completion_ids_list, "right")
        captured, call.captured = call.captured, None
        if captured is None:
            prompt_ids, prompt_mask = self._pad_ids(prompt_ids_list, "left")
            batch_size = (
                self.args.per_device_train_batch_size if self.mode == "train" else self.args.per_device_eval_batch_size
            )
            forward = self.policy_forward(
                torch.cat([prompt_ids, completion_ids], dim=1),
                torch.cat([prompt_mask, completion_mask], dim=1),
                completion_ids.size(1),
                batch_size=batch_size,
                power_sums=bool(call.stats_keys & POWER_SUM_KEYS),
            )
            captured = ("forward", dict(zip(ROLLOUT_STAT_KEYS, forward, strict=True)))
        source, values = captured
        width = completion_mask.size(1)
        mask = completion_mask.to(torch.float32)
        stats = {}
        for key in sorted(call.stats_keys):
            value = values[key].float().to(completion_mask.device)
            if value.size(1) < width:  # generation-time statistics stop at the longest completion, before padding
                value = torch.nn.functional.pad(value, (0, width - value.size(1)))
            stats[key] = value[:, :width] * mask
        if source not in self._stats_sources_logged:
            self._stats_sources_logged = self._stats_sources_logged | {source}
            logger.info("Rollout statistics %s: %s.", sorted(stats), ROLLOUT_STAT_SOURCES[source])
        return RolloutStats(source=source, mask=completion_mask, values=stats)

    # ------------------------------------------------------------------------------------------------------------
    # Rewards
    # ------------------------------------------------------------------------------------------------------------
    def _pad_ids(self, ids_list: list[list[int]], side: str) -> tuple[torch.Tensor, torch.Tensor]:
        """Token ids and their mask, padded as TRL pads prompts (left) and completions (right)."""
        kwargs = dict(padding_side=side, pad_to_multiple_of=self.pad_to_multiple_of)
        ids = pad([torch.tensor(x) for x in ids_list], padding_value=self._tokenizer.pad_token_id, **kwargs)
        mask = pad([torch.ones(len(x), dtype=torch.long) for x in ids_list], padding_value=0, **kwargs)
        return ids.to(self.accelerator.device), mask.to(self.accelerator.device)

    def _calculate_rewards(self, inputs, prompts, completions, completion_ids_list):
        call = self._generation_call()
        rewards_per_func, entropies = self._augmented_rewards(call, inputs, prompts, completions, completion_ids_list)
        if self._inspect is not None and entropies is not None:
            self._inspect.on_rollouts(self, prompts, completion_ids_list, rewards_per_func, entropies)
        call.gathered_rewards = rewards_per_func  # for `rollout_columns`
        return rewards_per_func

    def _generation_call(self) -> GenerationCall:
        """The state of the `_generate_and_score_completions` call running now (TRL 1.16 calls `_calculate_rewards`
        only inside it); a RuntimeError otherwise, rather than results that no hook would receive."""
        call = self._call
        if not isinstance(call, GenerationCall):
            raise RuntimeError(
                "TRL computed rewards outside GRPOTrainer._generate_and_score_completions; healtrl's reward and "
                "generation-batch hooks follow TRL 1.16, which computes them only inside it. Read "
                "healtrl/trainers/_trl/generation.py against this TRL release."
            )
        return call

    def _augmented_rewards(self, call: GenerationCall, inputs, prompts, completions, completion_ids_list):
        """TRL's gathered rewards with the augmentation columns filled (lever 3), and the rollout entropies when they
        were requested: `(local, local_mask, gathered, gathered_mask)`, right-padded, else None."""
        rewards_per_func = super()._calculate_rewards(inputs, prompts, completions, completion_ids_list)
        wants_entropies = "entropy" in call.stats_keys
        if not (self._augmentation_names or wants_entropies):
            return rewards_per_func, None

        entropies = entropy_mask = step_entropies = None
        if wants_entropies:
            stats = self._provide_rollout_stats(call)
            call.rollout_stats = stats  # for `finish_generation_batch`
            local_entropies, local_mask = stats["entropy"], stats.mask
            entropies = self.accelerator.gather(self.accelerator.pad_across_processes(local_entropies, dim=1))
            entropy_mask = self.accelerator.gather(self.accelerator.pad_across_processes(local_mask, dim=1))
            if self.needs_rollout_entropies:  # a metric of every step; the views' steps log `entropy/mean` instead
                self.log_metric("rollout/entropy", (entropies * entropy_mask).sum() / entropy_mask.sum().clamp(min=1))
            step_entropies = (local_entropies, local_mask, entropies, entropy_mask)
        if not self._augmentation_names:
            return rewards_per_func, step_entropies  # `rollout_entropy` alone: logged as `rollout/entropy`

        from accelerate.utils import gather_object

        rollouts = RolloutBatch(
            prompts=gather_object(list(prompts)),
            completions=gather_object(list(completions)),
            completion_ids=gather_object([list(ids) for ids in completion_ids_list]),
            inputs=gather_object(list(inputs)),
            rewards_per_func=rewards_per_func,
            reward_func_names=list(self.reward_func_names),
            num_generations=self.num_generations if self.mode == "train" else self.num_generations_eval,
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
        return rewards_per_func, step_entropies
