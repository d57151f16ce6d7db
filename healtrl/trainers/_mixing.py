"""Hybrid-domain data for HEAL (arXiv:2604.17928, §3.1): one training set from target and general rows, and the samplers
that decide how each generation batch mixes the two domains.

- `combine_domains` aligns the columns of the two datasets (a column only one of them has is filled with None in the
  other's rows) and writes the domain column.
- `interleave_domains` orders rows as the authors' code does: target and general rows each cut into `chunks` chunks,
  interleaved T1 G1 T2 G2 ..., read in that order.
- `DomainShareSampler` puts a fixed number of general prompts into every generation batch (the rest target), so that
  every batch holds both domains. It yields indices in TRL's `RepeatSampler` layout (each prompt `mini_repeat_count`
  times in a row, each batch `repeat_count` times), and every batch is a pure function of (seed, batch number): a run
  resumed from a checkpoint sees the same batches as an uninterrupted one.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch.utils.data import Sampler


def combine_domains(target, general, domain_column: str, target_domain: str, general_domain: str):
    """Concatenate `target` and `general` (`datasets.Dataset`s) with `domain_column` set to each row's domain."""
    from datasets import Value, concatenate_datasets

    def with_domain(ds, value):
        if domain_column in ds.column_names:
            ds = ds.remove_columns(domain_column)  # the dataset a row comes from decides its domain
        return ds.add_column(domain_column, [value] * len(ds), feature=Value("string"))

    def fill(ds, other):  # the columns only `other` has, as None in every row of `ds`
        for col in other.column_names:
            if col not in ds.column_names:
                ds = ds.add_column(col, [None] * len(ds), feature=other.features[col])
        return ds

    target, general = with_domain(target, target_domain), with_domain(general, general_domain)
    target, general = fill(target, general), fill(general, target)
    general = general.select_columns(target.column_names)
    for col in target.column_names:
        if target.features[col] != general.features[col]:
            try:
                general = general.cast_column(col, target.features[col])
            except Exception as exc:
                raise ValueError(
                    f"The column '{col}' has type {target.features[col]} in the target data and "
                    f"{general.features[col]} in the general data, and cannot be converted ({type(exc).__name__}: "
                    f"{exc}). Give both datasets the same format for '{col}' (e.g. both conversational prompts)."
                ) from exc
    return concatenate_datasets([target, general])


def load_general_dataset(args, general=None):
    """The general-domain rows of a run: `general` (a `datasets.Dataset` passed to the trainer) or the dataset named
    by `args.general_dataset_name`, cut to `args.num_general_samples` rows drawn with `args.seed`. `None` when
    neither is given. Shared by HEAL (lever 4) and the baselines trainer (HEAL's Table 7 trains its baselines on the
    same target + general data)."""
    if general is None and args.general_dataset_name is not None:
        from ..data import load_train_dataset

        general = load_train_dataset(
            args.general_dataset_name,
            args.general_dataset_config,
            split=args.general_dataset_split,
            num_samples=args.num_general_samples,
            seed=args.seed,
        )
    elif general is not None and args.num_general_samples is not None:
        n = args.num_general_samples
        if n > len(general):
            raise ValueError(f"num_general_samples is {n} but the general dataset has only {len(general)} rows.")
        general = general.shuffle(seed=args.seed).select(range(n))
    if general is not None and len(general) == 0:
        raise ValueError("The general-domain dataset is empty.")
    return general


def interleave_order(num_target: int, num_general: int, chunks: int) -> list[int]:
    """Row order T1 G1 T2 G2 ... over a dataset holding `num_target` target rows then `num_general` general rows."""
    if chunks < 1:
        raise ValueError(f"chunks must be >= 1, got {chunks}.")

    def cut(start: int, n: int) -> list[list[int]]:
        size = math.ceil(n / chunks) if n else 0
        return [list(range(start + i, start + min(i + size, n))) for i in range(0, n, size)] if n else []

    t, g = cut(0, num_target), cut(num_target, num_general)
    order: list[int] = []
    for i in range(max(len(t), len(g))):
        order += t[i] if i < len(t) else []
        order += g[i] if i < len(g) else []
    return order


class OrderedRepeatSampler(Sampler[int]):
    """TRL's `RepeatSampler` layout over a fixed row order (no shuffling): incomplete last batches are dropped."""

    def __init__(self, order: Sequence[int], mini_repeat_count: int, batch_size: int, repeat_count: int = 1):
        self.order = list(order)
        self.mini_repeat_count, self.batch_size, self.repeat_count = mini_repeat_count, batch_size, repeat_count

    def __iter__(self):
        for start in range(0, len(self.order) - self.batch_size + 1, self.batch_size):
            chunk = self.order[start : start + self.batch_size]
            for _ in range(self.repeat_count):
                for index in chunk:
                    yield from [index] * self.mini_repeat_count

    def __len__(self) -> int:
        return (len(self.order) // self.batch_size) * self.batch_size * self.mini_repeat_count * self.repeat_count


class DomainShareSampler(Sampler[int]):
    """Generation batches of `batch_size` distinct prompts, `num_general` of them general and the rest target.

    Each domain is read from its own endless stream of shuffled passes over its rows; one epoch is the number of
    batches that reads every target row once (at least one batch). Batch b of the run takes target rows
    [b * n_t, (b + 1) * n_t) and general rows [b * n_g, (b + 1) * n_g) of the streams, then shuffles the batch.
    """

    def __init__(
        self,
        target_indices: Sequence[int],
        general_indices: Sequence[int],
        batch_size: int,
        num_general: int,
        mini_repeat_count: int,
        repeat_count: int = 1,
        seed: int = 0,
    ):
        if not target_indices or not general_indices:
            raise ValueError("DomainShareSampler needs at least one target row and one general row.")
        if not 1 <= num_general < batch_size:
            raise ValueError(f"num_general must be in [1, batch_size - 1] = [1, {batch_size - 1}], got {num_general}.")
        self.target, self.general = list(target_indices), list(general_indices)
        self.batch_size, self.num_general = batch_size, num_general
        self.num_target = batch_size - num_general
        self.mini_repeat_count, self.repeat_count, self.seed = mini_repeat_count, repeat_count, seed
        self.batches_per_epoch = max(1, math.ceil(len(self.target) / self.num_target))
        self.epoch = 0

    def set_epoch(self, epoch: int) -> None:
        """Called by the Trainer (through accelerate) before each epoch."""
        self.epoch = epoch

    def _stream(self, rows: list[int], start: int, count: int, salt: int) -> list[int]:
        out: list[int] = []
        position = start
        while len(out) < count:
            pass_index, offset = divmod(position, len(rows))
            gen = torch.Generator().manual_seed(self.seed * 1_000_003 + salt * 7919 + pass_index)
            perm = torch.randperm(len(rows), generator=gen).tolist()
            take = min(count - len(out), len(rows) - offset)
            out += [rows[i] for i in perm[offset : offset + take]]
            position += take
        return out

    def batch(self, number: int) -> list[int]:
        """The distinct prompts (dataset row indices) of generation batch `number` of the run."""
        rows = self._stream(self.target, number * self.num_target, self.num_target, salt=1)
        rows += self._stream(self.general, number * self.num_general, self.num_general, salt=2)
        gen = torch.Generator().manual_seed(self.seed * 1_000_003 + 3 * 7919 + number)
        return [rows[i] for i in torch.randperm(len(rows), generator=gen).tolist()]

    def __iter__(self):
        first = self.epoch * self.batches_per_epoch
        for number in range(first, first + self.batches_per_epoch):
            chunk = self.batch(number)
            for _ in range(self.repeat_count):
                for index in chunk:
                    yield from [index] * self.mini_repeat_count

    def __len__(self) -> int:
        return self.batches_per_epoch * self.batch_size * self.mini_repeat_count * self.repeat_count
