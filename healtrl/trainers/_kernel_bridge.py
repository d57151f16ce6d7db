"""Routes TRL's fused LM head through healtrl's kernel (`healtrl.kernels.fused_logprob_entropy`).

TRL 1.16 patches the policy (and reference) model with `add_fused_lm_head`: called with `fused_lm_head=True`, the
forward runs the backbone, selects the scored positions, gathers sharded LM-head weights (FSDP2 DTensors, ZeRO-3),
and hands hidden states, weight, bias and labels to `trl.trainer.utils._ChunkedLogProbFunction.apply`. healtrl keeps
all of that and swaps only the last call, for the duration of one `_get_per_token_logps_and_entropies` call, so the
same pass can also return the power sums sum_v p^2 and sum_v p^2 log p that OPEFO's exact entropy-change estimator
needs.

The swap serves what the kernel computes exactly; everything else goes to TRL's own function, never to wrong numbers:
final-logit soft-capping (Gemma 2), a logit scale other than 1 (Cohere, Granite, ...), the extra TRL outputs
`mean_logits` / `is_top1`, and DeepSpeed ZeRO-3 (whose partitioned head would have to be gathered again in the
kernel's backward). `HealtrlLogProbFunction.fallbacks` counts those calls.

The swap itself (`healtrl_lm_head`, which replaces TRL's private `_ChunkedLogProbFunction`) and the layout of the
power sums (`scatter_power_sums`, which mirrors TRL's) are in the TRL boundary, `healtrl/trainers/_trl.py`.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from ..kernels import fused_logprob_entropy

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
