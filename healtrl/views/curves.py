"""Training curves: entropy and reward against the optimizer step, for one run or several side by side.

```python
from .curves import plot_curves

plot_curves(trainer.state.log_history, "curves.png")                            # one run
plot_curves({"GRPO": "outputs/grpo", "HEAL": "outputs/heal"}, "compare.png")    # runs written by train.py
```

A run is given as a `log_history` (the list of dicts in `trainer.state.log_history`), as the path of a
`metrics.jsonl` written by `train.py`, or as its output folder. Rendering uses matplotlib's Agg canvas directly, so it
never opens a window, needs no display, and leaves the global pyplot backend alone (safe inside notebooks).

The entropy panel also draws the entropy target or threshold of the run's method as a dashed line, labelled with its
value to 3 significant digits: the targets a run logs (`LOGGED_TARGETS`: AER's H*, PosAdv's delta) and those its
config sets (`config_targets`: PosAdv's threshold delta, TRL's adaptive-entropy target), passed to `draw_curves` as
`targets`. A method without one (GRPO, OPEFO, the clipping baselines) gets no line. A trainer's own `curves.png`
(`trainer.save_curves(dir)`) passes both, under a title naming the method, the model by the id it was loaded with and
the training data by its name. A figure title never names a folder of this machine (`checked_title`).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping, Sequence
from typing import Any

__all__ = [
    "DEFAULT_PANELS",
    "LOGGED_TARGETS",
    "METRICS_FILE",
    "checked_title",
    "config_targets",
    "curve",
    "draw_curves",
    "plot_curves",
    "read_metrics",
    "save_figure",
]

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

# Legend labels of the targets and thresholds, shared by the logged ones and those a config sets.
AER_TARGET = "AER target H*"
POSADV_THRESHOLD = "PosAdv threshold \u03b4"
ADAPTIVE_ENTROPY_TARGET = "adaptive-entropy target"

# Log key -> legend label of an entropy target a method logs, drawn on the entropy panels (`draw_curves`). AER's
# H* = tau * H0 (AER eq. 10) is measured as its `entropy_normalization` says (`token`: the token mean, as the panel's
# `entropy`; `sequence`, the default: the mean over responses of each response's token mean). PosAdv logs its delta
# (PosAdv eq. 5) at every update of its controller.
LOGGED_TARGETS: dict[str, str] = {
    "aer/target_entropy": AER_TARGET,
    "posadv/entropy_threshold": POSADV_THRESHOLD,
}

# Dots per inch of the PNGs `save_figure` writes.
PNG_DPI = 110

History = Sequence[Mapping[str, Any]]


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def config_targets(args: Any) -> dict[str, float]:
    """The entropy targets or thresholds a trainer config sets, for `draw_curves(..., targets=...)`.

    Args:
        args: A trainer config (e.g. `trainer.args`).

    Returns:
        Legend label -> value: `"PosAdv threshold \u03b4"` (`entropy_threshold`, PosAdv eq. 5) when the config has
        `schedule == "entropy"`, the only PosAdv schedule that reads it (PosAdv also logs it; `draw_curves` draws it
        once); `"adaptive-entropy target"` (`entropy_target`) when TRL's `use_adaptive_entropy` is on (any
        trainer: TRL's Skywork-OR1 controller is a GRPOConfig option). Empty for every other config (AER logs its
        target, `LOGGED_TARGETS`; GRPO, OPEFO and the clipping baselines have none).
    """
    targets: dict[str, float] = {}
    if getattr(args, "schedule", None) == "entropy" and _finite(getattr(args, "entropy_threshold", None)):
        targets[POSADV_THRESHOLD] = float(args.entropy_threshold)
    if getattr(args, "use_adaptive_entropy", False) is True and _finite(getattr(args, "entropy_target", None)):
        targets[ADAPTIVE_ENTROPY_TARGET] = float(args.entropy_target)
    return targets


def _path_token(token: str) -> bool:
    """Whether a word of a title is a path of this machine (absolute, `~`-relative, or an existing file or folder
    written with a separator; a lone separator, as in "entropy / reward", is none)."""
    if not token.strip("/\\~."):
        return False
    if os.path.isabs(token) or token.startswith("~"):
        return True
    return (os.sep in token or "/" in token) and os.path.exists(token)


def checked_title(title: str) -> str:
    """A figure title with no folder of this machine in it.

    Each whitespace-separated word (stripped of surrounding brackets, quotes and punctuation) that is a path of this
    machine (absolute, `~`-relative, or an existing file or folder written with a separator) is rewritten when it is
    the folder of a toy or offline model, to its `healtrl-toy/...` / `healtrl-offline/...` name
    (`healtrl.model_card.published_model_name`), and refused otherwise.

    Args:
        title: The title as given.

    Returns:
        The title, toy and offline model folders replaced by their names.

    Raises:
        ValueError: the title holds any other path, named in the message.
    """
    from ..model_card import published_model_name

    words = []
    for word in title.split(" "):
        core = word.strip("()[]{}<>,;:'\"")
        if core and _path_token(core):
            name, kind = published_model_name(core)
            if kind != "healtrl":
                raise ValueError(
                    f"The figure title {title!r} holds the path {core!r}, a folder of this machine. Name the model by "
                    "the id it was loaded with (a Hub id, or healtrl's `healtrl-toy/...` name) and the task by its "
                    "name."
                )
            word = word.replace(core, name)
        words.append(word)
    return " ".join(words)


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


def _entropy_panel(keys: Sequence[str]) -> bool:
    return any(key in DEFAULT_PANELS["entropy"] for key in keys)


def _target_line(ax, value: float, label: str, color) -> None:
    ax.axhline(value, linestyle="--", linewidth=1.2, color=color, label=f"{label} = {value:.3g}")


def _logged_target(ax, steps: list[float], values: list[float], label: str, color) -> None:
    """A logged target: a horizontal line when every logged value rounds to the same 3 significant digits (AER's H*
    and PosAdv's delta are constant once set), else the logged series, dashed, its last value in the legend."""
    if len({f"{value:.3g}" for value in values}) == 1:
        _target_line(ax, values[-1], label, color)
    else:
        ax.plot(steps, values, linestyle="--", linewidth=1.2, color=color, label=f"{label}, last = {values[-1]:.3g}")


def draw_curves(
    runs: History | str | os.PathLike | Mapping[str, History | str | os.PathLike],
    panels: Mapping[str, str | Sequence[str]] | None = None,
    title: str | None = None,
    targets: Mapping[str, float] | None = None,
):
    """The figure `plot_curves` saves: a `matplotlib.figure.Figure` on an Agg canvas (see `plot_curves`).

    Args:
        runs, panels, title: As for `plot_curves`.
        targets: Legend label -> an entropy target or threshold a config sets (`config_targets(trainer.args)`),
            drawn on every entropy panel as a dashed grey horizontal line labelled `<label> = <value to 3
            significant digits>`, besides the logged `LOGGED_TARGETS` that `plot_curves` draws. A target whose
            label is that of a `LOGGED_TARGETS` key some run logs (PosAdv's delta) is not drawn a second time: the
            logged line shows it.

    Raises:
        ValueError: a target is not a finite number, or the title holds a path `checked_title` refuses.
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
    panels = {name: (keys,) if isinstance(keys, str) else tuple(keys) for name, keys in panels.items()}
    for label, value in (targets or {}).items():
        if not _finite(value):
            raise ValueError(f"targets[{label!r}] must be a finite number, got {value!r}.")
    logged_labels = {
        target for key, target in LOGGED_TARGETS.items() if any(curve(h, key)[1] for h in labelled.values())
    }

    fig = Figure(figsize=(5.0 * len(panels), 3.8), layout="constrained")
    FigureCanvasAgg(fig)
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for ax, (name, keys) in zip(axes, panels.items()):
        drawn = lines = False
        for label, history in labelled.items():
            steps, values = curve(history, keys)
            color = None
            if values:
                (line,) = ax.plot(
                    steps, values, marker="o" if len(values) < 20 else None, markersize=3, label=label or None
                )
                color = line.get_color()
                drawn = True
            if _entropy_panel(keys):
                for key, target in LOGGED_TARGETS.items():
                    logged_steps, logged = curve(history, key)
                    if logged:
                        _logged_target(ax, logged_steps, logged, f"{label}: {target}" if label else target, color)
                        lines = True
        if _entropy_panel(keys):
            for label, value in (targets or {}).items():
                if label not in logged_labels:
                    _target_line(ax, float(value), label, "0.3")
                    lines = True
        if not drawn:
            ax.text(0.5, 0.5, f"no '{name}' logged", ha="center", va="center", transform=ax.transAxes, color="gray")
        ax.set_title(name)
        ax.set_xlabel("step")
        ax.grid(alpha=0.3)
        if lines or (drawn and len(labelled) > 1):
            ax.legend()
    if title:
        fig.suptitle(checked_title(title))
    return fig


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
        title: Figure title, checked by `checked_title` (a toy model's folder becomes its name; another path of
            this machine is an error).

    Every panel whose keys include one of `DEFAULT_PANELS["entropy"]` (the entropy panels) draws, per run, each key
    of `LOGGED_TARGETS` the run logs (AER's H*, PosAdv's delta) dashed in the run's colour: a horizontal line
    labelled `<target> = <value>` when its logged values agree to 3 significant digits, else the logged series
    labelled `<target>, last = <last value>` (values to 3 significant digits). Targets a config sets but no run logs
    (`config_targets`: TRL's adaptive-entropy target) are drawn by
    `save_figure(draw_curves(..., targets=config_targets(trainer.args)), path)`, as `trainer.save_curves` does.

    Returns:
        `path`, as a string.

    Raises:
        ValueError: the title holds a path `checked_title` refuses.
    """
    return save_figure(draw_curves(runs, panels=panels, title=title), path)


def save_figure(fig, path: str | os.PathLike) -> str:
    """Write a figure of `draw_curves` as a PNG (`PNG_DPI` dots per inch), creating the folder; returns `path`."""
    path = os.fspath(path)
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.savefig(path, format="png", dpi=PNG_DPI)
    return path
