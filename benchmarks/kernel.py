"""Side-by-side benchmark of LM-head log-prob + entropy implementations, in one process.

Implementations (each computes per-token logp of the target and the full-vocabulary entropy, with gradients
through both into hidden and weight):

- ``naive``: ``logits = h @ W.T``, ``log_softmax``, gather, ``entropy = -(p * logp).sum()``; autograd backward.
- ``trl-32768`` / ``trl-4096``: TRL's ``ChunkedLogProbFunction`` (what ``add_fused_lm_head`` calls), with TRL's
  default vocabulary chunk (32768) and with 4096, asked for ``("entropy",)``.
- ``liger``: Liger's ``LigerFusedLinearScaledCrossEntropyFunction`` with ``return_entropy=True`` (its torch
  fallback off Hopper; skipped with a note if liger-kernel is not installed or fails).
- ``gemms``: the floor, not an implementation: exactly the GEMMs an exact fused kernel cannot avoid (forward
  ``h @ W.T``; backward: its recompute, ``dh = D @ W`` and ``dW = D.T @ h``, with the recomputed logits standing in
  for ``D``) through the library's matmul (cuBLAS on CUDA), no softmax work; its "logp" / "entropy" are two logit
  columns, so it has no accuracy figures.
- ``ours`` / ``ours+ps``: :func:`healtrl.kernels.fused_logprob_entropy` (``+ps``: with ``power_sums=True``);
  ``ours@R``: with ``chunk_size=R``, to compare tile sizes in one run. ``fused`` and ``chunked`` (``chunked@S``:
  ``S`` vocabulary columns per slab): ours with ``backend="triton"`` (the fused kernel) or ``"chunked"`` (cuBLAS
  GEMMs + Triton statistics), side by side with ``ours`` (``--backend``, default ``auto``: the dispatch table).

Timing: every implementation runs once per round, rounds are repeated (``--repeats``) and the order of the
implementations rotates each round, so that load from other processes on a shared machine hits them alike; the
median over rounds is reported. CPU: ``time.perf_counter``; CUDA: CUDA events around each call.

Peak extra memory (measured in separate, untimed runs, one per implementation and mode):
- CPU ``alloc``: peak of the bytes held by torch's CPU allocator during the call, above what was held before it,
  from the memory events of ``torch.profiler`` (``profile_memory=True``: one event per tensor allocation and free,
  replayed in time order). This is the CPU analogue of ``torch.cuda.max_memory_allocated`` and counts the gradients
  (dh, dW) the backward returns.
- CPU ``rss``: peak resident set size (``VmHWM``) above the resident size before the call, after returning free
  heap memory to the OS (``malloc_trim``) and resetting the high-water mark (``/proc/self/clear_refs``). It also
  sees allocator slack; reported as a cross-check.
- CUDA: ``torch.cuda.max_memory_allocated() - memory_allocated()`` before the call.

Usage::

    python benchmarks/kernel.py                                     # CPU default: N=2048 H=1024 V=32768 fp32
    python benchmarks/kernel.py --device cuda --dtype bf16 --n 16384 --h 4096 --v 151936
    python benchmarks/kernel.py --output benchmarks/results/kernel_cpu.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
from collections.abc import Callable

import torch
from _bench import (
    cuda_peak_bytes,
    device_description,
    gemms,
    lm_head_call,
    make_trl,
    naive,
    profiler_peak_bytes,
    rotation,
    rss_peak_bytes,
    time_head,
)

from healtrl.kernels import fused_logprob_entropy

DTYPES = {"fp32": torch.float32, "bf16": torch.bfloat16, "fp16": torch.float16}


# ----------------------------------------------------------------------------------------------------------------
# Implementations: each takes (h, W, y, bias, T) and returns (logp, entropy) float tensors; `naive`, `gemms` and
# `make_trl` are the shared ones of `_bench`
# ----------------------------------------------------------------------------------------------------------------
def make_liger():
    from liger_kernel.ops.fused_linear_scaled_cross_entropy import LigerFusedLinearScaledCrossEntropyFunction

    def liger(h, w, y, bias, temperature):
        if bias is not None:
            raise NotImplementedError("Liger's scaled cross-entropy takes no bias")
        nll, entropy = LigerFusedLinearScaledCrossEntropyFunction.apply(h, w, y, temperature, -100, 1, True)
        return -nll, entropy

    return liger


def make_ours(backend: str, power_sums: bool, chunk_size: int | None):
    def ours(h, w, y, bias, temperature):
        out = fused_logprob_entropy(
            h, w, y, bias=bias, temperature=temperature, power_sums=power_sums, backend=backend, chunk_size=chunk_size
        )
        return out.logp, out.entropy

    return ours


# ----------------------------------------------------------------------------------------------------------------
# Measurement
# ----------------------------------------------------------------------------------------------------------------
def peak_memory(fn, inputs, mode, grads, device) -> tuple[float, float | None]:
    """Peak extra bytes of one call: on CUDA (max_memory_allocated, None); on a CPU (allocator peak from the profiler's
    memory events, RSS peak or None where /proc/self/clear_refs does not exist)."""

    def call():
        lm_head_call(fn, inputs, mode, grads)

    if device.type == "cuda":
        return cuda_peak_bytes(call), None
    return profiler_peak_bytes(call), rss_peak_bytes(call)


def check_accuracy(fn, inputs, rows: int = 512) -> tuple[float, float]:
    """Max abs error / max abs reference of logp and entropy on the first ``rows`` tokens vs float64."""
    h, w, y, b, temperature = inputs
    with torch.no_grad():
        logp, entropy = fn(h[:rows], w, y[:rows], b, temperature)
        z = h[:rows].double() @ w.double().t()
        if b is not None:
            z = z + b.double()
        lp = (z / temperature).log_softmax(-1)
        ref_logp = lp.gather(-1, y[:rows].unsqueeze(-1)).squeeze(-1)
        ref_ent = -(lp.exp() * lp).sum(-1)
        err = lambda a, r: ((a.double() - r).abs().max() / r.abs().max()).item()  # noqa: E731
        return err(logp, ref_logp), err(entropy, ref_ent)


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2048, help="tokens")
    parser.add_argument("--h", type=int, default=1024, help="hidden size")
    parser.add_argument("--v", type=int, default=32768, help="vocabulary size")
    parser.add_argument("--dtype", choices=sorted(DTYPES), default="fp32")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--temperature", type=float, default=1.0)
    parser.add_argument("--bias", action="store_true", help="LM head with bias (Liger is skipped)")
    parser.add_argument("--repeats", type=int, default=5, help="interleaved rounds (median reported)")
    parser.add_argument("--impls", default="naive,trl-32768,trl-4096,liger,ours,ours+ps")
    parser.add_argument("--backend", default="auto", help="backend of ours: auto, torch or triton")
    parser.add_argument("--chunk-size", type=int, default=None, help="chunk_size of ours (default: its own)")
    parser.add_argument("--modes", default="fwd,fwd+bwd")
    parser.add_argument("--no-memory", action="store_true", help="skip the peak-memory runs")
    parser.add_argument("--no-check", action="store_true", help="skip the float64 accuracy check")
    parser.add_argument("--output", default=None, help="write the markdown report here")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args(argv)

    device = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    torch.manual_seed(args.seed)
    # Logits of std ~2: a realistic spread of entropies
    h = (torch.randn(args.n, args.h, device=device) * (2.0 / args.h**0.5) ** 0.5).to(dtype).requires_grad_()
    w = (torch.randn(args.v, args.h, device=device) * (2.0 / args.h**0.5) ** 0.5).to(dtype).requires_grad_()
    b = (0.1 * torch.randn(args.v, device=device)).to(dtype).requires_grad_() if args.bias else None
    y = torch.randint(0, args.v, (args.n,), device=device)
    grads = (torch.randn(args.n, device=device), torch.randn(args.n, device=device))
    inputs = (h, w, y, b, args.temperature)

    notes: list[str] = []
    impls: dict[str, Callable] = {}
    for name in args.impls.split(","):
        try:
            if name == "naive":
                impls[name] = naive
            elif name == "gemms":
                impls[name] = gemms
            elif name.startswith("trl-"):
                impls[name] = make_trl(int(name.split("-")[1]))
            elif name == "liger":
                impls[name] = make_liger()
            elif name.split("@")[0] in ("ours", "ours+ps", "fused", "chunked"):
                # `ours@256`: ours with chunk_size 256 (a chunk size to compare side by side); `fused` / `chunked`:
                # ours with backend "triton" / "chunked" whatever --backend says (`chunked@4096`: 4096-column slabs)
                base, _, rows = name.partition("@")
                backend = {"fused": "triton", "chunked": "chunked"}.get(base, args.backend)
                impls[name] = make_ours(backend, base == "ours+ps", int(rows) if rows else args.chunk_size)
            else:
                raise ValueError(f"unknown implementation {name}")
            # Smoke run: drop an implementation that cannot run here, with a note
            lm_head_call(impls[name], (h[:8], w, y[:8], b, args.temperature), "fwd+bwd", (grads[0][:8], grads[1][:8]))
        except Exception as exc:  # noqa: BLE001
            impls.pop(name, None)
            notes.append(f"{name} skipped: {type(exc).__name__}: {str(exc).splitlines()[0][:160]}")
            print(notes[-1], flush=True)
    if "naive" not in impls:
        raise SystemExit("the naive implementation is the baseline and must run")

    modes = args.modes.split(",")
    names = list(impls)
    times = {(n, m): [] for n in names for m in modes}
    for n in names:  # warm-up
        for m in modes:
            time_head(impls[n], inputs, m, grads, device)
    for rep in range(args.repeats):
        order = rotation(names, rep)
        for n in order:
            for m in modes:
                times[(n, m)].append(time_head(impls[n], inputs, m, grads, device))
        print(
            f"round {rep + 1}/{args.repeats}: "
            + ", ".join(f"{n} {m} {times[(n, m)][-1]:.3f}s" for n in order for m in modes),
            flush=True,
        )

    mem: dict[tuple[str, str], tuple[float, float | None]] = {}
    if not args.no_memory:
        for n in names:
            for m in modes:
                mem[(n, m)] = peak_memory(impls[n], inputs, m, grads, device)
    acc = {} if args.no_check else {n: check_accuracy(impls[n], inputs) for n in names if n != "gemms"}

    mb = 2**20
    header = ["implementation"]
    for m in modes:
        header += [f"{m} time (s)", f"{m} vs naive"]
        if mem:
            header += [f"{m} peak extra (MiB)", f"{m} mem vs naive"]
            if device.type == "cpu":
                header += [f"{m} RSS peak (MiB)"]
    if acc:
        header += ["logp rel err", "entropy rel err"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for n in names:
        row = [n]
        for m in modes:
            t = statistics.median(times[(n, m)])
            t0 = statistics.median(times[("naive", m)])
            row += [f"{t:.4f}" if device.type == "cuda" else f"{t:.3f}", f"{t / t0:.2f}x"]
            if mem:
                a, rss = mem[(n, m)]
                a0 = mem[("naive", m)][0]
                row += [f"{a / mb:.0f}", f"{a / a0:.3f}"]
                if device.type == "cpu":
                    row += ["n/a" if rss is None else f"{rss / mb:.0f}"]
        if acc:
            row += [f"{acc[n][0]:.1e}", f"{acc[n][1]:.1e}"] if n in acc else ["-", "-"]
        lines.append("| " + " | ".join(row) + " |")

    spec = (
        f"N={args.n}, H={args.h}, V={args.v}, {args.dtype}, T={args.temperature}, bias={args.bias}, "
        f"device={args.device}, backend of ours={args.backend}"
    )
    report = [
        "# Fused LM-head kernel benchmark",
        "",
        f"- date: {datetime.date.today().isoformat()}",
        f"- device: {device_description(device)}",
        f"- shape: {spec}",
        f"- command: `python benchmarks/kernel.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        f"- timing: median of {args.repeats} interleaved rounds (order rotated each round), after one warm-up",
        "- rel err: max |x - ref| / max |ref| over the first 512 tokens, ref = float64 materialised",
        "",
        *lines,
    ]
    if notes:
        report += ["", *[f"- {x}" for x in notes]]
    text = "\n".join(report) + "\n"
    print(text)
    if args.output:
        os.makedirs(os.path.dirname(os.path.abspath(args.output)), exist_ok=True)
        with open(args.output, "w") as f:
            f.write(text)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
