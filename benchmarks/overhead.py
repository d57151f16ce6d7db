"""Step time of every healtrl trainer against GRPO at a scaled-down paper geometry on the toy world (issue #19).

Geometry (the papers' batch layout, scaled to the toy): gradient accumulation 4 micro-batches of 32 completions
(4 prompts x 8 generations) per optimizer step, and the paper's number of optimizer steps per rollout batch:

- 1 update per rollout batch (strict on-policy; `steps_per_generation = gradient_accumulation_steps`): OPEFO
  (arXiv:2605.11491, §5.2) and HEAL (arXiv:2604.17928, §4.1: 128 prompts per batch = mini-batch); reference "grpo (1
  update)".
- 4 updates per rollout batch (`steps_per_generation = 4 x gradient_accumulation_steps`): AER (arXiv:2510.10959: rollout
  batch of 4 mini-batches), Pos-Adv-Reweight (arXiv:2511.05993: N = 4) and the `grpo` trainer's entropy baselines
  (Clip-Cov, KL-Cov, Entropy-Adv, compared against at that geometry); reference "grpo (4 updates)".

Every trainer runs TRL's real training loop (`Trainer.train`) on the same model (`healtrl-toy/qwen2-add+compare`) and
data (HEAL's target + general pool, so every method sees the same prompts). One round = one `train()` call of 4
optimizer steps per trainer (one rollout batch at 4 updates, four at 1 update), trainers in a rotated order each
round, so load on the shared machine hits all alike. Each round starts every trainer from the same initial weights,
a fresh optimizer and the round's seed (`one_round`), so the trainers of a round time the same workload. A step is timed from `on_step_begin` to its `on_log` (logging
every step): generation, scoring, rewards, the methods' rollout work, forward/backward of every micro-batch, gradient
clipping, the optimizer step, the methods' per-step callbacks and logging. "generation" is the time inside
`_generate` (transformers sampling, including any hook a method puts on the LM head); "excl. generation" is the step
minus it. Each ratio is the median over rounds of (method's time in the round) / (its GRPO reference's time in the
same round); the spread is the interquartile range of those per-round ratios.

    python benchmarks/overhead.py                 # the table (~10 min on one CPU thread, 15 rounds)
    python benchmarks/overhead.py --rounds 3      # quick look
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
import warnings

import torch
from _bench import cpu_model, quartiles, rotation
from transformers import PrinterCallback, TrainerCallback, set_seed

from healtrl import (
    AERConfig,
    AERTrainer,
    GRPOBaselineConfig,
    GRPOBaselineTrainer,
    HEALConfig,
    HEALTrainer,
    OPEFOConfig,
    OPEFOTrainer,
    PosAdvConfig,
    PosAdvTrainer,
)

MODEL = "healtrl-toy/qwen2-add+compare"
GA = 4  # gradient accumulation steps
PER_DEVICE = 32  # completions per micro-batch (4 prompts x 8 generations)
STEPS_PER_ROUND = 4

# name -> (trainer, config, updates per rollout batch, config overrides, reference)
CASES = {
    "grpo (1 update)": (GRPOBaselineTrainer, GRPOBaselineConfig, 1, {}, None),
    "opefo": (OPEFOTrainer, OPEFOConfig, 1, {}, "grpo (1 update)"),
    "opefo (exact estimator)": (OPEFOTrainer, OPEFOConfig, 1, {"entropy_change_estimator": "exact"}, "grpo (1 update)"),
    "opefo (forward fallback)": (
        OPEFOTrainer,
        OPEFOConfig,
        1,
        {"rollout_entropy_source": "forward"},
        "grpo (1 update)",
    ),
    "heal": (HEALTrainer, HEALConfig, 1, {}, "grpo (1 update)"),
    "grpo (4 updates)": (GRPOBaselineTrainer, GRPOBaselineConfig, 4, {}, None),
    "aer": (AERTrainer, AERConfig, 4, {}, "grpo (4 updates)"),
    "posadv": (PosAdvTrainer, PosAdvConfig, 4, {}, "grpo (4 updates)"),
    "grpo clip_cov": (GRPOBaselineTrainer, GRPOBaselineConfig, 4, {"entropy_method": "clip_cov"}, "grpo (4 updates)"),
    "grpo kl_cov": (GRPOBaselineTrainer, GRPOBaselineConfig, 4, {"entropy_method": "kl_cov"}, "grpo (4 updates)"),
    "grpo entropy_adv": (
        GRPOBaselineTrainer,
        GRPOBaselineConfig,
        4,
        {"entropy_method": "entropy_adv"},
        "grpo (4 updates)",
    ),
}
# Informational rows, not held to the target (the fallback is what the default replaces).
NOT_TARGETED = {"opefo (forward fallback)"}


class StepClock(TrainerCallback):
    """Wall time of each optimizer step, from `on_step_begin` to the `on_log` that follows it."""

    def __init__(self):
        self.steps: list[tuple[float, float]] = []  # (step seconds, generation seconds)
        self._start = None
        self.generation = 0.0

    def on_train_begin(self, args, state, control, **kwargs):
        self._start = None

    def on_step_begin(self, args, state, control, **kwargs):
        self.generation = 0.0
        self._start = time.perf_counter()

    def on_log(self, args, state, control, logs=None, **kwargs):
        if self._start is not None and logs is not None and "loss" in logs:
            self.steps.append((time.perf_counter() - self._start, self.generation))
            self._start = None


def timed(cls):
    class Timed(cls):
        def _generate(self, prompts):
            start = time.perf_counter()
            try:
                return super()._generate(prompts)
            finally:
                self.clock.generation += time.perf_counter() - start

    Timed.__name__ = cls.__name__
    return Timed


def build(name, workdir, target, general, pool):
    from healtrl.toy import load_toy_model
    from healtrl.toy.collapse import toy_grpo_config
    from healtrl.toy.tasks import toy_reward

    trainer_cls, config_cls, updates, overrides, _ = CASES[name]
    model, tokenizer = load_toy_model(MODEL)
    set_seed(0)
    args = toy_grpo_config(
        os.path.join(workdir, name.replace(" ", "_")),
        steps=STEPS_PER_ROUND,
        config_cls=config_cls,
        per_device_train_batch_size=PER_DEVICE,
        gradient_accumulation_steps=GA,
        steps_per_generation=GA * updates,
        lr_scheduler_type="constant",
        learning_rate=1e-4,
        **overrides,
    )
    kwargs = (
        {"general_dataset": general, "train_dataset": target} if trainer_cls is HEALTrainer else {"train_dataset": pool}
    )
    trainer = timed(trainer_cls)(model=model, reward_funcs=toy_reward, args=args, processing_class=tokenizer, **kwargs)
    trainer.remove_callback(PrinterCallback)
    trainer.clock = StepClock()
    trainer.add_callback(trainer.clock)
    trainer.initial_weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
    return trainer


def one_round(trainer, seed: int = 0):
    """`STEPS_PER_ROUND` optimizer steps of `trainer` from its initial weights, with a fresh optimizer and the round's
    seed, starting a fresh rollout cycle; (step seconds, generation seconds).

    Every round starts each trainer from the same policy and random stream, so the trainers of a round time the same
    workload: without the reset their policies drift apart over the rounds (OPEFO's entropy rises on the toy, so its
    completions run longer) and a ratio would compare different completion lengths, not the methods' own work."""
    trainer.model.load_state_dict(trainer.initial_weights)
    trainer.optimizer, trainer.lr_scheduler = None, None  # created anew by `train`
    trainer._step, trainer._buffered_inputs = 0, None  # TRL's generation cadence starts over with the new dataloader
    trainer.clock.steps = []
    set_seed(seed)
    trainer.train()
    steps = trainer.clock.steps
    if len(steps) != STEPS_PER_ROUND:
        raise RuntimeError(f"timed {len(steps)} steps, expected {STEPS_PER_ROUND}")
    return sum(s for s, _ in steps), sum(g for _, g in steps)


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--rounds", type=int, default=15)
    parser.add_argument("--warmup", type=int, default=1, help="untimed rounds first")
    parser.add_argument("--only", nargs="*", help="cases to run (their GRPO references are added)")
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--output", help="write the markdown table to this file")
    args = parser.parse_args()
    torch.set_num_threads(args.threads)

    # The toy world's data from the study's helper (issue #41 item 5 moves it into the package)
    from healtrl.study.world import general_pool, target_data

    names = list(CASES) if not args.only else args.only
    names = list(dict.fromkeys([n for name in names for n in (CASES[name][4], name) if n is not None]))
    workdir = tempfile.mkdtemp(prefix="healtrl-overhead-")
    target, general = target_data(80, 0), general_pool()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        heal = build("heal", workdir, target, general, None)
        pool = heal.train_dataset  # HEAL's shuffled target + general pool: the same prompts for every method
        trainers = {name: (heal if name == "heal" else build(name, workdir, target, general, pool)) for name in names}
        results = {name: [] for name in names}
        started = time.perf_counter()
        for r in range(args.warmup + args.rounds):
            for name in rotation(names, r):
                out = one_round(trainers[name], seed=r)
                if r >= args.warmup:
                    results[name].append(out)
            print(f"round {r + 1}/{args.warmup + args.rounds} done ({time.perf_counter() - started:.0f} s)", flush=True)

    lines = [
        "| trainer | updates per rollout batch | step excl. generation (ms) | ratio excl. generation [IQR] | "
        "generation per step (ms) | step incl. generation (ms) | ratio incl. generation [IQR] | target | meets |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for name in names:
        ref = CASES[name][4]
        runs = results[name]
        total = statistics.median(t / STEPS_PER_ROUND for t, _ in runs)
        gen = statistics.median(g / STEPS_PER_ROUND for _, g in runs)
        excl = statistics.median((t - g) / STEPS_PER_ROUND for t, g in runs)
        if ref is None:
            cells = ["1 (reference)", "1 (reference)", "", ""]
        else:
            ref_runs = results[ref]
            r_ex = [(t - g) / (rt - rg) for (t, g), (rt, rg) in zip(runs, ref_runs)]
            r_in = [t / rt for (t, _), (rt, _) in zip(runs, ref_runs)]
            target = 1.10 if name == "heal" else 1.05
            q_ex, q_in = quartiles(r_ex), quartiles(r_in)
            meets = (
                "n/a (informational)" if name in NOT_TARGETED else ("yes" if max(q_ex[1], q_in[1]) <= target else "NO")
            )
            cells = [
                f"{q_ex[1]:.3f} [{q_ex[0]:.3f}-{q_ex[2]:.3f}]",
                f"{q_in[1]:.3f} [{q_in[0]:.3f}-{q_in[2]:.3f}]",
                f"<= {target:.2f}",
                meets,
            ]
        updates = CASES[name][2]
        lines.append(
            f"| {name} | {updates} | {1000 * excl:.1f} | {cells[0]} | {1000 * gen:.1f} | {1000 * total:.1f} | "
            f"{cells[1]} | {cells[2]} | {cells[3]} |"
        )
    header = (
        f"- date: {datetime.date.today().isoformat()}\n"
        f"- device: {cpu_model()}, {os.cpu_count()} logical cores (shared), "
        f"{args.threads} torch thread(s); Python {platform.python_version()}, torch {torch.__version__}\n"
        f"- command: `python benchmarks/overhead.py {' '.join(sys.argv[1:])}`\n"
        f"- geometry: gradient_accumulation_steps {GA} x {PER_DEVICE} completions (4 prompts x 8 generations), "
        f"max 4 completion tokens, {STEPS_PER_ROUND} optimizer steps per round, {args.rounds} timed rounds after "
        f"{args.warmup} warm-up round(s); model {MODEL}\n"
    )
    text = header + "\n" + "\n".join(lines) + "\n"
    print(text)
    if args.output:
        with open(args.output, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
