"""Public entry point of the fused LM-head kernel: validation and backend dispatch.

Definitions (per token n, vocabulary v = 0 .. V-1, temperature T):

    z_v     = (hidden_n . weight_v + bias_v) / T        (HF LM head with bias, then TRL's temperature division)
    p_v     = softmax(z)_v,    lse = log sum_v exp(z_v)
    logp    = z_y - lse                                  (y = targets_n, the sampled token)
    entropy = -sum_v p_v log p_v
    sum_p2  = sum_v p_v^2,     sum_p2_logp = sum_v p_v^2 log p_v   (OPEFO's exact first-order entropy change)

Gradients (with respect to z; the kernels then divide by T once more for the pre-temperature logits):

    d logp    / d z_j = 1[j = y] - p_j
    d entropy / d z_j = -p_j (log p_j + entropy)

Targets: every position must carry a valid token id in ``[0, V)``. There is no ignore index: padding positions
must carry any valid id (e.g. 0) and the caller masks their outputs (multiplying the per-token loss by the mask
gives them zero gradient).
"""

from __future__ import annotations

import importlib.util
import math
import os

import torch

from ._types import LogProbEntropy

BACKENDS = ("auto", "torch", "triton", "chunked")
TRITON_BACKENDS = ("triton", "chunked")  # the two CUDA paths, both with Triton kernels
_FLOAT_DTYPES = (torch.float32, torch.bfloat16, torch.float16)


def triton_available() -> bool:
    """Whether the ``triton`` package can be imported (checked without importing it)."""
    return importlib.util.find_spec("triton") is not None


def triton_interpreter_enabled() -> bool:
    """Whether Triton runs kernels in its CPU interpreter (``TRITON_INTERPRET=1``, read before triton's import)."""
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


def _validate(hidden, weight, targets, bias, temperature) -> None:
    for name, t in (("hidden", hidden), ("weight", weight), ("targets", targets)):
        if not isinstance(t, torch.Tensor):
            raise TypeError(f"{name} must be a torch.Tensor, got {type(t).__name__}")
    if hidden.dim() != 2:
        raise ValueError(f"hidden must be 2-D [N, H], got shape {tuple(hidden.shape)}")
    if weight.dim() != 2:
        raise ValueError(f"weight must be 2-D [V, H] (the LM head), got shape {tuple(weight.shape)}")
    if targets.dim() != 1:
        raise ValueError(f"targets must be 1-D [N], got shape {tuple(targets.shape)}")
    n, h = hidden.shape
    v = weight.shape[0]
    if weight.shape[1] != h:
        raise ValueError(f"hidden [N, H] = {tuple(hidden.shape)} and weight [V, H] = {tuple(weight.shape)}: H differs")
    if targets.shape[0] != n:
        raise ValueError(f"targets has {targets.shape[0]} entries for {n} rows of hidden")
    if v == 0 or h == 0:
        raise ValueError(f"empty vocabulary or hidden size: weight has shape {tuple(weight.shape)}")
    if hidden.dtype not in _FLOAT_DTYPES:
        raise TypeError(f"hidden must be float32, bfloat16 or float16, got {hidden.dtype}")
    if weight.dtype != hidden.dtype:
        raise TypeError(f"hidden ({hidden.dtype}) and weight ({weight.dtype}) must have the same dtype")
    if targets.dtype != torch.int64:
        raise TypeError(f"targets must be int64 token ids, got {targets.dtype}")
    devices = {hidden.device, weight.device, targets.device}
    if bias is not None:
        if not isinstance(bias, torch.Tensor):
            raise TypeError(f"bias must be a torch.Tensor or None, got {type(bias).__name__}")
        if bias.shape != (v,):
            raise ValueError(f"bias must have shape [V] = ({v},), got {tuple(bias.shape)}")
        if bias.dtype != weight.dtype:
            raise TypeError(f"bias ({bias.dtype}) and weight ({weight.dtype}) must have the same dtype")
        devices.add(bias.device)
    if len(devices) != 1:
        raise ValueError(f"hidden, weight, targets (and bias) must be on one device, got {sorted(map(str, devices))}")
    if isinstance(temperature, bool) or not isinstance(temperature, (int, float)):
        raise TypeError(f"temperature must be a real number, got {type(temperature).__name__}")
    if not (math.isfinite(temperature) and temperature > 0):
        raise ValueError(f"temperature must be finite and > 0, got {temperature}")
    if n > 0:
        # One small reduction (a host sync on CUDA): an out-of-range id would otherwise read out of bounds or be
        # silently scored as if its logit were absent.
        lo, hi = int(targets.min()), int(targets.max())
        if lo < 0 or hi >= v:
            raise ValueError(
                f"targets must be valid token ids in [0, {v}), got values in [{lo}, {hi}]. There is no ignore index "
                "(e.g. -100): give padding positions any valid id (e.g. 0) and mask their outputs in the loss."
            )


_SELF_CHECKED: dict[tuple[str, str], bool] = {}


def _triton_self_check(device: torch.device, which: str = "triton") -> bool:
    """Once per device and path: the compiled Triton path ``which`` against the torch path on a small random problem.

    `backend="auto"` uses a Triton path only if this passes (values and gradients within 1e-4 in fp32 for the fused
    kernel; for the chunked path, which takes bf16 on CUDA, values within 1e-4 and gradients within 2e-2 of the
    torch path on the same bf16 inputs), with awkward sizes and several slabs; otherwise it warns once and falls back
    (chunked -> fused -> torch), so a Triton build or GPU it was never checked on cannot give wrong numbers silently.
    An explicit `backend="triton"` or `"chunked"` skips the check.
    """
    key = (str(device), which)
    if key not in _SELF_CHECKED:
        import warnings

        try:
            from .torch_chunked import torch_logprob_entropy

            if which == "chunked":
                from .triton_chunked import chunked_logprob_entropy as fn

                dtype = torch.bfloat16 if device.type == "cuda" else torch.float32
                kwargs = {"chunk_size": 384}  # three slabs, the last one partial
            else:
                from .triton_fused import triton_logprob_entropy as fn

                dtype, kwargs = torch.float32, {}
            grad_tol = 2e-2 if dtype != torch.float32 else 1e-4
            gen = torch.Generator(device=device).manual_seed(0)
            h = torch.randn(77, 96, device=device, generator=gen).to(dtype).requires_grad_()
            w = torch.randn(1003, 96, device=device, generator=gen).to(dtype).requires_grad_()
            y = torch.randint(0, 1003, (77,), device=device, generator=gen)
            g = torch.randn(2, 77, device=device, generator=gen)
            results = []
            for f, kw in ((torch_logprob_entropy, {}), (fn, kwargs)):
                out = f(h, w, y, bias=None, temperature=0.7, power_sums=True, **kw)
                grads = torch.autograd.grad((out.logp * g[0] + out.entropy * g[1]).sum(), (h, w))
                results.append([out.logp, out.entropy, out.sum_p2, out.sum_p2_logp, *grads])
            ok = all(
                torch.allclose(b.float(), a.float(), rtol=tol, atol=tol * max(a.float().abs().max().item(), 1.0))
                for i, (a, b) in enumerate(zip(*results))
                for tol in [1e-4 if i < 4 else grad_tol]
            )
            reason = "results differ from the torch path"
        except Exception as exc:  # a failed compile or launch: fall back, say why
            ok, reason = False, f"{type(exc).__name__}: {exc}"
        if not ok:
            fallback = "the fused Triton kernel" if which == "chunked" else "the chunked torch path"
            warnings.warn(
                f"healtrl's {which} LM-head kernel failed its self-check on {device} ({reason}); using {fallback} "
                "instead. Please report this with your GPU, torch and triton versions.",
                RuntimeWarning,
                stacklevel=3,
            )
        _SELF_CHECKED[key] = ok
    return _SELF_CHECKED[key]


def _auto_choice(device: torch.device, dtype: torch.dtype | None, hidden_size: int | None):
    """``(backend, chunk_size)`` that ``backend="auto"`` takes (CUDA: the dispatch table, then the self-checks)."""
    if device.type != "cuda" or not triton_available() or not _triton_self_check(device, "triton"):
        return "torch", None
    if dtype is None or hidden_size is None:
        return "triton", None
    from .dispatch import choose

    choice = choose(torch.cuda.get_device_name(device), dtype, hidden_size)
    if choice.backend == "chunked" and not _triton_self_check(device, "chunked"):
        return "triton", None
    return choice.backend, choice.chunk_size


def resolve_backend(
    backend: str, device: torch.device, *, dtype: torch.dtype | None = None, hidden_size: int | None = None
) -> str:
    """The path ``backend`` takes on ``device`` (see :func:`fused_logprob_entropy`).

    For ``"auto"`` on CUDA, ``dtype`` and ``hidden_size`` select the path from the measured dispatch table
    (``healtrl.kernels.dispatch``); without them it answers for the fused kernel, the table's default.
    """
    if backend not in BACKENDS:
        raise ValueError(f"backend must be one of {BACKENDS}, got {backend!r}")
    if backend == "auto":
        return _auto_choice(device, dtype, hidden_size)[0]
    if backend in TRITON_BACKENDS:
        if not triton_available():
            raise ImportError(
                f"backend={backend!r} needs the `triton` package, which is not installed (pip install triton; it "
                "ships with CUDA builds of torch on Linux)"
            )
        if device.type != "cuda" and not triton_interpreter_enabled():
            raise ValueError(
                f"backend={backend!r} runs on CUDA tensors (got {device.type}); on CPU it needs Triton's interpreter "
                "(set TRITON_INTERPRET=1 before triton is first imported)"
            )
    return backend


def fused_logprob_entropy(
    hidden: torch.Tensor,
    weight: torch.Tensor,
    targets: torch.Tensor,
    *,
    bias: torch.Tensor | None = None,
    temperature: float = 1.0,
    power_sums: bool = False,
    backend: str = "auto",
    chunk_size: int | None = None,
) -> LogProbEntropy:
    """Per-token log-probability of ``targets`` and full-vocabulary entropy, without ``[N, V]`` logits in memory.

    Args:
        hidden: ``[N, H]`` final hidden states (float32, bfloat16 or float16).
        weight: ``[V, H]`` LM-head weight, same dtype as ``hidden``.
        targets: ``[N]`` int64 sampled token ids, each in ``[0, V)`` (no ignore index: see the module docstring).
        bias: optional ``[V]`` LM-head bias, same dtype as ``weight``.
        temperature: logits are ``(hidden @ weight.T + bias) / temperature``.
        power_sums: also return ``sum_p2 = sum_v p_v^2`` and ``sum_p2_logp = sum_v p_v^2 log p_v`` (no gradient).
        backend: ``"auto"`` (on CUDA with triton importable: the fused kernel or the chunked path as the measured
            dispatch table says for this device, dtype and hidden size, ``healtrl.kernels.dispatch``; elsewhere the
            torch chunked path), ``"torch"``, ``"triton"`` (the fused kernel) or ``"chunked"`` (cuBLAS GEMMs with
            Triton statistics; bf16/fp16 on CUDA); the Triton paths also run on CPU tensors under
            ``TRITON_INTERPRET=1``.
        chunk_size: rows (tokens) per chunk for the torch path, token-chunk of the backward workspace for the
            fused path, vocabulary columns per slab for the chunked path; ``None`` picks one from a memory budget
            (see the backends' docstrings) or, under ``"auto"``, from the dispatch table. Under ``"auto"`` on CUDA a
            given ``chunk_size`` is the fused path's token chunk, and the fused path is taken even where the table
            would pick the chunked one (whose ``chunk_size`` means something else).

    Returns:
        :class:`LogProbEntropy` of float32 ``[N]`` tensors for any input dtype. ``logp`` and ``entropy`` are
        differentiable with respect to hidden, weight and bias; gradients come back in the inputs' dtypes. An output
        whose gradient is not needed costs nothing in the backward.
    """
    _validate(hidden, weight, targets, bias, temperature)
    if chunk_size is not None and (isinstance(chunk_size, bool) or not isinstance(chunk_size, int) or chunk_size < 1):
        raise ValueError(f"chunk_size must be a positive int or None, got {chunk_size!r}")
    if backend == "auto":
        which, table_chunk = _auto_choice(hidden.device, hidden.dtype, hidden.shape[1])
        if chunk_size is not None and which == "chunked":
            which = "triton"  # a caller's chunk_size under "auto" keeps one meaning: the fused path's token chunk
        chunk_size = chunk_size if chunk_size is not None else table_chunk
    else:
        which = resolve_backend(backend, hidden.device)
    if which == "chunked":
        from .triton_chunked import chunked_logprob_entropy as backend_fn

        chunk = {"chunk_size": chunk_size}
    elif which == "triton":
        from .triton_fused import triton_logprob_entropy as backend_fn

        chunk = {"token_chunk": chunk_size}
    else:
        from .torch_chunked import torch_logprob_entropy as backend_fn

        chunk = {"chunk_size": chunk_size}
    return backend_fn(
        hidden, weight, targets, bias=bias, temperature=float(temperature), power_sums=power_sums, **chunk
    )
