"""General-domain rows trained on beside the target data: the config fields HEAL and the `grpo` trainer share.

HEAL (lever 4) mixes them with the few target rows by its `mixing` (HEAL, arXiv:2604.17928, §3.1); the `grpo` trainer
trains its entropy baselines on the same target + general rows in one shuffled pool, as HEAL's Table 7 does (HEAL App.
C.3). Both load them with `_mixing.load_general_dataset` and mark each row's domain in `DOMAIN_COLUMN` (HEAL's
`domain_column`, `target_domain`, `general_domain` default to these names).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from .base import EntropyGRPOConfig

#: The column marking each row's domain, and its values for target and general rows.
DOMAIN_COLUMN, TARGET_DOMAIN, GENERAL_DOMAIN = "domain", "target", "general"


@dataclass
class GeneralDataConfig(EntropyGRPOConfig):
    r"""
    Every field of [`EntropyGRPOConfig`] plus the general-domain data a trainer mixes into its training rows.

    Parameters:
        general_dataset_name (`str` or `None`, *optional*, defaults to `None`):
            General-domain data (e.g. the output folder of `healtrl select`, a task name, a local file or a Hub id),
            loaded with `healtrl.data.load_train_dataset`. HEAL's Table 7 (HEAL App. C.3) trains its entropy
            baselines on the same 32 target + 384 selected general rows as HEAL: set this to the `healtrl select`
            output. `None`: no general rows (HEAL: pass `general_dataset=` to the trainer, or give a training dataset
            whose `domain_column` already marks both domains).
        general_dataset_config (`str` or `None`, *optional*, defaults to `None`):
            Hub configuration of the general dataset.
        general_dataset_split (`str`, *optional*, defaults to `"train"`):
            Split of the general dataset.
        num_general_samples (`int` or `None`, *optional*, defaults to `None`):
            Keep this many general rows (a random subset drawn with `seed`). `None`: all. HEAL's paper: 384.
    """

    general_dataset_name: str | None = field(
        default=None,
        metadata={
            "help": "General-domain data (healtrl select output folder, task name, local file or Hub id), trained on "
            "beside the training data (HEAL Table 7: the baselines train on the same target + selected general rows "
            "as HEAL). None: no general rows (HEAL: pass general_dataset= or use a training set whose domain_column "
            "marks both domains)."
        },
    )
    general_dataset_config: str | None = field(
        default=None, metadata={"help": "Hub configuration of the general data.", "card": False}
    )
    general_dataset_split: str = field(
        default="train", metadata={"help": "Split of the general dataset.", "card": False}
    )
    num_general_samples: int | None = field(
        default=None, metadata={"help": "Keep this many general rows (random subset by seed). None: all. HEAL: 384."}
    )

    def __post_init__(self):
        if self.num_general_samples is not None and self.num_general_samples < 1:
            raise ValueError(f"num_general_samples must be >= 1 or null, got {self.num_general_samples}.")
        super().__post_init__()
