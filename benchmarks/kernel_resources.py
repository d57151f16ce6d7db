"""Compile-time resource use of healtrl's Triton kernels for A100 / H100 / B200, on a machine without a GPU.

Writes benchmarks/results/kernel_resources.md: per kernel x variant x arch, registers per thread, stack frame and
spill bytes (ptxas -v), shared memory, cp.async / TMA / wgmma in the PTX, whether the K loop issues asynchronous
copies itself (pipelined loads), and the occupancy those imply. Variants and configurations are those the dispatcher
launches on each architecture (``dispatcher_variants(capability)``). Takes a few minutes on 2 CPU cores.
These are COMPILE-TIME numbers from Triton's bundled ptxas, not GPU measurements.

    python benchmarks/kernel_resources.py [--out benchmarks/results/kernel_resources.md]
"""

from __future__ import annotations

import argparse
import datetime
import platform
import sys

import torch
import triton

from healtrl.kernels import compile_check as cc


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", default="benchmarks/results/kernel_resources.md")
    args = ap.parse_args(argv)
    rows, results = [], []
    for res in cc.compile_all():
        results.append(res)
        occ = cc.occupancy(res)
        cfg = res.variant.cfg
        lim = cc.SM_LIMITS[res.capability]
        rows.append(
            f"| {res.variant.name} | sm_{res.capability} ({lim['name']}) | "
            f"{cfg['BLOCK_N']}x{cfg['BLOCK_V']}x{cfg['BLOCK_K']}, {cfg['num_warps']}w, {cfg['num_stages']}s | "
            f"{res.registers} | {res.spill_stores}/{res.spill_loads} | {res.stack_bytes} | "
            f"{res.shared_bytes / 1024:.1f} | {'yes' if res.cp_async else 'no'} | {'yes' if res.tma else 'no'} | "
            f"{'yes' if res.k_loop_async else 'no'} | "
            f"{'yes' if res.wgmma else 'no'} | {occ['blocks']} | {occ['warps']}/{lim['warps']} "
            f"({occ['occupancy']:.1%}) | {occ['limiter']} |"
        )
        print(rows[-1], flush=True)
    skipped = [f"sm_{c}" for c in cc.ARCHS if not cc.ptxas_supports(c)]
    summary = ["", "Summary per architecture:", ""]
    for cap in cc.ARCHS:
        mine = [r for r in results if r.capability == cap]
        if not mine:
            continue
        spilling = [r.variant.name for r in mine if r.spills]
        unpiped = [r.variant.name for r in mine if not r.k_loop_async]
        summary.append(
            f"- sm_{cap} ({cc.SM_LIMITS[cap]['name']}): {len(mine)} variants, registers "
            f"{min(r.registers for r in mine)}-{max(r.registers for r in mine)}, spilling: "
            f"{', '.join(spilling) or 'none'}; K loop without async copies: {', '.join(unpiped) or 'none'}"
        )
    head = [
        "# Compiled resource use of healtrl's Triton kernels",
        "",
        "**Compile-time numbers, not GPU measurements.** Each variant the dispatcher can launch on a GPU of each",
        "architecture (`healtrl.kernels.compile_check.dispatcher_variants(capability)`) was compiled with",
        "`triton.compile` for that target and assembled by Triton's bundled ptxas (`ptxas -v` for registers, stack",
        "and spills), on a machine without a GPU. Occupancy is what registers / shared memory / warps allow per SM",
        "(65536 registers, allocated per warp in units of 256; 164 KiB shared memory on A100, 228 KiB on H100/B200,",
        '1 KiB reserved per block; 64 warps; 32 blocks), not a measured one. "async copies in K loop": `cp.async` /',
        "TMA issued inside the loop that holds the MMA, i.e. the `num_stages` software pipeline happened",
        "(`compile_check.k_loop_async`). Arguments specialized as a launch on",
        f"N={cc.PROBLEM['N']}, H={cc.PROBLEM['H']}, V={cc.PROBLEM['V']} (pointers 16-byte aligned, unit strides).",
        "",
        f"- device: {platform.machine()} CPU machine ({platform.node() or 'unnamed'}), no GPU",
        f"- date: {datetime.date.today().isoformat()}",
        f"- Triton {triton.__version__}, torch {torch.__version__}, Python {platform.python_version()}",
        f"- command: `python benchmarks/kernel_resources.py {' '.join(argv or sys.argv[1:])}`".rstrip(),
        f"- archs the bundled ptxas cannot target (skipped): {', '.join(skipped) or 'none'}",
        "",
        "| kernel[variant] | arch | config | regs/thread | spill stores/loads (B) | stack (B) | smem (KiB) | "
        "cp.async | TMA | async copies in K loop | wgmma | blocks/SM | warps/SM | limiter |",
        "|---|---|---|---|---|---|---|---|---|---|---|---|---|---|",
    ]
    with open(args.out, "w") as fh:
        fh.write("\n".join(head + rows + summary) + "\n")
    print(f"wrote {args.out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
