"""A reward for datasets that mix tasks: each row is scored by the reward of its own task (the `task` column)."""

from __future__ import annotations

from ._common import column, report

__all__ = ["task_reward"]


def task_reward(prompts=None, completions=None, task=None, log_metric=None, **columns) -> list[float]:
    """Score each completion with the reward of its row's task (`healtrl.tasks.get_task(task).reward`).

    For a dataset that mixes tasks (e.g. HEAL's target and general domains, built with `healtrl.tasks.mix_tasks`):
    rows are grouped by task and each group goes to its task's registered reward with its own slice of every column.
    Rows of an unknown task score 0.0 and are counted (`rewards/task/malformed`).

    Args:
        prompts: The prompts, sliced per task and passed on.
        completions: Strings or conversations.
        task: The task name of each row.
        log_metric: TRL's metric hook, passed on.
        **columns: The other dataset columns (and TRL's extras), sliced per task and passed on.

    Returns:
        One float per completion.
    """
    from healtrl.data import get_reward_func
    from healtrl.tasks import get_task

    completions = list(completions) if completions is not None else []
    n = len(completions)
    names = column(task, n, "task")
    groups: dict = {}
    for i, name in enumerate(names):
        groups.setdefault(name, []).append(i)
    scores = [0.0] * n
    unknown = 0
    for name, rows in groups.items():
        try:
            reward = get_reward_func(get_task(name).reward)
        except (ValueError, TypeError, ImportError):
            unknown += len(rows)
            continue

        def pick(values, rows=rows):
            if not isinstance(values, (str, bytes, dict)) and hasattr(values, "__len__") and len(values) == n:
                values = list(values)
                return [values[i] for i in rows]
            return values

        sliced = {key: pick(value) for key, value in columns.items()}
        if prompts is not None:
            sliced["prompts"] = pick(list(prompts))
        part = reward(
            completions=[completions[i] for i in rows], log_metric=log_metric, task=[name] * len(rows), **sliced
        )
        for i, value in zip(rows, part):
            scores[i] = 0.0 if value is None else float(value)
    report("task", unknown, n, None if not unknown else log_metric)
    return scores
