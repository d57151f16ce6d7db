"""Multiple-choice reward: exactly one chosen option (a letter such as "(B)", "Answer: B", "\\boxed{B}", or the exact
text of one option), compared with the `answer` column (the correct letter).

Bounds (issue #25): reading a completion is linear in its length (the answer statements with one regex pass whose
run of colons and whitespace is matched atomically, in the case-folded text; the boxes as in `healtrl.rewards.math`);
a completion with more than `MAX_STATED_ANSWERS` (1,000) boxes chooses no option, and one whose boxes nest too deep
is malformed (`extract_boxed`)."""

from __future__ import annotations

import re
import string

from ._common import column, fold_case, safe_scores
from .math import MAX_STATED_ANSWERS, _boxes

__all__ = ["LETTERS", "extract_choice", "multiple_choice_reward"]

LETTERS = string.ascii_uppercase
_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\{([^{}]*)\}")
_LEAD = re.compile(r"[(\[]?([A-Z])[)\]]?(?![A-Za-z0-9'’])")
_HEDGE = re.compile(r"\s*(?:,|/|&|\bor\b|\band\b|\bnor\b)\s*[(\[]?([A-Z])[)\]]?(?![A-Za-z0-9'’])")
_WORD = re.compile(r" (?!(?:or|and|nor)\b)[a-z]")
_LOOSE = re.compile(r"(?<![A-Za-z0-9])[(\[]?([A-Z])[)\]]?(?![A-Za-z0-9'’])")

STATEMENT_CHARS = 200
"""An answer statement is read up to this many characters (or the end of its line)."""

# An answer statement: a head ("Answer:", "the correct option is"), colons and whitespace, the answer. The run of
# colons and whitespace is matched atomically (a lookahead, then the same text again): the original pattern
# `\s*[:\s]*([^\n]{1,200})` backtracked quadratically over "Answer:" and 100,000 newlines. Searched in the
# case-folded text (`fold_case`): a case-insensitive search is ~10x slower.
_HEAD = r"(?:final\s+answer|answer|correct\s+(?:option|choice|answer)|option|choice)\s*(?:is|:|：|=)"
_STATEMENT_HEAD = re.compile(_HEAD)
_STATEMENT = re.compile(_HEAD + rf"(?=([:\s]*))\1([^\n]{{1,{STATEMENT_CHARS}}})")
_SEPARATORS = re.compile(r"[:\s]*")


def _norm_text(text: str) -> str:
    return re.sub(r"[\s.,;:!?\"'`*_()\[\]{}$]+", " ", text).strip().lower()


def _span_letters(span: str, n_options: int, options: list[str]) -> set[str]:
    """The option letters a short answer span names: the exact text of an option, else a leading letter ("B",
    "(B) Paris", "C because ..."), else every standalone letter in range ("A or C" names two). `options`: the option
    texts normalized by `_norm_text`."""
    span = _WRAPPERS.sub(r"\1", span).replace("$", "").strip().strip("*_").strip()
    valid = LETTERS[:n_options]
    normalized = _norm_text(span)
    if normalized:
        matches = {LETTERS[k] for k, option in enumerate(options) if option == normalized}
        if matches:
            return matches
    lead = _LEAD.match(span)
    if lead and lead.group(1) in valid:
        rest = span[lead.end() :]
        hedged = _HEDGE.match(rest)
        if hedged and hedged.group(1) in valid:
            return {lead.group(1), hedged.group(1)}
        bare = lead.group(0) == lead.group(1)
        if not (
            bare and lead.group(1) in "AI" and _WORD.match(rest)
        ):  # the article "A" and the pronoun "I" are not options
            return {lead.group(1)}
    letters = set()
    for match in _LOOSE.finditer(span):
        letter = match.group(1)
        if match.group(0) == letter and letter in "AI" and _WORD.match(span[match.end() :]):
            continue
        if letter in valid:
            letters.add(letter)
    return letters


def _statements(text: str) -> list[str]:
    """The answer of every answer statement of `text`, in order ("Answer: B", "the correct option is (C)"): after the
    head, colons and whitespace are skipped and the answer is the rest of the line, at most `STATEMENT_CHARS`
    characters. When only colons and whitespace follow the last head up to the end of the text, its answer is the
    last of them that is not a newline (none: not a statement). Linear in the length of the text."""
    folded = fold_case(text)
    spans = [match.span(2) for match in _STATEMENT.finditer(folded)]
    out = [text[start:end] for start, end in spans]
    # A head that only colons and whitespace follow to the end of the text (the atomic run leaves no answer).
    tail = len(text.rstrip("\n"))  # the text after this index is newlines only
    match = _STATEMENT_HEAD.search(folded, spans[-1][1] if spans else 0)
    while match:
        if _SEPARATORS.match(folded, match.end()).end() == len(text) and tail > match.end():
            out.append(text[tail - 1])
            break
        match = _STATEMENT_HEAD.search(folded, match.start() + 1)
    return out


def extract_choice(text: str, choices=None, n_options: int | None = None) -> str | None:
    """The single option letter a completion chooses, or None when it names none or several different ones.

    Looks, in order, at the `\\boxed{}` answers (all of them must name the same single option), at the last answer
    statement ("Answer: B", "the answer is (B)", "Final answer: Paris"), and, for a short completion, at the whole text.

    Args:
        text: The completion text.
        choices: The option texts in letter order (optional; enables matching an option by its text).
        n_options: Number of options (default: `len(choices)`, else 10).

    Returns:
        An uppercase letter, or None.
    """
    options = [str(c) for c in choices] if choices is not None else []
    n = n_options or len(options) or 10
    options = [_norm_text(option) for option in options]
    boxed = _boxes(text, MAX_STATED_ANSWERS)
    if boxed is None:  # more boxes than any completion restates its answer in
        return None
    if boxed:
        spans = dict.fromkeys(boxed)  # a restated answer is read once
        letters = set()
        for span in spans:
            letters |= _span_letters(span, n, options)
            if len(letters) > 1:
                return None
        return letters.pop() if len(letters) == 1 else None
    statements = _statements(text)
    if statements:
        letters = _span_letters(statements[-1], n, options)
        return letters.pop() if len(letters) == 1 else None
    if len(text.strip()) <= 200:
        letters = _span_letters(text, n, options)
        return letters.pop() if len(letters) == 1 else None
    return None


def _gold_letter(answer, options: list[str]) -> str | None:
    if answer is None:
        return None
    if isinstance(answer, int) and not isinstance(answer, bool):
        return LETTERS[answer] if 0 <= answer < len(LETTERS) else None
    gold = str(answer).strip().strip("()").strip()
    if len(gold) == 1 and gold.upper() in LETTERS:
        return gold.upper() if not options or LETTERS.index(gold.upper()) < len(options) else None
    for k, option in enumerate(options):
        if _norm_text(option) == _norm_text(gold):
            return LETTERS[k]
    return None


def multiple_choice_reward(
    prompts=None, completions=None, answer=None, choices=None, log_metric=None, **kwargs
) -> list[float]:
    """1.0 when the completion chooses exactly the correct option, else 0.0.

    The choice is read from `\\boxed{}` (every boxed answer must name the same option), else from the last answer
    statement ("Answer: B", "the answer is (B)"), else from a short completion as a whole; a letter or the exact text of
    an option counts. Several different options, or none, score 0.0. Malformed completions and unreadable ground
    truths score 0.0, never raise, and are counted (`rewards/multiple_choice/malformed`).

    Args:
        prompts: Unused.
        completions: Strings or conversations.
        answer: The correct option letter ("B"; a 0-based index or the option text work too), one per completion.
        choices: The option texts in letter order (list of str), one list per completion; optional.
        log_metric: TRL's metric hook.
        **kwargs: Other dataset columns, ignored.

    Returns:
        One float per completion.
    """
    completions = list(completions) if completions is not None else []
    answers = column(answer, len(completions), "answer")
    if choices is not None and len(completions) and not isinstance(choices, str):
        choices = list(choices)
        if choices and not isinstance(choices[0], (list, tuple)) and len(choices) != len(completions):
            choices = [choices] * len(completions)  # one option list shared by every completion
    option_lists = column(choices, len(completions), "choices")

    def score(i, text):
        options = [str(o) for o in option_lists[i]] if isinstance(option_lists[i], (list, tuple)) else []
        gold = _gold_letter(answers[i], options)
        if gold is None:
            return None
        return 1.0 if extract_choice(text, options) == gold else 0.0

    return safe_scores("multiple_choice", completions, score, log_metric)
