"""What a person looks at: per-token entropy pages and training curves.

- `entropy`: the per-token entropy page (HTML), its PNG summary and its data; imports nothing of healtrl's, so
  the trainers' training-time views use it too;
- `inspection`: `healtrl inspect` / `inspect_models`, which sample completions and measure them;
- `curves`: entropy and reward against the optimizer step, each method's target drawn.

What it may import: `entropy` and `curves` sit beside data and tasks (the trainers use them); `inspection` samples
with the evaluation's machinery and sits beside evaluation (`pyproject.toml`'s import contract). The names below are
imported on first access, so that the trainers' use of `entropy` does not import `inspection`.
"""

from healtrl.utils.lazy import lazy_exports

_EXPORTS = {
    "CompletionView": "entropy",
    "DEFAULT_MAX_ENTROPY": "entropy",
    "HIGH_ENTROPY_QUANTILE": "entropy",
    "HTML_FILE": "entropy",
    "InspectRun": "entropy",
    "JSON_FILE": "entropy",
    "PNG_FILE": "entropy",
    "PromptGroup": "entropy",
    "entropy_colour": "entropy",
    "format_prompt": "entropy",
    "high_entropy_threshold": "entropy",
    "render_html": "entropy",
    "render_summary_png": "entropy",
    "run_to_dict": "entropy",
    "token_texts": "entropy",
    "write_outputs": "entropy",
    "InspectError": "inspection",
    "inspect": "inspection",
    "inspect_models": "inspection",
    "load_prompts": "inspection",
    "sample": "inspection",
    "token_stats": "inspection",
    "DEFAULT_PANELS": "curves",
    "LOGGED_TARGETS": "curves",
    "METRICS_FILE": "curves",
    "checked_title": "curves",
    "config_targets": "curves",
    "curve": "curves",
    "draw_curves": "curves",
    "plot_curves": "curves",
    "read_metrics": "curves",
    "save_figure": "curves",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
