"""The result type of the fused LM-head statistics, shared by the dispatcher (`api`) and its backends."""

from __future__ import annotations

from typing import NamedTuple

import torch


class LogProbEntropy(NamedTuple):
    """Per-token statistics, each ``[N]`` float32 (float64 from the reference).

    ``logp`` and ``entropy`` are differentiable with respect to hidden, weight and bias; ``sum_p2`` and
    ``sum_p2_logp`` are ``None`` unless ``power_sums=True`` and never carry gradient.
    """

    logp: torch.Tensor
    entropy: torch.Tensor
    sum_p2: torch.Tensor | None = None
    sum_p2_logp: torch.Tensor | None = None
