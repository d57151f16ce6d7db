"""Block-size sweep of the Triton LM-head kernel on a CUDA GPU, side by side in one process.

For each candidate launch configuration (``BLOCK_N`` tokens x ``BLOCK_V`` vocabulary x ``BLOCK_K`` hidden per tile,
``num_warps``, ``num_stages``; passed to :func:`healtrl.kernels.triton_fused.triton_logprob_entropy` as ``config``)
and each shape: forward and forward+backward time (CUDA events, median of ``--repeats`` rounds, the candidates'
order rotated each round, after one warm-up call each), with TRL's chunked function and the four cuBLAS GEMMs
(``_bench.gemms``, the floor) in the same rounds. Each candidate's numbers are checked before
they count: forward ``logp`` / entropy against a float64 reference on the first 256 tokens, and the gradients
(h and W) against those of the default configuration (``default_config``, the one the tests cover). A candidate
row sets one tile for both kernels, or, written ``fwd A / bwd B``, tile A for the forward and tile B for the
backward's recompute kernel (a ``"fwd"`` override in ``config``). A candidate that fails to compile or run is listed
with its error. Timing: ``_bench.time_head``, as in ``benchmarks/kernel.py``.

Usage (one GPU)::

    python benchmarks/kernel_configs.py --output benchmarks/results/kernel_configs_h200.md
"""

from __future__ import annotations

import argparse
import datetime
import statistics
import sys

import torch
from _bench import gemms, make_trl, rotation, time_head

from healtrl.kernels.triton_fused import default_config, triton_logprob_entropy

TRL = make_trl(32768)  # TRL's chunked log-prob + entropy with its default vocabulary chunk
SHAPES = {"anchor": (16384, 4096, 151936), "smollm2": (16384, 576, 49152)}
# (BLOCK_N, BLOCK_V, BLOCK_K, num_warps, num_stages)
CANDIDATES = [
    None,  # default_config (what the dispatcher launches on this GPU)
    (128, 64, 64, 8, 3),
    (128, 128, 32, 8, 5),
    (128, 128, 32, 8, 6),
    (128, 128, 64, 8, 5),
    (128, 64, 64, 4, 3),
    (128, 64, 64, 8, 4),
    (128, 64, 128, 8, 3),
    (128, 128, 64, 8, 3),
    (128, 128, 64, 8, 4),
    (128, 128, 32, 8, 4),
    (64, 128, 64, 4, 3),
    (64, 128, 64, 8, 4),
    (64, 256, 64, 8, 3),
    (128, 256, 64, 8, 3),
    (256, 64, 64, 8, 3),
    # (forward tile, backward tile): the Hopper forward of default_config with a larger backward tile
    ((128, 128, 32, 8, 4), (128, 128, 64, 8, 3)),
    ((128, 128, 32, 8, 4), (128, 128, 64, 8, 4)),
]


def label(c) -> str:
    if c is None:
        return "default_config"
    if isinstance(c[0], tuple):
        return f"fwd {label(c[0])} / bwd {label(c[1])}"
    return f"{c[0]}x{c[1]}x{c[2]} w{c[3]} s{c[4]}"


def _tile(t) -> dict:
    return {"BLOCK_N": t[0], "BLOCK_V": t[1], "BLOCK_K": t[2], "num_warps": t[3], "num_stages": t[4]}


def ours(config):
    cfg = None
    if config is not None and isinstance(config[0], tuple):  # a forward tile and a backward tile
        cfg = {**_tile(config[1]), "fwd": _tile(config[0])}
    elif config is not None:  # the same tile for the forward and the backward's recompute kernel
        cfg = _tile(config)

    def fn(h, w, y, bias=None, temperature=1.0):  # the heads' signature of _bench
        out = triton_logprob_entropy(h, w, y, bias=bias, temperature=temperature, config=cfg)
        return out.logp, out.entropy

    return fn


def grads(fn, h, w, y, g):
    logp, ent = fn(h, w, y)
    return torch.autograd.grad((logp * g[0]).sum() + (ent * g[1]).sum(), (h, w))


def rel(a, b) -> float:
    return ((a.double() - b.double()).abs().max() / b.double().abs().max().clamp_min(1e-30)).item()


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--shapes", default="anchor,smollm2", help=f"comma-separated, from {sorted(SHAPES)}")
    parser.add_argument("--output", default=None, help="markdown report")
    args = parser.parse_args(argv)
    device = torch.device("cuda")
    lines = [
        "# Triton LM-head kernel: block-size sweep",
        "",
        f"- date: {datetime.date.today().isoformat()}; device: {torch.cuda.get_device_name()}, torch "
        f"{torch.__version__}, triton {__import__('triton').__version__}; bf16",
        f"- command: `python benchmarks/kernel_configs.py {' '.join(argv if argv is not None else sys.argv[1:])}`",
        f"- times: median of {args.repeats} rounds (order rotated), CUDA events, seconds; default_config for bf16: "
        f"`{default_config(device, torch.bfloat16)}`",
        "- logp / ent err: max |x - ref| / max |ref| on the first 256 tokens vs float64; dh / dW vs default: the same "
        "against the default configuration's gradients",
        "",
    ]
    for shape in args.shapes.split(","):
        n, hdim, v = SHAPES[shape]
        torch.manual_seed(0)
        scale = (2.0 / hdim**0.5) ** 0.5
        h = (torch.randn(n, hdim, device=device) * scale).bfloat16().requires_grad_()
        w = (torch.randn(v, hdim, device=device) * scale).bfloat16().requires_grad_()
        y = torch.randint(0, v, (n,), device=device)
        g = (torch.randn(n, device=device), torch.randn(n, device=device))
        with torch.no_grad():
            z = h[:256].double() @ w.double().t()
            lp = z.log_softmax(-1)
            ref_logp = lp.gather(-1, y[:256].unsqueeze(-1)).squeeze(-1)
            ref_ent = -(lp.exp() * lp).sum(-1)
            del z, lp
        impls = {"gemms (floor)": gemms, "trl-32768": TRL}  # all with the heads' signature of _bench
        inputs = (h, w, y, None, 1.0)
        notes, checks = [], {}
        ref_grads = grads(ours(CANDIDATES[0]), h, w, y, g)
        for c in CANDIDATES:
            fn = ours(c)
            try:
                with torch.no_grad():
                    lo, en = fn(h[:256], w, y[:256])
                dh, dw = grads(fn, h, w, y, g)
                checks[label(c)] = (rel(lo, ref_logp), rel(en, ref_ent), rel(dh, ref_grads[0]), rel(dw, ref_grads[1]))
                impls[label(c)] = fn
            except Exception as exc:  # noqa: BLE001
                notes.append(f"{label(c)}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
                print(notes[-1], flush=True)
        del ref_grads
        names = list(impls)
        times = {(k, b): [] for k in names for b in (False, True)}

        for k in names:  # warm-up (compilation)
            time_head(impls[k], inputs, "fwd+bwd", g, device)
        for rep in range(args.repeats):
            for k in rotation(names, rep):
                for b in (False, True):
                    times[(k, b)].append(time_head(impls[k], inputs, "fwd+bwd" if b else "fwd", g, device))
        t_trl = statistics.median(times[("trl-32768", True)])
        lines += [
            f"## {shape}: N={n}, H={hdim}, V={v}",
            "",
            "| configuration | fwd (s) | fwd+bwd (s) | fwd+bwd vs TRL | logp err | ent err | dh vs default | dW vs default |",
            "|---|---|---|---|---|---|---|---|",
        ]
        for k in names:
            fwd, both = statistics.median(times[(k, False)]), statistics.median(times[(k, True)])
            err = checks.get(k)
            cells = ["-"] * 4 if err is None else [f"{e:.1e}" for e in err]
            lines.append(f"| {k} | {fwd:.4f} | {both:.4f} | {both / t_trl:.2f}x | " + " | ".join(cells) + " |")
        lines += [""] + [f"- failed: {x}" for x in notes] + [""]
        print("\n".join(lines[-len(names) - 6 :]), flush=True)
        del h, w, y, g, inputs
        torch.cuda.empty_cache()
    if args.output:
        with open(args.output, "w") as f:
            f.write("\n".join(lines) + "\n")


if __name__ == "__main__":
    main()
