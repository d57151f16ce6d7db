"""Speed of HEAL's Entropy Dynamics Alignment (HEAL, arXiv:2604.17928, §3.2, eq. 2-4; Appendix A.2, eq. 8-9): all-pairs
KL similarity and rewards for one rollout batch.

Issue targets: <= 0.5 s on this 2-core CPU for N = 256 trajectories of length <= 512 (kl), and <= 50 ms on an
H100/H200 for N = 1024 of length <= 3072. Lengths are drawn uniform in [L/2, L]; token entropies are realistic
(mostly low with spikes, in [0, 5] nats: 5 * u**4, u uniform).

Timed (wall clock, median and min of --repeats runs after --warmup runs, each with a device synchronisation):

- `pairwise`: `pairwise_entropy_similarity(x, lengths=...)`, the full [N, N] matrix;
- `paper`: `eda_rewards(..., mode="paper")` with --target-fraction of the trajectories in the target domain (default
  8/104, the authors' batch mix: 8 target : 96 general rows); only pairs with a target trajectory are computed;
- `paper-half`: the same with half of them targets;
- `reference`: `eda_rewards(..., mode="reference")`: every pair, every trajectory scored (the worst case).

Usage:
    python benchmarks/eda_speed.py                                     # CPU, N=256, L=512
    python benchmarks/eda_speed.py --device cuda --n 1024 --length 3072
"""

from __future__ import annotations

import argparse
import os
import statistics
import time

import torch
from _bench import cpu_model, sync

from healtrl.functional import eda_rewards, pairwise_entropy_similarity


def time_it(fn, device: torch.device, repeats: int, warmup: int) -> tuple[float, float, float | None]:
    """(median s, min s, peak extra MiB on CUDA or None)."""
    for _ in range(warmup):
        fn()
    sync(device)
    peak = None
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        base = torch.cuda.memory_allocated(device)
    times = []
    for _ in range(repeats):
        sync(device)
        start = time.perf_counter()
        fn()
        sync(device)
        times.append(time.perf_counter() - start)
    if device.type == "cuda":
        peak = (torch.cuda.max_memory_allocated(device) - base) / 2**20
    return statistics.median(times), min(times), peak


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--n", type=int, default=256, help="trajectories per batch")
    parser.add_argument("--length", type=int, default=512, help="longest trajectory; lengths uniform in [L/2, L]")
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--dtype", default="float32", choices=["float32", "float64"])
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--warmup", type=int, default=1)
    parser.add_argument("--threads", type=int, default=None, help="torch CPU threads (default: torch's)")
    parser.add_argument("--target-fraction", type=float, default=8 / 104)
    parser.add_argument("--tile-elements", type=int, default=None)
    parser.add_argument("--target-seconds", type=float, default=None, help="default: 0.5 on CPU, 0.05 otherwise")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()

    if args.threads:
        torch.set_num_threads(args.threads)
    device = torch.device(args.device)
    dtype = getattr(torch, args.dtype)
    target = args.target_seconds or (0.5 if device.type == "cpu" else 0.05)
    gen = torch.Generator().manual_seed(args.seed)
    lengths = torch.randint(args.length // 2, args.length + 1, (args.n,), generator=gen)
    x = 5.0 * torch.rand(args.n, args.length, generator=gen) ** 4
    x = x.masked_fill(torch.arange(args.length) >= lengths[:, None], 0.0)
    is_target = torch.rand(args.n, generator=gen) < args.target_fraction
    half = torch.rand(args.n, generator=gen) < 0.5
    x, lengths, is_target, half = (t.to(device) for t in (x.to(dtype), lengths, is_target, half))
    te = args.tile_elements

    cases = {
        "pairwise": lambda: pairwise_entropy_similarity(x, lengths=lengths, tile_elements=te),
        "paper": lambda: eda_rewards(x, is_target, lengths=lengths, tile_elements=te),
        "paper-half": lambda: eda_rewards(x, half, lengths=lengths, tile_elements=te),
        "reference": lambda: eda_rewards(x, is_target, lengths=lengths, mode="reference", tile_elements=te),
    }
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else cpu_model()
    print(
        f"device {device} ({name}), torch {torch.__version__}, threads {torch.get_num_threads()}, {args.dtype}, "
        f"N={args.n}, lengths uniform in [{args.length // 2}, {args.length}] (mean {lengths.float().mean():.0f}), "
        f"targets {int(is_target.sum())} (paper-half: {int(half.sum())}), tile_elements {te or 'default'}, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    print(f"target: <= {target * 1e3:.0f} ms")
    print("| case | median (ms) | min (ms) | median / target | peak extra (MiB) |")
    print("|---|---|---|---|---|")
    for case, fn in cases.items():
        med, best, peak = time_it(fn, device, args.repeats, args.warmup)
        peak_s = f"{peak:.0f}" if peak is not None else "n/a"
        print(f"| {case} | {med * 1e3:.1f} | {best * 1e3:.1f} | {med / target:.2f} | {peak_s} |", flush=True)
    print(f"load average after: {os.getloadavg()[0]:.2f}")


if __name__ == "__main__":
    main()
