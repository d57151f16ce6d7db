"""The study: every method x {few-shot, full target data} x seeds in a toy world, and the papers' claims judged on it.

What it holds (`healtrl study` on the command line, `healtrl/cli/study.py`; `benchmarks/toy_study.py` and
`benchmarks/claims.py` call the same functions):

- `world`: the worlds (`--task add | mul | countdown`): each one's toy model, target and general data, completion
  budget, data regimes and held-out score;
- `methods`: the methods (`METHODS`), the trainer and config fields each runs with (`RUN_CONFIGS`, `OPEFO_VARIANTS`,
  `WORLD_OVERRIDES`, `PAPER_REGIME`), and a user's trainer given as `module:Class` (`user_method`);
- `runs`: one run's trainer, training, held-out score and cached JSON record (`run_one`, `load_run`), and the pool of
  worker processes that trains the missing runs (`train_missing`);
- `report`: per-run summaries, the figures, the findings and the markdown table (`write_report`);
- `claims`: the papers' claims, each a pre-registered statistic with a threshold, a control and paired comparisons,
  judged on the cached runs (`evaluate`, `judge`: `claims.md`, `claims.json`, the README's table);
- `command`: the command line of the study (`parse_args`, `main`);
- `paths`: the repository's results folders and the cache's name.

What it may import: the trainers (`healtrl.trainers`), the toy world (`healtrl.toy`), data, evaluation and HEAL's
selection (`healtrl.data`, `healtrl.evaluation`, `healtrl.selection`) and the small helpers; it sits in the
applications layer of pyproject.toml's import contract, below the command line (`healtrl.cli`), which is the only
layer that imports it. Importing `world`, `methods`, `paths`, `report` or `command` imports no torch (the trainers are
imported inside the functions that build runs), so `healtrl study --help` stays cheap; `claims` imports the trainers'
configs (the thresholds are their defaults).
"""
