"""The reasoning world's card (issue #26 item 1): build it, measure it at step 0, check it against the targets.

Builds `healtrl.toy.world.WORLD_MODEL` with `WORLD_BUILD` (or loads it from the cache; `--fresh` builds it in a new
cache folder so the warm-up time is measured), then measures, with 16 samples per problem at temperature 1:

- pass@1 and pass@16 on 128 target training problems (Countdown, the `train` split) and on the 20 held-out ones;
- the share of groups of 8 completions (the first 8 samples of each problem) whose rewards are all equal;
- the mean completion length (tokens, `<|end|>` included) and the distribution of token entropies;
- the wall time of one GRPO step of 16 prompts x 8 completions (`EntropyGRPOTrainer`, the world's completion budget,
  one torch thread; the median of steps 2-4 of a 4-step run, so that the first step's set-up is not counted);

and writes the card (Markdown) with each target of the issue and whether it is met.

    python benchmarks/reasoning_world.py --fresh --output benchmarks/results/reasoning_world.md
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

from _bench import cpu_model


def step_seconds(model_name: str, build: dict, steps: int = 4) -> list[float]:
    """Wall seconds of each optimizer step of a short GRPO run on the world (16 prompts x 8 completions)."""
    from transformers import PrinterCallback, TrainerCallback

    from healtrl import EntropyGRPOConfig, EntropyGRPOTrainer
    from healtrl.data import load_train_dataset
    from healtrl.toy import load_toy_model
    from healtrl.toy.collapse import toy_grpo_config
    from healtrl.toy.tasks import toy_reward
    from healtrl.toy.world import MAX_COMPLETION_LENGTH

    class Clock(TrainerCallback):
        def __init__(self):
            self.start, self.seconds = None, []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)

    model, tokenizer = load_toy_model(model_name, **build)
    clock = Clock()
    args = toy_grpo_config(tempfile.mkdtemp(prefix="world-step-"), steps=steps, config_cls=EntropyGRPOConfig,
                           max_completion_length=MAX_COMPLETION_LENGTH)  # fmt: skip
    trainer = EntropyGRPOTrainer(
        model=model,
        reward_funcs=toy_reward,
        args=args,
        train_dataset=load_train_dataset("healtrl-toy/countdown", split="train", num_samples=256, seed=0),
        processing_class=tokenizer,
        callbacks=[clock],
    )
    trainer.remove_callback(PrinterCallback)
    trainer.train()
    return clock.seconds


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--fresh", action="store_true", help="build the world in a new cache folder (times the warm-up)")
    ap.add_argument("--problems", type=int, default=128, help="target training problems measured")
    ap.add_argument("--output", help="write the card here (Markdown); default: print it")
    args = ap.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore")
    import torch

    from healtrl.data import load_train_dataset
    from healtrl.toy import load_toy_model, toy_model_info
    from healtrl.toy.world import CARD_NOTES, ENTROPY_BINS, WORLD_BUILD, WORLD_MODEL, world_statistics

    torch.set_num_threads(1)
    started = datetime.datetime.now(datetime.timezone.utc)
    cache = tempfile.mkdtemp(prefix="world-cache-") if args.fresh else None
    t0 = time.perf_counter()
    model, tokenizer = load_toy_model(WORLD_MODEL, cache_dir=cache, **WORLD_BUILD)
    load_seconds = time.perf_counter() - t0
    info = toy_model_info(model.config.name_or_path)
    train = load_train_dataset("healtrl-toy/countdown", split="train", num_samples=args.problems, seed=0)
    test = load_train_dataset("healtrl-toy/countdown", split="test")
    general = load_train_dataset("healtrl-toy/sumchain", split="train", num_samples=64, seed=0)
    stats = {
        "train": world_statistics(model, tokenizer, train, k=16, group=8, seed=0),
        "test": world_statistics(model, tokenizer, test, k=16, group=8, seed=1),
        "general": world_statistics(model, tokenizer, general, k=16, group=8, seed=2),
    }
    del model
    steps = step_seconds(WORLD_MODEL, {**WORLD_BUILD, "cache_dir": cache} if cache else WORLD_BUILD)
    step = statistics.median(steps[1:]) if len(steps) > 1 else steps[0]
    warm = info["warmup"]
    params = sum(p.numel() for p in load_toy_model(WORLD_MODEL, cache_dir=cache, **WORLD_BUILD)[0].parameters())

    s = stats["train"]
    checks = [
        ("pass@1 on target training problems in [0.15, 0.6]", f"{s['pass@1']:.3f}", 0.15 <= s["pass@1"] <= 0.6),
        ("pass@16 >= 2x pass@1", f"{s['pass@16']:.3f} ({s['pass@16'] / max(s['pass@1'], 1e-9):.2f}x)",
         s["pass@16"] >= 2 * s["pass@1"]),
        ("groups of 8 with equal rewards <= 30%", f"{s['equal_reward_groups']:.1%}", s["equal_reward_groups"] <= 0.30),
        ("mean completion length >= 16 tokens", f"{s['mean_length']:.1f}", s["mean_length"] >= 16),
        ("most completion tokens confident (entropy < 0.1 nats)", f"{s['confident']:.1%}", s["confident"] > 0.5),
        ("a minority of high-entropy forks (>= 0.7 nats)", f"{s['forks']:.1%}", 0 < s["forks"] < 0.5),
        ("warm-up <= 10 minutes (cached)", f"{warm['seconds'] / 60:.1f} min ({warm['steps']} steps)"
         + ("" if args.fresh else ", from the cache's record"), warm["seconds"] <= 600),
        ("one GRPO step, 16 prompts x 8 completions, <= 3 s", f"{step:.2f} s (steps: "
         + ", ".join(f"{x:.2f}" for x in steps) + ")", step <= 3.0),
    ]  # fmt: skip
    lines = [
        "# The reasoning world's card (issue #26 item 1)",
        "",
        f"Command: `python benchmarks/reasoning_world.py{' --fresh' if args.fresh else ''}"
        f"{f' --output {args.output}' if args.output else ''}`",
        "",
        f"- date: {started:%Y-%m-%d %H:%M} UTC - {datetime.datetime.now(datetime.timezone.utc):%H:%M} UTC; "
        f"machine: {cpu_model()}, {os.cpu_count()} cores; torch {torch.__version__}; the warm-up on "
        f"{WORLD_BUILD.get('threads', 1)} torch thread(s), the statistics and the GRPO step on one",
        f"- model: `{WORLD_MODEL}` ({params / 1e6:.2f}M parameters), built with `WORLD_BUILD` = `{WORLD_BUILD}`",
        f"- warm-up: {warm['steps']} steps, {warm['seconds']:.0f} s, stopped at sampled accuracy {warm['accuracy']:.3f} "
        f"(target {info['spec']['target_accuracy']}; probe history {warm['history'][-4:]}); build + load "
        f"{load_seconds:.0f} s",
        "- statistics: 16 samples per problem at temperature 1, completion budget 32 tokens; pass@k unbiased; equal-"
        "reward groups: the first 8 samples of each problem",
        "",
        "| target (issue #26 item 1) | measured | met |",
        "|---|---|---|",
        *(f"| {name} | {value} | {'yes' if ok else '**NO**'} |" for name, value, ok in checks),
        "",
        "| problems | n | pass@1 | pass@16 | equal-reward groups of 8 | mean length | confident (< 0.1) | forks (>= 0.7)"
        " | mean entropy |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    names = {"train": "Countdown, training problems", "test": "Countdown, held-out", "general": "sum chains (general)"}
    for key, st in stats.items():
        lines.append(
            f"| {names[key]} | {st['problems']} | {st['pass@1']:.3f} | {st['pass@16']:.3f} | "
            f"{st['equal_reward_groups']:.1%} | {st['mean_length']:.1f} | {st['confident']:.1%} | {st['forks']:.1%} | "
            f"{st['mean_entropy']:.3f} |"
        )
    lines += ["", "Token-entropy distribution of the completions on the training problems (nats; share of tokens):", ""]
    lines += ["| entropy | share |", "|---|---|"]
    for label, share in s["entropy_bins"].items():
        lines.append(f"| {label} | {share:.1%} {'#' * round(share * 50)} |")
    for note in CARD_NOTES:
        lines += ["", note]
    card = "\n".join(lines) + "\n"
    assert len(ENTROPY_BINS) - 1 == len(s["entropy_bins"])
    if args.output:
        with open(args.output, "w") as f:
            f.write(card)
    print(card)
    return 0 if all(ok for _, _, ok in checks) else 1


if __name__ == "__main__":
    sys.exit(main())
