"""The GEMM floor of the chunked torch LM head on CPU, side by side with the full kernel and TRL's chunked function.

Forward+backward of ``logp`` and entropy needs four GEMMs of ``2 N H V`` FLOP each: the forward logits, their
recompute in the backward (nothing of size ``[N, V]`` is kept), ``dh = D @ W`` and ``dW = D^T @ h``. ``gemms`` runs
exactly these four (``_bench.four_gemms``) with the tiling of ``healtrl.kernels.torch_chunked`` (``plan_chunks``:
same slabs, chunks and buffers, no elementwise work), so ``ours - gemms`` is what the softmax statistics and the
logits gradient cost on top, and ``gemms / trl-4096`` is the lowest ratio to TRL any exact four-GEMM float32 kernel reaches with these GEMMs.

Timing: fwd+bwd wall clock, every implementation once per round, order rotated each round, median over rounds
(``--repeats``), after one warm-up round.

Usage::

    python benchmarks/kernel_gemm_floor.py --n 2048 --h 576 --v 49152 --repeats 7
"""

from __future__ import annotations

import argparse
import statistics

import torch
from _bench import four_gemms, rotation, time_call

from healtrl.kernels import fused_logprob_entropy
from healtrl.kernels.torch_chunked import plan_chunks


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
        dt = time_call(fn)
        h.grad = w.grad = None
        return dt

    names = list(impls)
    for n in names:
        timed(impls[n])
    times = {n: [] for n in names}
    for rep in range(args.repeats):
        for n in rotation(names, rep):
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
