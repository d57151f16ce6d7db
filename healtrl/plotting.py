"""Training curves: entropy and reward against the optimizer step, for one run or several side by side.

```python
from healtrl.plotting import plot_curves

plot_curves(trainer.state.log_history, "curves.png")                            # one run
plot_curves({"GRPO": "outputs/grpo", "HEAL": "outputs/heal"}, "compare.png")    # runs written by train.py
```

A run is given as a `log_history` (the list of dicts in `trainer.state.log_history`), as the path of a
`metrics.jsonl` written by `train.py`, or as its output folder. Rendering uses matplotlib's Agg canvas directly, so it
never opens a window, needs no display, and leaves the global pyplot backend alone (safe inside notebooks).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = ["DEFAULT_PANELS", "METRICS_FILE", "curve", "plot_curves", "read_metrics"]

METRICS_FILE = "metrics.jsonl"

# Panel title -> the log keys that hold it, first present wins (TRL logs "entropy" and "reward"; healtrl's rollout
# entropy and TRL's per-reward means are fallbacks).
DEFAULT_PANELS: dict[str, tuple[str, ...]] = {
    "entropy": ("entropy", "rollout/entropy"),
    "reward": ("reward", "rewards/toy_reward/mean"),
}

# Added to the default panels when a run logs them (HEAL's per-domain rollout entropies, HEAL Fig. 1).
DOMAIN_PANELS: dict[str, tuple[str, ...]] = {
    "entropy, target domain": ("heal/entropy_target",),
    "entropy, general domain": ("heal/entropy_general",),
}

History = Sequence[Mapping[str, Any]]


def read_metrics(path: str | os.PathLike) -> list[dict[str, Any]]:
    """The log history stored in a `metrics.jsonl` file, or in the `metrics.jsonl` of an output folder."""
    path = os.fspath(path)
    if os.path.isdir(path):
        path = os.path.join(path, METRICS_FILE)
    if not os.path.isfile(path):
        raise FileNotFoundError(f"No metrics file at {path!r}; train.py writes {METRICS_FILE} into its output_dir.")
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def _as_history(run) -> list[Mapping[str, Any]]:
    if isinstance(run, (str, os.PathLike)):
        return read_metrics(run)
    return list(run)


def curve(history: History, keys: str | Sequence[str]) -> tuple[list[float], list[float]]:
    """(steps, values) of the first key in `keys` that the history logs; training entries only (no eval_ keys)."""
    keys = (keys,) if isinstance(keys, str) else tuple(keys)
    for key in keys:
        steps, values = [], []
        for entry in history:
            value = entry.get(key)
            if isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value):
                steps.append(entry.get("step", len(steps)))
                values.append(float(value))
        if values:
            return steps, values
    return [], []


def plot_curves(
    runs: History | str | os.PathLike | Mapping[str, History | str | os.PathLike],
    path: str | os.PathLike,
    panels: Mapping[str, str | Sequence[str]] | None = None,
    title: str | None = None,
) -> str:
    """Plot entropy and reward against the step and save the figure as a PNG.

    Args:
        runs: One run (a `log_history` list, a `metrics.jsonl` path or an output folder), or a mapping label -> run
            to draw several runs on the same axes (e.g. `{"GRPO": ..., "HEAL": ...}`).
        path: Where to write the PNG.
        panels: Panel title -> log key (or keys, first present wins). Defaults to `DEFAULT_PANELS`, plus the
            per-domain entropies (`DOMAIN_PANELS`) when some run logs them (HEAL).
        title: Figure title.

    Returns:
        `path`, as a string.
    """
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    if isinstance(runs, Mapping):
        labelled = {str(label): _as_history(run) for label, run in runs.items()}
    else:
        labelled = {"": _as_history(runs)}
    if panels is None:
        panels = dict(DEFAULT_PANELS)
        for name, keys in DOMAIN_PANELS.items():
            if any(curve(history, keys)[1] for history in labelled.values()):
                panels[name] = keys
    panels = dict(panels)

    fig = Figure(figsize=(5.0 * len(panels), 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, keys) in zip(axes, panels.items()):
        drawn = False
        for label, history in labelled.items():
            steps, values = curve(history, keys)
            if values:
                ax.plot(steps, values, marker="o" if len(values) < 20 else None, markersize=3, label=label or None)
                drawn = True
        if not drawn:
            ax.text(0.5, 0.5, f"no '{name}' logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if drawn and len(labelled) > 1:
            ax.legend()
    if title:
        fig.suptitle(title)
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="png", dpi=110)
    return path
