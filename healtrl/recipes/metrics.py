"""The metrics of paper recipes and of `healtrl eval`'s comparisons: a metric's name (`avg@k`, `pass@k`, `pass@<j>`,
`avg@<k>`), its check against the samples per problem, and its value.

Metrics are computed from each task's per-problem correct counts `c` out of `k` samples: `avg@k` is the mean
correctness (mean of c / k; equals the unbiased pass@1), `pass@j` the mean over problems of the unbiased estimator
1 - C(k - c, j) / C(k, j) (Chen et al. 2021, eq. 1; `healtrl.functional.pass_at_k`), for any j <= k.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np

__all__ = ["check_metric_against_k", "metric_key", "metric_value", "parse_metric"]

_METRIC = re.compile(r"^(avg|pass)@(k|\d+)$")


def parse_metric(metric, where: str) -> tuple[str, int | None]:
    """`"avg@k"` -> ("avg", None); `"pass@4"` -> ("pass", 4); None stands for "the k of the task"."""
    match = _METRIC.match(metric) if isinstance(metric, str) else None
    if not match:
        raise ValueError(
            f"{where} must be 'avg@k', 'pass@k', 'pass@<j>' or 'avg@<k>' (e.g. 'pass@1', 'avg@32'), got {metric!r}."
        )
    kind, j = match.group(1), match.group(2)
    if j == "k":
        return kind, None
    if int(j) < 1:
        raise ValueError(f"{where}: {metric!r} needs a number of samples >= 1.")
    return kind, int(j)


def check_metric_against_k(kind: str, j: int | None, k: int, where: str, k_key: str) -> None:
    """Raise a ValueError naming `where` and `k_key` when the metric cannot be estimated from `k` samples per problem
    (`avg@<j>` with j != k, `pass@<j>` with j > k)."""
    if j is None:
        return
    if kind == "avg" and j != k:
        raise ValueError(
            f"{where} is 'avg@{j}' but {k_key} is {k}: avg@ is the mean over all k samples. Set {k_key} to {j}, or "
            "write the metric as 'avg@k'."
        )
    if kind == "pass" and j > k:
        raise ValueError(
            f"{where} is 'pass@{j}', which needs at least {j} samples per problem, but {k_key} is {k}. Set {k_key} "
            f"to at least {j}, or use pass@j with j <= {k}."
        )


def metric_key(kind: str, j: int | None, k: int) -> str:
    """The metric's name at sample count `k` (e.g. ("avg", None, 32) -> "avg@32", ("pass", None, 8) -> "pass@8")."""
    return f"{kind}@{k if j is None else j}"


def metric_value(correct: Sequence[int], k: int, kind: str, j: int | None = None) -> float:
    """avg@k (mean of c / k) or the mean unbiased pass@j (j defaults to k) of per-problem correct counts, in [0, 1]."""
    from healtrl.functional.evaluation import pass_at_k

    counts = np.asarray(list(correct), dtype=np.int64)
    if counts.size == 0:
        return float("nan")
    if kind == "avg":
        return float(counts.mean() / k)
    j = k if j is None else j
    if j > k:
        raise ValueError(f"pass@{j} needs at least {j} samples per problem; these results have k={k}.")
    return float(np.mean(pass_at_k(k, counts, j)))
