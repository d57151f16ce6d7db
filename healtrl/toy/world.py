"""The reasoning world: a small Qwen2 warmed up on imperfect Countdown demonstrations, and the statistics of its card.

    from healtrl.toy import load_toy_model
    from healtrl.toy.world import WORLD_MODEL

    model, tokenizer = load_toy_model(WORLD_MODEL)  # the name stands for WORLD_BUILD; built and cached on first use

The families are `healtrl.toy.countdown`'s: Countdown (target domain: reach a target from three or four numbers, the
steps written out, several correct paths) and sum chains (general domain). The warm-up is supervised, like the add
world's, but on *imperfect* demonstrations (`demonstrations`): for each problem a correct path drawn among its
solutions with probability `p_correct`, else a wrong path, so the model learns the format and the arithmetic, writes
several paths, and is right only part of the time; it stops at the first probe whose sampled accuracy on Countdown
reaches its target, so where it stops, and the model it leaves, depend on the machine (`CARD_NOTES`). No
demonstration comes from the 20 held-out test problems of either family.

Every demonstration is written as the world's paths are (`countdown.solutions`): the larger operand first in each
step, every result in [1, 100). What is scored is wider: the probe, the card and the study's rewards all go through
`countdown.check_countdown`, which also accepts an addition's operands in either order and zero results (its
docstring states the rule; the card's "Verifier rule" paragraph says so too).

`world_statistics` measures what the world's card reports (issue #26 item 1): sampled pass@1 and pass@16 on training
problems, the share of groups of 8 completions with equal rewards, the completion length, and the distribution of
token entropies (how many tokens are confident, how many are forks).
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence

import torch
from datasets import Dataset

from ..functional.evaluation import pass_at_k
from . import countdown
from .supervised import _left_padded
from .tasks import FEATURES, get_family, held_out_indices, toy_reward

WORLD_MODEL = "healtrl-toy/qwen2-countdown+sumchain"
MAX_COMPLETION_LENGTH = 32
"""Completion budget of the world: the longest Countdown solution (three steps) is 24 characters, plus `<|end|>`."""

WORLD_BUILD = dict(
    hidden_size=128,
    num_layers=3,
    num_heads=4,
    target_accuracy=0.25,
    max_steps=3000,
    batch_size=64,
    lr=3e-3,
    max_new_tokens=MAX_COMPLETION_LENGTH,
    demo_correct=0.5,
    demo_rows=16384,
    eval_every=100,
    lr_warmup_steps=100,
    threads=2,
)
"""`load_toy_model` / `toy_model_path` arguments of the world's model (`WORLD_MODEL`)."""

CARD_NOTES = (
    "**Verifier rule.** Every Countdown score on this card (the warm-up's stopping probe and the statistics above) "
    "and every reward of the study's runs (`benchmarks/toy_study.py`) comes from "
    "`healtrl.toy.countdown.check_countdown` as implemented: steps `a+b=c` or `a-b=c` separated by `,`, each number "
    "one or two ASCII digits without a sign; exact arithmetic; both operands still available (a given number as many "
    "times as it is given, a result once it is made); exactly one number left at the end, the target. It asks "
    "neither for the larger operand first nor for positive results: `2+11=13` counts, and so does a zero result "
    "(`6-6=0`), which a later step may use (`11+0=11`) but which may not be left over; a subtraction with the smaller "
    "operand first is refused only because its negative result cannot be written (`3-5=-2` is not a step). The "
    "world's reference answers and demonstrations are narrower (the larger operand first, every result in [1, 100)): "
    "for `2,5,11,12>20` the verifier accepts 64 completions, 18 of them world paths. Issue #40 measured that 0.4% of "
    "sampled completions depend on the wider rule; that figure is the issue's, not re-measured for this card.",
    "**The build stops at a target, so its numbers vary by machine.** The warm-up samples one answer for each of "
    f"512 probe Countdown problems every {WORLD_BUILD['eval_every']} steps and stops at the first probe whose "
    f"accuracy reaches `target_accuracy` = {WORLD_BUILD['target_accuracy']}; that accuracy moves by several points "
    "from one probe to the next. The build is seeded, but its floating-point results can differ between CPUs, thread "
    "counts and torch builds, so another machine can stop at another step with another model, and every number on "
    "this card belongs to the build it measured. The card of 2026-11-26 (AMD EPYC, 2 cores) measured pass@1 0.223 "
    "on the training problems; its model was not kept, so that figure cannot be re-measured, and a rebuild on "
    "another machine gave 0.249 with every target still met (issue #40).",
)
"""Paragraphs the world's card (`benchmarks/results/reasoning_world.md`) carries word for word after its statistics:
which verifier rule scored the world and the study, and why the card's numbers depend on the machine."""

ENTROPY_BINS = (0.0, 0.01, 0.1, 0.3, 0.7, 1.5, math.inf)
"""Token-entropy bins (nats) of the card's distribution; "confident" is below 0.1."""


def demonstrations(
    family: str | Sequence[str] = ("countdown", "sumchain"),
    n: int = 16384,
    p_correct: float = 0.4,
    seed: int = 0,
    general_share: float = 0.25,
) -> Dataset:
    """`n` warm-up rows (columns as `make_dataset`), none from a held-out problem: a `general_share` of them from the
    general-domain families, the rest from the target-domain ones, each row's family drawn at random among those.

    Countdown rows hold an imperfect demonstration (`countdown.demonstration` with `p_correct`), written as the
    world's paths are (the larger operand first, no zero result); rows of the other families hold their correct
    answer.
    """
    names = [family] if isinstance(family, str) else list(family)
    rng = random.Random(f"healtrl-toy:demonstrations:{'+'.join(names)}:{seed}:{p_correct}:{general_share}")
    rows = {name: [] for name in FEATURES}
    excluded_by = {name: held_out_indices(name) for name in names}
    targets = [name for name in names if get_family(name).domain == "target"]
    generals = [name for name in names if get_family(name).domain != "target"]
    for _ in range(n):
        pick = generals if generals and (not targets or rng.random() < general_share) else targets
        fam = get_family(rng.choice(pick))
        excluded = excluded_by[fam.name]
        index = rng.randrange(fam.size)
        while index in excluded:
            index = rng.randrange(fam.size)
        question, answer = fam.problem(index)
        if fam.name == "countdown":
            numbers, target = countdown.countdown_problems()[index]
            answer = countdown.demonstration(rng, numbers, target, p_correct)
        rows["prompt"].append([{"role": "user", "content": question}])
        rows["answer"].append(answer)
        rows["domain"].append(fam.domain)
        rows["task"].append(fam.name)
    return Dataset.from_dict(rows, features=FEATURES)


@torch.no_grad()
def sample_with_entropies(model, tokenizer, prompts, n: int, max_new_tokens: int = MAX_COMPLETION_LENGTH, seed: int = 0,
                          batch_size: int = 256):  # fmt: skip
    """`n` completions per prompt at temperature 1, with each generated token's entropy (nats, full vocabulary).

    Returns `(texts, entropies)`: `texts[i * n + j]` is prompt i's j-th completion, `entropies` the matching lists of
    per-token entropies (the eos token included, padding excluded).
    """
    generator = torch.Generator().manual_seed(seed)
    expanded = [p for p in prompts for _ in range(n)]
    was_training = model.training
    model.eval()
    texts, entropies = [], []
    eos = tokenizer.eos_token_id
    for start in range(0, len(expanded), batch_size):
        input_ids, attention_mask = _left_padded(tokenizer, expanded[start : start + batch_size])
        position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
        past, tokens, ents = None, [], []
        done = torch.zeros(len(input_ids), dtype=torch.bool)
        for _ in range(max_new_tokens):
            out = model(input_ids=input_ids, attention_mask=attention_mask, position_ids=position_ids,
                        past_key_values=past, use_cache=True, logits_to_keep=1)  # fmt: skip
            past, logits = out.past_key_values, out.logits[:, -1].float()
            logp = torch.log_softmax(logits, dim=-1)
            probs = logp.exp()
            ents.append(-(probs * logp).sum(-1))
            token = torch.multinomial(probs, 1, generator=generator).squeeze(1)
            tokens.append(token)
            done |= token == eos
            input_ids = token[:, None]
            position_ids = position_ids[:, -1:] + 1
            attention_mask = torch.cat([attention_mask, torch.ones_like(input_ids)], dim=1)
            if bool(done.all()):
                break
        for row, ent in zip(torch.stack(tokens, 1).tolist(), torch.stack(ents, 1).tolist()):
            cut = row.index(eos) + 1 if eos in row else len(row)
            texts.append(tokenizer.decode(row[:cut], skip_special_tokens=True))
            entropies.append(ent[:cut])
    model.train(was_training)
    return texts, entropies


def world_statistics(model, tokenizer, rows: Dataset, k: int = 16, group: int = 8, seed: int = 0) -> dict:
    """The card's statistics on `rows` (a family's problems): `k` samples per problem at temperature 1.

    Returns a dict: `pass@1`, `pass@k` (unbiased, from the k samples), `equal_reward_groups` (share of groups of
    `group` completions, the first `group` samples of each problem, whose rewards are all equal; 1.0 or 0.0 alike),
    `mean_length` (completion tokens, eos included), `entropy_bins` (share of completion tokens per `ENTROPY_BINS`
    bin), `confident` (share of tokens with entropy < 0.1 nats), `forks` (share >= 0.7 nats), and `problems`.
    """
    texts, entropies = sample_with_entropies(model, tokenizer, rows["prompt"], k, seed=seed)
    prompts = [p for p in rows["prompt"] for _ in range(k)]
    expand = lambda column: [v for v in rows[column] for _ in range(k)]  # noqa: E731
    rewards = toy_reward(prompts=prompts, completions=texts, answer=expand("answer"), task=expand("task"))
    per_problem = [rewards[i * k : (i + 1) * k] for i in range(len(rows))]
    flat = [e for ent in entropies for e in ent]
    bins = [0] * (len(ENTROPY_BINS) - 1)
    for e in flat:
        bins[next(b for b in range(len(bins)) if e < ENTROPY_BINS[b + 1])] += 1
    return {
        "problems": len(rows),
        "pass@1": sum(rewards) / len(rewards),
        f"pass@{k}": sum(pass_at_k(k, int(sum(r)), k) for r in per_problem) / len(per_problem),
        "equal_reward_groups": sum(len(set(r[:group])) == 1 for r in per_problem) / len(per_problem),
        "mean_length": sum(len(e) for e in entropies) / len(entropies),
        "entropy_bins": {f"[{lo}, {hi})": c / len(flat) for lo, hi, c in zip(ENTROPY_BINS, ENTROPY_BINS[1:], bins)},
        "confident": sum(e < 0.1 for e in flat) / len(flat),
        "forks": sum(e >= 0.7 for e in flat) / len(flat),
        "mean_entropy": sum(flat) / len(flat),
    }
