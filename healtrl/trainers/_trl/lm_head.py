"""The fused LM head: TRL's forward computes through healtrl's kernel (`healtrl.kernels.fused_logprob_entropy`).

TRL 1.16 patches the policy (and reference) model with `add_fused_lm_head`: called with `fused_lm_head=True`, the
forward runs the backbone, selects the scored positions, gathers sharded LM-head weights (FSDP2 DTensors, ZeRO-3),
and hands hidden states, weight, bias and labels to `trl.trainer.utils._ChunkedLogProbFunction.apply`. healtrl keeps
all of that and swaps only the last call (`healtrl_lm_head`), for the duration of one
`_get_per_token_logps_and_entropies` call, so the same pass can also return the power sums sum_v p^2 and
sum_v p^2 log p that OPEFO's exact entropy-change estimator needs; `scatter_power_sums` lays them out as TRL lays out
its per-token outputs.

The swap serves what the kernel computes exactly; everything else goes to TRL's own function, never to wrong numbers:
final-logit soft-capping (Gemma 2), a logit scale other than 1 (Cohere, Granite, ...), the extra TRL outputs
`mean_logits` / `is_top1`, and DeepSpeed ZeRO-3 (whose partitioned head would have to be gathered again in the
kernel's backward). `HealtrlLogProbFunction.fallbacks` counts those calls.

`LMHeadForwards` (a part of `TRLBoundary`) runs TRL's forward under the kernel chosen by `logprob_kernel`
(`_trl_forward`) and offers it to the methods as `policy_forward`.
"""

from __future__ import annotations

import contextlib
from dataclasses import dataclass, field
from typing import NamedTuple

import torch
import trl.trainer.utils as trl_utils
from trl.kernels.chunked_logprob import _use_triton
from trl.models.utils import disable_gradient_checkpointing

from ...kernels import fused_logprob_entropy
from .hooks import BoundaryHooks

KERNELS = ("healtrl", "trl")


@dataclass
class HealtrlLogProbFunction:
    """Drop-in for `_ChunkedLogProbFunction` (same `apply` signature and 5-tuple result)."""

    original: type
    power_sums: bool = False
    captured: list = field(default_factory=list)  # (sum_p2, sum_p2_logp) per call, compact or flat like the outputs
    calls: int = 0
    fallbacks: int = 0

    def apply(self, hidden, weight, bias, labels, temperature, chunk_size, softcap, logit_scale, outputs):
        unsupported = softcap is not None or logit_scale != 1.0 or bool({"mean_logits", "is_top1"} & set(outputs))
        if unsupported or _zero3_enabled():
            self.fallbacks += 1
            if self.power_sums:
                raise NotImplementedError(
                    "The power sums sum_v p^2 and sum_v p^2 log p (needed by this trainer) come from healtrl's kernel, "
                    "which cannot serve this model (final-logit soft-capping, a logit scale, or DeepSpeed ZeRO-3). "
                    "Choose an estimator that needs no power sums."
                )
            return self.original.apply(
                hidden, weight, bias, labels, temperature, chunk_size, softcap, logit_scale, outputs
            )
        self.calls += 1
        if hidden.dtype != weight.dtype:
            # Mixed precision: TRL calls the head inside autocast, where the projection runs in the autocast dtype.
            device_type = hidden.device.type
            dtype = torch.get_autocast_dtype(device_type) if torch.is_autocast_enabled(device_type) else weight.dtype
            hidden, weight = hidden.to(dtype), weight.to(dtype)
            bias = None if bias is None else bias.to(dtype)
        need_sums = self.power_sums or "log_sum_sq_probs" in outputs
        result = fused_logprob_entropy(hidden, weight, labels, bias=bias, temperature=temperature, power_sums=need_sums)
        if self.power_sums:
            self.captured.append((result.sum_p2, result.sum_p2_logp))
        entropy = result.entropy if "entropy" in outputs else None
        log_sum_sq = result.sum_p2.log() if "log_sum_sq_probs" in outputs else None
        return result.logp, entropy, log_sum_sq, None, None


def _zero3_enabled() -> bool:
    from transformers.integrations.deepspeed import is_deepspeed_zero3_enabled

    return is_deepspeed_zero3_enabled()


@contextlib.contextmanager
def healtrl_lm_head(power_sums: bool = False):
    """Within the block, TRL's fused LM head computes through healtrl's kernel; yields the function (its captures).

    TRL 1.16's fused forward calls `trl.trainer.utils._ChunkedLogProbFunction.apply`; the block swaps that module
    attribute for `HealtrlLogProbFunction` and restores it after.
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


class PolicyForward(NamedTuple):
    """Per-token outputs of one policy forward, (B, T) over completion tokens; the power sums are None unless asked."""

    logps: torch.Tensor
    entropies: torch.Tensor
    sum_p2: torch.Tensor | None = None
    sum_p2_logp: torch.Tensor | None = None


class LMHeadForwards(BoundaryHooks):
    """TRL's `_get_per_token_logps_and_entropies` under the kernel of `logprob_kernel` (a part of `TRLBoundary`)."""

    def _lm_head(self, power_sums: bool = False):
        """Context in which TRL's fused LM head computes with the kernel chosen by `logprob_kernel`."""
        if self.config_value("logprob_kernel") == "trl":
            if power_sums:
                raise ValueError(
                    f"{type(self).__name__} needs the power sums sum_v p^2 and sum_v p^2 log p, which only healtrl's "
                    "kernel computes. Set `logprob_kernel: healtrl`."
                )
            return contextlib.nullcontext(None)
        return healtrl_lm_head(power_sums=power_sums)

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
