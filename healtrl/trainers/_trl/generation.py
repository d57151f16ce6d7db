"""Generation and rewards: TRL 1.16 `_generate_and_score_completions` calls `_generate`, then `_calculate_rewards`.

`GenerationCalls` (a part of `TRLBoundary`) states the call (`TRLCall.GENERATE_AND_SCORE`) and, inside it:

- wraps `_generate` in the `generate_rollouts` hook, recording the rollout ids and, when rollout entropies are wanted,
  the entropies read off the generation logits (transformers `generate`) or taken from TRL's old-log-prob pass;
- takes TRL's old-log-prob pass (its first policy forward in the call, when it runs: `_trl_computes_old_logps`)
  through `_old_logps_forward`, handing its statistics to `receive_old_logps_stats` on request;
- adds the reward augmentations (lever 3) to `_calculate_rewards`' gathered rewards, and the entropy views' rollouts;
- puts `rollout_columns` into the local batch and calls `finish_generation_batch` before TRL buffers it.

`generate_and_score` runs the call without the batch hooks; `fsdp_helper` hands out TRL's FSDP helper.
"""

from __future__ import annotations

import warnings
from typing import Any

import torch
from trl.trainer.utils import pad

from .batches import RolloutBatch
from .hooks import CallState, TRLCall
from .lm_head import LMHeadForwards


def fsdp_helper(trainer):
    """TRL 1.16's FSDP helper of a trainer (`GRPOTrainer._dist`, whose `summon_full_params` gathers the parameters for
    generation), or None (no FSDP, or a trainer without one)."""
    return getattr(trainer, "_dist", None)


class GenerationCalls(LMHeadForwards):
    """`GRPOTrainer._generate_and_score_completions` and what it calls, with the hooks (a part of `TRLBoundary`)."""

    # Class-level defaults keep TRL's paths working on an instance built without `__init__` (a test double).
    _rollout_ids: tuple[list, list] | None = None  # (prompt_ids, completion_ids) of the last `_generate`
    _rollout_entropies: torch.Tensor | None = None  # captured from TRL's old-log-prob pass or the generation logits
    _capture_rollout_entropy = False
    _warned_generation_entropy = False
    _gathered_rewards: torch.Tensor | None = None
    _skip_batch_hooks = False
    _step_entropies = None  # (local, local mask, gathered, gathered mask) rollout entropies of this batch

    def generate_and_score(self, inputs: list[dict[str, Any]]) -> dict[str, Any]:
        """TRL's `_generate_and_score_completions` of `inputs` (rows, each repeated per completion), without the
        method's generation-batch hooks (`rollout_columns`, `finish_generation_batch`)."""
        self._skip_batch_hooks = True
        try:
            return self._generate_and_score_completions(inputs)
        finally:
            self._skip_batch_hooks = False

    def _generate_and_score_completions(self, inputs):
        self._gathered_rewards = None
        with self._inside(TRLCall.GENERATE_AND_SCORE):
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
    # TRL's old-log-prob pass
    # ------------------------------------------------------------------------------------------------------------
    def _is_old_logps_pass(self, call: CallState, model) -> bool:
        """Whether a forward TRL runs now is its old-log-prob pass: the first policy forward of
        `_generate_and_score_completions`, which TRL 1.16 runs (before the reference forward) only when
        `_trl_computes_old_logps`."""
        return (
            call.call is TRLCall.GENERATE_AND_SCORE
            and not call.old_logps_done
            and model is self.model
            and self._trl_computes_old_logps()
        )

    def _old_logps_forward(self, call: CallState, model, input_ids, attention_mask, logits_to_keep, *args, **kwargs):
        """TRL's old-log-prob pass over the fresh rollouts (no grad, the policy that takes the update): the method
        (`old_logps_pass_request`) and `rollout_entropy` take the entropies (and power sums) from the same forward."""
        call.old_logps_done = True
        request = self.old_logps_pass_request()
        if request is None and not self._capture_rollout_entropy:
            logps, entropies, aux, _, _ = self._trl_forward(
                model, input_ids, attention_mask, logits_to_keep, *args, **kwargs
            )
            return logps, entropies, aux
        kwargs["compute_entropy"] = True
        power_sums = request is not None and bool(request.get("power_sums"))
        logps, entropies, aux, sum_p2, sum_p2_logp = self._trl_forward(
            model, input_ids, attention_mask, logits_to_keep, *args, power_sums=power_sums, **kwargs
        )
        if request is not None:
            stats = {"logp": logps, "entropy": entropies}
            if power_sums:
                stats["sum_p2"], stats["sum_p2_logp"] = sum_p2, sum_p2_logp
            self.receive_old_logps_stats(stats)
        if self._capture_rollout_entropy:  # `rollout_entropy` wants this pass's entropies too
            self._capture_rollout_entropy = False
            self._rollout_entropies = entropies
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
    # Generation and rewards
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
