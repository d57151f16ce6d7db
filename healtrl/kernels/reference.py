"""Plain float64 reference for the fused LM-head statistics (tests and benchmarks only).

It materialises the full ``[N, V]`` logits in float64, so use it on small shapes. It is differentiable: pass float64
leaves to get float64 gradients that the fused kernels are compared against.
"""

from __future__ import annotations

import torch

from ._types import LogProbEntropy


def reference_logprob_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    power_sums: bool = False,
) -> LogProbEntropy:
    """Float64 ``logp``, ``entropy`` (and the power sums) of ``logits = (hidden @ weight.T + bias) / temperature``.

    Same semantics as :func:`healtrl.kernels.fused_logprob_entropy`; every output is float64. The power sums are
    detached (the fused kernels return them without gradient too).
    """
    logits = hidden.double() @ weight.double().t()
    if bias is not None:
        logits = logits + bias.double()
    logits = logits / temperature
    log_probs = torch.log_softmax(logits, dim=-1)
    probs = log_probs.exp()
    logp = log_probs.gather(-1, targets.long().unsqueeze(-1)).squeeze(-1)
    # p * log p with p = 0 is 0: log_probs is finite for finite logits, so the product is 0 there already
    entropy = -(probs * log_probs).sum(-1)
    sum_p2 = sum_p2_logp = None
    if power_sums:
        p2 = (probs * probs).detach()
        sum_p2 = p2.sum(-1)
        sum_p2_logp = (p2 * log_probs.detach()).sum(-1)
    return LogProbEntropy(logp, entropy, sum_p2, sum_p2_logp)
