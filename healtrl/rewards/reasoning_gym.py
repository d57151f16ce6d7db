"""Reward for any `reasoning-gym` generator: the generator's own scorer on the completion's final answer.

The final answer is read in linear time (issue #25): boxes as in `healtrl.rewards.math`, `<answer>` tags with
str.find. The generator's scorer is reasoning-gym's code and is not bounded here."""

from __future__ import annotations

import functools
import json
import threading

from ._common import column, fold_case, safe_scores
from .math import extract_boxed

__all__ = ["reasoning_gym_reward", "rg_lookup"]

_lock = threading.Lock()


@functools.lru_cache(maxsize=64)
def _dataset(name: str, seed: int, size: int, config: str):
    import reasoning_gym

    return reasoning_gym.create_dataset(name, seed=seed, size=size, **json.loads(config))


def rg_lookup(spec: dict | str) -> tuple[object, dict]:
    """The reasoning-gym dataset and entry that a `rg_entry` column value names.

    Args:
        spec: `{"dataset": name, "seed": int, "size": int, "index": int, "config": {...}}` or its JSON string; the
            entry is regenerated exactly (reasoning-gym's generators are deterministic in `(seed, index)`).

    Returns:
        `(dataset, entry)`.
    """
    spec = json.loads(spec) if isinstance(spec, str) else spec
    config = json.dumps(spec.get("config") or {}, sort_keys=True)
    with _lock:  # generators hold state (their random stream)
        dataset = _dataset(spec["dataset"], int(spec["seed"]), int(spec["size"]), config)
        entry = dataset[int(spec["index"])]
    return dataset, entry


def _answer_tags(text: str) -> list[str]:
    """The contents of every `<answer>...</answer>` of `text` (case-insensitive tags; each closed by the first closing
    tag after it), in order. str.find on the case-folded text: linear (a lazy regex rescans to the end of the text
    from every unclosed tag)."""
    out, pos, folded = [], 0, fold_case(text)
    while (start := folded.find("<answer>", pos)) >= 0:
        end = folded.find("</answer>", start + len("<answer>"))
        if end < 0:
            break
        out.append(text[start + len("<answer>") : end])
        pos = end + len("</answer>")
    return out


def _final_answer(text: str) -> str:
    boxed = extract_boxed(text)
    if boxed:
        return boxed[-1].strip()
    tagged = _answer_tags(text)
    if tagged:
        return tagged[-1].strip()
    return text.strip().splitlines()[-1].strip()


def reasoning_gym_reward(prompts=None, completions=None, rg_entry=None, log_metric=None, **kwargs) -> list[float]:
    """The reasoning-gym generator's score (in [0, 1]) of the completion's final answer.

    The final answer is the last `\\boxed{}`, else the last `<answer>...</answer>`, else the last line. Malformed
    completions and unreadable `rg_entry` values score 0.0, never raise, and are counted
    (`rewards/reasoning_gym/malformed`).

    Args:
        prompts: Unused.
        completions: Strings or conversations.
        rg_entry: JSON `{"dataset", "seed", "size", "index", "config"}` naming the generated problem (see
            `healtrl.tasks.load_task("rg/<name>")`), one per completion.
        log_metric: TRL's metric hook.
        **kwargs: Other dataset columns, ignored.

    Returns:
        One float per completion.
    """
    completions = list(completions) if completions is not None else []
    specs = column(rg_entry, len(completions), "rg_entry")

    def score(i, text):
        if specs[i] is None:
            return None
        dataset, entry = rg_lookup(specs[i])
        value = dataset.score_answer(answer=_final_answer(text), entry=entry)
        return min(max(float(value), 0.0), 1.0)

    return safe_scores("reasoning_gym", completions, score, log_metric)
