"""Entropy and reward of GRPO, AER, Pos-Adv-Reweight and the entropy baselines on the toy world, side by side.

Every run is `healtrl.toy.reproduce_entropy_collapse` (warmed-up toy Qwen2 on single-digit addition, 16 prompts x 8
generations per step, lr 5e-4 decaying linearly to 0, temperature 1, no KL, seed 0) with one method switched on.
Each cell is the mean over the `--window` steps ending at that step (single steps are noisy).

    python benchmarks/entropy_methods.py                     # the table (about 15 min on one CPU thread)
    python benchmarks/entropy_methods.py --steps 100 --only grpo aer
    python benchmarks/entropy_methods.py --steps 600 --model healtrl-toy/qwen2-mul --only grpo aer   # harder task
    python benchmarks/entropy_methods.py --overhead          # training-step time of each trainer vs the base

`--overhead` times forward + loss + backward + optimizer step (generation excluded) of every trainer on the same
toy batch, interleaved round-robin so that load on the machine affects all alike, and prints median ratios to the base
trainer (`EntropyGRPOTrainer`).
"""

from __future__ import annotations

import argparse
import platform
import statistics
import time
import warnings

import torch

from healtrl import (
    AERConfig,
    AERTrainer,
    EntropyGRPOConfig,
    EntropyGRPOTrainer,
    GRPOBaselineConfig,
    GRPOBaselineTrainer,
    PosAdvConfig,
    PosAdvTrainer,
)
from healtrl.study.methods import trainer_runs
from healtrl.toy import reproduce_entropy_collapse

# name -> (trainer, config, overrides, note): the study's table of these runs (healtrl.study.methods.RUN_CONFIGS)
RUNS = trainer_runs()


def window_means(history, steps, window, key):
    values = {e["step"]: e[key] for e in history if "step" in e and key in e}
    out = []
    for s in steps:
        xs = [values[t] for t in range(max(1, s - window + 1), s + 1) if t in values]
        out.append(sum(xs) / len(xs) if xs else float("nan"))
    return out


def table(args):
    steps = [s for s in (1, 50, 100, 200, 300, 400, 500, 750, 1000) if s <= args.steps]
    if args.steps not in steps:
        steps.append(args.steps)
    names = args.only or list(RUNS)
    header = "| method | " + " | ".join(f"H@{s}" for s in steps) + " | " + " | ".join(f"R@{s}" for s in steps)
    lines = [header + " | s/step | notes |", "|" + "---|" * (2 * len(steps) + 3)]
    print(header, flush=True)
    for name in names:
        trainer_cls, config_cls, overrides, note = RUNS[name]
        t0 = time.perf_counter()
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            history = reproduce_entropy_collapse(
                steps=args.steps,
                seed=args.seed,
                trainer_cls=trainer_cls,
                config_cls=config_cls,
                model_name=args.model,
                **overrides,
            )
        per_step = (time.perf_counter() - t0) / args.steps
        ent = window_means(history, steps, args.window, "entropy")
        rew = window_means(history, steps, args.window, "reward")
        row = f"| {name} | " + " | ".join(f"{v:.3f}" for v in ent) + " | " + " | ".join(f"{v:.3f}" for v in rew)
        row += f" | {per_step:.3f} | {note} |"
        lines.append(row)
        print(row, flush=True)
    if args.output:
        with open(args.output, "a") as f:
            f.write("\n".join(lines) + "\n")


def overhead(args):
    from _bench import loss_and_grads, next_inputs
    from transformers import set_seed

    from healtrl.toy import load_toy_model
    from healtrl.toy.collapse import toy_grpo_config
    from healtrl.toy.tasks import make_dataset, toy_reward

    torch.set_num_threads(1)
    cases = {
        "base": (EntropyGRPOTrainer, EntropyGRPOConfig, {}),
        "grpo(none)": (GRPOBaselineTrainer, GRPOBaselineConfig, {}),
        "aer": (AERTrainer, AERConfig, {"alpha_init": 0.01}),
        "posadv_entropy": (PosAdvTrainer, PosAdvConfig, {}),
        "rand_pos_clip": (PosAdvTrainer, PosAdvConfig, {"schedule": "rand_pos_clip"}),
        "clip_cov": (GRPOBaselineTrainer, GRPOBaselineConfig, {"entropy_method": "clip_cov"}),
        "kl_cov": (GRPOBaselineTrainer, GRPOBaselineConfig, {"entropy_method": "kl_cov", "kl_cov_ratio": 0.02}),
        "entropy_adv": (GRPOBaselineTrainer, GRPOBaselineConfig, {"entropy_method": "entropy_adv"}),
    }
    trainers, inputs = {}, None
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, (tcls, ccls, kw) in cases.items():
            model, tok = load_toy_model("healtrl-toy/qwen2-add")
            set_seed(0)
            trainer = tcls(
                model=model,
                reward_funcs=toy_reward,
                args=toy_grpo_config("/tmp/healtrl-overhead", steps=10, config_cls=ccls, **kw),
                train_dataset=make_dataset(("add",), 1600, seed=0),
                processing_class=tok,
            )
            trainer.create_optimizer_and_scheduler(num_training_steps=10)
            if inputs is None:
                set_seed(1)
                inputs = next_inputs(trainer)
            trainers[name] = trainer
    times = {name: [] for name in trainers}
    for _ in range(args.repeats):
        for name, trainer in trainers.items():
            t0 = time.perf_counter()
            loss_and_grads(trainer, inputs)
            trainer.optimizer.step()
            trainer.optimizer.zero_grad()
            closed, trainer._closed_step_sums = trainer._closed_step_sums, {}
            trainer.optimizer_step_end(closed)  # what the Trainer loop's step-end callback does
            times[name].append(time.perf_counter() - t0)
    base = statistics.median(times["base"])
    print(f"| trainer | median step (ms) | ratio to base |  ({args.repeats} interleaved repeats, 1 thread)")
    print("|---|---|---|")
    for name, ts in times.items():
        med = statistics.median(ts)
        print(f"| {name} | {1000 * med:.2f} | {med / base:.3f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument(
        "--model", default="healtrl-toy/qwen2-add", help="toy model (and task family), e.g. healtrl-toy/qwen2-mul"
    )
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--only", nargs="*")
    parser.add_argument("--output", help="append the markdown table to this file")
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument("--repeats", type=int, default=60)
    args = parser.parse_args()
    if args.overhead:
        overhead(args)
    else:
        print(f"# {platform.platform()}, {platform.processor() or platform.machine()}, torch {torch.__version__}")
        table(args)


if __name__ == "__main__":
    main()
