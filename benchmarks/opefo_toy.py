"""OPEFO vs GRPO on the toy world, side by side (same seeds), and OPEFO's training-step overhead.

Part 1 (curves): strict on-policy GRPO (healtrl's `EntropyGRPOTrainer`, every lever off) and `OPEFOTrainer` (and the
Table 2 ablations: static lambda 0.001, S+ only, S- only) on the warmed-up toy "add" model, with the setup of
`configs/opefo_toy.yaml` (16 prompts x 8 generations, lr 5e-4 constant, one update per rollout batch). Reported: policy
entropy and reward averaged over windows of steps, and OPEFO's mean lambda*.

Part 2 (overhead): the training step without generation (`training_step` minus `_generate_and_score_completions`;
the loss forward, the levers and the backward), GRPO vs OPEFO on the same config, runs alternated over rounds, median
over steps. With gradient accumulation > 1 OPEFO adds one no-grad forward per optimizer step at generation time
(the TRL boundary's `_provide_rollout_stats`, a no-grad forward where generation logits are not available), which is counted here as training-step time.

Usage:
    python benchmarks/opefo_toy.py                       # writes benchmarks/results/opefo_toy.md (~6 min, 1 thread)
    python benchmarks/opefo_toy.py --steps 40 --seeds 0  # quick look
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import time

import torch
from _bench import cpu_model, rotation

from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer, OPEFOConfig, OPEFOTrainer
from healtrl.toy import reproduce_entropy_collapse

COMMON = dict(learning_rate=5e-4, lr_scheduler_type="constant")


def window_means(history, key, windows):
    rows = [e for e in history if "step" in e and key in e]
    out = []
    for lo, hi in windows:
        vals = [e[key] for e in rows if lo <= e["step"] <= hi]
        out.append(sum(vals) / len(vals) if vals else float("nan"))
    return out


def timed(cls):
    """`cls` with the time of each training step, generation excluded, recorded in `self.step_times`."""

    class Timed(cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.step_times, self._gen, self._extra = [], 0.0, 0.0

        def training_step(self, *args, **kwargs):
            self._gen = self._extra = 0.0
            start = time.perf_counter()
            out = super().training_step(*args, **kwargs)
            self.step_times.append(time.perf_counter() - start - self._gen + self._extra)
            return out

        def _generate_and_score_completions(self, inputs):
            start = time.perf_counter()
            out = super()._generate_and_score_completions(inputs)
            self._gen += time.perf_counter() - start
            return out

        def _provide_rollout_stats(self, call):  # OPEFO's whole-batch statistics (gradient accumulation > 1)
            start = time.perf_counter()
            out = super()._provide_rollout_stats(call)
            self._extra += time.perf_counter() - start
            return out

    Timed.__name__ = cls.__name__
    return Timed


def run_curves(args, out):
    windows = [(1, 10)] + [(s - 24, s) for s in range(50, args.steps + 1, 50)]
    variants = [
        ("GRPO (strict on-policy)", EntropyGRPOTrainer, EntropyGRPOConfig, {}),
        ("OPEFO", OPEFOTrainer, OPEFOConfig, {}),
    ]
    ablations = [
        ("Static lambda = 0.001", OPEFOTrainer, OPEFOConfig, {"lambda_mode": "static"}),
        ("One-side (S+ only)", OPEFOTrainer, OPEFOConfig, {"balance_sides": "pos"}),
        ("One-side (S- only)", OPEFOTrainer, OPEFOConfig, {"balance_sides": "neg"}),
    ]
    results = {}
    for seed in args.seeds:
        for name, tcls, ccls, extra in variants + (ablations if seed == args.seeds[0] else []):
            start = time.perf_counter()
            hist = reproduce_entropy_collapse(
                args.steps, seed=seed, trainer_cls=tcls, config_cls=ccls, **COMMON, **extra
            )
            results[(name, seed)] = hist
            print(f"{name} seed {seed}: {time.perf_counter() - start:.0f} s", flush=True)

    head = " | ".join(f"{lo}-{hi}" for lo, hi in windows)
    sep = " | ".join("---" for _ in windows)
    for key, title in [("entropy", "Policy entropy (nats/token)"), ("reward", "Reward (exact match)")]:
        out.append(f"### {title}, mean over steps\n")
        out.append(f"| method | seed | {head} |")
        out.append(f"| --- | --- | {sep} |")
        for (name, seed), hist in results.items():
            vals = " | ".join(f"{v:.3f}" for v in window_means(hist, key, windows))
            out.append(f"| {name} | {seed} | {vals} |")
        out.append("")
    out.append("### OPEFO's lambda* and entropy flow (mean over steps, seed " + str(args.seeds[0]) + ")\n")
    out.append(f"| metric | {head} |")
    out.append(f"| --- | {sep} |")
    hist = results[("OPEFO", args.seeds[0])]
    for key in ("opefo/lambda", "opefo/net_flow", "opefo/pos_share"):
        vals = " | ".join(f"{v:.4g}" for v in window_means(hist, key, windows))
        out.append(f"| `{key}` | {vals} |")
    out.append("")
    return results


def run_overhead(args, out):
    out.append("## Overhead: training step without generation\n")
    out.append("| config | GRPO median (ms) | OPEFO median (ms) | ratio |")
    out.append("| --- | --- | --- | --- |")
    ratios = {}
    for ga in (1, 2):
        cfg = dict(COMMON, gradient_accumulation_steps=ga, per_device_train_batch_size=128 // ga)
        times = {"GRPO": [], "OPEFO": []}
        cases = [("GRPO", EntropyGRPOTrainer, EntropyGRPOConfig), ("OPEFO", OPEFOTrainer, OPEFOConfig)]
        for r in range(args.rounds):
            for name, tcls, ccls in rotation(cases, r):  # GRPO first in even rounds, OPEFO first in odd ones
                holder = {}

                class Keep(timed(tcls)):
                    def __init__(self, *a, _holder=holder, **k):
                        super().__init__(*a, **k)
                        _holder["t"] = self

                reproduce_entropy_collapse(args.overhead_steps, trainer_cls=Keep, config_cls=ccls, **cfg)
                # Steps here are micro-steps; sum each optimizer step's micro-steps, drop the first (warm-up).
                micro = holder["t"].step_times
                steps = [sum(micro[i : i + ga]) for i in range(0, len(micro), ga)][1:]
                times[name].extend(steps)
        grpo, opefo = statistics.median(times["GRPO"]), statistics.median(times["OPEFO"])
        ratios[ga] = opefo / grpo
        label = f"toy, gradient_accumulation_steps={ga}" + (" (OPEFO: + no-grad pass)" if ga > 1 else "")
        out.append(f"| {label} | {grpo * 1e3:.2f} | {opefo * 1e3:.2f} | {opefo / grpo:.3f}x |")
        print(f"overhead ga={ga}: {opefo / grpo:.3f}x", flush=True)
    out.append("")
    return ratios


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--overhead-steps", type=int, default=40)
    parser.add_argument("--output", default="benchmarks/results/opefo_toy.md")
    parser.add_argument("--skip-curves", action="store_true")
    args = parser.parse_args()
    torch.set_num_threads(1)

    out = [
        "# OPEFO vs GRPO on the toy world",
        "",
        f"**Date:** {datetime.date.today().isoformat()} · **Machine:** {cpu_model()}, {os.cpu_count()} cores "
        f"(shared), 1 torch thread, Python {platform.python_version()}, torch {torch.__version__} · **Script:** "
        f"`benchmarks/opefo_toy.py --steps {args.steps} --seeds {' '.join(map(str, args.seeds))}`",
        "",
        "Setup: warmed-up toy Qwen2 on single-digit addition (`healtrl-toy/qwen2-add`), 16 prompts x 8 generations per "
        "step, one optimizer update per rollout batch (strict on-policy), lr 5e-4 constant, temperature 1, no KL; same "
        "seeds for every method (identical first rollout batch). See `configs/opefo_toy.yaml`.",
        "",
        "## Curves",
        "",
    ]
    if not args.skip_curves:
        run_curves(args, out)
    run_overhead(args, out)
    os.makedirs(os.path.dirname(args.output) or ".", exist_ok=True)
    with open(args.output, "w") as f:
        f.write("\n".join(out) + "\n")
    print("\n".join(out))


if __name__ == "__main__":
    main()
