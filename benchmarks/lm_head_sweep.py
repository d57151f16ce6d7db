"""Sweep of the two exact CUDA heads (fused kernel, chunked cuBLAS + Triton path) for the dispatch table.

For one shape (N tokens, hidden H, vocabulary V, bf16), times forward+backward (gradients of logp and entropy into
hidden and weight) of:

- ``fused``: the fused Triton kernel (``backend="triton"``);
- ``chunked``: the chunked path with its default slab (buffer <= 1/4 of the weight gradient);
- ``chunked@S``: the chunked path with ``S`` vocabulary columns per slab (``chunk_size=S``);
- ``chunked/stats=RxCwW`` and ``chunked/grad=RxCwW``: the default slab with other block sizes of its statistics
  kernel or its gradient kernel (rows x columns per program, warps);
- ``trl``: TRL's ``ChunkedLogProbFunction`` (default chunk 32768), and ``floor``: the four cuBLAS GEMMs an exact
  head cannot avoid (forward, recompute, dh, dW), no softmax work. Both for reference, in the same rounds.

CUDA events around each call, median of ``--repeats`` rounds, the order rotated each round. Prints a markdown table
and, with ``--json``, writes every time and the fastest head per shape (what ``healtrl.kernels.dispatch.TABLE``
records). Usage (on a CUDA machine, from the repository root)::

    python benchmarks/lm_head_sweep.py --h 4096 --v 151936 --json sweep_h4096.json
"""

from __future__ import annotations

import argparse
import datetime
import json
import statistics

import torch
from _bench import gemms, make_trl, rotation, time_call


def variants(h: int, v: int, n: int) -> dict[str, dict]:
    """name -> keyword arguments of ``fused_logprob_entropy`` (plus ``config`` for the chunked kernels)."""
    out = {"fused": {"backend": "triton"}, "chunked": {"backend": "chunked"}}
    for s in (1024, 2048, 4096, 8192, 16384):
        if s < v and n * s * 6 <= 2 * 2**30:  # buffer <= 2 GiB
            out[f"chunked@{s}"] = {"backend": "chunked", "chunk_size": s}
    for r, c, w in ((8, 512, 8), (2, 2048, 8), (16, 256, 4), (4, 1024, 4)):
        out[f"chunked/stats={r}x{c}w{w}"] = {
            "backend": "chunked",
            "config": {"STATS_R": r, "STATS_C": c, "stats_warps": w},
        }
    for r, c, w in ((16, 512, 8), (64, 128, 4), (32, 256, 4), (8, 1024, 8)):
        out[f"chunked/grad={r}x{c}w{w}"] = {"backend": "chunked", "config": {"GRAD_R": r, "GRAD_C": c, "grad_warps": w}}
    return out


def make_fn(name: str, kwargs: dict):
    from healtrl.kernels import fused_logprob_entropy

    if name == "trl":
        trl = make_trl(32768)
        return lambda h, w, y: trl(h, w, y, None, 1.0)
    if name == "floor":
        return lambda h, w, y: gemms(h, w, y, None, 1.0)
    config = kwargs.pop("config", None)
    if config:
        from healtrl.kernels.triton_chunked import chunked_logprob_entropy

        def chunked(h, w, y):
            o = chunked_logprob_entropy(h, w, y, config=config)
            return o.logp, o.entropy

        return chunked

    def ours(h, w, y):
        o = fused_logprob_entropy(h, w, y, **kwargs)
        return o.logp, o.entropy

    return ours


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--n", type=int, default=16384)
    p.add_argument("--h", type=int, default=4096)
    p.add_argument("--v", type=int, default=151936)
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--json", default=None, help="write the times and the fastest head here")
    p.add_argument("--device", default="cuda", help="cuda; cpu only to check the script (TRITON_INTERPRET=1)")
    args = p.parse_args(argv)
    dev = torch.device(args.device)
    torch.manual_seed(0)
    scale = (2.0 / args.h**0.5) ** 0.5
    h = (torch.randn(args.n, args.h, device=dev) * scale).bfloat16().requires_grad_()
    w = (torch.randn(args.v, args.h, device=dev) * scale).bfloat16().requires_grad_()
    y = torch.randint(0, args.v, (args.n,), device=dev)
    g = torch.randn(2, args.n, device=dev)

    fns, skipped = {}, {}
    for name, kw in {"trl": {}, "floor": {}, **variants(args.h, args.v, args.n)}.items():
        try:
            fns[name] = make_fn(name, dict(kw))
            lp, ent = fns[name](h[:64], w, y[:64])
            (lp.sum() + ent.sum()).backward()
        except Exception as exc:  # noqa: BLE001 - report and go on
            fns.pop(name, None)
            skipped[name] = f"{type(exc).__name__}: {str(exc).splitlines()[0][:150]}"
            print(f"{name} skipped: {skipped[name]}", flush=True)
        h.grad = w.grad = None

    def fwd_bwd(fn) -> None:
        lp, ent = fn(h, w, y)
        ((lp * g[0]).sum() + (ent * g[1]).sum()).backward()

    def once(fn) -> float:
        seconds = time_call(lambda: fwd_bwd(fn), dev)
        h.grad = w.grad = None
        return seconds

    names = list(fns)
    for n in names:
        once(fns[n])  # warm-up (compiles)
    times = {n: [] for n in names}
    for rnd in range(args.repeats):
        for n in rotation(names, rnd):
            times[n].append(once(fns[n]))
    med = {n: statistics.median(t) for n, t in times.items()}
    heads = [n for n in names if n not in ("trl", "floor")]
    best = min(heads, key=med.get)
    dev_name = torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu (script check)"
    print(f"# LM-head sweep: {dev_name}, N={args.n}, H={args.h}, V={args.v}, bf16, {datetime.date.today()}")
    print(f"fwd+bwd, median of {args.repeats} interleaved rounds (CUDA events)\n")
    print("| head | fwd+bwd (s) | vs TRL | vs floor | rounds |\n|---|---|---|---|---|")
    for n in names:
        vs_trl = f"{med[n] / med['trl']:.3f}x" if "trl" in med else "-"
        vs_floor = f"{med[n] / med['floor']:.3f}x" if "floor" in med else "-"
        rounds = " ".join(f"{t:.4f}" for t in times[n])
        print(f"| {n}{' (fastest)' if n == best else ''} | {med[n]:.4f} | {vs_trl} | {vs_floor} | {rounds} |")
    for n, why in skipped.items():
        print(f"- {n} skipped: {why}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump(
                {
                    "device": dev_name,
                    "date": str(datetime.date.today()),
                    "shape": {"n": args.n, "h": args.h, "v": args.v, "dtype": "bf16"},
                    "median_s": med,
                    "rounds_s": times,
                    "skipped": skipped,
                    "fastest": best,
                    "fastest_kwargs": variants(args.h, args.v, args.n).get(best, {}),
                },
                f,
                indent=1,
            )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
