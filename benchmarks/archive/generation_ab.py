"""Generation alone, TRL's GRPOTrainer vs healtrl's base trainer, interleaved in one process (issue #29 item 1).

`step_smollm2.py` times whole steps, one fresh process per run; at 256 tokens its base trainer's generation part came
out 1.11x TRL's although both call the same `generate` (the base trainer installs no hook when no rollout statistic
is requested). Between processes a single run's generation time moved by up to 30% (82-122 s for the same work), so
this script removes the process from the comparison: it builds both trainers in ONE process, each on its own copy of
the same weights and with the same config as `step_smollm2.py` (SmolLM2-135M-Instruct, GSM-Symbolic, 4 prompts x 4
completions, every completion forced to exactly L tokens), and calls each trainer's `_generate` on the same 16
prompts alternately (A B B A A B ...), reseeding before every call, so both sample the same tokens. It prints each
pair's ratio (base / TRL) and their median, and checks that both produced identical completions.

    python benchmarks/archive/generation_ab.py --length 64 --pairs 6
    python benchmarks/archive/generation_ab.py --length 32 --profile   # call counts of each `_generate`, compared

`--profile`: one `_generate` of each trainer under `cProfile` (after the untimed warm-up calls), then every function
whose number of calls differs between the two, with both counts: a cost the base trainer adds per decoding step shows
as a function called ~length times more often (or only) in its generation. Call counts do not depend on the machine's
load; the profiled times do and are not printed.
"""

from __future__ import annotations

import argparse
import datetime
import os
import statistics
import sys
import tempfile
import time

# The model and task of `benchmarks/step_smollm2.py`
MODEL = "healtrl-offline/SmolLM2-135M-Instruct"
TASK = "task:gsm-symbolic"


def config_fields(
    name: str, length: int, prompts: int, generations: int, force_length: bool = True, device: str = "cpu"
) -> dict:
    """`benchmarks/step_smollm2.py`'s trainer config as of this A/B (copied when the script was archived, so that it
    keeps running the config it measured); `name` "trl" or a healtrl trainer."""
    fields = dict(
        output_dir=tempfile.mkdtemp(prefix=f"step-{name}-"),
        max_steps=1,
        learning_rate=1e-6,
        lr_scheduler_type="constant",
        per_device_train_batch_size=prompts * generations,
        gradient_accumulation_steps=1,
        num_generations=generations,
        max_completion_length=length,
        temperature=1.0,
        beta=0.0,
        seed=0,
        logging_steps=1,
        save_strategy="no",
        report_to="none",
        use_cpu=device == "cpu",
        bf16=device == "cuda",
        disable_tqdm=True,
    )
    if force_length:
        fields["generation_kwargs"] = {"min_new_tokens": length}
    if name != "trl":
        fields["inspect_every_steps"] = 0
    return fields


def build(name, length, prompts, generations):
    import torch
    from trl import GRPOConfig, GRPOTrainer

    import healtrl
    from healtrl.data import get_reward_func, load_train_dataset
    from healtrl.models import load_model_and_tokenizer

    cls, cfg_cls = (
        (GRPOTrainer, GRPOConfig) if name == "trl" else (healtrl.EntropyGRPOTrainer, healtrl.EntropyGRPOConfig)
    )
    model, tokenizer = load_model_and_tokenizer(MODEL, dtype=torch.float32)
    fields = config_fields(name, length, prompts, generations)  # the whole-step benchmark's config
    trainer = cls(
        model=model,
        reward_funcs=get_reward_func("math"),
        args=cfg_cls(**fields),
        train_dataset=load_train_dataset(TASK, num_samples=16, seed=0),
        processing_class=tokenizer,
    )
    trainer.model.train()  # `_generate` reads the mode from the model, as in a training step
    return trainer


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--length", type=int, default=64, help="completion length, forced (tokens)")
    ap.add_argument("--pairs", type=int, default=6, help="timed (TRL, base) pairs; the order alternates each pair")
    ap.add_argument("--prompts", type=int, default=4)
    ap.add_argument("--generations", type=int, default=4)
    ap.add_argument("--threads", type=int, default=1, help="torch threads")
    ap.add_argument("--profile", action="store_true", help="compare the call counts of one call of each (no timing)")
    args = ap.parse_args(argv)

    import warnings

    warnings.filterwarnings("ignore")
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    import torch
    from transformers import set_seed

    from healtrl.data import load_train_dataset

    torch.set_num_threads(args.threads)
    trainers = {name: build(name, args.length, args.prompts, args.generations) for name in ("trl", "base")}
    rows = load_train_dataset(TASK, num_samples=16, seed=0)
    prompts = [p for p in rows["prompt"][: args.prompts] for _ in range(args.generations)]

    def generate(name):
        set_seed(0)
        start = time.perf_counter()
        out = trainers[name]._generate(prompts)
        return time.perf_counter() - start, out[1]

    for name in trainers:  # untimed: lazy initialisation of each trainer's generation path
        generate(name)
    if args.profile:
        return profile_counts(trainers, prompts, args.length)
    started = datetime.datetime.now(datetime.timezone.utc)
    print(f"# generation A/B, {args.length} tokens, {len(prompts)} completions, {args.threads} torch thread(s)")
    print(f"# started {started:%Y-%m-%d %H:%M} UTC, load average {os.getloadavg()[0]:.2f}")
    print("| pair | order | trl (s) | base (s) | base / trl |")
    print("|---|---|---|---|---|")
    ratios, same = [], True
    for i in range(args.pairs):
        order = ("trl", "base") if i % 2 == 0 else ("base", "trl")
        times, ids = {}, {}
        for name in order:
            times[name], ids[name] = generate(name)
        same &= ids["trl"] == ids["base"]
        ratios.append(times["base"] / times["trl"])
        print(
            f"| {i + 1} | {','.join(order)} | {times['trl']:.2f} | {times['base']:.2f} | {ratios[-1]:.3f} |", flush=True
        )
    print(
        f"\nmedian base / trl over {args.pairs} pairs: {statistics.median(ratios):.3f} "
        f"(min {min(ratios):.3f}, max {max(ratios):.3f}); identical completions in every pair: {same}"
    )
    print(
        f"# ended {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC, "
        f"load average {os.getloadavg()[0]:.2f}"
    )
    return 0 if same else 1


def profile_counts(trainers, prompts, length) -> int:
    """Print the functions whose call counts differ between one `_generate` of TRL's trainer and of the base one."""
    import cProfile
    import pstats

    from transformers import set_seed

    counts, ids = {}, {}
    for name, trainer in trainers.items():
        set_seed(0)
        prof = cProfile.Profile()
        prof.enable()
        ids[name] = trainer._generate(prompts)[1]
        prof.disable()
        stats = pstats.Stats(prof).stats  # (file, line, function) -> (primitive calls, total calls, ...)
        counts[name] = {f"{os.path.basename(k[0])}:{k[1]}({k[2]})": v[1] for k, v in stats.items()}
    keys = sorted(set(counts["trl"]) | set(counts["base"]))
    differ = [(k, counts["trl"].get(k, 0), counts["base"].get(k, 0)) for k in keys]
    differ = [d for d in differ if d[1] != d[2]]
    total = {n: sum(c.values()) for n, c in counts.items()}
    print(f"# call counts of one `_generate` ({len(prompts)} completions x {length} tokens)")
    print(f"# total function calls: trl {total['trl']}, base {total['base']}; identical completions: "
          f"{ids['trl'] == ids['base']}")  # fmt: skip
    print(f"# functions whose call counts differ: {len(differ)}")
    print("| function | trl calls | base calls |\n|---|---|---|")
    for k, a, b in sorted(differ, key=lambda d: -abs(d[2] - d[1])):
        print(f"| {k} | {a} | {b} |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
