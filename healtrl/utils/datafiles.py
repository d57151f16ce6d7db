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


def pick_split(data, split: str, where: str):
    from datasets import DatasetDict, IterableDatasetDict

    if isinstance(data, (DatasetDict, IterableDatasetDict)):
        if split not in data:
            raise ValueError(
                f"{where} has no split '{split}'. Splits found: {', '.join(data)}. Set `dataset_train_split` / "
                "`dataset_test_split` to one of them."
            )
        return data[split]
    return data


def load_local(path: str, config: str | None, split: str):
    """One split of a local dataset file or folder; a ValueError names the path when it cannot be read or holds no
    rows (the run would stop at its first batch, after the model has loaded)."""
    import datasets

    if os.path.isfile(path):
        builder = LOCAL_FILE_BUILDERS.get(os.path.splitext(path)[1].lower())
        if builder is None:
            raise ValueError(
                f"Cannot load the dataset file '{path}': unknown extension. Supported: "
                f"{', '.join(sorted(LOCAL_FILE_BUILDERS))}, or a folder written by `save_to_disk`."
            )
        # A single file is a single split: `split` only selects among the splits of folders and Hub datasets.
        try:
            data = datasets.load_dataset(builder, data_files=path, split="train")
        except StopIteration:  # `datasets` reads the first batch for the schema: an empty file has none
            data = None
        except ValueError as exc:
            if "corresponds to no data" not in str(exc):  # `datasets`' words for a file of blank lines / a header
                raise ValueError(f"Cannot read the dataset file '{path}' as {builder}: {exc}") from exc
            data = None
        what = f"The dataset file '{path}'"
    else:
        saved = any(
            os.path.exists(os.path.join(path, marker))
            for marker in ("dataset_info.json", "state.json", "dataset_dict.json")
        )
        where = f"The dataset folder '{path}'"
        if saved:
            data = pick_split(datasets.load_from_disk(path), split, where)
        else:
            data = pick_split(datasets.load_dataset(path, config), split, where)
        what = f"{where} (split '{split}')"
    if data is None or (hasattr(data, "__len__") and len(data) == 0):
        raise ValueError(
            f"{what} holds no rows. Fill it, or point the config's dataset name (`dataset_name`, "
            "`eval_dataset_name`) at data with rows."
        )
    return data
