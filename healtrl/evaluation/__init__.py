"""Evaluation of a model on verifiable tasks, and what is built on it.

- `engine`: k samples per problem, avg@k, pass@k and response length (`evaluate`, `healtrl eval`);
- `callback`: `PeriodicEvalCallback`, the same evaluation on the current policy during training;
- `options`: the backends and the correctness threshold, which `healtrl eval --help` reads without torch;
- `best_checkpoint`: every saved checkpoint of a run evaluated by its recipe's rule (`healtrl eval --checkpoints`).

What it may import: the trainers and every layer below them (data, tasks, rewards, generation, recipes, helpers),
never the command line (`pyproject.toml`'s import contract). The names below are imported on first access, so that
importing one module does not import the others (`callback` imports TRL's trainer stack).
"""

from healtrl.utils.lazy import lazy_exports

_EXPORTS = {
    "Completion": "engine",
    "DEFAULT_THRESHOLD": "options",
    "EvalResults": "engine",
    "SamplingSettings": "engine",
    "TaskResult": "engine",
    "TransformersGenerator": "engine",
    "VLLMGenerator": "engine",
    "evaluate": "engine",
    "evaluate_task": "engine",
    "pass_at_k_points": "engine",
    "score_completions": "engine",
    "tokenize_prompts": "engine",
    "BEST_JSON": "best_checkpoint",
    "CHECKPOINT_ROWS": "best_checkpoint",
    "CHECKPOINT_TABLE": "best_checkpoint",
    "FINAL": "best_checkpoint",
    "choose_best": "best_checkpoint",
    "evaluate_checkpoints": "best_checkpoint",
    "find_checkpoints": "best_checkpoint",
    "render_checkpoint_table": "best_checkpoint",
    "score_row": "best_checkpoint",
    "weights_signature": "best_checkpoint",
    "PeriodicEvalCallback": "callback",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
