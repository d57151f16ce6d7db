"""HEAL's general-domain data-selection score (Liu et al., *HEALing Entropy Collapse*, §3.1, eq. 1).

For a question x with N sampled trajectories y_1 .. y_N:

    Acc(x)         = 1/N sum_i 1[y_i is correct]
    Uncertainty(x) = 1 - 2 |Acc(x) - 1/2|                      (Reasoning Uncertainty, §3.1)
    Diversity(x)   = mean over trajectories of the mean entropy of each trajectory's top-20% highest-entropy tokens
                                                                (Exploratory Diversity, §3.1)
    c(x)           = Uncertainty(x) * Diversity(x)              (eq. 1)

Count rule (the paper says "top 20% of tokens" and gives no rounding): a trajectory of L >= 1 tokens keeps its
k = max(1, ceil(top_fraction * L)) highest-entropy tokens, the product rounded to 6 decimals before the ceiling so that
floating-point error cannot add a token (0.2 * 15 is 3.0000000000000004 in binary floating point: k = 3, not 4).
An empty trajectory (no completion token) has no entropy and is left out of its question's mean; a question whose
trajectories are all empty gets Diversity 0 (so score 0). Its accuracy still counts all N trajectories.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch

__all__ = ["selection_scores", "top_fraction_counts"]

# Rows of padded entropies handled per `topk` call: bounds the padded workspace to rows x longest trajectory.
_ROWS_PER_CHUNK = 4096


def top_fraction_counts(lengths: torch.Tensor, top_fraction: float) -> torch.Tensor:
    """Number of highest-entropy tokens kept per trajectory: ``max(1, ceil(top_fraction * L))``, 0 when ``L = 0``.

    Args:
        lengths: ``[R]`` integer trajectory lengths (>= 0).
        top_fraction: Share of tokens kept, in ``(0, 1]`` (HEAL: 0.2).

    Returns:
        ``[R]`` int64 counts, each in ``[0, L]``.
    """
    _check_fraction(top_fraction)
    lengths = torch.as_tensor(lengths, dtype=torch.int64)
    # The product is rounded before the ceiling so that 0.2 * 15 gives 3 (see the module docstring).
    counts = torch.ceil(torch.round(lengths.double() * top_fraction, decimals=6)).to(torch.int64)
    counts = torch.minimum(counts.clamp(min=1), lengths)
    return counts


def _check_fraction(top_fraction) -> None:
    if isinstance(top_fraction, bool) or not isinstance(top_fraction, (int, float)):
        raise TypeError(f"top_fraction must be a number in (0, 1], got {type(top_fraction).__name__}")
    if not (math.isfinite(top_fraction) and 0 < top_fraction <= 1):
        raise ValueError(f"top_fraction must be in (0, 1] (HEAL uses 0.2: the top 20% of tokens), got {top_fraction}")


def _as_correct(correct) -> torch.Tensor:
    if not isinstance(correct, torch.Tensor):
        try:
            correct = torch.as_tensor(correct)
        except (TypeError, ValueError) as exc:
            raise TypeError(
                f"correct must be a [Q, N] tensor (or nested lists) of booleans or 0/1 values: {exc}"
            ) from exc
    if correct.dim() != 2:
        raise ValueError(f"correct must be 2-D [Q questions, N rollouts], got shape {tuple(correct.shape)}")
    if correct.shape[1] == 0:
        raise ValueError("correct has N = 0 rollouts per question: Acc(x) needs at least one rollout")
    if correct.is_complex():
        raise TypeError(f"correct must hold booleans or 0/1 numbers, got {correct.dtype}")
    values = correct.double()
    bad = ~((values == 0) | (values == 1))
    if bool(bad.any()):
        q, n = (int(i) for i in bad.nonzero()[0])
        raise ValueError(
            f"correct must hold booleans or 0/1 values, got {values[q, n].item()} at [{q}, {n}]: threshold rewards first "
            "(e.g. `rewards > 0.5`)"
        )
    return values


def _top_fraction_means(rows: list[torch.Tensor], top_fraction: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Mean of each row's top-``top_fraction`` entries (float64 ``[R]``, 0 for empty rows) and its count ``[R]``."""
    lengths = torch.tensor([row.numel() for row in rows], dtype=torch.int64)
    counts = top_fraction_counts(lengths, top_fraction)
    means = torch.zeros(len(rows), dtype=torch.float64)
    for start in range(0, len(rows), _ROWS_PER_CHUNK):
        stop = min(start + _ROWS_PER_CHUNK, len(rows))
        chunk_counts = counts[start:stop]
        k_max = int(chunk_counts.max()) if stop > start else 0
        if k_max == 0:
            continue
        # Pad with -inf: a row's k <= L largest values are then all real entries.
        padded = torch.nn.utils.rnn.pad_sequence(
            [row.double() for row in rows[start:stop]], batch_first=True, padding_value=-math.inf
        )
        top = padded.topk(k_max, dim=1, sorted=True).values  # descending
        keep = torch.arange(k_max).unsqueeze(0) < chunk_counts.unsqueeze(1)
        sums = top.masked_fill(~keep, 0.0).sum(dim=1)
        means[start:stop] = torch.where(chunk_counts > 0, sums / chunk_counts.clamp(min=1), 0.0)
    return means, counts


def selection_scores(
    correct: torch.Tensor | Sequence[Sequence[float]],
    entropies: Sequence[Sequence[torch.Tensor]],
    top_fraction: float = 0.2,
) -> dict[str, torch.Tensor]:
    """HEAL's per-question selection score c(x) = Uncertainty(x) * Diversity(x) (§3.1, eq. 1).

    Args:
        correct: ``[Q, N]`` booleans or 0/1 numbers: whether rollout n of question q is correct.
        entropies: ``entropies[q][n]`` is a 1-D tensor of rollout n's per-token entropies (any length, may be empty),
            Q lists of N tensors each.
        top_fraction: Share of each rollout's highest-entropy tokens averaged into Diversity (paper: 0.2). A rollout
            of L >= 1 tokens keeps ``max(1, ceil(top_fraction * L))`` tokens; empty rollouts are left out of the
            question's mean, and a question with only empty rollouts gets Diversity 0 (module docstring).

    Returns:
        dict with float32 ``[Q]`` tensors ``accuracy`` (Acc), ``uncertainty``, ``diversity`` and ``score`` (c(x)).
    """
    values = _as_correct(correct)
    _check_fraction(top_fraction)
    num_q, num_n = values.shape
    if isinstance(entropies, torch.Tensor) or not isinstance(entropies, Sequence):
        raise TypeError("entropies must be a sequence of Q sequences of N 1-D tensors (entropies[q][n])")
    if len(entropies) != num_q:
        raise ValueError(
            f"entropies has {len(entropies)} questions, correct has {num_q} (shape [Q, N] = {(num_q, num_n)})"
        )
    rows: list[torch.Tensor] = []
    for q, per_question in enumerate(entropies):
        if isinstance(per_question, torch.Tensor) or not isinstance(per_question, Sequence):
            raise TypeError(f"entropies[{q}] must be a sequence of N 1-D tensors, got {type(per_question).__name__}")
        if len(per_question) != num_n:
            raise ValueError(f"entropies[{q}] has {len(per_question)} rollouts, correct has N = {num_n}")
        for n, row in enumerate(per_question):
            if not isinstance(row, torch.Tensor):
                raise TypeError(f"entropies[{q}][{n}] must be a torch.Tensor, got {type(row).__name__}")
            if row.dim() != 1:
                raise ValueError(f"entropies[{q}][{n}] must be 1-D (one entropy per token), got {tuple(row.shape)}")
            if not row.is_floating_point():
                raise TypeError(f"entropies[{q}][{n}] must be a float tensor, got {row.dtype}")
            if row.numel() and not bool(torch.isfinite(row).all()):
                raise ValueError(f"entropies[{q}][{n}] holds non-finite values (NaN or inf)")
            rows.append(row.detach().cpu())

    # Reasoning Uncertainty (§3.1): Acc(x) = mean correctness, Uncertainty(x) = 1 - 2 |Acc(x) - 1/2|.
    accuracy = values.mean(dim=1)
    uncertainty = 1.0 - 2.0 * (accuracy - 0.5).abs()

    # Exploratory Diversity (§3.1): mean over rollouts of the mean of each rollout's top-20%-entropy tokens.
    if rows:
        means, counts = _top_fraction_means(rows, top_fraction)
        means, nonempty = means.view(num_q, num_n), (counts > 0).view(num_q, num_n).double()
        diversity = (means * nonempty).sum(dim=1) / nonempty.sum(dim=1).clamp(min=1)
    else:
        diversity = torch.zeros(num_q, dtype=torch.float64)

    score = uncertainty * diversity  # c(x) = Uncertainty(x) * Diversity(x)   (eq. 1)
    return {
        "accuracy": accuracy.float(),
        "uncertainty": uncertainty.float(),
        "diversity": diversity.float(),
        "score": score.float(),
    }
