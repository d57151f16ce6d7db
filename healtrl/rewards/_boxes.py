"""Boxes (`\\boxed{...}`, `\\fbox{...}`, `\\boxed 5`) of a completion, and what is written next to them: the reading
half of `healtrl.rewards.math` (its docstring states the rules), linear in the completion's length."""

from __future__ import annotations

import re

MAX_BOXED_CHARS_FACTOR = 2
"""The contents of all the boxes of a text add up to at most this many times its length, else the text is
malformed (`extract_boxed` raises ValueError, the completion scores 0). Boxes nested up to 2 deep never reach it;
without it, 100,000 nested boxes in 1M characters would copy ~10^11 characters."""

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\b")
_BOX_TOKEN_RE = re.compile(r"[^\s$]+")
_BRACE_RE = re.compile(r"[{}]")
_PYTHON_BRACES = 2_000
"""Texts with at most this many braces are matched in a Python loop; more are matched with numpy (a Python loop
over 1M braces takes ~0.3 s)."""


def _closing_braces(text: str, openings: list[int]) -> dict[int, int]:
    """Index of each "{" of `openings` -> index of its matching "}" in `text` (unmatched ones are left out).

    "{" and "}" pair as on a stack: a "}" closes the last unclosed "{" and is ignored when there is none. Linear:
    a loop over the braces when they are few, else vectorized (`_PYTHON_BRACES`)."""
    if text.count("{") + text.count("}") <= _PYTHON_BRACES:
        pairs, stack = {}, []
        for match in _BRACE_RE.finditer(text, openings[0]):  # braces before the first opening pair no opening
            if match.group() == "{":
                stack.append(match.start())
            elif stack:
                pairs[stack.pop()] = match.start()
        return {i: pairs[i] for i in openings if i in pairs}
    import numpy as np

    codes = np.frombuffer(text.encode("utf-32-le"), dtype=np.uint32)
    position = np.flatnonzero((codes == ord("{")) | (codes == ord("}")))
    is_open = codes[position] == ord("{")
    # Depth after each brace, a "}" at depth 0 being ignored: the running sum of +1/-1 reflected at 0.
    total = np.cumsum(np.where(is_open, 1, -1))
    after = total - np.minimum(np.minimum.accumulate(total), 0)
    wanted = np.searchsorted(position, openings)
    if len(openings) <= 16:  # a "{" at depth d is closed by the first later brace that leaves depth d - 1
        pairs = {}
        for i, k in zip(openings, wanted.tolist()):
            below = after[k + 1 :] < after[k]
            j = int(below.argmax()) if len(below) else 0
            if len(below) and below[j]:
                pairs[i] = int(position[k + 1 + j])
        return pairs
    before = np.concatenate(([0], after[:-1]))
    # A "{" that takes the depth to d is closed by the next brace that leaves depth d (a "}" from d to d - 1): sorted
    # by (level, position), with level = depth after a "{" and before a "}", each pair is a "{" followed by a "}".
    level = np.where(is_open, after, before)
    order = np.argsort(level, kind="stable")
    pair = is_open[order[:-1]] & ~is_open[order[1:]] & (level[order[:-1]] == level[order[1:]])
    match = np.full(len(position), -1)
    match[order[:-1][pair]] = order[1:][pair]
    closing = match[wanted]
    return {i: int(position[k]) for i, k in zip(openings, closing.tolist()) if k >= 0}


def extract_boxed(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}` in `text` (balanced braces; `\\boxed 5` too), in order.

    Linear in the length of `text`.

    Raises:
        ValueError: the contents add up to more than `MAX_BOXED_CHARS_FACTOR` times the length of `text` (boxes
            nested deeper than 2, with long contents): a malformed completion.
    """
    return _boxes(text)


def _boxes(text: str, limit: int | None = None) -> list[str] | None:
    """`extract_boxed`; None when `text` has more than `limit` boxes."""
    spans = _box_spans(text, limit)
    return None if spans is None else [content for _, _, content in spans]


def _box_spans(text: str, limit: int | None = None) -> list[tuple[int, int, str]] | None:
    """(start of the `\\boxed`, end of the box, contents) of every box of `text`, in order; None when `text` has more
    than `limit` boxes. Raises ValueError as `extract_boxed` does."""
    found = []  # (start, index of the "{", None) or (start, end, "\boxed 5" token)
    for count, match in enumerate(_BOX_RE.finditer(text)):
        if limit is not None and count >= limit:
            return None
        i = match.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            found.append((match.start(), i, None))
        elif i > match.end():  # "\boxed 5": one token
            token = _BOX_TOKEN_RE.match(text, i)
            if token:
                found.append((match.start(), token.end(), token.group(0)))
    openings = [i for _, i, token in found if token is None]
    if not openings:
        return found
    pairs = _closing_braces(text, openings)
    if sum(pairs.values()) - sum(pairs) - len(pairs) > MAX_BOXED_CHARS_FACTOR * len(text):
        raise ValueError(
            f"The boxes of this text nest too deep: their contents add up to more than {MAX_BOXED_CHARS_FACTOR} "
            "times its length."
        )
    return [
        (start, i, token) if token is not None else (start, pairs[i] + 1, text[i + 1 : pairs[i]])
        for start, i, token in found
        if token is not None or i in pairs
    ]


BOX_CONTEXT_CHARS = 200
"""How far around a box its context is read (`_box_context`): the rest of its line after it, and its sentence before
it on its line, at most this many characters each way."""

# The words that make an answer a hedge (regex alternatives), for `math.py`'s `_HEDGE_RE` / `_ALTERNATIVE_RE` and
# the box context below.
HEDGE_WORDS = ("maybe", "perhaps", "possibly", "probably", "either", "guess", r"not\s+sure", "unsure")


def words_re(words) -> re.Pattern:
    """A case-insensitive regex matching any of `words` (regex alternatives) as whole words."""
    return re.compile(r"(?i)\b(?:" + "|".join(words) + r")\b")


# A hedge next to a box ("probably \boxed{4}", "\boxed{4}, not sure"): the hedge words without "either" ("Either way,
# the answer is \boxed{4}" is not a hedge).
_CONTEXT_HEDGE_RE = words_re(w for w in HEDGE_WORDS if w != "either")
# An alternative offered after a box: "(or 3 if n is even)", "although it might be 5", "or rather 5". The candidate
# is the first number or math span after the phrase, within its clause.
_OFFER_RE = re.compile(
    r"(?i)\b(?:or(?!\s+equivalently\b)|might\s+be|could\s+be|may\s+be|alternatively|otherwise|unless)\b"
    r"[^\n.;:!?$\\\d]{0,40}"
    r"(\$[^$\n]{1,200}\$|\\\([^\n]{1,200}?\\\)|\\[a-zA-Z]+(?:\{[^{}\n]{0,200}\})+|-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?)"
)
_OR_BEFORE_RE = re.compile(r"(?i)\bor\s*(?:\$|\\\(|\\\[)?\s*$")  # "3 or \boxed{4}": the box is one of two
_SENTENCE_END_RE = re.compile(r"[.!?](?:\s|$)")


def _box_context(text: str, spans: list[tuple[int, int, str]]) -> tuple[bool, list[str]]:
    """What the text around the boxes of `text` says about them: (hedged, alternatives).

    For each box, its context is the rest of its line after it and its sentence before it on its line (at most
    `BOX_CONTEXT_CHARS` characters each, and not past the neighbouring boxes). Hedged: a hedge word in either ("probably
    \\boxed{4}", "\\boxed{4}, but I am not sure", "\\boxed{4} (or possibly 3)"), or the box offered as one of two ("3
    or \\boxed{4}"). Alternatives: the answer an "or" / "might be" / "could be" / "alternatively" / "otherwise" /
    "unless" offers after the box ("\\boxed{4} (or 3 if n is even)" offers 3, "\\boxed{4}, although it might be 5"
    offers 5); they are stated answers and must agree with the box ("\\boxed{0.5} (or \\frac12)" is fine). Linear:
    each box reads at most 2 x `BOX_CONTEXT_CHARS` characters."""
    hedged, offered = False, []
    for k, (start, end, _) in enumerate(spans):
        line_start = text.rfind("\n", max(0, start - BOX_CONTEXT_CHARS), start) + 1
        line_end = text.find("\n", end, end + BOX_CONTEXT_CHARS)
        line_end = min(len(text), end + BOX_CONTEXT_CHARS) if line_end < 0 else line_end
        before = text[max(line_start, start - BOX_CONTEXT_CHARS, spans[k - 1][1] if k else 0) : start]
        sentence_ends = list(_SENTENCE_END_RE.finditer(before))
        before = before[sentence_ends[-1].end() :] if sentence_ends else before
        after = text[end : min(line_end, spans[k + 1][0] if k + 1 < len(spans) else line_end)]
        if _CONTEXT_HEDGE_RE.search(before) or _CONTEXT_HEDGE_RE.search(after) or _OR_BEFORE_RE.search(before):
            hedged = True
        offered.extend(_strip_answer(m.group(1)) for m in _OFFER_RE.finditer(after))
    return hedged, [answer for answer in offered if answer]


def _strip_answer(answer: str) -> str:
    answer = answer.strip().strip("*_").strip()
    if len(answer) >= 2 and answer[0] == answer[-1] == "$":
        answer = answer.strip("$").strip()
    elif answer.startswith("\\(") and answer.endswith("\\)"):
        answer = answer[2:-2].strip()
    elif answer.startswith("\\[") and answer.endswith("\\]"):
        answer = answer[2:-2].strip()
    return answer.rstrip(".").strip()
