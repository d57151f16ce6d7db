"""Evaluation metrics over k sampled answers per problem.

`pass_at_k(n, c, k)` is the unbiased estimator of pass@k of Chen et al. (2021, "Evaluating Large Language Models
Trained on Code", eq. 1): with `n` samples of which `c` are correct, the probability that at least one of `k` samples
drawn without replacement is correct,

    pass@k = 1 - C(n - c, k) / C(n, k),

computed as the product `1 - prod_{i = n - c + 1}^{n} (1 - k / i)` (the numerically stable form of the same paper's
Figure 3), which never forms the huge binomial coefficients.
"""

from __future__ import annotations

import numbers

import numpy as np
import torch

__all__ = ["pass_at_k"]


def _as_array(value, name: str, backend: str):
    """`value` as a float64 array/tensor of the backend, checked to hold non-negative integers."""
    if backend == "torch":
        array = torch.as_tensor(value)
        if array.is_complex() or array.dtype == torch.bool:
            raise TypeError(f"`{name}` must hold integers, got a tensor of dtype {array.dtype}.")
        array = array.to(torch.float64)
        finite = torch.isfinite(array).all().item()
        integral = finite and bool((array == torch.round(array)).all().item())
        negative = finite and bool((array < 0).any().item())
    else:
        array = np.asarray(value)
        if array.dtype == object or array.dtype.kind not in "iuf":
            raise TypeError(f"`{name}` must hold integers, got {type(value).__name__} of dtype {array.dtype}.")
        array = array.astype(np.float64)
        finite = bool(np.isfinite(array).all())
        integral = finite and bool((array == np.round(array)).all())
        negative = finite and bool((array < 0).any())
    if not integral:
        raise ValueError(f"`{name}` must hold whole numbers (counts), got {value!r}.")
    if negative:
        raise ValueError(f"`{name}` must be non-negative, got {value!r}.")
    return array


def pass_at_k(n, c, k):
    r"""Unbiased estimate of pass@k from `n` samples of which `c` are correct.

    pass@k = 1 - C(n - c, k) / C(n, k) (Chen et al. 2021, eq. 1): the probability that a random subset of `k` of the
    `n` samples holds at least one correct sample. It is computed as `1 - prod_{i=n-c+1}^{n} (1 - k / i)`, which is
    exact in float64 to rounding and stable for large `n` (no binomial coefficient is formed). pass@1 equals `c / n`.

    Args:
        n (`int`, `np.ndarray` or `torch.Tensor`):
            Number of samples per problem (at least `k`).
        c (`int`, `np.ndarray` or `torch.Tensor`):
            Number of correct samples per problem (`0 <= c <= n`).
        k (`int`, `np.ndarray` or `torch.Tensor`):
            Number of attempts (`1 <= k <= n`).

        The three arguments broadcast against each other (e.g. one `n` and `k`, an array of `c` per problem).

    Returns:
        `float` when every argument is a Python or NumPy scalar; a float64 `torch.Tensor` when any argument is a
        tensor (on that tensor's device); a float64 `np.ndarray` otherwise.

    Raises:
        ValueError: a negative or fractional count, `k < 1`, `k > n` or `c > n` (the message names the argument).
        TypeError: an argument that is not a number or an array of numbers.

    Example:

    ```python
    >>> pass_at_k(4, 2, 2)  # 1 - C(2, 2) / C(4, 2) = 5/6
    0.8333333333333333
    >>> pass_at_k(np.array([4, 4]), np.array([0, 2]), 2)  # per problem; average for the benchmark's pass@2
    array([0.        , 0.83333333])
    ```
    """
    for name, value in (("n", n), ("c", c), ("k", k)):
        if isinstance(value, bool) or (isinstance(value, numbers.Number) and not isinstance(value, numbers.Real)):
            raise TypeError(f"`{name}` must be an integer count, got {value!r}.")
    tensors = [v for v in (n, c, k) if isinstance(v, torch.Tensor)]
    backend = "torch" if tensors else "numpy"
    scalar = all(np.ndim(v) == 0 and not isinstance(v, torch.Tensor) for v in (n, c, k))

    n_, c_, k_ = (_as_array(v, name, backend) for v, name in ((n, "n"), (c, "c"), (k, "k")))
    if backend == "torch":
        device = tensors[0].device
        n_, c_, k_ = (t.to(device) for t in (n_, c_, k_))
        n_, c_, k_ = torch.broadcast_tensors(n_, c_, k_)
        anyof = lambda mask: bool(mask.any().item())  # noqa: E731
    else:
        n_, c_, k_ = np.broadcast_arrays(n_, c_, k_)
        anyof = lambda mask: bool(np.any(mask))  # noqa: E731

    if anyof(k_ < 1):
        raise ValueError(f"`k` must be at least 1 (the number of attempts), got {k!r}.")
    if anyof(k_ > n_):
        raise ValueError(
            f"`k` ({k!r}) must not exceed `n` ({n!r}): pass@k needs at least k samples per problem. Sample more "
            "completions or lower k."
        )
    if anyof(c_ > n_):
        raise ValueError(f"`c` ({c!r}) must not exceed `n` ({n!r}): there cannot be more correct samples than samples.")

    # Chen et al. 2021, eq. 1 in product form: C(n-c, k) / C(n, k) = prod_{i=n-c+1}^{n} (1 - k / i), a product of c
    # factors. Problems with n - c < k always contain a correct sample among any k (pass@k = 1).
    if backend == "torch":
        ratio = torch.ones_like(n_)
        max_c = int(c_.max().item()) if c_.numel() else 0
        for j in range(max_c):
            i = n_ - j  # the factors i = n, n-1, ..., n-c+1
            active = (j < c_) & (n_ - c_ >= k_)
            ratio = torch.where(active, ratio * (1.0 - k_ / torch.where(active, i, torch.ones_like(i))), ratio)
        result = torch.where(n_ - c_ < k_, torch.zeros_like(ratio), ratio)
        return 1.0 - result
    ratio = np.ones_like(n_)
    max_c = int(c_.max()) if c_.size else 0
    for j in range(max_c):
        i = n_ - j
        active = (j < c_) & (n_ - c_ >= k_)
        ratio = np.where(active, ratio * (1.0 - k_ / np.where(active, i, 1.0)), ratio)
    result = 1.0 - np.where(n_ - c_ < k_, 0.0, ratio)
    return float(result) if scalar else result
