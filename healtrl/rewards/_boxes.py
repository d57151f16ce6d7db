"""Boxes (`\\boxed{...}`, `\\fbox{...}`, `\\boxed 5`) of a completion, and what is written next to them: the reading
half of `healtrl.rewards.math` (its docstring states the rules), linear in the completion's length."""

from __future__ import annotations

import re

from ._common import fold_case, skeleton

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

# The words that make an answer, or the text around a box, a hedge (regex alternatives, read in the `skeleton` of the
# text: confusable letters as ASCII), for `math.py` and the box context below.
HEDGE_WORDS = (
    "maybe",
    "perhaps",
    "possibly",
    "probably",
    "likely",
    "either",
    "guess",
    r"not\s+sure",
    "unsure",
    "alternatively",
    "alternately",
    r"(?:could|might|may|can)\s+(?:also\s+|instead\s+|alternatively\s+)?be",
    r"not\s+(?:certain|confident)",
    "uncertain",
    "unclear",
    r"conceivabl[ey]",
    r"plausibl[ey]",
    r"if\s+not",
    r"in\s+(?:the\s+|an\s+|some\s+)?other\s+cases?",
)


def words_re(words, folded: bool = False) -> re.Pattern:
    """A case-insensitive regex matching any of `words` (regex alternatives, in lower case) as whole words; with
    `folded`, a case-sensitive one for texts already case-folded (`fold_case`: ~4x faster on long texts; a word starts
    after any character but an ASCII letter, digit or "_")."""
    if folded:  # a lookbehind for an ASCII word character instead of the leading \b: ~1.5x faster on ordinary text
        return re.compile(r"(?<![a-z0-9_])(?:" + "|".join(words) + r")\b")
    return re.compile(r"(?i)\b(?:" + "|".join(words) + r")\b")


# A hedge next to a box ("probably \boxed{4}", "\boxed{4}, not sure"): the hedge words without "either" ("Either way,
# the answer is \boxed{4}" is not a hedge) and with "could be" / "might be" only as "could also be" (else they offer an
# answer: `_offers`).
_CONTEXT_HEDGE_WORDS = (
    [w for w in HEDGE_WORDS if w != "either" and not w.startswith("(?:could")]
    + [r"(?:could|might|may|can|would)\s+(?:also|instead|alternatively)\s+(?:be|work|hold)"]
    + [r"also\s+(?:correct|valid|possible|acceptable|works?)", r"(?:an)?other\s+(?:possible\s+)?answers?"]
    + [r"alternative\s+(?:answer|solution|value)s?"]
)
_CONTEXT_HEDGE_RE = words_re(_CONTEXT_HEDGE_WORDS)
_CONTEXT_HEDGE_FOLDED_RE = words_re(_CONTEXT_HEDGE_WORDS, folded=True)  # for long tails, in the folded skeleton
# A number written as a word, offered as an alternative ("or three"): a trie, so that a failing position costs little.
_NUMBER_WORDS = (
    r"t(?:wo|hree|en|welve|wenty|hirt(?:een|y)|housand)|f(?:our(?:teen|ty)?|ive|ift(?:een|y)|orty)"
    r"|s(?:ix(?:teen|ty)?|even(?:teen|ty)?)|e(?:ight(?:een|y)?|leven)|nine(?:teen|ty)?|one|zero|hundred"
)
_OFFER_PHRASE_RE = re.compile(
    r"(?i)\b(?:or(?!\s+equivalently\b)|nor|(?:might|could|may|can)\s+(?:also\s+|instead\s+)?be|alternatively"
    r"|otherwise|else"
    r"|unless|one\s+of|answer\s+(?:is|was|would\s+be|should\s+be|must\s+be|will\s+be|equals))\b|\\(?:lor|vee)\b|∨"
    r"|\banswer[ \t*_]*(?:[=‒–—―]|-+(?=\s))"
)
_OFFER_CANDIDATE = (
    r"[^\n.;:!?$\\\d]{0,40}?(?<![a-z])"
    r"((?>\$[^$\n]{1,200}\$|\\\([^\n]{1,200}?\\\)|\\[a-zA-Z]+(?:\{[^{}\n]{0,200}\})+|-?\d+(?:\.\d+)?(?:\s*/\s*\d+)?"
    rf"|\b(?:{_NUMBER_WORDS})\b))"
    r"(?!\s*(?:[-+*/×÷^=<>]|\\(?:times|cdot|div)\b)\s*[\w(\\$])"
)
_OFFER_CANDIDATE_RE = re.compile(_OFFER_CANDIDATE)  # read in the folded skeleton
_OFFER_PHRASE_FOLDED_RE = re.compile(_OFFER_PHRASE_RE.pattern.removeprefix("(?i)"))
# A phrase and its candidate in one pattern, read in the folded skeleton (`_box_context`).
_OFFER_RE = re.compile("(?:" + _OFFER_PHRASE_RE.pattern.removeprefix("(?i)") + ")" + _OFFER_CANDIDATE)
OFFER_READ_CHARS = 300
"""After an offering phrase, its candidate is looked for in this many characters."""


def _offers(folded: str, text: str, start: int, end: int, limit: int) -> list[str] | None:
    """The alternatives offered in `text[start:end]` (phrases found in `folded`, its case-folded skeleton), in order;
    None when there are more than `limit` offering phrases. Each phrase reads at most `OFFER_READ_CHARS` characters
    after it."""
    out = []
    for count, phrase in enumerate(_OFFER_PHRASE_FOLDED_RE.finditer(folded, start, end)):
        if count >= limit:
            return None
        candidate = _OFFER_CANDIDATE_RE.match(folded, phrase.end(), min(end, phrase.end() + OFFER_READ_CHARS))
        if candidate:
            out.append(_strip_answer(text[candidate.start(1) : candidate.end(1)]))
    return [answer for answer in out if answer]


_OR_BEFORE_RE = re.compile(r"\bor\s*(?:\$|\\\(|\\\[)?\s*$")  # "3 or \boxed{4}": one of two (folded text)
_SENTENCE_END_RE = re.compile(r"[.!?](?:\s|$)")
_LETTER_RE = re.compile(r"[A-Za-z]")

TAIL_OFFERS = 1_000
"""At most this many offering phrases ("or", "could be"...) are read after the last final answer (`_tail_context`);
more make the completion score 0."""


def _box_context(text: str, spans: list[tuple[int, int, str]], folded: str | None = None):
    """What the text around the boxes of `text` says about them: (hedged, alternatives).

    For each box, its context is the rest of its line after it and, before it, its sentence on its line, with the
    last sentence of the previous non-blank line when no letter precedes the box in its own ("Maybe.\n\\boxed{4}";
    `_before`); at most `BOX_CONTEXT_CHARS` characters each way, and not past the neighbouring boxes. Hedged: a hedge word in either ("probably \\boxed{4}",
    "perhaps\n\\boxed{4}", "\\boxed{4}, but I am not sure", "\\boxed{4} (or possibly 3)"), or the box offered as one
    of two ("3 or \\boxed{4}"). Alternatives: the answer an "or" / "might be" / "could be" / "alternatively" /
    "otherwise" / "unless" / "the answer is" offers after the box ("\\boxed{4} (or 3 if n is even)" offers 3,
    "\\boxed{4}, although it might be 5" offers 5); they are stated answers and must agree with the box
    ("\\boxed{0.5} (or \\frac12)" is fine). The words are read in `folded` (`fold_case` of the `skeleton` of `text`,
    same indices; computed when not given), the alternatives sliced from `text`. Linear: each box reads at most 2 x
    `BOX_CONTEXT_CHARS` characters."""
    words = fold_case(skeleton(text)) if folded is None else folded
    hedged, offered = False, []
    for k, (start, end, _) in enumerate(spans):
        line_end = text.find("\n", end, end + BOX_CONTEXT_CHARS)
        line_end = min(len(text), end + BOX_CONTEXT_CHARS) if line_end < 0 else line_end
        before = _before(words, start, spans[k - 1][1] if k else 0)
        after_end = min(line_end, spans[k + 1][0] if k + 1 < len(spans) else line_end)
        after = words[end:after_end]
        if _CONTEXT_HEDGE_FOLDED_RE.search(before) or _CONTEXT_HEDGE_FOLDED_RE.search(after):
            hedged = True
        if _OR_BEFORE_RE.search(before):
            hedged = True
        offered.extend(_strip_answer(text[m.start(1) : m.end(1)]) for m in _OFFER_RE.finditer(words, end, after_end))
    return hedged, [answer for answer in offered if answer]


def _before(words: str, start: int, floor: int = 0) -> str:
    """The context before a statement that starts at `start` (`_box_context`'s rule): its sentence on its line (from
    the last ".", "!" or "?" followed by whitespace); when no letter precedes the statement there (it starts its line
    or its sentence: "Maybe.\n\\boxed{4}", "perhaps\n\\boxed{4}", "Probably:\n\nAnswer: 4"), the last sentence of
    the previous non-blank line as well. At most `BOX_CONTEXT_CHARS` characters, none before `floor`."""
    low = max(start - BOX_CONTEXT_CHARS, floor)
    own = words[max(low, words.rfind("\n", low, start) + 1) : start]
    sentence_ends = [match.end() for match in _SENTENCE_END_RE.finditer(own)]
    own = own[sentence_ends[-1] :] if sentence_ends else own
    if _LETTER_RE.search(own):
        return own
    previous_end = start - len(own)  # the start of the statement's line, or of its sentence on it
    while previous_end > low and words[previous_end - 1].isspace():
        previous_end -= 1  # blank lines and spaces before it
    line = words[max(low, words.rfind("\n", low, previous_end) + 1) : previous_end]
    sentence_ends = [match.end() for match in _SENTENCE_END_RE.finditer(line, 0, len(line) - 1)]  # not its own end
    return line[sentence_ends[-1] :] + own if sentence_ends else line + own


def hedged_before(words: str, starts: list[int]) -> bool:
    """Whether a hedge word, or an "or" right before it, precedes a statement starting at one of `starts` (the heads
    of "Answer:" lines) in its context (`_before`); `words` is the case-folded skeleton of the text."""
    for start in starts:
        before = _before(words, start)
        if _CONTEXT_HEDGE_FOLDED_RE.search(before) or _OR_BEFORE_RE.search(before):
            return True
    return False


# After the final answer, a sentence that corrects, adds or weighs another value: from the start of the sentence that
# holds the first of these cues to the end of the completion, every value written is a stated answer
# (`_tail_context`). Read in the case-folded skeleton, as whole words.
TAIL_CUES = (
    "wait",
    r"hold\s+on",
    "hm+",
    "oops",
    "sorry",
    r"correct(?:ion|ed|ing)",
    "actually",
    r"in\s+fact",
    r"p\.?\s?(?:p\.?\s?)?s",
    "also",
    "too",
    r"either\s+way",
    "instead",
    "rather",
    "alternatively",
    "alternately",
    "otherwise",
    "or",
    "nor",
    "else",
    r"on\s+second\s+thought",
    "mistake",
    "typo",
    "erratum",
    r"i\s+meant?",
    "revised",
    "updated",
    "edit",
    r"works?",
    r"fits?",
    "valid",
    r"(?:should|must|would|could|might|may|can|will)\s+(?:also\s+|instead\s+)?(?:be|equal|give|work|hold)",
    r"answer\s+(?:is|was|equals)",
    *HEDGE_WORDS,
)
_TAIL_CUE_RE = words_re(TAIL_CUES, folded=True)
# A value after a cue: a math span, a LaTeX math command with its braces (not a text command), a number word other
# than "one" (a pronoun too; "$18 per day" is a price: a "$" before a number and a space opens no span), or a run
# of numbers joined by operators ("2 + 2 = 4": its value is what follows the last "=", 4; a run followed by a letter
# or digit, "3x", "2nd", is not a value). A number right after a comparison ("n > 3", "n \geq 3") is a bound, not a
# value. Every repetition is possessive and bounded: linear in the tail.
_TAIL_VALUE_RE = re.compile(
    r"(?=[$\\a-z0-9-])(\$(?!\d[\d,.]*+(?:[ \t]|$))[^$\n]{1,200}\$|\\\([^\n\\]{1,200}\\\)"
    r"|\\(?!text|mbox|hbox|emph|label|ref|cite|url|href|section)[a-z]+(?:\{[^{}\n]{0,200}\})+"
    rf"|\b(?!one\b)(?:{_NUMBER_WORDS})\b"
    r"|(?<![\w.<>≤≥≠])(?<![<>≤≥≠]\s)(?<!eq\s)-?\d++(?:\.\d++)?(?:[ \t]*+[-+*/×÷^=][ \t]*+-?\d++(?:\.\d++)?)*+)"
)
_CLAUSE_START_RE = re.compile(r"[.!?\n]")
_WORD_VALUES = dict(
    zip(
        "zero two three four five six seven eight nine ten eleven twelve thirteen fourteen fifteen sixteen seventeen"
        " eighteen nineteen twenty thirty forty fifty sixty seventy eighty ninety hundred thousand".split(),
        [0, *range(2, 21), 30, 40, 50, 60, 70, 80, 90, 100, 1000],
    )
)
"""A number word after a cue is compared as its number ("Wait, it's three." states 3)."""


# A clause of a cued sentence: split at punctuation, sentence ends and joining words (`_CLAUSE_SPLIT_RE`). A clause
# that rejects a value ("We reject the other solution x = -2 since x must be positive", "x = -2 is extraneous") or
# verifies one ("substituting x = 4 gives 2(4) - 3 = 5") does not offer its values (`_NOT_OFFERED_RE`); its joining
# words end it, so "reject 4 and take 3", "it is not 4 since it's 3", "4 is wrong, it's 3" still offer 3.
_CLAUSE_SPLIT_RE = re.compile(
    r"[,;:!?\n]|\.(?!\d)|(?<![a-z0-9_])(?:and|but|since|because|so|thus|hence|therefore|instead|rather|then"
    r"|while|whereas|although|though|however|yet|or|nor|actually|wait)(?![a-z0-9_])"
)
_NOT_OFFERED_RE = re.compile(
    r"(?<![a-z0-9_])(?:reject(?:s|ed|ing)?|discard(?:s|ed|ing)?|extraneous|invalid|not\s+valid|cannot\s+be"
    r"|can'?t\s+be|isn'?t|is\s+not|doesn'?t\s+work|does\s+not\s+work|fails?|excluded?|ruled?\s+out)(?![a-z0-9_])"
)
_VERIFIES_RE = re.compile(
    r"(?<![a-z0-9_])(?:verif(?:y|ies|ied|ying|ication)|check(?:s|ed|ing)?|substitut(?:e|es|ed|ing|ion)"
    r"|plug(?:s|ged|ging)?|indeed)(?![a-z0-9_])|[✓✔]"
)
# A rate in a unit of time after a value ("18 per day", "126 a week", "5/hour"): when the cued text states rates in two
# different units ("$18 per day, or $126 per week"), they convert one quantity and are not offered answers.
_RATE_RE = re.compile(r"[ \t]*+(?:per|/|a|an|each|every)[ \t]*+(second|minute|hour|day|week|month|year)s?(?![a-z])")
CLAUSE_CHARS = 400
"""A clause longer than this (no punctuation or joining word in 400 characters) is read as its first 400."""

CUED_VALUE_CHARS = 1_000
"""A cued value longer than this (a run of 1,000 characters of arithmetic) makes the completion score 0 (as more than
`TAIL_OFFERS` values do) without being parsed."""


def _is_word(char: str) -> bool:
    return char.isalnum() or char == "_"


def _cued_values(words: str, text: str, start: int, limit: int) -> list[str] | None:
    """The values written after the first `TAIL_CUES` cue of `words[start:]` (`words`: the case-folded skeleton of
    `text`), from the start of its sentence (the last ".", "!", "?" or line break before it, at most
    `BOX_CONTEXT_CHARS` before it) to the end of the text, sliced from `text`; None when there are more than `limit`, or
    one is longer than `CUED_VALUE_CHARS`. Linear in the length of the tail."""
    cue = _TAIL_CUE_RE.search(words, start)
    if cue is None:
        return []
    window = max(start, cue.start() - BOX_CONTEXT_CHARS)
    ends = [match.end() for match in _CLAUSE_START_RE.finditer(words, window, cue.start())]
    begin = ends[-1] if ends else window
    out = []
    rates: list[tuple[str, str]] = []  # (unit, value) of the values followed by a rate ("18 per day")
    clause_end, skipped = begin, False  # the clause being read (`_NOT_OFFERED_RE`), and whether it offers nothing
    for count, match in enumerate(_TAIL_VALUE_RE.finditer(words, begin)):
        if count >= limit:
            return None
        value = text[match.start(1) : match.end(1)]
        if len(value) > CUED_VALUE_CHARS:
            return None
        if match.end() < len(words) and _is_word(words[match.end()]) and value[-1].isdigit():
            continue  # "3x", "2nd": part of a word or a term, not a value (the run is possessive: linear)
        if match.start(1) >= clause_end:  # a new clause: from the last split before the value to the next after it
            low = max(begin, clause_end, match.start(1) - CLAUSE_CHARS)
            splits = [split.end() for split in _CLAUSE_SPLIT_RE.finditer(words, low, match.start(1))]
            clause_start = splits[-1] if splits else low
            following = _CLAUSE_SPLIT_RE.search(words, match.end(1), match.end(1) + CLAUSE_CHARS)
            clause_end = following.start() if following else min(len(words), match.end(1) + CLAUSE_CHARS)
            skipped = _NOT_OFFERED_RE.search(words, clause_start, clause_end) is not None or (
                _VERIFIES_RE.search(words, clause_start, clause_end) is not None
                and words.find("=", clause_start, clause_end) >= 0
            )
        if skipped:
            continue  # a rejected or verified value ("we reject x = -2", "substituting x = 4 gives 2(4) - 3 = 5")
        rate = _RATE_RE.match(words, match.end())
        if rate:
            rates.append((rate.group(1), value))
            continue
        if value[0].isdigit() or value[0] == "-":
            value = value.rsplit("=", 1)[-1]
        out.append(str(_WORD_VALUES.get(value.lower(), _strip_answer(value))))
    if len({unit for unit, _ in rates}) < 2:  # one rate, or rates in one unit: offered values all the same
        out.extend(_strip_answer(value) for _, value in rates)
    return out


def _tail_context(text: str, start: int, folded: str | None = None) -> tuple[bool, list[str]] | None:
    """What the text after the last final answer (from `start` to the end) says: (hedged, alternatives). Hedged: a
    hedge word anywhere in it ("\\boxed{4}\nAlternatively, the answer could be 3."). Alternatives: each value an
    offering phrase offers ("\\boxed{4}\nThe answer is 5." offers 5), and every value written from the sentence of the
    first cue of `TAIL_CUES` on ("\\boxed{4}\nWait, it's 3.", "Correction: 3.", "P.S. 3 works too."; `_cued_values`).
    None when it has more than `TAIL_OFFERS` offering phrases or cued values. Linear in the tail's length."""
    folded = fold_case(skeleton(text)) if folded is None else folded
    offered = _offers(folded, text, start, len(text), TAIL_OFFERS)
    cued = _cued_values(folded, text, start, TAIL_OFFERS)
    if offered is None or cued is None:
        return None
    return bool(_CONTEXT_HEDGE_FOLDED_RE.search(folded, start)), [answer for answer in offered + cued if answer]


def _strip_answer(answer: str) -> str:
    answer = answer.strip().strip("*_").strip()
    if len(answer) >= 2 and answer[0] == answer[-1] == "$":
        answer = answer.strip("$").strip()
    elif answer.startswith("\\(") and answer.endswith("\\)"):
        answer = answer[2:-2].strip()
    elif answer.startswith("\\[") and answer.endswith("\\]"):
        answer = answer[2:-2].strip()
    return answer.rstrip(".").strip()
