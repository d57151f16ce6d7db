"""HEAL's general-domain data selection (HEAL, arXiv:2604.17928, §3.1): `healtrl select`.

- `config`: `SelectionConfig`, the settings with their help, the paper's defaults and checks;
- `data`: the pieces the dry run shares with the run (file names, prompts, the reward's call, the record store);
- `pipeline`: the run (`select_general_data`).

What it may import: the trainers' layer and every layer below it (data, tasks, models, generation, functional,
helpers), never the command line. The names below are imported on first access.
"""

from healtrl.utils.lazy import lazy_exports

_EXPORTS = {
    "rollout_entropies": "pipeline",
    "select_general_data": "pipeline",
    "DTYPES": "config",
    "SelectionConfig": "config",
    "SelectionError": "config",
    "option_type": "config",
    "INDEX_COLUMN": "data",
    "PromptBuilder": "data",
    "RECORDS_FILE": "data",
    "RecordStore": "data",
    "SCORE_COLUMNS": "data",
    "SELECTED_DIR": "data",
    "SELECTED_JSONL": "data",
    "SETTINGS_FILE": "data",
    "call_reward": "data",
    "pool_indices": "data",
    "prompt_hash": "data",
    "render_value": "data",
    "reward_arguments": "data",
}
__all__, __getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)
