"""Fused LM-head kernels: per-token log-probability, full-vocabulary entropy and the power sums
``sum_v p^2`` and ``sum_v p^2 log p`` of ``softmax((hidden @ weight.T + bias) / T)``, with gradients, without ever
holding ``[N, V]`` logits in memory.

- :func:`fused_logprob_entropy`: the entry point (validation, backend dispatch).
- ``torch_chunked``: chunked torch path (CPU and any device).
- ``triton_fused``: fused Triton path (CUDA; CPU tensors under ``TRITON_INTERPRET=1``).
- ``triton_chunked``: chunked CUDA path, cuBLAS GEMMs + Triton softmax statistics (same interpreter rule).
- ``dispatch``: which CUDA path ``backend="auto"`` takes per device and hidden size (a measured table).
- :func:`reference_logprob_entropy`: materialised float64 reference for tests.

What it may import: torch, Triton and the standard library only, nothing of healtrl's (beside `healtrl.functional`
in `pyproject.toml`'s import contract, which it must not import).
"""

from .api import LogProbEntropy, fused_logprob_entropy, resolve_backend, triton_available
from .reference import reference_logprob_entropy

__all__ = [
    "LogProbEntropy",
    "fused_logprob_entropy",
    "reference_logprob_entropy",
    "resolve_backend",
    "triton_available",
]
