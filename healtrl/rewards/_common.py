"""Shared plumbing of the verifiable rewards: completion text, column alignment, malformed-completion accounting, and
`fold_case` (case-insensitive searches at the speed of literal ones, for the linear-time parsing of issue #25)."""

from __future__ import annotations

import logging
import string
import threading
from collections import Counter
from collections.abc import Callable, Sequence

from healtrl.toy.tasks import completion_text

logger = logging.getLogger("healtrl.rewards")

MAX_COMPLETION_CHARS = 1_000_000
"""Completions longer than this (characters) are malformed: they score 0 without being parsed."""

# Every character that a case-insensitive regex matches to an ASCII letter -> that letter in lower case: A-Z and
# U+0130, U+0131 (i), U+017F (s), U+212A (k). A lower-case pattern matches the folded text where its case-insensitive
# version matches the text, at the same indices (one character for one). Case-insensitive patterns cannot use the
# regex engine's fast search for a literal prefix; on 1M characters they take ~0.1 s where the literal takes ~1 ms.
_FOLD = str.maketrans(
    {**{c: c.lower() for c in string.ascii_uppercase}, "\u0130": "i", "\u0131": "i", "\u017f": "s", "\u212a": "k"}
)


def fold_case(text: str) -> str:
    """`text` with the characters a case-insensitive regex matches to ASCII letters replaced by those letters in
    lower case; same length, same indices."""
    return text.translate(_FOLD)


_lock = threading.Lock()
_MALFORMED: Counter = Counter()


def malformed_counts() -> dict[str, int]:
    """Malformed completions seen so far in this process, per reward name (empty, too long, invalid unicode, wrong
    type, unreadable ground truth)."""
    with _lock:
        return dict(_MALFORMED)


def reset_malformed_counts() -> None:
    """Set every malformed-completion counter back to zero."""
    with _lock:
        _MALFORMED.clear()


def clean_text(completion) -> str | None:
    """The text of a completion (string or conversation), or None when it is malformed.

    Malformed: not a string or a conversation with text content, empty or only whitespace, longer than
    `MAX_COMPLETION_CHARS`, or not encodable as UTF-8 (lone surrogates).
    """
    try:
        text = completion_text(completion)
    except Exception:
        return None
    if not isinstance(text, str) or not text.strip() or len(text) > MAX_COMPLETION_CHARS:
        return None
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return None
    return text


def column(values, n: int, name: str) -> list:
    """A dataset column as TRL passes it (a list aligned with the completions), broadcast from a scalar if needed.

    Raises:
        ValueError: the list does not have one value per completion (a bug in the caller, not a malformed completion).
    """
    if values is None or isinstance(values, (str, bytes, int, float)):
        return [values] * n
    try:
        values = list(values)
    except TypeError:
        return [values] * n
    if len(values) != n:
        raise ValueError(
            f"The reward got {n} completions but {len(values)} values of the column '{name}'; TRL passes one value "
            "per completion. Pass the dataset column aligned with `completions`."
        )
    return values


def report(name: str, n_malformed: int, n_total: int, log_metric: Callable | None) -> None:
    """Count malformed completions of one batch and log the count (through TRL's `log_metric` when given)."""
    if n_malformed:
        with _lock:
            _MALFORMED[name] += n_malformed
            total = _MALFORMED[name]
    if callable(log_metric):
        try:
            log_metric(f"rewards/{name}/malformed", float(n_malformed))
            return
        except Exception:  # a logging hook must not take the reward down
            pass
    if n_malformed:
        logger.warning(
            "Reward '%s': %d of %d completions were malformed and scored 0 (%d so far).",
            name,
            n_malformed,
            n_total,
            total,
        )


def safe_scores(name: str, completions: Sequence, score: Callable[[int, str], float], log_metric=None) -> list[float]:
    """Score each completion with `score(index, text)`; malformed completions and any exception score 0.0 and are
    counted."""
    completions = list(completions) if completions is not None else []
    rewards, bad = [], 0
    for i, completion in enumerate(completions):
        text = clean_text(completion)
        if text is None:
            rewards.append(0.0)
            bad += 1
            continue
        try:
            value = score(i, text)
        except Exception as exc:  # never raise on a completion
            logger.debug("Reward '%s' failed on completion %d: %r", name, i, exc)
            value = None
        if value is None:
            rewards.append(0.0)
            bad += 1
        else:
            rewards.append(float(value))
    report(name, bad, len(completions), log_metric)
    return rewards
