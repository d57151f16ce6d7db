"""The worlds the study runs in: each one's toy model, target and general data, completion budget and held-out score.

A world is a target task family (`--task`): `add` (the toy world: single-digit addition, max-of-two as general data),
`mul` (single-digit multiplication, no general domain) and `countdown` (the reasoning world of `healtrl.toy.world`:
Countdown with written-out steps, sum chains as general data). `WORLDS` holds each one's model, general family,
completion budget, data regimes (target problems of `few_shot` and `full`) and the pool the regimes draw from;
`TASKS` the model and the sentence the report describes it with.

Every run of the study shares this: 16 prompts x 8 generations per step, lr 5e-4 decaying linearly to 0, temperature
1, no KL (`healtrl.toy.collapse.toy_grpo_config`, through `toy_args`), the world's completion budget, target problems
drawn by seed from the world's pool (`target_data`), and after training unbiased pass@k on the family's 20 held-out
problems, `K` samples each at temperature 1 (`held_out_pass_at`).

Imports torch, transformers and datasets only inside the functions, so the command line can read the tables cheaply.
"""

from __future__ import annotations

import os

MODEL = "healtrl-toy/qwen2-add+compare"
REGIMES = {"few_shot": 8, "full": 80}  # the add world's target problems; each world has its own in WORLDS
K = 16  # held-out samples per problem

# Target family -> model (warmed up on target + general), general family (None: no HEAL / Hybrid), completion budget,
# data regimes (target problems), and the pool the regimes draw from.
WORLDS = {
    "add": dict(model=MODEL, general="compare", completion=4, regimes=REGIMES, pool=80),
    "mul": dict(model="healtrl-toy/qwen2-mul", general=None, completion=4, regimes=REGIMES, pool=80),
    # The reasoning world (healtrl.toy.world, issue #26): Countdown with written-out steps; sum chains as general data.
    "countdown": dict(
        model="healtrl-toy/qwen2-countdown+sumchain",
        general="sumchain",
        completion=32,
        regimes={"few_shot": 16, "full": 256},
        pool=256,
    ),
}
# --task: target family -> (toy model, what it is). "add" is the study's world; "mul" keeps hard problems longer.
TASKS = {
    "add": (
        MODEL,
        "a tiny Qwen2 warmed up to ~20% sampled accuracy on single-digit addition (the target domain) and max-of-two "
        "(the general domain)",
    ),
    "mul": (
        "healtrl-toy/qwen2-mul",
        "a tiny Qwen2 warmed up to ~20% sampled accuracy on single-digit multiplication (one- and two-digit answers); "
        "no general domain, so HEAL and Hybrid do not run on it",
    ),
    "countdown": (
        WORLDS["countdown"]["model"],
        "the reasoning world (`healtrl.toy.world`, card: `benchmarks/results/reasoning_world.md`): a small Qwen2 "
        "warmed up on imperfect Countdown demonstrations (target domain: reach a target from 3-4 numbers with + and "
        "-, the steps written out, several correct paths) and sum chains (general domain); completions up to 32 "
        "tokens; few-shot 16 / full 256 target problems, HEAL's general data 64 prompts",
    ),
}
# Log keys of the per-step series, first present wins (HEAL logs per domain, the other trainers the rollout entropy).
TARGET_ENTROPY = ("heal/entropy_target", "rollout/entropy")
GENERAL_ENTROPY = ("heal/entropy_general",)
TARGET_REWARD = ("heal/reward_target", "rewards/toy_reward/mean")


def regime_size(task: str, regime: str) -> int:
    """Target problems of a data regime in the world of `task`."""
    return WORLDS[task]["regimes"][regime]


def toy_args(config_cls, output_dir, steps, seed, world: str = "add", **overrides):
    """A `config_cls` of one study run: `toy_grpo_config`'s settings, logging every step, no progress bar, the world's
    completion budget, then `overrides`."""
    from healtrl.toy.collapse import toy_grpo_config

    kwargs = dict(seed=seed, logging_steps=1, disable_tqdm=True, max_completion_length=WORLDS[world]["completion"])
    kwargs.update(overrides)
    return toy_grpo_config(output_dir, steps=steps, config_cls=config_cls, **kwargs)


def target_data(n: int, seed: int, repeat: bool = True, family: str = "add"):
    """`n` target problems of `family`'s training pool, drawn by `seed`; with `repeat`, the set repeated so that an
    epoch holds several batches (TRL draws whole batches of distinct rows)."""
    from healtrl.data import load_train_dataset

    # The world's pool of training problems (for "add": the 80 training additions; 20 are held out), `n` of them.
    pool = WORLDS[family]["pool"]
    rows = load_train_dataset(f"healtrl-toy/{family}", split="train", num_samples=pool, seed=0)
    rows = rows.shuffle(seed=seed).select(range(n))
    if not repeat:
        return rows
    from datasets import concatenate_datasets

    return concatenate_datasets([rows] * max(1, 160 // n))


def general_pool(world: str = "add"):
    """The general-domain pool of `world` (its general family's training split, the world's pool size)."""
    from healtrl.data import load_train_dataset

    spec = WORLDS[world]
    return load_train_dataset(f"healtrl-toy/{spec['general']}", split="train", num_samples=spec["pool"], seed=0)


def select_general(seed: int, top_k: int, workdir: str, world: str = "add"):
    """HEAL's selection of `top_k` general prompts for `seed` (uncertainty x diversity, 8 rollouts of the world's
    model per question), saved in and resumed from `workdir`."""
    from healtrl.selection.pipeline import select_general_data

    pool = os.path.join(workdir, f"general-pool-{world}")
    if not os.path.exists(pool):
        general_pool(world).save_to_disk(pool)
    return select_general_data(
        WORLDS[world]["model"],
        pool,
        reward="toy",
        output_dir=os.path.join(workdir, f"select-{seed}" if world == "add" else f"select-{world}-{seed}"),
        num_rollouts=8,
        top_k=top_k,
        temperature=1.0,
        max_new_tokens=WORLDS[world]["completion"],
        batch_size=80,
        seed=seed,
        progress=False,
    )


def held_out_pass_at(model, tokenizer, seed: int, k: int = K, family: str = "add") -> dict[int, float]:
    """Unbiased pass@j (j = 1, 2, 4, ..., k) on the 20 held-out problems of `family`, k samples each at temperature 1.

    Args:
        model: The trained policy (put in eval mode).
        tokenizer: Its tokenizer.
        seed: Sampling seed.
        k: Samples per problem.
        family: Toy task family, a key of WORLDS ("add": the 20 held-out additions).

    Returns:
        j -> mean over problems of pass@j; pass@1 equals avg@k.
    """
    from healtrl.evaluation.engine import evaluate

    model.eval()
    results = evaluate(
        model, [f"toy-{family}"], k=k, tokenizer=tokenizer, temperature=1.0,
        max_new_tokens=WORLDS[family]["completion"], seed=seed, split="test", progress=False,
    )  # fmt: skip
    return dict(results.tasks[f"toy-{family}"].pass_at)
