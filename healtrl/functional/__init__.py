"""Pure tensor functions behind healtrl's methods: no trainer state, usable directly in tests and user code.

Each function cites the paper and equation it implements.

What it may import: torch and the standard library only, nothing of healtrl's (the layer above the helpers in
`pyproject.toml`'s import contract, beside `healtrl.kernels`, which it must not import either).
"""

from .aer import aer_coefficients, aer_entropy_term, aer_update_alpha, sequence_entropies
from .cov import clip_cov_select, entropy_advantage, kl_cov_count, kl_cov_select, token_covariance
from .eda import eda_rewards, entropy_dynamics_similarity, pairwise_entropy_similarity
from .entropy_change import ESTIMATORS, token_entropy_change
from .evaluation import pass_at_k
from .opefo import opefo_flow_sums, opefo_lambda, opefo_lambda_from_sums, opefo_token_weights
from .posadv import entropy_guided_lambda, epoch_lambda, posadv_token_weights, rand_pos_clip_mask, stage_lambda
from .selection import selection_scores, top_fraction_counts

__all__ = [
    "ESTIMATORS",
    "aer_coefficients",
    "aer_entropy_term",
    "aer_update_alpha",
    "clip_cov_select",
    "eda_rewards",
    "entropy_advantage",
    "entropy_dynamics_similarity",
    "entropy_guided_lambda",
    "epoch_lambda",
    "kl_cov_count",
    "kl_cov_select",
    "opefo_flow_sums",
    "opefo_lambda",
    "opefo_lambda_from_sums",
    "opefo_token_weights",
    "pairwise_entropy_similarity",
    "pass_at_k",
    "posadv_token_weights",
    "rand_pos_clip_mask",
    "selection_scores",
    "sequence_entropies",
    "stage_lambda",
    "token_covariance",
    "token_entropy_change",
    "top_fraction_counts",
]
