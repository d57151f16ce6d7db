"""Per-token entropy views of sampled completions: the data, one self-contained HTML page and a PNG summary.

The page colours each completion token by its entropy on a fixed scale (legend at the top) with the entropy and
probability in the token's title (hover) text, shows each completion's reward and mean entropy, and puts the models
(runs) side by side per prompt with their entropy differences; no network (inline CSS, no scripts, no fonts from
elsewhere). The PNG has the histogram of token entropies, the mean entropy by position and the most frequent
high-entropy tokens.

Used by `healtrl inspect` and `inspect_models` (`healtrl.views.inspection`, which sample and measure) and by the trainers'
training-time views (`healtrl.trainers._inspect_hooks`); it imports nothing of healtrl's, so both can use it.
"""

from __future__ import annotations

import html
import json
import math
import os
from collections import Counter
from collections.abc import Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

HTML_FILE = "inspect.html"
PNG_FILE = "inspect_summary.png"
JSON_FILE = "inspect.json"
DEFAULT_MAX_ENTROPY = 2.0
"""Top of the colour scale in nats; higher entropies get the top colour (the legend says so)."""
HIGH_ENTROPY_QUANTILE = 0.8
"""Without `--high_entropy`, the "high-entropy tokens" panel takes the tokens above this quantile of all the page's
token entropies: the top 20%, the "forking" tokens of Wang et al. 2025 (TRL's `top_entropy_quantile`)."""


def high_entropy_threshold(runs: Sequence[InspectRun], high_entropy: float | None) -> float:
    """`high_entropy`, or the `HIGH_ENTROPY_QUANTILE` quantile of every token entropy of `runs` (0 without tokens)."""
    if high_entropy is not None:
        return float(high_entropy)
    import numpy as np

    values = [h for r in runs for g in r.groups for c in g.completions for h in c.entropies]
    return float(np.quantile(values, HIGH_ENTROPY_QUANTILE)) if values else 0.0


# ----------------------------------------------------------------------------------------------------------------
# Data
# ----------------------------------------------------------------------------------------------------------------
@dataclass
class CompletionView:
    """One sampled completion with its per-token statistics."""

    token_ids: list[int]
    tokens: list[str]
    entropies: list[float]
    probs: list[float]
    text: str
    truncated: bool
    reward: float | None = None

    @property
    def mean_entropy(self) -> float:
        return sum(self.entropies) / len(self.entropies) if self.entropies else float("nan")


@dataclass
class PromptGroup:
    """The k completions of one prompt from one model."""

    prompt: Any
    prompt_text: str
    completions: list[CompletionView] = field(default_factory=list)

    @property
    def mean_entropy(self) -> float:
        values = [h for c in self.completions for h in c.entropies]
        return sum(values) / len(values) if values else float("nan")


@dataclass
class InspectRun:
    """One model's completions on every prompt."""

    model: str
    groups: list[PromptGroup]
    temperature: float
    seed: int


def format_prompt(prompt) -> str:
    if isinstance(prompt, str):
        return prompt
    return "\n".join(f"{m.get('role', '')}: {m.get('content', '')}" for m in prompt)


def token_texts(tokenizer, ids: Sequence[int]) -> list[str]:
    return [tokenizer.decode([i], skip_special_tokens=False) for i in ids]


# ----------------------------------------------------------------------------------------------------------------
# Rendering
# ----------------------------------------------------------------------------------------------------------------
_STOPS = [(0.0, (255, 255, 255)), (0.25, (255, 237, 160)), (0.5, (254, 178, 76)), (0.75, (240, 59, 32)),
          (1.0, (128, 0, 38))]  # fmt: skip


def entropy_colour(entropy: float, max_entropy: float = DEFAULT_MAX_ENTROPY) -> str:
    """Background colour of a token on the fixed scale white (0 nats) -> dark red (>= `max_entropy`)."""
    x = min(max(entropy / max_entropy, 0.0), 1.0) if math.isfinite(entropy) else 1.0
    for (x0, c0), (x1, c1) in zip(_STOPS, _STOPS[1:]):
        if x <= x1:
            t = (x - x0) / (x1 - x0)
            return "#" + "".join(f"{round(a + t * (b - a)):02x}" for a, b in zip(c0, c1))
    return "#800026"


def _luminance(colour: str) -> float:
    """WCAG relative luminance of a `#rrggbb` colour."""
    channels = [int(colour[i : i + 2], 16) / 255 for i in (1, 3, 5)]
    r, g, b = (c / 12.92 if c <= 0.03928 else ((c + 0.055) / 1.055) ** 2.4 for c in channels)
    return 0.2126 * r + 0.7152 * g + 0.0722 * b


def _text_colour(entropy: float, max_entropy: float) -> str:
    """Black or white, whichever contrasts more with the token's background: at least 4.58:1 on any colour (WCAG AA
    asks 4.5:1 for normal text; checked in tests/test_inspect_browser.py)."""
    lum = _luminance(entropy_colour(entropy, max_entropy))
    return "#ffffff" if (1.05 / (lum + 0.05)) > ((lum + 0.05) / 0.05) else "#000000"


_CSS = """
body { font-family: system-ui, -apple-system, "Segoe UI", sans-serif; margin: 1.5em; color: #111; background: #fafafa; }
h1 { font-size: 1.3em; } h2 { font-size: 1.05em; margin: 0.3em 0; }
.legend { display: flex; align-items: center; gap: 0.5em; margin: 0.5em 0 1em; }
.legend .bar { width: 320px; height: 14px; border: 1px solid #999; }
.prompt { background: #fff; border: 1px solid #ddd; border-radius: 6px; padding: 0.8em; margin-bottom: 1.2em; }
.ptext { white-space: pre-wrap; font-family: ui-monospace, "DejaVu Sans Mono", monospace; background: #f0f0f0;
  padding: 0.4em; border-radius: 4px; }
.models { display: flex; gap: 1em; align-items: flex-start; }
.model { flex: 1 1 0; min-width: 0; }
.completions { display: grid; grid-template-columns: repeat(auto-fill, minmax(260px, 1fr)); gap: 0.6em; }
.completion { border: 1px solid #ccc; border-radius: 4px; padding: 0.4em; background: #fff; }
.meta { font-size: 0.8em; color: #444; margin-bottom: 0.3em; }
.tokens { white-space: pre-wrap; word-break: break-all; font-family: ui-monospace, "DejaVu Sans Mono", monospace;
  font-size: 0.9em; line-height: 1.5; }
.tok { border-radius: 2px; }
.diff { font-size: 0.85em; margin: 0.3em 0; }
"""


def _esc(text: str) -> str:
    return html.escape(text, quote=True)


def _completion_html(c: CompletionView, index: int, max_entropy: float, diff: float | None) -> str:
    spans = []
    probs = c.probs or [None] * len(c.tokens)  # a training-time view has no probabilities where none were computed
    for tok, h, p in zip(c.tokens, c.entropies, probs):
        prob = "" if p is None else f", p = {p:.4f}"
        data = "" if p is None else f' data-p="{p!r}"'
        spans.append(
            f'<span class="tok" style="background:{entropy_colour(h, max_entropy)};color:{_text_colour(h, max_entropy)}"'
            f' title="entropy {h:.4f} nats{prob}" data-h="{h!r}"{data}>{_esc(tok)}</span>'
        )
    reward = "n/a" if c.reward is None else f"{c.reward:g}"
    extra = "" if diff is None else f" &middot; &Delta;H vs model 1: {diff:+.4f}"
    cut = " &middot; truncated" if c.truncated else ""
    return (
        f'<div class="completion"><div class="meta">#{index} &middot; reward {reward} &middot; mean H '
        f"{c.mean_entropy:.4f} &middot; {len(c.tokens)} tokens{cut}{extra}</div>"
        f'<div class="tokens">{"".join(spans)}</div></div>'
    )


def render_html(runs: Sequence[InspectRun], max_entropy: float = DEFAULT_MAX_ENTROPY, title: str = "") -> str:
    """One self-contained HTML page (inline CSS, no scripts, no external resources) for one or two runs on the same
    prompts; with two, each completion and prompt shows the mean-entropy difference (model 2 - model 1)."""
    if not runs:
        raise ValueError("render_html needs at least one run.")
    if any(len(r.groups) != len(runs[0].groups) for r in runs):
        raise ValueError("Every run must cover the same prompts.")
    gradient = ", ".join(
        f"{entropy_colour(x * max_entropy, max_entropy)} {x * 100:.0f}%" for x in (0, 0.25, 0.5, 0.75, 1)
    )
    names = " vs ".join(_esc(r.model) for r in runs)
    has_probs = any(c.probs for r in runs for g in r.groups for c in g.completions)
    parts = [
        "<!DOCTYPE html>",
        '<html lang="en"><head><meta charset="utf-8">',
        f"<title>{_esc(title or 'healtrl inspect: ' + ' vs '.join(r.model for r in runs))}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>Token entropy: {names}</h1>",
        f"<p>Temperature {runs[0].temperature:g}, seed {runs[0].seed}. Each token's background is the exact entropy "
        "of the sampling distribution at that token (full vocabulary, at the sampling temperature); hover a token for "
        f"its entropy{' and probability' if has_probs else ''}.</p>",
        f'<div class="legend"><span>0 nats</span><span class="bar" style="background:linear-gradient(to right, '
        f'{gradient})"></span><span>&ge; {max_entropy:g} nats</span></div>',
    ]
    for i in range(len(runs[0].groups)):
        group0 = runs[0].groups[i]
        parts.append(f'<div class="prompt"><h2>Prompt {i}</h2><div class="ptext">{_esc(group0.prompt_text)}</div>')
        if len(runs) > 1:
            deltas = [f"{_esc(r.model)}: {r.groups[i].mean_entropy - group0.mean_entropy:+.4f}" for r in runs[1:]]
            parts.append(
                f'<div class="diff">Mean entropy difference vs {_esc(runs[0].model)}: {"; ".join(deltas)}</div>'
            )
        parts.append('<div class="models">')
        for run in runs:
            group = run.groups[i]
            parts.append(
                f'<div class="model"><div class="meta"><b>{_esc(run.model)}</b> &middot; mean H {group.mean_entropy:.4f}'
                '</div><div class="completions">'
            )
            for j, c in enumerate(group.completions):
                diff = None
                if run is not runs[0] and j < len(group0.completions):
                    diff = c.mean_entropy - group0.completions[j].mean_entropy
                parts.append(_completion_html(c, j, max_entropy, diff))
            parts.append("</div></div>")
        parts.append("</div></div>")
    parts.append("</body></html>")
    return "\n".join(parts)


def render_summary_png(runs: Sequence[InspectRun], path: str, high_entropy: float | None = None, top: int = 15) -> str:
    """PNG with the histogram of token entropies, the mean entropy by position and the most frequent tokens with
    entropy >= `high_entropy`, one colour per run."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    high_entropy = high_entropy_threshold(runs, high_entropy)
    fig, axes = plt.subplots(1, 3, figsize=(15, 4.2))
    all_h = [h for r in runs for g in r.groups for c in g.completions for h in c.entropies]
    edges = np.linspace(0, max(all_h) if all_h and max(all_h) > 0 else 1.0, 31)
    for r in runs:
        values = [h for g in r.groups for c in g.completions for h in c.entropies]
        axes[0].hist(values, bins=edges, alpha=0.6 if len(runs) > 1 else 0.9, label=r.model)
        longest = max((len(c.entropies) for g in r.groups for c in g.completions), default=0)
        sums, counts = np.zeros(longest), np.zeros(longest)
        for g in r.groups:
            for c in g.completions:
                sums[: len(c.entropies)] += c.entropies
                counts[: len(c.entropies)] += 1
        if longest:
            axes[1].plot(np.arange(longest), sums / np.maximum(counts, 1), marker=".", label=r.model)
    axes[0].set(title="Token entropy", xlabel="entropy (nats)", ylabel="tokens")
    axes[1].set(title="Mean entropy by position", xlabel="completion token position", ylabel="mean entropy (nats)")
    width = 0.8 / len(runs)
    counters = [
        Counter(t for g in r.groups for c in g.completions for t, h in zip(c.tokens, c.entropies) if h >= high_entropy)
        for r in runs
    ]
    labels = [t for t, _ in sum(counters, Counter()).most_common(top)]
    for n, (r, counter) in enumerate(zip(runs, counters)):
        axes[2].barh(np.arange(len(labels)) + n * width, [counter[t] for t in labels], height=width, label=r.model)
    axes[2].set_yticks(np.arange(len(labels)) + 0.4 - width / 2, [repr(t)[1:-1] for t in labels])
    axes[2].invert_yaxis()
    axes[2].set(title=f"Most frequent tokens with entropy >= {high_entropy:g}", xlabel="count")
    for ax in axes:
        if len(runs) > 1:
            ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path


def run_to_dict(run: InspectRun) -> dict:
    return {
        "model": run.model,
        "temperature": run.temperature,
        "seed": run.seed,
        "prompts": [
            {"prompt": g.prompt, "completions": [{**asdict(c), "mean_entropy": c.mean_entropy} for c in g.completions]}
            for g in run.groups
        ],
    }


def write_outputs(
    runs: Sequence[InspectRun],
    output_dir: str,
    max_entropy: float = DEFAULT_MAX_ENTROPY,
    high_entropy: float | None = None,
) -> list[str]:
    """Write inspect.html, inspect_summary.png and inspect.json into `output_dir`; returns their paths."""
    os.makedirs(output_dir, exist_ok=True)
    html_path, png_path, json_path = (os.path.join(output_dir, f) for f in (HTML_FILE, PNG_FILE, JSON_FILE))
    with open(html_path, "w", encoding="utf-8") as f:
        f.write(render_html(runs, max_entropy))
    render_summary_png(runs, png_path, high_entropy=high_entropy)
    with open(json_path, "w", encoding="utf-8") as f:
        json.dump({"runs": [run_to_dict(r) for r in runs]}, f, default=str)
    return [html_path, png_path, json_path]
