"""The TRL boundary: every use of TRL's (and transformers `Trainer`'s) private API in healtrl, in one package.

TRL reshapes `GRPOTrainer`'s private methods (`_generate_and_score_completions`, `_compute_loss`,
`_get_per_token_logps_and_entropies`, ...) from one release to the next. healtrl rides on them, so it keeps every such
use here: the overrides of TRL's and transformers' private methods, the reads and writes of their private state
(`_metrics`, `_step`, `_buffered_inputs`, ...), the imports of private names, and the functions that mirror TRL's
internal logic, each citing the TRL 1.16 function it follows. Everything else in healtrl talks to the public hooks and
accessors of `TRLBoundary` (those a method may use are listed in `healtrl/trainers/contract.py`);
`tests/test_trl_boundary.py` fails when another module names a TRL-private attribute. The package imports nothing of
healtrl outside itself but `healtrl.functional` and `healtrl.kernels` (`tests/test_method_contract.py` checks): what
it needs of the rest (the checkpoint files' format, the check of the `report_to` extras) the base trainer passes in
through `BoundaryHooks`.
A TRL upgrade is: read this package against the new release, run the suite (`healtrl.utils.compat` refuses untested
releases).

The package is split the way TRL's own methods are:

- `hooks.py`: `BoundaryHooks`, every hook and attribute the boundary calls or reads on the trainer, with its default
  (the levers `shape_advantages`, `extra_loss`, `augment_rewards`; `train_sampler`, `rollout_columns`,
  `finish_generation_batch`, `rollout_stats_needed` (the one request for per-token rollout statistics),
  `method_state` / `load_method_state`, `defer_trl_entropy`, ...) and the accessors every part reads (`config_value`,
  `mode`, `log_metric`, `micro_steps_per_rollout_batch`, `at_rollout_boundary`); `TRLCall` and the call states
  `LossCall` and `GenerationCall` (`CallState`), one object per TRL call the boundary states it is inside
  (`_compute_loss` or `_generate_and_score_completions`) holding what it decided and saw there (which decides what a
  forward is; nothing of one call stays on the trainer); and `generate_every`, the micro-batches one rollout batch lasts (the only
  place healtrl computes it);
- `loss.py`: `_compute_loss` with levers 1 and 2 in its policy forward; `clip_status`, `aggregate_like_policy_loss`;
- `generation.py`: `_generate_and_score_completions`, `_generate` and TRL's old-log-prob pass (the rollout statistics,
  from the cheapest source), `_calculate_rewards` (lever 3), `_get_train_sampler`; `trl_computes_old_logps`;
- `generation_stats.py`: `GenerationStats`, the rollout statistics read off the LM-head calls of transformers'
  `generate`;
- `checkpoint.py`: method state, resume in the middle of a rollout batch, the completion marker;
- `lm_head.py`: the fused LM head through healtrl's kernel (`HealtrlLogProbFunction`, `healtrl_lm_head`), the power
  sums' layout, `policy_forward`;
- `vllm_sync.py`: the weight sync for vLLM on the CPU, which replaces TRL's;
- `batches.py`: `LossBatch`, `RolloutBatch` and `RolloutStats`, what the levers and hooks receive;
- `boundary.py`: `TRLBoundary`, the parts composed, and the accessors `log_metric`, `discarded_metrics`,
  `log_completion_columns`, `run_output_dir`, `card_name` / `card_paper` / `card_tags`.
"""

from __future__ import annotations

from .batches import ROLLOUT_STAT_KEYS, ROLLOUT_STAT_SOURCES, LossBatch, RolloutBatch, RolloutStats
from .boundary import TRLBoundary
from .checkpoint import ROLLOUT_BUFFER_FILE, STATE_FILE
from .generation import fsdp_helper
from .hooks import BoundaryHooks, TRLCall, generate_every
from .lm_head import HealtrlLogProbFunction, PolicyForward, healtrl_lm_head, scatter_power_sums
from .loss import LOSS_TYPES, aggregate_like_policy_loss, clip_status

__all__ = [
    "LOSS_TYPES",
    "ROLLOUT_BUFFER_FILE",
    "ROLLOUT_STAT_KEYS",
    "ROLLOUT_STAT_SOURCES",
    "STATE_FILE",
    "BoundaryHooks",
    "HealtrlLogProbFunction",
    "LossBatch",
    "PolicyForward",
    "RolloutBatch",
    "RolloutStats",
    "TRLBoundary",
    "TRLCall",
    "aggregate_like_policy_loss",
    "clip_status",
    "fsdp_helper",
    "generate_every",
    "healtrl_lm_head",
    "scatter_power_sums",
]
