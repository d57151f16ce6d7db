"""Compute-matched baselines: filling fixed-size prompt batches from a small set by seeded repetition
(`train_repeats`, `healtrl.data.repeat_rows`), read by TRL's RepeatSampler and HEAL's mixing samplers."""

from __future__ import annotations

from collections import Counter
from pathlib import Path

import pytest
from datasets import Dataset
from trl.trainer.utils import RepeatSampler

from healtrl.cli import apply_train_repeats, train_main
from healtrl.cli.config import ConfigError, resolve
from healtrl.data import repeat_order, repeat_rows, repeats_to_fill
from healtrl.trainers._mixing import DomainShareSampler, combine_domains

REPO = Path(__file__).resolve().parents[1]
TOY = str(REPO / "configs" / "toy_grpo.yaml")
HEAL_TOY = str(REPO / "configs" / "heal_toy.yaml")


def few_shot(n=32):
    return Dataset.from_dict({"prompt": [f"question {i}" for i in range(n)], "answer": [str(i) for i in range(n)]})


def batches_of(dataset, prompts_per_batch, num_generations=8, repeat_count=1):
    """The prompts of each generation batch as TRL's GRPOTrainer draws them (RepeatSampler, shuffle_dataset=False):
    every index comes num_generations times in a row, each batch repeat_count times."""
    sampler = RepeatSampler(dataset, num_generations, prompts_per_batch, repeat_count, shuffle=False, seed=0)
    indices = list(sampler)[::num_generations]  # one entry per prompt
    per_batch = prompts_per_batch * repeat_count
    out = []
    for start in range(0, len(indices), per_batch):
        chunk = indices[start : start + prompts_per_batch]  # the repeats of a batch are the same prompts
        assert indices[start : start + per_batch] == chunk * repeat_count
        out.append([dataset[i]["prompt"] for i in chunk])
    return out


def test_each_batch_holds_each_row_as_often_as_stated():
    """128-prompt batches from 32 rows: every batch holds each row exactly 4 times (TRL sampler, in order)."""
    repeats = repeats_to_fill(32, max_steps=10, prompts_per_batch=128, steps_per_batch=1)
    assert repeats == 40 and repeats_to_fill(32, 200, 128, 1) == 800  # the HEAL recipes' 200 steps
    data = repeat_rows(few_shot(), repeats, seed=5)
    batches = batches_of(data, 128, repeat_count=2)  # 2 optimizer passes per generation batch (steps_per_generation)
    assert len(batches) == 10
    for batch in batches:
        assert Counter(batch) == {f"question {i}": 4 for i in range(32)}
    # each copy is a permutation of every row: no row twice before every row once
    order = repeat_order(32, 3, seed=5)
    assert [sorted(order[c * 32 : (c + 1) * 32]) for c in range(3)] == [list(range(32))] * 3


def test_batches_are_exactly_reproducible_by_seed():
    first = batches_of(repeat_rows(few_shot(), 40, seed=7), 128)
    again = batches_of(repeat_rows(few_shot(), 40, seed=7), 128)
    other = batches_of(repeat_rows(few_shot(), 40, seed=8), 128)
    assert first == again
    assert all(Counter(a) == Counter(b) for a, b in zip(first, other))  # same rows per batch...
    assert sum(a != b for a, b in zip(first, other)) == len(first)  # ...in another order in every batch


def test_batches_not_a_multiple_of_the_rows():
    """48-prompt batches from 32 rows: each row once or twice per batch, and exactly `repeats` times in all."""
    data = repeat_rows(few_shot(), 3, seed=0)
    batches = batches_of(data, 48)
    assert len(batches) == 2
    for batch in batches:
        assert set(Counter(batch).values()) == {1, 2} and len(set(batch)) == 32
    assert Counter(p for b in batches for p in b) == {f"question {i}": 3 for i in range(32)}
    with pytest.raises(ValueError, match="positive number of copies"):
        repeat_rows(few_shot(), 0)
    with pytest.raises(ValueError, match="set `max_steps`"):
        repeats_to_fill(32, -1, 128, 1)


def test_repeated_target_rows_in_heal_fixed_share_batches():
    """HEAL's DomainShareSampler over target copies + general rows: every batch holds 16 target prompts and, over an
    epoch of the target stream, each target row comes exactly as often as it has copies."""
    target = repeat_rows(few_shot(8), 4, seed=1)  # 32 target rows
    general = Dataset.from_dict({"prompt": [f"general {i}" for i in range(40)], "answer": ["0"] * 40})
    mixed = combine_domains(target, general, "domain", "target", "general")
    domains = mixed["domain"]
    t = [i for i, d in enumerate(domains) if d == "target"]
    g = [i for i, d in enumerate(domains) if d == "general"]
    sampler = DomainShareSampler(t, g, batch_size=32, num_general=16, mini_repeat_count=8, seed=3)
    seen = Counter()
    for number in range(sampler.batches_per_epoch):
        batch = sampler.batch(number)
        prompts = [mixed[i]["prompt"] for i in batch if domains[i] == "target"]
        assert len(prompts) == 16
        seen.update(prompts)
    assert sampler.batches_per_epoch == 2 and seen == {f"question {i}": 4 for i in range(8)}
    assert [sampler.batch(n) for n in range(3)] == [
        DomainShareSampler(t, g, 32, 16, 8, seed=3).batch(n) for n in range(3)
    ]


# ---------------------------------------------------------------------------------------------------- train.py
def test_train_repeats_in_a_run():
    resolved = resolve(["--config", TOY, "--num_train_samples", "4", "--train_repeats", "auto", "--max_steps", "6"])
    args = resolved.trainer_args
    assert args.shuffle_dataset is True  # TRL's default until the repeats are applied
    data = apply_train_repeats(resolved, few_shot(4))
    # 16 prompts per batch, one optimizer step per batch: 6 batches x 16 prompts / 4 rows = 24 copies
    assert len(data) == 96 and args.shuffle_dataset is False
    assert all(Counter(b) == {f"question {i}": 4 for i in range(4)} for b in batches_of(data, 16))
    assert len(apply_train_repeats(resolve(["--config", TOY, "--train_repeats", "3"]), few_shot(4))) == 12
    assert apply_train_repeats(resolve(["--config", TOY]), few_shot(4)).num_rows == 4  # unset: unchanged


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--config", TOY, "--train_repeats", "auto", "--max_steps", "-1"], "set `max_steps`"),
        (["--config", TOY, "--train_repeats", "2", "--shuffle_dataset", "true"], "would reshuffle them across copies"),
        (["--config", HEAL_TOY, "--train_repeats", "auto"], "also trains on healtrl-toy/compare"),
    ],
)
def test_train_repeats_misuse_is_refused(argv, message):
    with pytest.raises(ConfigError, match=message):
        apply_train_repeats(resolve(argv), few_shot(4))


def test_train_repeats_value_is_checked():
    with pytest.raises(ConfigError, match="train_repeats"):
        resolve(["--config", TOY, "--train_repeats", "0"])
    with pytest.raises(ConfigError, match="train_repeats"):
        resolve(["--config", TOY, "--train_repeats", "sometimes"])


def test_heal_keeps_its_shuffled_pool_with_repeated_target_rows():
    resolved = resolve(["--config", HEAL_TOY, "--train_repeats", "2"])
    assert len(apply_train_repeats(resolved, few_shot(8))) == 16
    assert resolved.trainer_args.shuffle_dataset is True  # the copies join the pool that TRL's sampler shuffles


def entries(out: str) -> str:
    return " ".join(out.split())


def test_dry_run_prints_steps_and_how_often_each_row_is_seen(capsys):
    assert train_main(["--config", TOY, "--num_train_samples", "4", "--train_repeats", "auto", "--dry_run"]) == 0
    out = entries(capsys.readouterr().out)
    assert (
        "length: 300 optimizer steps (max_steps 300) = 300 generation batches of 16 prompts (4800 prompts drawn)" in out
    )
    assert "train_repeats auto: 1200 seeded copies of the training rows (read in order, shuffle_dataset false)" in out
    assert "each of the 4 training rows is seen 1200 times, 4 per generation batch (x 8 completions)" in out
    # without repetition 4 rows cannot fill a 16-prompt batch: the dry run says so and names the option
    assert train_main(["--config", TOY, "--num_train_samples", "4", "--dry_run"]) == 2
    assert "fewer than the 16 distinct prompts of one generation batch" in capsys.readouterr().err
    # epochs: the steps follow from the rows (1000 toy rows / 16 prompts = 62 batches per epoch)
    assert train_main(["--config", TOY, "--max_steps", "-1", "--num_train_epochs", "2", "--dry_run"]) == 0
    out = entries(capsys.readouterr().out)
    assert "124 optimizer steps (num_train_epochs 2 x 62 steps per epoch (1000 rows))" in out
    assert "each training row is seen about 1.98 times" in out
    # HEAL: target + general rows in one pool
    assert train_main(["--config", HEAL_TOY, "--dry_run"]) == 0
    assert "each training row is seen about 120 times" in entries(capsys.readouterr().out)  # 4800 / (8 + 32)
