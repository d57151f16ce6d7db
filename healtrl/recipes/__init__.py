"""Paper recipes as data: what a paper config states beside its training settings, and its uses.

- `recipe`: the best-checkpoint rule, the paper's protocol and reported numbers, a run's saved config;
- `metrics`: a metric's name (`avg@k`, `pass@k`, ...), its check against the samples per problem, its value;
- `checks`: the dry run's checks of a recipe (checkpoints that serve the rule, their cost, the paper rows);
- `comparison`: your run against the paper's numbers (`healtrl eval --compare_paper`).

What it may import: tasks, functional and the helpers (it sits beside data and tasks in `pyproject.toml`'s import
contract), never the trainers. The names below are imported on first access.
"""

from healtrl.utils.lazy import lazy_exports

_EXPORTS = {
    "BYTES_PER_PARAMETER": "recipe",
    "BestCheckpointRule": "recipe",
    "CHECKPOINT_BOUNDS": "recipe",
    "CONFIG_FILE": "recipe",
    "PaperProtocol": "recipe",
    "PaperResult": "recipe",
    "parse_best_checkpoint": "recipe",
    "parse_paper_protocol": "recipe",
    "parse_paper_results": "recipe",
    "read_run_config": "recipe",
    "run_config_for": "recipe",
    "check_metric_against_k": "metrics",
    "metric_key": "metrics",
    "metric_value": "metrics",
    "parse_metric": "metrics",
    "checkpoint_plan": "checks",
    "recipe_problems": "checks",
    "validation_keeps_best": "checks",
    "COMPARISON_JSON": "comparison",
    "COMPARISON_MD": "comparison",
    "PaperRowMismatch": "comparison",
    "compare_with_paper": "comparison",
    "describe_protocol": "comparison",
    "render_comparison": "comparison",
    "row_mismatches": "comparison",
    "select_paper_rows": "comparison",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
