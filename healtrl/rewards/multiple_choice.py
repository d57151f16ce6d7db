"""Multiple-choice reward: exactly one chosen option (a letter such as "(B)", "Answer: B", "\\boxed{B}", or the exact
text of one option), compared with the `answer` column (the correct letter).

Reading rules (issue #39):

* The completion is read after `normalize_text` and in its `skeleton` (`healtrl.rewards._common`): line breaks of any
  kind split lines, fullwidth `Ａ` is A, a Cyrillic `А` or Greek `Α` is A, zero-width characters vanish. The option
  texts are read the same way, so matching an option by its text is unchanged for ordinary text.
* One box or answer statement that names two options chooses none: after the leading option, any run of
  separators (every character but an ASCII letter or digit, a line break, and ".", "!", "?" followed by whitespace:
  `, ; | / & + ( ) –  — ∣ ‖ ∕ ǀ`, other scripts' words), LaTeX commands (`\\mid`, `\\vert`, `\\|`, `\\setminus`,
  `\\backslash`, `\\lor`, `\\text{ or }`) and connective or hedge words ("or", "and", "and/or", "maybe", "vs")
  followed by another standalone letter in range (`\\boxed{A (or B)}`, `\\boxed{A|B}`, `\\boxed{A–B}`,
  `\\boxed{A \\mid B}`, "Answer: A∕B", "Answer: A, B", "Answer: A and/or B"). A letter followed by a lower-case
  word ("A man", "I think") is the article or the pronoun, not an option; "(B) Paris", "B. Paris", "B - Paris" and
  "A. B is wrong." name one option (a lower-case word, or a sentence end, stops the run). A second letter that is the
  subject of a clause is not chosen either (`_subject`): reached from the first through clause punctuation and "and"
  only, followed (after a list of letters joined by "," or "and") by a lower-case word, in a sentence with no endorsing
  word ("also", "too", "correct", "right", "works", "possible", "could"...): "C, and D is wrong", "C (B is Berlin)",
  "C - D is Rome", "C; A, B and D are wrong" choose C; "C, D is also correct", "C or D is correct", "C | D is wrong"
  name two.
* Every box and every answer statement must name the same single option: "Answer: B" and a later "Answer: C" (on
  lines split by any line break), or `\\boxed{B}` and "Answer: C", choose none; a restated answer is read once, and
  more than `MAX_STATED_ANSWERS` different statements choose none.
* After the final answer (the last box, else the last statement), a hedge word ("maybe", "perhaps", "probably",
  "alternatively", "not sure", "plausible", "uncertain"...), another option offered ("or C", "could be (C)", "the
  answer is C", "Final answer - C"), an answer statement naming another option, or another option named in a clause
  that endorses it without negating anything ("B works too.", "B is equally right", but not "A is also wrong" or "B
  is not correct": `_endorses_another`) chooses none (`_after_final`).
  A hedge word there zeroes the completion even when it names no other option ("\\boxed{C}\nThis is likely the
  intended answer." scores 0): it weighs the choice it follows, and telling "likely the intended answer" from "likely
  wrong" would need reading the sentence's meaning.

Bounds (issues #25, #39): reading a completion is linear in its length (the answer statements with one regex pass
whose run of colons and whitespace is matched atomically, in the case-folded text; the boxes as in
`healtrl.rewards.math`;
the second option within `STATEMENT_CHARS` of the first); a completion with more than `MAX_STATED_ANSWERS` (1,000)
boxes, or more than `TAIL_OFFERS` options offered or different statements after its final answer, chooses no
option, and one whose boxes nest too deep is malformed (`extract_boxed`)."""

from __future__ import annotations

import functools
import re
import string

from ._boxes import _CONTEXT_HEDGE_FOLDED_RE, _box_spans
from ._common import column, fold_case, normalize_text, safe_scores, skeleton
from .math import MAX_STATED_ANSWERS

__all__ = ["LETTERS", "extract_choice", "multiple_choice_reward"]

LETTERS = string.ascii_uppercase
_WRAPPERS = re.compile(r"\\(?:text|textbf|mathrm|mathbf|mbox)\{([^{}]*)\}")
_LEAD = re.compile(r"[(\[]?([A-Z])[)\]]?(?![A-Za-z0-9'’])")
_WORD = re.compile(r" (?!(?:or|and|nor)\b)[a-z]")
_LOOSE = re.compile(r"(?<![A-Za-z0-9])[(\[]?([A-Z])[)\]]?(?![A-Za-z0-9'’])")
# A second option after the leading one: any run of separators (every character but an ASCII letter or digit, a line
# break and a sentence end: ".", "!" or "?" followed by whitespace or the end; so dashes, bars, slashes, `∣`, `‖`,
# `∕`, brackets, other scripts' words), LaTeX commands (`\\mid`, `\\vert`, `\\setminus`, `\\text`, `\\lor`...) and
# connective or hedge words, then a standalone letter ("A (or B)", "A|B", "A–B", "A \\mid B", "A \\text{ or } B",
# "A, B", "A and/or B", "A, maybe B", "A vs B"). The words are matched case-insensitively, the letter only in upper
# case. Read in at most `STATEMENT_CHARS` characters; the run is possessive (each repetition takes a separator
# character, a whole command or a whole word, and never gives them back), so a failing position costs one pass.
_SECOND_OPTION = re.compile(
    r"(?:\\[A-Za-z]{2,}+|[^A-Za-z0-9\n.!?]|[.!?](?![\s]|$)|(?i:(?:or|and|nor|either|maybe|perhaps|possibly|probably"
    r"|also|vs|versus|else|otherwise|alternatively|alternately|then|(?:could|might|may)\s+be)(?![a-z])))*+"
    r"([A-Z])(?![A-Za-z0-9'’])"
)
# An option offered after the final answer ("\boxed{B}\nOr maybe C.", "Alternatively, the answer could be (C)").
_TAIL_OFFER = re.compile(
    r"(?i:\b(?:or|nor|alternatively|otherwise|(?:could|might|may|can)\s+(?:also\s+|instead\s+)?be|answer\s+"
    r"(?:is|was|would\s+be|should\s+be|could\s+be|might\s+be))\b|\banswer\s*(?:[=‒–—―]|-+(?=\s)))[\s:,(\[]*"
    r"([A-Z])(?![A-Za-z0-9'’])"
)

# A letter that is the subject of a clause after the chosen option ("C, and D is wrong", "C (B is Berlin)", "C; A, B
# and D are wrong"): reached from the chosen option through clause punctuation and "and" only (`_CLAUSE_RUN`), it is
# followed by a list of letters joined by "," / "and", then a lower-case word (`_SUBJECT`), and the rest of its sentence
# has no word that endorses it (`_ENDORSES`: "D is also correct", "B is right", "B works" still name two options).
_CLAUSE_RUN = re.compile(r"(?i)(?:[\s,;:()\[\]\-‒–—―]|and(?![a-z]))*")
_SUBJECT = re.compile(r"(?:[ \t]*+(?:,|and(?![a-z]))[ \t]*+[A-Z](?![A-Za-z0-9'’]))*+[ \t]++(?!(?:or|and|nor)\b)[a-z]")
_ENDORSES = re.compile(
    r"(?i)\b(?:also|too|correct|right|true|valid|works?|possible|plausible|acceptable|fine|good|best|ok|okay|answer"
    r"|equally|either|could|might|may|can|should|would|or|nor)\b"
)
_SENTENCE_END = re.compile(r"[.!?](?:\s|$)|\n")

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
        second = _SECOND_OPTION.match(rest[:STATEMENT_CHARS])
        if (
            second
            and second.group(1) in valid
            and not _article(second.group(1), rest, second.end())
            and not _subject(rest, second.start(1), second.end())
        ):
            return {lead.group(1), second.group(1)}
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


def _subject(rest: str, start: int, end: int) -> bool:
    """Whether the letter at `rest[start:end]`, after the chosen option, is the subject of a clause that does not
    endorse it ("C, and D is wrong", "C (B is Berlin)", "C - D is Rome", "C; A, B and D are wrong", "C; D is a
    distractor"): only clause punctuation and "and" lead to it from the option, a lower-case word follows it (after a
    list of letters joined by "," or "and"), and the rest of its sentence has no endorsing word ("also", "correct",
    "right", "works", "possible", "could"...). Linear in `STATEMENT_CHARS`."""
    if _CLAUSE_RUN.fullmatch(rest, 0, start) is None or _SUBJECT.match(rest, end) is None:
        return False
    sentence_end = _SENTENCE_END.search(rest, end)
    return _ENDORSES.search(rest, end, sentence_end.start() if sentence_end else len(rest)) is None


def _article(letter: str, text: str, end: int) -> bool:
    """Whether the letter ending at `text[end]` is the article "A" or the pronoun "I" ("A man", "I think")."""
    return letter in "AI" and bool(_WORD.match(text, end))


def _statements(text: str, ends: list | None = None) -> list[str]:
    """The answer of every answer statement of `text`, in order ("Answer: B", "the correct option is (C)"): after the
    head, colons and whitespace are skipped and the answer is the rest of the line, at most `STATEMENT_CHARS`
    characters. When only colons and whitespace follow the last head up to the end of the text, its answer is the
    last of them that is not a newline (none: not a statement). Linear in the length of the text. The end of each
    answer is appended to `ends` when given."""
    folded = fold_case(text)
    spans = [match.span(2) for match in _STATEMENT.finditer(folded)]
    out = [text[start:end] for start, end in spans]
    if ends is not None:
        ends.extend(end for _, end in spans)
    # A head that only colons and whitespace follow to the end of the text (the atomic run leaves no answer).
    tail = len(text.rstrip("\n"))  # the text after this index is newlines only
    match = _STATEMENT_HEAD.search(folded, spans[-1][1] if spans else 0)
    while match:
        if _SEPARATORS.match(folded, match.end()).end() == len(text) and tail > match.end():
            out.append(text[tail - 1])
            if ends is not None:
                ends.append(len(text))
            break
        match = _STATEMENT_HEAD.search(folded, match.start() + 1)
    return out


def extract_choice(text: str, choices=None, n_options: int | None = None) -> str | None:
    """The single option letter a completion chooses, or None when it names none or several different ones.

    Looks at the `\\boxed{}` answers and the answer statements ("Answer: B", "the answer is (B)", "Final answer:
    Paris"; all of them must name the same single option), and, without either, for a short completion, at the whole
    text; the text after the final answer must not hedge or name another option (the module docstring's rules). The
    text is read after `normalize_text`, in its `skeleton`.

    Args:
        text: The completion text.
        choices: The option texts in letter order (optional; enables matching an option by its text).
        n_options: Number of options (default: `len(choices)`, else 10).

    Returns:
        An uppercase letter, or None.
    """
    text = normalize_text(text)
    if text is None:
        return None
    return _extract_choice(skeleton(text), _options(choices), n_options)


def _options(choices) -> list[str]:
    """The option texts as `_extract_choice` compares them: normalized, confusables mapped, `_norm_text`."""
    options = tuple(str(c) for c in choices) if choices is not None else ()
    if sum(map(len, options)) <= _CACHED_OPTION_CHARS:
        return list(_prepared_options(options))
    return [_norm_text(skeleton(normalize_text(option) or "")) for option in options]


_CACHED_OPTION_CHARS = 10_000  # option lists up to this many characters are cached (256 lists at most)


@functools.lru_cache(maxsize=256)  # every completion of a prompt shares its options
def _prepared_options(options: tuple[str, ...]) -> tuple[str, ...]:
    return tuple(_norm_text(skeleton(normalize_text(option) or "")) for option in options)


def _extract_choice(text: str, options: list[str], n_options: int | None = None) -> str | None:
    """`extract_choice` on a normalized, skeleton text and prepared options (`_options`)."""
    n = n_options or len(options) or 10
    spans = _box_spans(text, MAX_STATED_ANSWERS)
    if spans is None:  # more boxes than any completion restates its answer in
        return None
    spans = [span for span in spans if span[2]]
    ends: list[int] = []
    statements = _statements(text, ends)
    # Every box and every answer statement must name the same single option ("Answer: B" then "Answer: C", or a box
    # and a different "Answer:" line, choose nothing); a restated answer is read once.
    stated = dict.fromkeys([content for _, _, content in spans] + statements)
    if len(stated) > MAX_STATED_ANSWERS:
        return None
    if stated:
        letters: set[str] = set()
        for span in stated:
            letters |= _span_letters(span, n, options)
            if len(letters) > 1:
                return None
        end = max(spans[-1][1] if spans else 0, ends[-1] if ends else 0)
        return _after_final(text, end, letters, n, options)
    if len(text.strip()) <= 200:
        letters = _span_letters(text, n, options)
        return letters.pop() if len(letters) == 1 else None
    return None


TAIL_OFFERS = 1_000
"""At most this many options offered, or different answer statements, after the final answer are read
(`_after_final`); more choose no option."""


def _after_final(text: str, end: int, letters: set[str], n: int, options: list[str]) -> str | None:
    """The chosen letter when `letters` holds exactly one and the text after the final answer (from `end`) neither
    hedges (a hedge word of `healtrl.rewards.math`: "\\boxed{B}\nBut maybe not.") nor offers or states another option
    ("\\boxed{B}\nOr possibly C.", "\\boxed{B}\nAnswer: C"); else None. Linear in the length of the tail."""
    if len(letters) != 1 or _CONTEXT_HEDGE_FOLDED_RE.search(fold_case(text[end:])):
        return None
    (letter,) = letters
    valid = LETTERS[:n]
    for count, match in enumerate(_TAIL_OFFER.finditer(text, end)):
        other = match.group(1)
        if count >= TAIL_OFFERS:
            return None
        if other != letter and other in valid and not _article(other, text, match.end()):
            return None
    statements = dict.fromkeys(_statements(text[end:]))  # a restated answer is read once
    if len(statements) > TAIL_OFFERS:
        return None
    for statement in statements:
        if _span_letters(statement, n, options) - {letter}:
            return None
    return None if _endorses_another(text, end, letter, valid) else letter


# After the final answer, another option named in a sentence that endorses it ("B works too.", "(B is also
# defensible)", "B is equally right") and does not negate ("B is not correct", "A is also wrong").
_TAIL_LETTER = re.compile(r"(?<![A-Za-z0-9'’])[(\[]?([A-Z])[)\]]?(?![A-Za-z0-9'’])")
_TAIL_ENDORSES = re.compile(
    r"(?i)\b(?:also|too|correct|right|true|valid|works?|possible|acceptable|defensible|fine|equally"
    r"|fits?|as\s+well)\b"
)
_CLAUSE_END = re.compile(r"[.!?;](?:\s|$)|\n|(?i:\b(?:but|while|whereas|however|although|though)\b)")
_NEGATES = re.compile(r"(?i)\b(?:not|never|no|wrong|incorrect|false|invalid|rule[sd]?\s+out|eliminat\w*)\b|n't\b")


def _endorses_another(text: str, end: int, letter: str, valid: str) -> bool:
    """Whether the text after the final answer (from `end`) names another option in a sentence that endorses it and
    negates nothing (`_TAIL_ENDORSES`, `_NEGATES`); the sentence ends at ".", "!", "?", ";", a line break or a
    contrasting word ("but", "while", "however"...). Each letter's sentence is read within `STATEMENT_CHARS` on either
    side; more than `TAIL_OFFERS` letters after the answer count as endorsing (a completion is not that long)."""
    for count, match in enumerate(_TAIL_LETTER.finditer(text, end)):
        if count >= TAIL_OFFERS:
            return True
        other = match.group(1)
        if other == letter or other not in valid or _article(other, text, match.end()):
            continue
        low = max(end, match.start() - STATEMENT_CHARS)
        ends = [found.end() for found in _CLAUSE_END.finditer(text, low, match.start())]
        start = ends[-1] if ends else low
        stop = _CLAUSE_END.search(text, match.end(), min(len(text), match.end() + STATEMENT_CHARS))
        sentence = text[start : stop.start() if stop else min(len(text), match.end() + STATEMENT_CHARS)]
        if _TAIL_ENDORSES.search(sentence) and not _NEGATES.search(sentence):
            return True
    return False


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
        text = normalize_text(text)
        if gold is None or text is None:
            return None
        return 1.0 if _extract_choice(skeleton(text), _options(options), len(options) or None) == gold else 0.0

    return safe_scores("multiple_choice", completions, score, log_metric)
