"""HEAL on the toy world: few-shot vs full target data; GRPO vs Hybrid (random general data) vs HEAL, side by side.

Toy world: `healtrl-toy/qwen2-add+compare` (a tiny Qwen2 warmed up to about 20% sampled accuracy on single-digit
addition, the target domain, and max-of-two, the general domain). Target data: 8 additions (few-shot) or all 80
training additions (full); the 20 held-out additions of the test split are never trained on. Runs (16 prompts x 8
generations per step, lr 5e-4 decaying linearly to 0, temperature 1, no KL, `--steps` steps, each seed):

- `grpo`: GRPO on the target data only (TRL's GRPO; rollout entropies logged),
- `hybrid`: target + 32 random general prompts, one shuffled pool, no EDA reward (HEAL with eda_weight 0; HEAL
  (arXiv:2604.17928) §4.1 baseline 4),
- `heal`: target + the 32 general prompts `healtrl select` ranks highest by uncertainty x diversity (HEAL eq. 1,
  8 rollouts of the initial model per question) + the EDA reward (eq. 2-4, KL similarity, paper mode).

Printed per run: the target-domain and general-domain rollout entropy and the target training reward (each the mean
over the `--window` logged steps ending at the step), and at the end avg@16 / pass@16 on the held-out additions
(16 samples at temperature 1). The last table gives mean and spread (min-max) over seeds.

    python benchmarks/heal_toy.py                          # 3 seeds x 2 data regimes x 3 methods (about 20 min)
    python benchmarks/heal_toy.py --seeds 0 --steps 100    # quick look
    python benchmarks/heal_toy.py --overhead               # HEAL's training step vs the base trainer's

The runs are built as the study builds its `grpo`, `hybrid` and `heal` runs (`make_heal_family_trainer` of
`healtrl.study.runs`, the world and data of `healtrl.study.world`), without the study's entropy-flow logging.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import tempfile
import time
import warnings

import torch

# The world, its data and the trainers of the grpo / hybrid / heal runs are the study's (healtrl.study).
from healtrl.study.runs import make_heal_family_trainer as make_trainer  # noqa: E402
from healtrl.study.world import (  # noqa: E402
    GENERAL_ENTROPY,
    MODEL,
    REGIMES,
    TARGET_ENTROPY,
    TARGET_REWARD,
    general_pool,
    held_out_pass_at,
    target_data,
    toy_args,
)

STEPS_SHOWN = (1, 50, 100, 200, 300, 500, 1000)
METHODS = ("grpo", "hybrid", "heal")


def run(method: str, regime: str, seed: int, steps: int, workdir: str, selected: dict):
    trainer, tokenizer = make_trainer(method, regime, seed, steps, workdir, selected)
    t0 = time.perf_counter()
    trainer.train()
    seconds = time.perf_counter() - t0
    held_out = held_out_accuracy(trainer.model, tokenizer, seed)
    return trainer.state.log_history, held_out, seconds


def held_out_accuracy(model, tokenizer, seed: int, k: int = 16) -> tuple[float, float]:
    pass_at = held_out_pass_at(model, tokenizer, seed, k)
    return pass_at[1], pass_at[k]


def window_mean(history, step, window, keys):
    for key in keys:
        values = {e["step"]: e[key] for e in history if "step" in e and key in e}
        xs = [values[t] for t in range(max(1, step - window + 1), step + 1) if t in values]
        if xs:
            return sum(xs) / len(xs)
    return float("nan")


def fmt(x: float) -> str:
    return "—" if x != x else f"{x:.3f}"


def table(args):
    steps = [s for s in STEPS_SHOWN if s <= args.steps]
    if args.steps not in steps:
        steps.append(args.steps)
    cols = [f"H_tgt@{s}" for s in steps] + [f"H_gen@{s}" for s in steps] + [f"R_tgt@{s}" for s in steps]
    header = "| data | method | seed | " + " | ".join(cols) + " | avg@16 | pass@16 | s |"
    lines = [header, "|" + "---|" * (len(cols) + 6)]
    print("\n".join(lines), flush=True)
    finals: dict[tuple[str, str], list[tuple[float, ...]]] = {}
    selected: dict = {}
    workdir = tempfile.mkdtemp(prefix="heal-toy-")
    for seed in args.seeds:
        for regime in args.regimes:
            for method in args.only or METHODS:
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    history, (avg, pass_k), seconds = run(method, regime, seed, args.steps, workdir, selected)
                h_t = [window_mean(history, s, args.window, TARGET_ENTROPY) for s in steps]
                h_g = [window_mean(history, s, args.window, GENERAL_ENTROPY) for s in steps]
                r_t = [window_mean(history, s, args.window, TARGET_REWARD) for s in steps]
                row = f"| {regime} | {method} | {seed} | " + " | ".join(fmt(v) for v in h_t + h_g + r_t)
                row += f" | {avg:.3f} | {pass_k:.3f} | {seconds:.0f} |"
                lines.append(row)
                print(row, flush=True)
                finals.setdefault((regime, method), []).append((h_t[-1], h_g[-1], r_t[-1], avg, pass_k))
    summary = [
        "",
        f"Mean (min-max) over seeds {args.seeds}, at step {args.steps}:",
        "",
        "| data | method | H_tgt | H_gen | R_tgt (train) | avg@16 (held out) | pass@16 (held out) |",
        "|---|---|---|---|---|---|---|",
    ]
    for (regime, method), values in finals.items():
        cells = []
        for column in zip(*values):
            finite = [v for v in column if v == v]
            cells.append(f"{statistics.mean(finite):.3f} ({min(finite):.3f}-{max(finite):.3f})" if finite else "—")
        summary.append(f"| {regime} | {method} | " + " | ".join(cells) + " |")
    print("\n".join(summary), flush=True)
    if args.output:
        with open(args.output, "a") as f:
            f.write("\n".join(lines + summary) + "\n")


def overhead(args):
    """Training step (generation excluded) of HEAL vs the base trainer on the same batch, interleaved round-robin.

    HEAL's step = getting the rollout entropies + the EDA reward on the gathered batch + forward/loss/backward/optimizer
    step. Two ways of getting the entropies are timed: `auto` reads them off the generation's own logits (so the
    step itself adds only EDA; the hook's cost shows up in generation, timed separately), `forward` runs one no-grad
    forward with the fused kernel (what happens under vLLM without TRL's old-log-prob pass).
    """
    from _bench import loss_and_grads, next_inputs
    from transformers import set_seed

    from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer, HEALConfig, HEALTrainer
    from healtrl.functional import eda_rewards
    from healtrl.toy import load_toy_model
    from healtrl.toy.tasks import toy_reward

    torch.set_num_threads(1)
    target, general = target_data(80, 0), general_pool()
    workdir = tempfile.mkdtemp(prefix="heal-overhead-")
    trainers = {}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        for name, tcls, ccls, kw in [
            ("base", EntropyGRPOTrainer, EntropyGRPOConfig, {}),
            ("heal", HEALTrainer, HEALConfig, {"general_dataset": general}),
        ]:
            model, tokenizer = load_toy_model(MODEL)
            set_seed(0)
            trainers[name] = tcls(
                model=model, reward_funcs=toy_reward, args=toy_args(ccls, os.path.join(workdir, name), 10, 0),
                train_dataset=target, processing_class=tokenizer, **kw,
            )  # fmt: skip
            trainers[name].create_optimizer_and_scheduler(num_training_steps=10)
        set_seed(1)
        inputs = next_inputs(trainers["heal"])
    heal = trainers["heal"]
    prompts = [p[m.bool()].tolist() for p, m in zip(inputs["prompt_ids"], inputs["prompt_mask"])]
    completions = [c[m.bool()].tolist() for c, m in zip(inputs["completion_ids"], inputs["completion_mask"])]
    is_target = torch.arange(len(completions)) % 4 != 0

    def eda_from(entropies, mask):
        lengths = mask.sum(1)
        return eda_rewards([entropies[i, : lengths[i]] for i in range(len(lengths))], is_target)

    from healtrl.trainers._trl.hooks import GenerationCall

    def rollout_entropies(captured):
        # The TRL boundary's provision of the rollout entropies (`_trl/generation.py`), from what generation captured
        # (None: one no-grad forward).
        call = GenerationCall(stats_keys=frozenset({"entropy"}), rollout_ids=(prompts, completions), captured=captured)
        stats = heal._provide_rollout_stats(call)
        return stats["entropy"], stats.mask

    def heal_step(source):
        # "auto": the generation hook already filled the entropies, so the step only pays for the EDA reward.
        eda_from(*rollout_entropies(("generation", {"entropy": generation_entropies}) if source == "auto" else None))
        loss_and_grads(heal, inputs)
        heal.optimizer.step()
        heal.optimizer.zero_grad()

    generation_entropies, _ = rollout_entropies(None)
    base = trainers["base"]
    cases = {
        "base": lambda: (loss_and_grads(base, inputs), base.optimizer.step(), base.optimizer.zero_grad()),
        "heal (auto: entropies from generation)": lambda: heal_step("auto"),
        "heal (forward: one no-grad forward)": lambda: heal_step("forward"),
    }
    times = {name: [] for name in cases}
    for _ in range(args.repeats):
        for name, fn in cases.items():
            t0 = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - t0)

    # Generation with and without the entropy hook (the `auto` source's cost).
    gen_times = {"generation, base": [], "generation, heal (entropy hook)": []}
    rows = [target[i] for i in range(16) for _ in range(8)]
    for _ in range(max(3, args.repeats // 10)):
        for name, trainer in (("generation, base", base), ("generation, heal (entropy hook)", heal)):
            set_seed(2)
            t0 = time.perf_counter()
            with torch.no_grad():
                trainer._generate([r["prompt"] for r in rows])
            gen_times[name].append(time.perf_counter() - t0)

    print(
        f"| step | median (ms) | ratio |   ({args.repeats} interleaved repeats, 1 thread, 16 prompts x 8 generations)"
    )
    print("|---|---|---|")
    ref = statistics.median(times["base"])
    for name, ts in times.items():
        print(f"| {name} | {1000 * statistics.median(ts):.1f} | {statistics.median(ts) / ref:.3f} |")
    ref = statistics.median(gen_times["generation, base"])
    for name, ts in gen_times.items():
        print(f"| {name} | {1000 * statistics.median(ts):.1f} | {statistics.median(ts) / ref:.3f} |")


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--regimes", nargs="+", default=list(REGIMES), choices=list(REGIMES))
    parser.add_argument("--only", nargs="*", choices=list(METHODS))
    parser.add_argument("--window", type=int, default=20)
    parser.add_argument("--output", help="append the markdown tables to this file")
    parser.add_argument("--overhead", action="store_true")
    parser.add_argument("--repeats", type=int, default=40)
    args = parser.parse_args()
    torch.set_num_threads(1)
    print(f"# {datetime.date.today()} {platform.platform()}, torch {torch.__version__}, model {MODEL}")
    if args.overhead:
        overhead(args)
    else:
        table(args)


if __name__ == "__main__":
    main()
