"""The GEMM floor of the chunked torch LM head on CPU, side by side with the full kernel and TRL's chunked function.

Forward+backward of ``logp`` and entropy needs four GEMMs of ``2 N H V`` FLOP each: the forward logits, their
recompute in the backward (nothing of size ``[N, V]`` is kept), ``dh = D @ W`` and ``dW = D^T @ h``. ``gemms`` runs
exactly these four with the tiling of ``healtrl.kernels.torch_chunked`` (``plan_chunks``: same slabs, chunks and
buffers, no elementwise work), so ``ours - gemms`` is what the softmax statistics and the logits gradient cost on
top, and ``gemms / trl-4096`` is the lowest ratio to TRL any exact four-GEMM float32 kernel reaches with these GEMMs.

Timing: fwd+bwd wall clock, every implementation once per round, order rotated each round, median over rounds
(``--repeats``), after one warm-up round.

Usage::

    python benchmarks/kernel_gemm_floor.py --n 2048 --h 576 --v 49152 --repeats 7
"""

from __future__ import annotations

import argparse
import gc
import os
import statistics
import sys
import time

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))

from healtrl.kernels import fused_logprob_entropy  # noqa: E402
from healtrl.kernels.torch_chunked import plan_chunks  # noqa: E402


def four_gemms(h, w, rows, slab):
    """The forward GEMM, then the backward's recompute, dh and dW GEMMs, with the kernel's loops and buffers."""
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


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--n", type=int, default=2048)
    parser.add_argument("--h", type=int, default=576)
    parser.add_argument("--v", type=int, default=49152)
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--impls", default="gemms,ours,trl-4096,trl-32768")
    args = parser.parse_args(argv)

    torch.manual_seed(0)
    scale = (2.0 / args.h**0.5) ** 0.5
    h = (torch.randn(args.n, args.h) * scale).requires_grad_()
    w = (torch.randn(args.v, args.h) * scale).requires_grad_()
    y = torch.randint(0, args.v, (args.n,))
    g = torch.randn(2, args.n)
    rows, slab = plan_chunks(args.n, args.v, args.h, torch.float32)

    def ours():
        out = fused_logprob_entropy(h, w, y, backend="torch")
        ((out.logp * g[0]).sum() + (out.entropy * g[1]).sum()).backward()

    def make_trl(chunk):
        from trl.kernels import ChunkedLogProbFunction

        def trl():
            out = ChunkedLogProbFunction.apply(h, w, None, y, 1.0, chunk, None, 1.0, ("entropy",))
            ((out[0] * g[0]).sum() + (out[1] * g[1]).sum()).backward()

        return trl

    impls = {}
    for name in args.impls.split(","):
        if name == "gemms":
            impls[name] = lambda: four_gemms(h.detach(), w.detach(), rows, slab)
        elif name == "ours":
            impls[name] = ours
        elif name.startswith("trl-"):
            impls[name] = make_trl(int(name.split("-")[1]))
        else:
            raise SystemExit(f"unknown implementation {name!r}: use gemms, ours or trl-<chunk>")

    def timed(fn):
        gc.collect()
        t0 = time.perf_counter()
        fn()
        dt = time.perf_counter() - t0
        h.grad = w.grad = None
        return dt

    names = list(impls)
    for n in names:
        timed(impls[n])
    times = {n: [] for n in names}
    for rep in range(args.repeats):
        for n in names[rep % len(names) :] + names[: rep % len(names)]:
            times[n].append(timed(impls[n]))
        print(f"round {rep + 1}/{args.repeats}: " + ", ".join(f"{n} {times[n][-1]:.3f}s" for n in names), flush=True)

    med = {n: statistics.median(t) for n, t in times.items()}
    print(
        f"\nN={args.n} H={args.h} V={args.v} fp32, tiles: slab {slab} x {rows} rows; fwd+bwd median of {args.repeats}"
    )
    refs = [r for r in names if r.startswith("trl-")]
    print("| implementation | fwd+bwd (s) | " + " | ".join(f"vs {r}" for r in refs) + " |")
    print("|---|---|" + "---|" * len(refs))
    for n in names:
        print(f"| {n} | {med[n]:.3f} | " + " | ".join(f"{med[n] / med[r]:.3f}" for r in refs) + " |")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
