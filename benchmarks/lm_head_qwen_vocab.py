"""The LM head at a Qwen-size vocabulary on the CPU: time and peak extra memory of forward+backward (issue #29 item 2).

Forward+backward of per-token ``logp`` and entropy (and, for ``ours+ps``, the power sums S2 / S2L) with gradients
through ``logp`` and the entropy into the hidden states and the LM-head weight, at V = 151,936 (Qwen2/2.5/3),
H = 2,048 and N = 4,096 / 16,384 tokens. Implementations:

- ``gemms``: the four GEMMs alone (forward logits, their recompute in the backward, ``dh``, ``dW``) with the tiles
  of ``healtrl.kernels.torch_chunked`` (``_bench.four_gemms``): the floor of any exact
  four-GEMM float32 kernel with these GEMMs. It holds ``dh`` and ``dW`` like the others.
- ``ours`` / ``ours+ps``: ``healtrl.kernels.fused_logprob_entropy(backend="torch")``, ``+ps``: ``power_sums=True``
  (the power sums are computed; the gradient flows through logp and entropy, as in the trainers).
- ``trl``: TRL 1.16's ``ChunkedLogProbFunction`` (what ``add_fused_lm_head`` calls) with its default vocabulary
  chunk of 32,768, asked for ``("entropy",)``.
- ``naive``: full logits ``h @ W^T``, ``log_softmax``, gather, ``-(p * log p).sum()``; autograd backward.

Measurement: every (implementation, round) runs in a FRESH PROCESS (``--child``), which builds the inputs from the
seed, returns free heap memory to the OS (``malloc_trim``), resets the resident high-water mark
(``/proc/self/clear_refs`` = 5) and reads the resident size, then runs forward+backward once, timed with
``time.perf_counter``, and reads the high-water mark ``VmHWM``. "Peak extra" = ``VmHWM`` - resident size before the
call: every byte the call touches, including the returned gradients ``dW`` (V x H x 4 bytes for float32 inputs) and
``dh`` (N x H x 4), and also any allocator slack (an upper bound on the bytes torch holds; torch's CPU allocator has no
``max_memory_allocated``). A fresh process per run means no run inherits another's heap; the implementations of a
round run back to back in an order rotated each round, and the reported times are medians over rounds, the ratios
ratios of those medians (per-round ratios printed too), so load from other processes on the shared machine hits all
alike.

Usage::

    python benchmarks/lm_head_qwen_vocab.py --n 4096 --rounds 2
    python benchmarks/lm_head_qwen_vocab.py --n 16384 --rounds 1 --impls gemms,ours
    python benchmarks/lm_head_qwen_vocab.py --n 4096 --dtype bf16 --rounds 1 --impls ours,ours+ps,trl
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import statistics
import subprocess
import sys
import time

from _bench import four_gemms, machine, reset_rss_peak, rotation, status_kb

MIB = 2**20


def child(args) -> int:
    import torch

    from healtrl.kernels import fused_logprob_entropy
    from healtrl.kernels.torch_chunked import plan_chunks

    if args.threads:
        torch.set_num_threads(args.threads)
    dtype = {"fp32": torch.float32, "bf16": torch.bfloat16}[args.dtype]
    torch.manual_seed(0)
    scale = (2.0 / args.h**0.5) ** 0.5  # logits of std ~2
    h = (torch.randn(args.n, args.h) * scale).to(dtype).requires_grad_()
    w = (torch.randn(args.v, args.h) * scale).to(dtype).requires_grad_()
    y = torch.randint(0, args.v, (args.n,))
    g = torch.randn(2, args.n)

    def run():
        if args.impl == "gemms":
            rows, slab = plan_chunks(args.n, args.v, args.h, torch.float32)
            four_gemms(h.detach().float(), w.detach().float(), rows, slab)
            return
        if args.impl in ("ours", "ours+ps"):
            out = fused_logprob_entropy(h, w, y, power_sums=args.impl == "ours+ps", backend="torch")
            logp, ent = out.logp, out.entropy
        elif args.impl == "trl":
            from trl.kernels import ChunkedLogProbFunction

            logp, ent = ChunkedLogProbFunction.apply(h, w, None, y, 1.0, 32768, None, 1.0, ("entropy",))[:2]
        elif args.impl == "naive":
            logp_all = (h @ w.t()).float().log_softmax(-1)
            logp = logp_all.gather(-1, y.unsqueeze(-1)).squeeze(-1)
            ent = -(logp_all.exp() * logp_all).sum(-1)
            del logp_all
        else:
            raise SystemExit(f"unknown implementation {args.impl}")
        ((logp.float() * g[0]).sum() + (ent.float() * g[1]).sum()).backward()

    # A tiny untimed call first, so that one-off lazy initialisation (MKL, OpenMP pools) is not in the measurement
    if args.impl != "gemms":
        ws = w.detach()[:4096].clone().requires_grad_()
        hs = h.detach()[:64].clone().requires_grad_()
        fused_logprob_entropy(hs, ws, y[:64] % 4096, backend="torch").logp.sum().backward()
        del ws, hs
    before = reset_rss_peak()
    t0 = time.perf_counter()
    run()
    dt = time.perf_counter() - t0
    peak = status_kb("VmHWM")
    print(json.dumps({"time": dt, "extra_mib": (peak - before) / 1024, "rss_before_mib": before / 1024}))
    return 0


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--n", type=int, default=4096)
    ap.add_argument("--h", type=int, default=2048)
    ap.add_argument("--v", type=int, default=151936)
    ap.add_argument("--dtype", choices=["fp32", "bf16"], default="fp32")
    ap.add_argument("--rounds", type=int, default=2)
    ap.add_argument("--impls", default="gemms,ours,ours+ps,trl,naive")
    ap.add_argument("--output", default=None, help="append the markdown section to this file")
    ap.add_argument("--threads", type=int, default=None, help="torch threads per run (default: torch's)")
    ap.add_argument(
        "--parallel",
        action="store_true",
        help="start the implementations of a round at the same time (one process each), so that they share the "
        "machine's load alike",
    )
    ap.add_argument("--jsonl", default=None, help="also append each run's result to this file as it finishes")
    ap.add_argument(
        "--report-from", default=None, help="no runs: write the section from the results in this --jsonl file"
    )
    ap.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--impl", default=None, help=argparse.SUPPRESS)
    args = ap.parse_args(argv)
    if args.child:
        return child(args)

    names = args.impls.split(",")
    res: dict[str, list[dict]] = {n: [] for n in names}
    started = datetime.datetime.now(datetime.timezone.utc)
    if args.report_from:
        with open(args.report_from) as f:
            rows = [json.loads(x) for x in f if x.strip()]
        key = (args.n, args.h, args.v, args.dtype)
        rows = [x for x in rows if (x["n"], x["h"], x["v"], x["dtype"]) == key and x["impl"] in res]
        for x in rows:
            res[x["impl"]].append(x)
        names = [n for n in names if res[n]]
        started = min(datetime.datetime.fromisoformat(x["start"]) for x in rows)
        args.rounds = max(len(v) for v in res.values())
    for r in range(0 if args.report_from else args.rounds):
        order = rotation(names, r)
        procs = {}
        for n in order:
            cmd = [sys.executable, os.path.abspath(__file__), "--child", "--impl", n]
            cmd += ["--n", str(args.n), "--h", str(args.h), "--v", str(args.v), "--dtype", args.dtype]
            cmd += [] if args.threads is None else ["--threads", str(args.threads)]
            procs[n] = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
            if not args.parallel:
                procs[n].wait()
        for n in order:
            p = procs[n]
            p.stdout_text, p.stderr_text = p.communicate()
            if p.returncode != 0:
                print(f"round {r + 1} {n}: FAILED rc={p.returncode}: {p.stderr_text.strip()[-400:]}", flush=True)
                res[n].append({"time": float("nan"), "extra_mib": float("nan"), "load": os.getloadavg()[0]})
                continue
            out = json.loads(p.stdout_text.strip().splitlines()[-1])
            out["load"] = os.getloadavg()[0]
            res[n].append(out)
            if args.jsonl:
                meta = {"impl": n, "round": r, "n": args.n, "h": args.h, "v": args.v, "dtype": args.dtype}
                meta.update(parallel=args.parallel, threads=args.threads)
                meta["start"] = started.isoformat()
                meta["end"] = datetime.datetime.now(datetime.timezone.utc).isoformat()
                with open(args.jsonl, "a") as f:
                    f.write(json.dumps({**meta, **out}) + "\n")
            print(
                f"round {r + 1}/{args.rounds} {n}: {out['time']:.2f} s, peak extra {out['extra_mib']:.0f} MiB "
                f"(load {out['load']:.1f})",
                flush=True,
            )
    ended = datetime.datetime.now(datetime.timezone.utc)
    if args.report_from:
        ended = max(datetime.datetime.fromisoformat(x["end"]) for v in res.values() for x in v)

    elem = 4 if args.dtype == "fp32" else 2
    dw = args.v * args.h * elem / MIB
    dh = args.n * args.h * elem / MIB
    med = {n: statistics.median(x["time"] for x in res[n]) for n in names}
    mem = {n: max(x["extra_mib"] for x in res[n]) for n in names}
    refs = [r for r in ("gemms", "trl", "naive") if r in names]
    lines = [
        "| implementation | fwd+bwd (s), median | per round (s) | "
        + "".join(f"time vs {r} | " for r in refs)
        + "peak extra (MiB), max over rounds | minus dW | minus dW and dh |",
        "|---|---|---|" + "---|" * len(refs) + "---|---|---|",
    ]
    for n in names:
        per = ", ".join(f"{x['time']:.1f}" for x in res[n])
        lines.append(
            f"| {n} | {med[n]:.2f} | {per} | "
            + "".join(f"{med[n] / med[r]:.3f} | " for r in refs)
            + f"{mem[n]:.0f} | {mem[n] - dw:+.0f} | {mem[n] - dw - dh:+.0f} |"
        )
    per_round = []
    for r in [x for x in ("gemms", "trl") if x in names]:
        for n in [x for x in ("ours", "ours+ps") if x in names]:
            ratios = [a["time"] / b["time"] for a, b in zip(res[n], res[r])]
            per_round.append(f"{n} / {r} per round: " + ", ".join(f"{q:.3f}" for q in ratios))
    loads = [x["load"] for n in names for x in res[n]]
    cmd = f"python benchmarks/lm_head_qwen_vocab.py {' '.join(argv if argv is not None else sys.argv[1:])}"
    text = "\n".join(
        [
            f"## N={args.n}, H={args.h}, V={args.v}, {args.dtype} inputs",
            "",
            f"- command: `{cmd}`",
            f"- date: {started:%Y-%m-%d %H:%M}-{ended:%H:%M} UTC; 1-min load average after each run "
            f"{min(loads):.1f}-{max(loads):.1f}",
            f"- machine: {machine(trainer_libraries=False)}",
            f"- gradients the call returns: dW {dw:.0f} MiB, dh {dh:.0f} MiB ({args.dtype})",
            "",
            *lines,
            "",
            *[f"- {x}" for x in per_round],
            "",
        ]
    )
    print(text)
    if args.output:
        with open(args.output, "a") as f:
            f.write(text + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
