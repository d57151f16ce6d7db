"""Loading a dataset from a local file or folder, shared by `healtrl.data` and the task adapters (`healtrl.tasks`)."""

from __future__ import annotations

import os

LOCAL_FILE_BUILDERS = {
    ".json": "json",
    ".jsonl": "json",
    ".parquet": "parquet",
    ".csv": "csv",
    ".arrow": "arrow",
    ".txt": "text",
}
"""File extension -> `datasets` builder of a local dataset file."""


def _pick_split(data, split: str, where: str):
    from datasets import DatasetDict, IterableDatasetDict

    if isinstance(data, (DatasetDict, IterableDatasetDict)):
        if split not in data:
            raise ValueError(
                f"{where} has no split '{split}'. Splits found: {', '.join(data)}. Set `dataset_train_split` / "
                "`dataset_test_split` to one of them."
            )
        return data[split]
    return data


def _load_local(path: str, config: str | None, split: str):
    import datasets

    if os.path.isfile(path):
        builder = LOCAL_FILE_BUILDERS.get(os.path.splitext(path)[1].lower())
        if builder is None:
            raise ValueError(
                f"Cannot load the dataset file '{path}': unknown extension. Supported: "
                f"{', '.join(sorted(LOCAL_FILE_BUILDERS))}, or a folder written by `save_to_disk`."
            )
        # A single file is a single split: `split` only selects among the splits of folders and Hub datasets.
        return datasets.load_dataset(builder, data_files=path, split="train")
    saved = any(
        os.path.exists(os.path.join(path, marker))
        for marker in ("dataset_info.json", "state.json", "dataset_dict.json")
    )
    if saved:
        return _pick_split(datasets.load_from_disk(path), split, f"The dataset folder '{path}'")
    data = datasets.load_dataset(path, config)
    return _pick_split(data, split, f"The dataset folder '{path}'")
