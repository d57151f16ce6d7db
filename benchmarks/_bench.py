"""What the benchmark scripts share: rounds, timing, peak memory, the machine header and the LM-head reference heads.

A script in ``benchmarks/`` imports this module as ``import _bench`` (run as ``python benchmarks/x.py``, Python puts
``benchmarks/`` first on ``sys.path``) and imports nothing else from ``benchmarks/``; ``tests/test_benchmarks_index.py``
checks both rules. Nothing here imports healtrl, and torch only inside the functions that need it, so that a script's
``--help`` stays fast.

- Rounds: :func:`rotation` is the order of the compared implementations in round ``r``: the list rotated left by
  ``r mod len``, so each one runs first, second, ... equally often and load from other processes on a shared machine
  hits them alike.
- Timing: :func:`time_call` times one call, with CUDA events on a CUDA device (after a synchronisation) and
  ``time.perf_counter`` elsewhere; :func:`quartiles` summarises per-round ratios.
- Peak extra memory of one call, above what was held before it: :func:`profiler_peak_bytes` (CPU: torch's allocator,
  replayed from the profiler's memory events), :func:`rss_peak_bytes` (CPU: resident high-water mark ``VmHWM`` after
  :func:`reset_rss_peak`) and :func:`cuda_peak_bytes` (``torch.cuda.max_memory_allocated``).
- The machine header: :func:`cpu_model`, :func:`device_description` and :func:`machine`.
- LM-head pieces more than one script times: :func:`naive`, :func:`gemms` (the GEMM floor), :func:`make_trl` (TRL's
  chunked function), :func:`four_gemms` (the CPU floor with the torch kernel's tiles), :func:`lm_head_call` and
  :func:`time_head`. A head
  takes ``(h, W, y, bias, temperature)`` and returns float ``(logp, entropy)`` of shape ``[N]``.
"""

from __future__ import annotations

import ctypes
import functools
import gc
import os
import platform
import statistics
import time
from collections.abc import Callable, Sequence
from typing import TypeVar

T = TypeVar("T")


# ----------------------------------------------------------------------------------------------------------------
# Rounds and timing
# ----------------------------------------------------------------------------------------------------------------
def rotation(names: Sequence[T], round_index: int) -> list[T]:
    """``names`` rotated left by ``round_index mod len(names)``: the order of round ``round_index`` (0-based)."""
    k = round_index % len(names)
    return [*names[k:], *names[:k]]


def sync(device) -> None:
    """Wait for the device's queued work (``torch.cuda.synchronize`` on CUDA; nothing to wait for on a CPU)."""
    if device is not None and device.type == "cuda":
        import torch

        torch.cuda.synchronize(device)


def time_call(fn: Callable[[], object], device=None) -> float:
    """Seconds one ``fn()`` takes, after a garbage collection: CUDA events around the call when ``device`` is a CUDA
    device (synchronised before and after), ``time.perf_counter`` otherwise (``device`` None or a CPU)."""
    gc.collect()
    if device is not None and device.type == "cuda":
        import torch

        sync(device)
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        fn()
        end.record()
        sync(device)
        return start.elapsed_time(end) / 1e3
    t0 = time.perf_counter()
    fn()
    return time.perf_counter() - t0


def quartiles(values: Sequence[float]) -> tuple[float, float, float]:
    """(first quartile, median, third quartile) of ``values`` (``statistics.quantiles``, exclusive method); one value
    is its own three quartiles."""
    if len(values) == 1:
        return values[0], values[0], values[0]
    q = statistics.quantiles(values, n=4)
    return q[0], q[1], q[2]


# ----------------------------------------------------------------------------------------------------------------
# Peak extra memory
# ----------------------------------------------------------------------------------------------------------------
def status_kb(field: str) -> int:
    """A ``kB`` field of ``/proc/self/status`` (``VmRSS``, ``VmHWM``); RuntimeError when the field is missing."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1])
    raise RuntimeError(f"{field} not in /proc/self/status")


def reset_rss_peak() -> int:
    """Return free heap memory to the OS (``malloc_trim``), reset the resident high-water mark ``VmHWM`` to the
    current resident size (``/proc/self/clear_refs`` = 5) and return that size in kB. Linux only: OSError elsewhere."""
    gc.collect()
    ctypes.CDLL("libc.so.6").malloc_trim(0)
    with open("/proc/self/clear_refs", "w") as f:
        f.write("5")
    return status_kb("VmRSS")


def rss_peak_bytes(fn: Callable[[], object]) -> float | None:
    """Peak resident bytes of one ``fn()`` above the resident size before it (``VmHWM`` after :func:`reset_rss_peak`;
    it also sees allocator slack), or None where ``/proc/self/clear_refs`` or ``libc.so.6`` does not exist."""
    try:
        before = reset_rss_peak()
    except OSError:
        return None
    fn()
    return float((status_kb("VmHWM") - before) * 1024)


def profiler_peak_bytes(fn: Callable[[], object]) -> float:
    """Peak bytes held by torch's CPU allocator during one ``fn()`` above what it held before: the memory events of
    ``torch.profiler`` (``profile_memory=True``, one per allocation and free) summed in time order. The CPU analogue
    of ``torch.cuda.max_memory_allocated``."""
    from torch.profiler import ProfilerActivity, profile

    gc.collect()
    with profile(activities=[ProfilerActivity.CPU], profile_memory=True) as prof:
        fn()
    events = sorted((e.start_ns(), e.nbytes()) for e in prof.profiler.kineto_results.events() if e.name() == "[memory]")
    current = peak = 0
    for _, nbytes in events:
        current += nbytes
        peak = max(peak, current)
    return float(peak)


def cuda_peak_bytes(fn: Callable[[], object]) -> float:
    """``torch.cuda.max_memory_allocated()`` during one ``fn()`` minus ``memory_allocated()`` before it."""
    import torch

    gc.collect()
    torch.cuda.synchronize()
    base = torch.cuda.memory_allocated()
    torch.cuda.reset_peak_memory_stats()
    fn()
    torch.cuda.synchronize()
    return float(torch.cuda.max_memory_allocated() - base)


# ----------------------------------------------------------------------------------------------------------------
# The machine header
# ----------------------------------------------------------------------------------------------------------------
def cpu_model() -> str:
    """The CPU's model name from ``/proc/cpuinfo`` (what ``lscpu`` prints); where that file or its ``model name`` line
    is missing, ``platform.processor()``, else ``platform.machine()``."""
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("model name"):
                    return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def device_description(device) -> str:
    """One line for a report: the GPU's name and torch's version, or the CPU model, its logical cores, torch's threads
    and torch's version."""
    import torch

    if device.type == "cuda":
        return f"{torch.cuda.get_device_name(device)}, torch {torch.__version__}"
    return (
        f"{cpu_model()}, {os.cpu_count()} logical cores, {torch.get_num_threads()} torch threads, "
        f"torch {torch.__version__}"
    )


def machine(trainer_libraries: bool = True) -> str:
    """One line for a report: CPU model, cores, torch threads, RAM, the GPU (name, memory, CUDA) where torch sees
    one, and the versions of torch, transformers and TRL (``trainer_libraries``) and Python."""
    import torch

    mem = os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES") / 2**30
    text = f"{cpu_model()} (`/proc/cpuinfo` model name), {os.cpu_count()} cores, {torch.get_num_threads()} torch "
    text += f"threads, {mem:.0f} GiB RAM"
    if trainer_libraries:
        import transformers
        import trl

        if torch.cuda.is_available():
            props = torch.cuda.get_device_properties(0)
            text += f"; GPU {props.name} ({props.total_memory / 2**30:.0f} GiB), CUDA {torch.version.cuda}"
        libraries = f"torch {torch.__version__}, transformers {transformers.__version__}, trl {trl.__version__}"
    else:
        libraries = f"torch {torch.__version__}"
    return f"{text}; {libraries}, Python {platform.python_version()}"


# ----------------------------------------------------------------------------------------------------------------
# LM heads: the references several scripts time
# ----------------------------------------------------------------------------------------------------------------
def naive(h, w, y, bias, temperature):
    """Full logits ``h @ W.T`` (+ bias, / temperature), ``log_softmax`` in float32, gather, ``-(p * log p).sum()``."""
    logits = h @ w.t()
    if bias is not None:
        logits = logits + bias
    if temperature != 1.0:
        logits = logits / temperature
    logp_all = logits.float().log_softmax(-1)
    logp = logp_all.gather(-1, y.unsqueeze(-1)).squeeze(-1)
    entropy = -(logp_all.exp() * logp_all).sum(-1)
    return logp, entropy


@functools.cache
def _gemm_floor():
    import torch

    class GemmFloor(torch.autograd.Function):
        @staticmethod
        def forward(ctx, h, w):
            ctx.save_for_backward(h, w)
            z = h @ w.t()
            return z[:, 0].float(), z[:, 1].float()

        @staticmethod
        def backward(ctx, g0, g1):
            h, w = ctx.saved_tensors
            d = h @ w.t()  # the recompute; it also stands in for the logits' gradient
            return d @ w, d.t() @ h

    return GemmFloor


def gemms(h, w, y, bias, temperature):
    """The floor, not a head: the GEMMs an exact head cannot avoid (forward ``h @ W.T``; backward: its recompute,
    ``dh = D @ W``, ``dW = D.T @ h`` with the recomputed logits standing in for ``D``) through the library's matmul,
    no softmax work; its "logp" / "entropy" are two logit columns."""
    return _gemm_floor().apply(h, w)


def make_trl(chunk: int):
    """TRL's ``ChunkedLogProbFunction`` (what ``add_fused_lm_head`` calls) with vocabulary chunk ``chunk``, asked for
    ``("entropy",)``, as a head."""
    from trl.kernels import ChunkedLogProbFunction

    def trl(h, w, y, bias, temperature):
        out = ChunkedLogProbFunction.apply(h, w, bias, y, temperature, chunk, None, 1.0, ("entropy",))
        return out[0], out[1]

    return trl


def lm_head_call(fn, inputs, mode: str, grads) -> None:
    """One call of head ``fn`` on ``inputs = (h, W, y, bias, temperature)``; for ``mode == "fwd+bwd"`` also the
    backward of ``sum(logp * grads[0]) + sum(entropy * grads[1])``. The gradients are dropped afterwards."""
    h, w, y, b, temperature = inputs
    logp, entropy = fn(h, w, y, b, temperature)
    if mode == "fwd+bwd":
        loss = (logp * grads[0]).sum() + (entropy * grads[1]).sum()
        loss.backward()
    del logp, entropy
    for t in (h, w, b):
        if t is not None:
            t.grad = None


def time_head(fn, inputs, mode: str, grads, device) -> float:
    """Seconds of one :func:`lm_head_call` (:func:`time_call`: CUDA events on a CUDA device, else ``perf_counter``)."""
    return time_call(lambda: lm_head_call(fn, inputs, mode, grads), device)


def four_gemms(h, w, rows: int, slab: int) -> None:
    """On a CPU, float32: the forward GEMM, then the backward's recompute, ``dh`` and ``dW`` GEMMs, with the loops and
    buffers of ``healtrl.kernels.torch_chunked`` (``rows`` tokens x ``slab`` vocabulary columns per tile, from its
    ``plan_chunks``) and no elementwise work."""
    import torch

    n, hid = h.shape
    v = w.shape[0]
    buf = torch.empty(rows * slab)
    for v0 in range(0, v, slab):
        w_s = w[v0 : v0 + slab]
        for r0 in range(0, n, rows):
            h_c = h[r0 : r0 + rows]
            torch.mm(w_s, h_c.t(), out=buf[: w_s.shape[0] * h_c.shape[0]].view(w_s.shape[0], h_c.shape[0]))
    dh = torch.empty(n, hid)
    dw = torch.empty(v, hid)
    for v0 in range(0, v, slab):
        w_s = w[v0 : v0 + slab]
        for r0 in range(0, n, rows):
            h_c = h[r0 : r0 + rows]
            z = buf[: w_s.shape[0] * h_c.shape[0]].view(w_s.shape[0], h_c.shape[0])
            torch.mm(w_s, h_c.t(), out=z)
            if v0 == 0:
                torch.mm(z.t(), w_s, out=dh[r0 : r0 + rows])
            else:
                dh[r0 : r0 + rows].addmm_(z.t(), w_s)
            if r0 == 0:
                torch.mm(z, h_c, out=dw[v0 : v0 + slab])
            else:
                dw[v0 : v0 + slab].addmm_(z, h_c)


def next_inputs(trainer):
    """One training micro-batch of `trainer`, generated and scored as TRL does at the start of training (the timing
    scripts' `--overhead` modes, and the test suite through tests/helpers.py)."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps  # the loss reads it
    batch = next(iter(trainer.get_train_dataloader()))
    return trainer._prepare_inputs(batch)


def loss_and_grads(trainer, inputs):
    """The loss of one micro-batch and the gradient of every parameter, after one backward from zero gradients."""
    trainer.model.train()
    trainer.current_gradient_accumulation_steps = trainer.args.gradient_accumulation_steps
    trainer.model.zero_grad(set_to_none=True)
    loss = trainer.compute_loss(trainer.model, inputs)
    loss.backward()
    grads = {n: p.grad.detach().clone() for n, p in trainer.model.named_parameters() if p.grad is not None}
    return loss.detach(), grads
