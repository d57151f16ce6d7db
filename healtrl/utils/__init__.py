"""Small helpers every layer of healtrl may use: version pins and optional extras (`compat`), local data files
(`datafiles`), the processes of a launch (`distributed`), an inter-process file lock (`filelock`), type checks of
config values (`numbers`), prompt token ids (`prompts`), the package version (`version`), YAML with duplicate keys
refused (`yamlfile`) and lazy re-exports for the packages' `__init__` (`lazy`).

What it may import: nothing of healtrl's outside `healtrl.utils` (the bottom layer of the import contract in
`pyproject.toml`, checked by `tests/test_layers.py`). Importing this package imports none of its modules.
"""
