"""`HEALTrainer`: Hybrid-domain Entropy dynamics ALignment (HEAL, arXiv:2604.17928, §3) on top of TRL's GRPO.

Few-shot RLVR on a handful of target-domain prompts collapses the policy's entropy. HEAL
1. trains on the target prompts mixed with general-domain prompts (HEAL §3.1; pick them with `healtrl select`,
   eq. 1), and
2. adds the Entropy Dynamics Alignment reward (§3.2, eq. 2-4): a target trajectory whose token-entropy sequence is
   closer to some general trajectory's than to every other target trajectory's gets r_EDA = 1, so the final reward is
   r = r_acc + r_EDA (eq. 5 with `eda_weight` = 1).

Where the pieces live (the four levers of `EntropyGRPOTrainer`):
- lever 4, `mix_datasets`: target + general rows in one dataset with a domain column; the train sampler implements
  `mixing` (`shuffle`: one shuffled pool, the paper; `interleave`: the authors' code; `fixed_share`: a fixed number
  of general prompts in every generation batch).
- lever 3, `augment_rewards`: exact full-vocabulary entropies of every rollout under the current policy (one no-grad
  forward through the fused kernel, reused from TRL's old-log-prob pass when that runs; also when vLLM generates),
  gathered over all processes, then `healtrl.functional.eda_rewards` on the global batch. The EDA column is added to
  the rewards before TRL computes advantages, weighted by `eda_weight`. With `eda_weight: 0` the EDA reward is still
  computed and logged but not added: that is the paper's "Hybrid" baseline (target + random general data, §4.1).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch

from ..functional.eda import eda_rewards
from ._card import CardDescription
from ._general_data import DOMAIN_COLUMN, GENERAL_DOMAIN, TARGET_DOMAIN, GeneralDataConfig
from ._mixing import DomainShareSampler, OrderedRepeatSampler, combine_domains, interleave_order, load_general_dataset
from ._papers import HEAL_PAPER
from .base import EntropyGRPOTrainer, RolloutBatch

MIXING_MODES = ("shuffle", "interleave", "fixed_share")
EDA_SIMILARITIES = ("kl", "hti", "pl")
EDA_MODES = ("paper", "reference")
EDA_COLUMN = "eda"


@dataclass
class HEALConfig(GeneralDataConfig):
    r"""
    Configuration for [`HEALTrainer`]: every field of [`GeneralDataConfig`] (the general-domain data, shared with
    the `grpo` trainer) plus HEAL's (HEAL §3, §4.1).

    The paper's setup (§4.1): 32 target prompts + 384 selected CommonsenseQA prompts, 8 rollouts per prompt,
    temperature 0.7 (Qwen3) / 0.6 (LLaMA-3.2), 128 prompts per batch (= mini-batch), max prompt 1024 and completion
    3072 tokens; see `configs/heal_qwen3_1.7b_medicine.yaml`.

    Parameters:
        domain_column (`str`, *optional*, defaults to `"domain"`):
            Column holding each row's domain.
        target_domain (`str`, *optional*, defaults to `"target"`):
            Value of `domain_column` for target-domain rows.
        general_domain (`str`, *optional*, defaults to `"general"`):
            Value of `domain_column` for general-domain rows.
        mixing (`str`, *optional*, defaults to `"shuffle"`):
            How batches mix the domains. `"shuffle"`: one shuffled pool (the paper, §3.1); `"interleave"`: target and
            general rows each cut into `interleave_chunks` chunks, interleaved and read in order without shuffling
            (the authors' public code); `"fixed_share"`: every generation batch holds `general_share` general prompts
            (so EDA is defined in every batch).
        interleave_chunks (`int`, *optional*, defaults to `4`):
            Number of chunks per domain for `mixing="interleave"` (the authors' code uses 4).
        general_share (`float`, *optional*, defaults to `0.5`):
            Share of general prompts in every generation batch for `mixing="fixed_share"`, in (0, 1); rounded to a
            whole number of prompts that must leave at least one prompt of each domain.
        eda_weight (`float`, *optional*, defaults to `1.0`):
            Weight of r_EDA in the summed reward (HEAL eq. 5 uses r = r_acc + r_EDA, weight 1). 0 gives the
            paper's Hybrid baseline: r_EDA is computed and logged but not rewarded.
        eda_similarity (`str`, *optional*, defaults to `"kl"`):
            Entropy-dynamics similarity: `"kl"` (Appendix A.2 eq. 8-9, the paper's choice), `"hti"` (eq. 10) or `"pl"`
            (eq. 11).
        eda_mode (`str`, *optional*, defaults to `"paper"`):
            `"paper"`: eq. 2-4, only target trajectories are rewarded, S_intra over the other target trajectories and
            S_inter over the general trajectories of the whole global batch. `"reference"`: the authors' code (every
            pair of the batch, general trajectories rewarded too, short trajectories get 0).
        eda_min_length (`int` or `None`, *optional*, defaults to `None`):
            Trajectories of at most this many tokens get r_EDA = 0 and are nobody's neighbour. `None`: 0 in `paper`
            mode, 50 in `reference` mode (the authors' code).
    """

    domain_column: str = field(default=DOMAIN_COLUMN, metadata={"help": "Column holding each row's domain."})
    target_domain: str = field(default=TARGET_DOMAIN, metadata={"help": "domain_column value of target-domain rows."})
    general_domain: str = field(
        default=GENERAL_DOMAIN, metadata={"help": "domain_column value of general-domain rows."}
    )
    mixing: str = field(
        default="shuffle",
        metadata={
            "help": "How batches mix the domains: shuffle (paper: one shuffled pool), interleave (authors' code: "
            "chunks interleaved, read in order) or fixed_share (general_share general prompts in every batch).",
            "choices": list(MIXING_MODES),
        },
    )
    interleave_chunks: int = field(default=4, metadata={"help": "Chunks per domain for mixing=interleave (>= 1)."})
    general_share: float = field(
        default=0.5,
        metadata={"help": "Share of general prompts per generation batch for mixing=fixed_share, in (0,1)."},
    )
    eda_weight: float = field(
        default=1.0,
        metadata={"help": "Weight of the EDA reward (HEAL eq. 5: 1). 0: Hybrid baseline (EDA logged, not rewarded)."},
    )
    eda_similarity: str = field(
        default="kl",
        metadata={
            "help": "Entropy-dynamics similarity: kl (HEAL eq. 9, paper), hti (eq. 10) or pl (eq. 11).",
            "choices": list(EDA_SIMILARITIES),
        },
    )
    eda_mode: str = field(
        default="paper",
        metadata={
            "help": "paper (HEAL eq. 2-4) or reference (authors' code: all pairs, general rewarded, min length 50).",
            "choices": list(EDA_MODES),
        },
    )
    eda_min_length: int | None = field(
        default=None,
        metadata={"help": "Trajectories of <= this many tokens get r_EDA = 0. None: 0 (paper) / 50 (reference)."},
    )

    def __post_init__(self):
        def bad(name, value, valid):
            return ValueError(f"{name} must be {valid}, got {value!r}.")

        if self.interleave_chunks < 1:
            raise bad("interleave_chunks", self.interleave_chunks, ">= 1")
        if not 0.0 < self.general_share < 1.0:
            raise bad("general_share", self.general_share, "in (0, 1)")
        if not (self.eda_weight >= 0) or math.isinf(self.eda_weight):
            raise bad("eda_weight", self.eda_weight, ">= 0 and finite")
        if self.eda_min_length is not None and self.eda_min_length < 0:
            raise bad("eda_min_length", self.eda_min_length, ">= 0 or null")
        if self.target_domain == self.general_domain:
            raise ValueError(f"target_domain and general_domain must differ (both are {self.target_domain!r}).")
        super().__post_init__()


class HEALTrainer(EntropyGRPOTrainer):
    """GRPO on hybrid-domain data with the Entropy Dynamics Alignment reward (HEAL §3).

    Constructor: the same as `EntropyGRPOTrainer`, plus `general_dataset` (a `datasets.Dataset` of general-domain
    rows; alternatively `args.general_dataset_name`, or a `train_dataset` whose `domain_column` marks both domains).
    `train_dataset` holds the target rows (the few-shot set).

    Logged (TRL's buffer, per logging step): `heal/entropy_target` and `heal/entropy_general` (mean token entropy of
    the batch's rollouts per domain, as in HEAL Fig. 1), `heal/eda_rate` (share of target trajectories with
    r_EDA = 1; in `reference` mode over all trajectories), `heal/s_inter` and `heal/s_intra` (means over target
    trajectories where finite), `heal/general_share` (share of the batch's trajectories that are general), and
    `heal/reward_target` / `heal/reward_general` (the summed reward without EDA, per domain); the EDA column itself is
    `rewards/eda/mean`.
    """

    config_class = HEALConfig
    card = CardDescription(
        name="HEAL",
        paper=HEAL_PAPER,
        description=(
            "Hybrid-domain Entropy dynamics ALignment for few-shot RLVR: the few target-domain prompts are mixed with "
            "general-domain prompts (picked by uncertainty x diversity, eq. 1), and the Entropy Dynamics Alignment reward "
            "(eq. 2-4) gives +1 to a target rollout whose token-entropy sequence is closer to a general rollout's than to "
            "every other target rollout's, added to the accuracy reward (eq. 5)."
        ),
        summary_keys=("heal/entropy_target", "heal/entropy_general", "heal/eda_rate"),
        tags=("heal",),
    )

    def __init__(
        self, model, reward_funcs=None, args: HEALConfig | None = None, train_dataset=None, general_dataset=None, **kw
    ):
        self._general_dataset = general_dataset
        super().__init__(model, reward_funcs=reward_funcs, args=args, train_dataset=train_dataset, **kw)
        self._general_dataset = None
        if train_dataset is None:  # after TRL's own check (it needs one too, unless an environment owns the data)
            raise ValueError("HEALTrainer needs train_dataset (the target-domain prompts).")

    @property
    def needs_rollout_entropies(self) -> bool:
        return True  # EDA reads every rollout's token entropies, whatever `rollout_entropy` says

    # -- lever 4: hybrid data --------------------------------------------------------------------------------------
    def get_reward_augmentations(self) -> dict[str, float]:
        return {EDA_COLUMN: float(self.args.eda_weight)}

    def mix_datasets(self, train_dataset, args: HEALConfig):
        for name, data in (("train_dataset", train_dataset), ("general_dataset", self._general_dataset)):
            if data is not None and not hasattr(data, "__len__"):
                raise ValueError(
                    f"HEAL mixes the target rows with general-domain rows and samples them by index, which needs a "
                    f"map-style datasets.Dataset; {name} is a {type(data).__name__} (a streaming IterableDataset has "
                    "no rows to index). Load it without streaming=True."
                )
        general = load_general_dataset(args, self._general_dataset)
        if general is not None:
            mixed = combine_domains(train_dataset, general, args.domain_column, args.target_domain, args.general_domain)
        else:
            mixed = train_dataset
        self._check_domains(mixed, args, separate=general is not None)
        return mixed

    @staticmethod
    def _check_domains(dataset, args: HEALConfig, separate: bool) -> None:
        col = args.domain_column
        if col not in dataset.column_names:
            raise ValueError(
                f"HEAL needs general-domain data: set `general_dataset_name` (or pass general_dataset=), or give the "
                f"training data a '{col}' column (domain_column) with values '{args.target_domain}' and "
                f"'{args.general_domain}'. Columns found: {', '.join(dataset.column_names)}."
            )
        values = set(dataset[col])
        unknown = values - {args.target_domain, args.general_domain}
        if unknown:
            raise ValueError(
                f"The column '{col}' holds {sorted(map(str, unknown))}, which match neither target_domain "
                f"('{args.target_domain}') nor general_domain ('{args.general_domain}'). Set target_domain / "
                "general_domain to the dataset's values, or map the column."
            )
        for name, value in (("target", args.target_domain), ("general", args.general_domain)):
            if value not in values:
                where = "the training data" if not separate else "the combined data"
                raise ValueError(
                    f"{where} has no {name}-domain row ('{col}' == '{value}'). HEAL needs both domains: give "
                    + ("target rows in train_dataset." if name == "target" else "general_dataset_name.")
                )

    def _domain_indices(self) -> tuple[list[int], list[int]]:
        domains = self.train_dataset[self.args.domain_column]
        target = [i for i, d in enumerate(domains) if d == self.args.target_domain]
        general = [i for i, d in enumerate(domains) if d == self.args.general_domain]
        return target, general

    def train_sampler(self, dataset=None):
        if (dataset is not None and dataset is not self.train_dataset) or self.args.mixing == "shuffle":
            return None  # TRL's sampler
        prompts_per_batch = self.args.generation_batch_size // self.num_generations
        repeat = self.micro_steps_per_rollout_batch  # the repeat_count TRL 1.16 gives its `RepeatSampler`
        target, general = self._domain_indices()
        if self.args.mixing == "interleave":
            # Target rows come first in a combined dataset; `interleave_order` works on positions, so map them back.
            positions = target + general
            order = [positions[i] for i in interleave_order(len(target), len(general), self.args.interleave_chunks)]
            return OrderedRepeatSampler(order, self.num_generations, prompts_per_batch, repeat)
        num_general = round(self.args.general_share * prompts_per_batch)
        if not 1 <= num_general <= prompts_per_batch - 1:
            raise ValueError(
                f"general_share {self.args.general_share} gives {num_general} general prompt(s) out of "
                f"{prompts_per_batch} per generation batch; each batch needs at least one prompt of each domain. "
                "Change general_share or use more prompts per batch (per_device_train_batch_size / num_generations)."
            )
        return DomainShareSampler(
            target, general, prompts_per_batch, num_general, self.num_generations, repeat, seed=self.args.seed
        )

    # -- lever 3: the EDA reward -----------------------------------------------------------------------------------
    def augment_rewards(self, rollouts: RolloutBatch) -> dict[str, torch.Tensor]:
        entropies, mask = rollouts.entropies, rollouts.entropy_mask  # zero past each completion's end
        domains = rollouts.column(self.args.domain_column)
        is_target = torch.tensor([d == self.args.target_domain for d in domains], device=entropies.device)
        reward, stats = eda_rewards(
            entropies,
            is_target,
            lengths=mask.sum(dim=1).long(),
            similarity=self.args.eda_similarity,
            mode=self.args.eda_mode,
            min_length=self.args.eda_min_length,
            return_stats=True,
        )
        self._log_domains(rollouts, is_target, reward, stats)
        return {EDA_COLUMN: reward}

    def _log_domains(self, rollouts: RolloutBatch, is_target, reward, stats) -> None:
        mask = rollouts.entropy_mask.to(rollouts.entropies.dtype)
        token_sums = (rollouts.entropies * mask).sum(dim=1)
        token_counts = mask.sum(dim=1)
        names = rollouts.reward_func_names
        weights = self.reward_weights.to(rollouts.rewards_per_func.device).clone()
        weights[names.index(EDA_COLUMN)] = 0.0
        base_reward = (rollouts.rewards_per_func.nan_to_num(0.0) * weights).sum(dim=1)
        for name, sel in (("target", is_target), ("general", ~is_target)):
            if sel.any():
                self.log_metric(f"heal/entropy_{name}", token_sums[sel].sum() / token_counts[sel].sum().clamp(min=1))
                self.log_metric(f"heal/reward_{name}", base_reward[sel.to(base_reward.device)].mean())
        self.log_metric("heal/general_share", (~is_target).float().mean())
        rated = is_target if self.args.eda_mode == "paper" else torch.ones_like(is_target)
        if rated.any():
            self.log_metric("heal/eda_rate", reward[rated].float().mean())
        for key in ("s_inter", "s_intra"):
            values = stats[key][is_target]
            values = values[torch.isfinite(values)]
            if values.numel():
                self.log_metric(f"heal/{key}", values.mean())
