"""Math reward: `math-verify` on the final answer of a completion, read in an explicit answer format, against the
`answer` column.

Answer formats (`ANSWER_FORMATS`):

| format | the final answer is | prompt that asks for it | used by |
|---|---|---|---|
| `boxed` (default) | every `\\boxed{...}` / `\\fbox{...}` (empty boxes ignored) | "... output the final answer within \\boxed{}." (`healtrl.tasks`' math prompt, DeepScaleR / verl) | HEAL, AER, OPEFO evaluation; every healtrl math task except DAPO-Math-17k |
| `answer_line` | every line "Answer: ..." (also "**Final Answer:** ...", the answer may sit on the next line) | DAPO-Math-17k's "The last line of your response should be of the form Answer: $Answer ..." | PosAdv and OPEFO training data (DAPO-Math-17k) |
| `lenient` (opt-in) | the boxes, else the "Answer:" lines, else the "the answer is ..." statements, else the last LaTeX math span or bare number (of the last 2,000 characters) | any | nothing by default: for models that ignore the instruction |

Scoring rules, the same in every format (issue #39 for Unicode, alternatives and the tail):

* The completion and the ground truth are read after `normalize_text` (`healtrl.rewards._common`): every line break
  (`\\r`, `\\r\\n`, vertical tab, form feed, U+0085, U+2028, U+2029...) is a newline, so "Answer: 3\\rAnswer: 4" is two
  lines; superscript and subscript runs are `^{...}` / `_{...}` (`x²` equals `x^2`, not `x2`; `9⁹⁹⁹⁹⁹⁹` meets the cost
  pre-check as a power); NFKC (fullwidth `４２` is 42, `½` is 1/2); zero-width characters, soft hyphens, bidi
  controls, variation selectors and generic combining marks are removed. Hedge words, alternatives and the
  "Answer:" heads are read in the `skeleton` of the text (Cyrillic, Greek, accented and hooked Latin letters, small
  capitals "ᴏʀ" and modifier letters that pass for Latin ones mapped to them: "mаybe" with a Cyrillic `а`, "Аnswer:"
  with a Cyrillic `А`); the answers themselves keep their letters.
* **Every** final-answer statement must equal the ground truth: a completion that states two different answers
  (`\\boxed{3} ... \\boxed{4}`, two "Answer:" lines that disagree, a box and a different "Answer:" line) scores 0,
  whichever comes last. Restating the same answer (`\\boxed{4} ... so \\boxed{4}`, or `\\boxed{\\frac12}` and
  `\\boxed{0.5}`) is fine. More than `MAX_VERIFIED_ANSWERS` (16) statements that differ from the ground truth as
  strings score 0 (one answer written 17 ways is not one final answer, and each way costs a math-verify parse).
* A stated answer that offers more than one value, or hedges, scores 0: a word of `ANSWER_ALTERNATIVES` ("or",
  "either", "otherwise", "unless", "if", "maybe", "perhaps", "possibly", "probably", "likely", "could", "might",
  "one of", "not sure"...) or logical or (`\\lor`, `\\vee`, "∨") in its rendering (`_alternative_words`: text commands
  unwrapped, other commands and spacing removed, so `\\boxed{4 \\text{ (or 3)}}`, `\\boxed{4 \\mbox{ or } 3}`,
  `\\boxed{4\\ \\textrm{or}\\ 3}`, `\\boxed{4\\text{o}\\text{r}3}` all hold "or"; words end at letters, so "North" holds
  none). A word the ground truth holds is allowed; a ground truth that lists values ("3, 4", "1 \\text{ or } 2",
  "\\pm 1") allows "or", "nor" and "either" (the answer is then compared as a set by math-verify). Slashes, commas and
  semicolons are not alternatives in math (division, lists: math-verify compares them).
* What is written next to a box counts (difference 7 below): a hedge word in its sentence before it on its line
  (with the last sentence of the previous non-blank line when no letter precedes the box on its line:
  "Maybe.\\n\\boxed{4}", "perhaps\\n\\boxed{4}") or on its line after it, or the box offered as one of two ("3 or \\boxed{4}"), scores 0; an alternative offered after it is a
  stated answer and must agree. The sentence before an "Answer:" line is read the same way ("Probably:\\nAnswer: 4").
  Hedge words (`HEDGE_WORDS`) include "uncertain", "unclear", "not certain", "conceivably", "plausible",
  "alternately", "if not", "in the other case".
* What follows the last final answer (the last box or "Answer:" line) to the end of the completion counts too
  (`_tail_context`): a hedge word there ("maybe", "perhaps", "alternatively", "could also be", "not sure"...) scores
  0 ("\\boxed{4}\\nAlternatively, the answer could be 3."), and each value offered there ("or 3", "might be 5",
  "the answer is 5", "Final answer - 3", "The answer = 3", "otherwise 3", "\\lor 3", "or three") is a stated answer
  that must agree. A value that starts a calculation ("or 1+3=4") is not offered. More than `TAIL_OFFERS` (1,000)
  offering phrases score 0.
* A later correction or addition after the last final answer is a stated answer (`_boxes._cued_values`): from the
  sentence that holds the first cue of `TAIL_CUES` (a correction or offer word: "wait", "correction", "actually",
  "P.S.", "also", "too", "either way", "instead", "rather", "or", "otherwise", "works", "fits", "should be", "the
  answer is", every hedge word...) to the end of the completion, every value written (a number, a run of numbers
  and operators read as what follows its last "=", a `$...$` or `\\(...\\)` span, a LaTeX math command with braces,
  a number word other than "one") must agree: "\\boxed{4}\\nWait, it's 3.", "Correction: 3.", "(Either way, 3 also
  fits.)", "P.S. 3 works too.", "Wait. It's three." score 0. Not values: a number right after a comparison ("n > 3",
  "\\geq 3"), a number glued to a word or term ("3x", "2nd"). So honest text without a cue keeps 1 ("This took 3
  steps.", "Check: 2 + 2 = 4."), and so does a cued calculation whose result is the answer ("This also holds since 2
  + 2 = 4."); a cued remark that mentions another number ("Also, this took 3 steps.") scores 0 (the price of a rule
  that splitting the cue and the value into two sentences does not evade). More than `TAIL_OFFERS` cued values, or one
  longer than `CUED_VALUE_CHARS`, score 0. Not offered either (`_boxes._cued_values`), in a clause (split at
  ",;:!?", sentence ends, line breaks and joining words: "and", "but", "since", "because", "so", "or", "wait"...):
  the values of a clause that rejects them ("We reject the other solution x = -2 since x must be positive", "x = -2
  is extraneous", "is not", "cannot be", "fails", "ruled out"); the values of a clause that verifies with an "="
  ("substituting x = 4 gives 2(4) - 3 = 5", "check", "plugging", "indeed", "✓"); rates in two different time units
  ("$18 per day, or $126 per week": one quantity converted; a "$" before a number and a space is a price, not a math
  span). The clause ends at its joining words, so "Wait, we reject 4 and take 3.", "Wait, 4 is not right, it's 3.",
  "Actually, checking again gives 3." and "Wait, it's 3 per day." still offer 3.
* "Answer:" heads are a colon after "answer" at the start of a line (DAPO's head); "Final answer - 3", "Final answer
  — 3", "The answer = 3" are offering phrases (above), read after the final answer and next to a box.
* In `lenient` mode a last line that offers two candidates joined by a hedge word or by "or" ("3 or maybe 4")
  scores 0 for gold 4.
* A percentage equals its number and its fraction (`12.5\\%` equals 12.5 and 0.125; difference 8).
* A stated answer is parsed as LaTeX as a whole (`\\frac{2}{4}` is 1/2, never "4"); a list ("3, 4") is a set and
  equals only a set.
* A completion without a statement in the format scores 0 (the format was not followed): under `boxed` an
  "Answer:" line alone does not count, under `answer_line` a box alone does not. A box or "Answer:" line beside
  the format's own statement is a stated answer all the same and must agree (`\\boxed{3}` then "Answer: 4" scores
  0 in both formats).

Equivalence (`answers_match`): normalized string equality, else `math_verify.verify` on both sides parsed as LaTeX.

Deliberate differences from TRL's `trl.rewards.accuracy_reward` (math-verify's own extraction: boxes first, then
LaTeX after an "answer" anchor, first match), numbered as the reasons of the table in `tests/test_math_grader.py`
(each difference is a row there, its reason starting with its number; a test checks that every number is listed
here and tested there):

1. One format is read. A `boxed` recipe never credits an unboxed `$\\frac{1}{2}$` (TRL does); an `answer_line`
   recipe reads "Answer: 4" and "**Final Answer:** 12" without the `$...$` TRL needs there, and the answer may sit
   on the next line (as DAPO's regex allows); it does not credit a box without an "Answer:" line (TRL does).
2. Every stated answer must agree: a box contradicted by an "Answer:" line scores 0 (TRL reads the box and credits
   it). Several different boxes fail in both (math-verify joins them into a set).
3. A hedge inside the answer (`\\boxed{4 \\text{ (maybe 3)}}`) scores 0; TRL's unit normalization drops the text
   and credits it.
4. A ground truth math-verify cannot parse without delimiters (`\\frac34`, `\\frac{\\sqrt{2}}{2}`, `\\infty`,
   `[1,2)`, `C`) makes TRL return None (the sample is skipped); we wrap it in `\\boxed{}` and fall back to
   normalized string equality, so it is graded. A list ground truth "3, 4" is a set here (TRL fails `\\boxed{3, 4}`).
5. `\\fbox{4}` and `\\boxed 4` are boxes, and an empty `\\boxed{}` (the instruction quoted back) is skipped;
   TRL scores these 0. `3\\times10^8` equals `3 \\times 10^{8}` here (string normalization), not in TRL.
6. `lenient` (opt-in) reads undelimited final answers ("The final answer is 4.", a last bare `\\frac{2}{4}` or
   number) that TRL does not.
7. What is written next to a box counts (`_box_context`, in every format). A hedge in the box's sentence before it
   or on its line after it ("probably \\boxed{4}", "\\boxed{4} (or possibly 3)", "\\boxed{4}, but I am not sure"),
   or a box offered as one of two ("3 or \\boxed{4}"), scores 0; an alternative offered after it ("\\boxed{4} (or 3
   if n is even)", "\\boxed{4}, although it might be 5") is a stated answer and must agree, and so is what follows the
   last final answer ("\\boxed{4}\\nThis might be 5 for other n." offers 5). TRL reads the box only and credits all of
   these.
8. Percentages compare by their number: `\\boxed{12.5\\%}` equals 12.5 (and 0.125, as in math-verify; `12.5
   percent` and `12.5%` too); TRL credits `25\\%` for 25 but not `12.5\\%` for 12.5.
9. The answer is normalized before math-verify reads it (`_normalize`): a final period (`\\boxed{8.}`), thin spaces
   (`1\\,000\\,000`), `\\tfrac`/`\\dfrac` as `\\frac`; so `\\tfrac73` is the brace-less `\\frac73`, which the
   fallback parse reads as 7/3. TRL's math-verify fails all three.
10. A ground truth math-verify misreads without delimiters: gold `2\\pi` parses as 2 in TRL, which then fails
    `\\boxed{2\\pi}`; we box the gold, so it parses whole (and a decimal within math-verify's tolerance,
    `\\boxed{6.283185}`, equals it: math-verify's rule).

Deliberate differences from the reference graders: the grader DAPO-Math-17k ships with (verl `math_dapo`) reads
the last "Answer:" match in the last 300 characters and compares normalized strings; we read every "Answer:" line and
box (two different answers score 0) and compare with math-verify (`0.5` equals `\\frac{1}{2}`). verl's and
DeepScaleR's boxed graders take the last box; we require all boxes to agree. AER states math-verify (AER §5.1),
as here.

Bounds (issue #25: a completion is hostile text, read in the trainer process outside the sandbox):

* Reading the answers is linear in the completion's length (the text after the final answer is read in its
  case-folded skeleton with case-sensitive patterns, ~4x faster than case-insensitive ones; every repetition in the
  cued-value reader is possessive or bounded) (at most `MAX_COMPLETION_CHARS` = 1M characters; each
  hostile input of that size takes well under 0.1 s): boxes are found with a literal search and their braces matched
  in one pass (numpy past `_PYTHON_BRACES` braces); "Answer:" lines and "the answer is" statements are read by
  scans that give what the former regexes gave (those backtracked quadratically on "Answer:" + 100,000 newlines);
  case-insensitive heads are searched in the case-folded text (`fold_case`), where they have a fast literal prefix.
  The lenient fallback reads the last `LENIENT_TAIL_CHARS` characters only.
* Counts: more than `MAX_STATED_ANSWERS` (1,000) boxes, "Answer:" lines or "the answer is" statements, restatements
  included, score 0; boxes nested so that their contents add up to more than `MAX_BOXED_CHARS_FACTOR` (2) times the
  text's length make the completion malformed (`extract_boxed` raises ValueError; 2-deep nesting never does).
* Answers longer than `MAX_ANSWER_CHARS` are compared as strings only; identical statements are compared once (after
  `_normalize`), and more than `MAX_VERIFIED_ANSWERS` different ones score 0 without math-verify (1,000 forms of
  1/2 took 2-10 s of math-verify, so that a correct answer timed out to 0).
* Normalisation (`normalize_text`, `skeleton`) is linear and in C or numpy: ~1 ms on 1M ASCII characters, at most
  ~0.1 s on 1M hostile non-ASCII ones; a text that NFKC expands past `MAX_COMPLETION_CHARS` (U+FDFA is 18
  characters) is malformed, found chunk by chunk before the expansion costs more.
* math-verify runs in persistent worker processes (`MATH_VERIFY_WORKERS` = one per core, at most 4; started with
  `python -c` on `_math_verify_worker.py`: no `healtrl` import, no re-run of the caller's main module; each parses
  once before it reports ready) with a hard wall-clock timeout for all the answers of one completion; past it the
  worker is killed, a new one starts, and the answers do not match. It holds in the main thread and in any other
  (math-verify's own timeouts use signal.alarm, which works only in the main thread; in the worker they do).
  Normalized string equality, which decides most answers, stays in-process; the gold parse is cached in the worker.
* Batches: a reward call grades its n completions `MATH_VERIFY_WORKERS` at a time, in order of their indices, and
  gives math-verify n x `BATCH_SECONDS_PER_COMPLETION` (0.5 s) in all (`Deadline`); one completion's call may take
  at most `MATH_VERIFY_WORKERS` x 0.5 s (its share: hostile completions early in a batch cannot use up the honest
  ones' time) and at most `MATH_VERIFY_TIMEOUT_S` (2 s; also the bound of one `answers_match` call). A completion
  still waiting for math-verify at the deadline does not match. Not counted: worker start-up (the first in a
  process, and the restart after a killed worker, ~1-2 s each: only answers that pass the pre-check below and still
  hang math-verify cause one) and waiting for workers that another reward call holds. Scores keep the completions'
  order; malformed ones are counted as before.
* Before an answer is sent, a cheap reader (`_too_costly`, a recursive-descent pass over at most `MAX_ANSWER_CHARS`
  characters that evaluates nothing and bounds every number from above) refuses (no match) those that would make
  sympy compute a huge number: an exponent above `MAX_EXPONENT` or holding a factorial (power towers in `^`, `**`,
  `\\uparrow` and braces, bounded from the inside out: `9^{9^{9^{9}}}`, chains `9^9^9` read as `9^(9^9)`,
  `{9}^{9}`, `e^{e^{e^{10}}}`; Knuth's `\\uparrow\\uparrow`); a factorial, double factorial or Gamma
  (`\\Gamma`, `\\operatorname{Gamma}`) of a number above `MAX_FACTORIAL` or of a factorial, whatever expression
  gives it (`(9999^{2})!`, `10^{10}!`, `(10!)!`); a binomial coefficient (`\\binom`, `\\dbinom`, `{n \\choose k}`)
  with a number above `MAX_BINOMIAL`; `\\sum` / `\\prod` with a numeric bound above `MAX_SUM_TERMS`, or whose
  terms (and those of `\\int`) carry an exponent above `MAX_OPERATOR_EXPONENT`; a power above
  `MAX_IRRATIONAL_EXPONENT` of a non-rational number (`\\sin(1)^{99999}`, `\\pi^{50}`); function applications nested
  deeper than `MAX_FUNCTION_NESTING`; a function (`\\sin`, `\\log`...) of a number with more than
  `MAX_FUNCTION_ARGUMENT_DIGITS` digits; a power above `MAX_COMPOUND_EXPONENT` of a sum that is not a plain rational
  number (`(x+1)^{1000}`, `(1+i)^{1000}`); a number of more than `MAX_DIGITS` digits; nesting deeper than
  `MAX_NESTING`. Each of these took 0.3 s to minutes in math-verify; ordinary answers (`2^{10000}`, `10!`,
  `\\binom{10}{3}`, `\\sum_{k=1}^{\\infty} \\frac{1}{k^2}`) pass.

Why this module is long: its docstring is the grader's specification (reading rules, the numbered
differences from TRL's grader that tests/test_math_grader.py checks one by one, and every bound), and the
reading code it specifies is one pass over hostile text that reads best in one place.
"""

from __future__ import annotations

import functools
import re
from concurrent.futures import ThreadPoolExecutor

from . import _math_verify_pool as _pool
from ._boxes import (  # noqa: F401  (MAX_BOXED_CHARS_FACTOR, BOX_CONTEXT_CHARS, _boxes: documented and used here)
    BOX_CONTEXT_CHARS,
    HEDGE_WORDS,
    MAX_BOXED_CHARS_FACTOR,
    _box_context,
    _box_spans,
    _boxes,
    _strip_answer,
    _tail_context,
    extract_boxed,
    hedged_before,
    words_re,
)
from ._common import clean_text, column, fold_case, logger, normalize_text, report, skeleton
from ._math_verify_pool import (  # noqa: F401  (the bounds are documented here)
    BATCH_SECONDS_PER_COMPLETION,
    MATH_VERIFY_TIMEOUT_S,
    MATH_VERIFY_WORKERS,
    MAX_EXPONENT,
    MAX_FACTORIAL,
    Deadline,
    _math_verify,
)

__all__ = [
    "ANSWER_FORMATS",
    "DEFAULT_ANSWER_FORMAT",
    "answers_match",
    "check_answer_format",
    "extract_answer_lines",
    "extract_boxed",
    "extract_final_answer",
    "final_answers",
    "grade_math",
    "math_answer_line_reward",
    "math_boxed_reward",
    "math_lenient_reward",
    "math_reward",
]

ANSWER_FORMATS = ("boxed", "answer_line", "lenient")
"""How the final answer of a completion is read (see the module docstring)."""

DEFAULT_ANSWER_FORMAT = "boxed"
"""The format of the `math` reward for rows without an `answer_format` column: the papers' (HEAL, AER, OPEFO) and
healtrl's math prompts ask for `\\boxed{}`."""

MAX_ANSWER_CHARS = 1_000
"""Extracted answers longer than this are compared as strings only (sympy parsing of huge expressions can hang)."""

MAX_STATED_ANSWERS = 1_000
"""A completion with more boxes, or more "Answer:" lines, than this (restatements included) scores 0, and so does
one with more different final-answer statements: each costs a normalization (and possibly a math-verify call),
which 100,000 boxes would turn into seconds (or hours of math-verify)."""

# "Answer: x", "**Final Answer:** x", "> answer: x", "The final answer: x"; the answer may start on the next line. This
# is the head of such a line, up to the blanks after the colon; the answer is read by `extract_answer_lines`. Matched
# in the case-folded skeleton (`fold_case` of `skeleton`: an "Аnswer" with a Cyrillic А is a head). Other marks
# ("Final answer - 3", "The answer = 3") are offering phrases (`_boxes._OFFER_PHRASE_RE`), not heads.
_ANSWER_LINE_HEAD_RE = re.compile(r"(?m)^[ \t>*#_-]*(?:the[ \t]+)?(?:final[ \t]+)?answer[ \t*_]*[:：][ \t*_]*")
# Searched in the case-folded skeleton: "answer" is a literal prefix, found fast.
_ANSWER_COLON_RE = re.compile(r"answer[ \t*_]*[:：]")
# "answer is", in the case-folded text; a "final" before it is read backwards in the reversed text (a leading optional
# group would cost the literal prefix and its fast search).
_ANSWER_IS_RE = re.compile(r"answer\s+is")
_FINAL_BEFORE_RE = re.compile(r"\s+lanif")
_SPACES_RE = re.compile(r"\s*")
_BLANKS_RE = re.compile(r"[ \t]*")
_LEADING_PHRASE_RE = re.compile(r"(?i)^(?:the\s+)?(?:final\s+)?answer\s+is\s*:?\s*")
# Bounded lengths keep every search linear in the completion's length (no span or gap longer than an answer).
_MATH_SPAN_RE = re.compile(r"\$\$(.{1,1000}?)\$\$|\$(.{1,1000}?)\$|\\\((.{1,1000}?)\\\)|\\\[(.{1,1000}?)\\\]", re.S)
_BARE_LATEX_RE = re.compile(r"(?:-[ \t]{0,3})?\\[a-zA-Z]+(?:[ \t]{0,3}\{[^{}\n]{0,1000}\})+")
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w])|(?<![\w.])-?\.\d+(?![\w])")
_HEDGE_RE = words_re(HEDGE_WORDS)
_ALTERNATIVE_RE = words_re(("or", *HEDGE_WORDS))


def check_answer_format(answer_format, where: str = "answer_format") -> str:
    """`answer_format` if it is one of `ANSWER_FORMATS`, else a ValueError naming `where` and the choices."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(
            f"Unknown {where} {answer_format!r}: choose one of {', '.join(ANSWER_FORMATS)} (boxed: the last-line "
            "\\boxed{} of healtrl's math prompts; answer_line: DAPO-Math-17k's 'Answer: ...' line; lenient: any of "
            "these, else the last number)."
        )
    return answer_format


def _line_answer(text: str, start: int) -> tuple[int, int, int] | None:
    """The answer on the line of `text` from `start` (to its newline or the end of the text): (start, end, end of
    the line), the span empty when the rest of the line is blank; None when whitespace other than spaces and tabs
    follows the last non-whitespace character."""
    eol = text.find("\n", start)
    eol = len(text) if eol < 0 else eol
    stop = start + len(text[start:eol].rstrip())  # after the last non-whitespace character
    return None if text[stop:eol].strip(" \t") else (start, stop, eol)


def _answer_line_contents(
    text: str, limit: int | None = None, spans: bool = False, words: str | None = None, heads: list | None = None
) -> list:
    """The answer of every "Answer: ..." line of `text` as written ("" when the line has none), in order (the first
    `limit` + 1 of them when `limit` is given).

    After the head ("Answer:", "**Final Answer:**"...) the answer is the rest of the line; when the head ends the
    line, it is the next line without its leading blanks, unless that line ends in whitespace other than spaces and
    tabs ("\\r"; then the answer is empty). A line that ends in such whitespace has no answer. One pass: linear in
    the length of the text (only the lines with "answer" and a colon are looked at). With `spans`, (start, end)
    of each answer in `text` instead of the answers. Heads are read in `words`, `fold_case` of the `skeleton` of
    `text` (computed when not given; same indices). The start of the line of each head is appended to `heads` when
    given."""
    out, pos = [], 0
    folded = fold_case(skeleton(text)) if words is None else words
    candidate = _ANSWER_COLON_RE.search(folded)
    while candidate and (limit is None or len(out) <= limit):
        line_start = text.rfind("\n", 0, candidate.start()) + 1
        next_line = text.find("\n", candidate.start()) + 1
        match = _ANSWER_LINE_HEAD_RE.match(folded, line_start) if line_start >= pos else None
        if match:
            start = match.end()
            found = None
            if start < len(text) and text[start] == "\n":
                found = _line_answer(text, _BLANKS_RE.match(text, start + 1).end()) or (start, start, start)
            else:
                found = _line_answer(text, start)
            if found:
                first, stop, pos = found
                out.append((first, stop) if spans else text[first:stop])
                if heads is not None:
                    heads.append(line_start)
                next_line = text.rfind("\n", 0, pos + 1) + 1 if pos < len(text) else len(text) + 1
        if not next_line or next_line > len(text):
            break
        candidate = _ANSWER_COLON_RE.search(folded, max(next_line, pos))
    return out


def extract_answer_lines(text: str) -> list[str]:
    """The answers of every "Answer: ..." line of `text` (DAPO's format), in order: delimiters (`$...$`), a leading
    "the answer is" and a final period removed; a box inside the line is unwrapped."""
    return _answer_lines(text)


def _answer_lines(
    text: str, limit: int | None = None, ends: list | None = None, words: str | None = None, heads: list | None = None
) -> list[str] | None:
    """`extract_answer_lines`; None when `text` has more than `limit` "Answer:" lines. The end of each line's
    answer in `text` is appended to `ends` when given, the start of each line to `heads`; `words`: the case-folded
    `skeleton` of `text`, when the caller has it."""
    spans = _answer_line_contents(text, limit, spans=True, words=words, heads=heads)
    if limit is not None and len(spans) > limit:
        return None
    out = []
    for start, stop in spans:
        content = _LEADING_PHRASE_RE.sub("", _strip_answer(text[start:stop]))
        boxes = [b.strip() for b in extract_boxed(content) if b.strip()]
        out.extend(boxes if boxes else [_strip_answer(content)] if content.strip() else [])
        if ends is not None and content.strip():
            ends.append(stop)
    return out


def _mask(text: str, spans) -> str:
    chars = list(text)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


STATEMENT_CHARS = 200
"""A "the answer is ..." statement (lenient format) is read up to this many characters (or the end of its line)."""

LENIENT_TAIL_CHARS = 2_000
"""The lenient format's last-expression fallback looks at this many final characters of a completion (DAPO's
grader reads its "Answer:" line in the last 300)."""


def _last_expression(text: str) -> str | None:
    """Lenient fallback: the last LaTeX math span (`$...$`, `\\(...\\)`, `\\[...\\]`), bare LaTeX command
    (`\\frac{2}{4}`) or bare number of the last `LENIENT_TAIL_CHARS` characters of `text`, None when there is none
    or when its line offers alternatives ("3 or maybe 4")."""
    text = text[-LENIENT_TAIL_CHARS:]
    candidates = []  # (start, end, answer)
    for match in _MATH_SPAN_RE.finditer(text):
        inner = next(group for group in match.groups() if group is not None)
        candidates.append((match.start(), match.end(), inner.strip()))
    rest = _mask(text, [(s, e) for s, e, _ in candidates])
    for match in _BARE_LATEX_RE.finditer(rest):
        candidates.append((match.start(), match.end(), match.group(0).replace(" ", "")))
    rest = _mask(rest, [(m.start(), m.end()) for m in _BARE_LATEX_RE.finditer(rest)])
    for match in _NUMBER_RE.finditer(rest):
        candidates.append((match.start(), match.end(), match.group(0).replace(",", "").replace(" ", "")))
    if not candidates:
        return None
    candidates.sort()
    start, end, answer = candidates[-1]
    line_start = text.rfind("\n", 0, start) + 1
    line_end = text.find("\n", end)
    line_end = len(text) if line_end < 0 else line_end
    on_line = [c for c in candidates if c[0] >= line_start and c[1] <= line_end]
    line = skeleton(text[line_start:line_end])
    if len(on_line) > 1 and len({c[2] for c in on_line}) > 1 and _ALTERNATIVE_RE.search(line):
        return None  # "3 or maybe 4": two candidates offered as alternatives
    return answer


def _answer_is_statements(text: str, limit: int | None = None, ends: list | None = None) -> list[str]:
    """The answer of every "the answer is ..." statement of `text`, in order (the first `limit` + 1 when `limit` is
    given): after "answer is" (or "final answer is", at a word boundary), blanks and one optional colon, at most
    `STATEMENT_CHARS` characters of the rest of the line. When only whitespace follows up to the end of the text,
    the answer is its last character that is not a newline (none: no statement; a colon followed only by newlines
    is the answer then). One pass: linear in the length of the text. The end of each answer is appended to `ends`
    when given."""
    out, pos, folded, backwards = [], 0, fold_case(text), None
    tail = len(text.rstrip("\n"))  # the text after this index is newlines only
    while (limit is None or len(out) <= limit) and (match := _ANSWER_IS_RE.search(folded, pos)):
        starts = [match.start()]
        if match.start() >= 5:
            backwards = folded[::-1] if backwards is None else backwards
            final = _FINAL_BEFORE_RE.match(backwards, len(text) - match.start())
            if final and match.start() - final.end() + final.start() >= pos:
                starts.insert(0, match.start() - final.end() + final.start())
        starts = [i for i in starts if not (i and _is_word(text[i - 1]))]  # \b before the statement
        if not starts:
            pos = match.start() + 1
            continue
        start = _SPACES_RE.match(text, match.end()).end()
        if start < len(text) and text[start] == ":":
            after = _SPACES_RE.match(text, start + 1).end()
            if after < len(text):
                start = after
            elif tail > start + 1:
                start = tail - 1
        elif start == len(text):
            if tail <= match.end():
                pos = starts[0] + 1
                continue
            start = tail - 1
        end = text.find("\n", start, start + STATEMENT_CHARS)
        end = min(start + STATEMENT_CHARS, len(text)) if end < 0 else end
        out.append(text[start:end])
        if ends is not None:
            ends.append(end)
        pos = end
    return out


def _is_word(char: str) -> bool:
    """Whether the regex engine counts `char` as a word character (for \\b)."""
    return char.isalnum() or char == "_"


def final_answers(text: str, answer_format: str = DEFAULT_ANSWER_FORMAT) -> list[str]:
    """Every final-answer statement of `text` (read after `normalize_text`) in `answer_format`, in order ([] when the
    format is not followed)."""
    check_answer_format(answer_format)
    text = normalize_text(text)
    if text is None:
        return []
    boxed = [b.strip() for b in extract_boxed(text) if b.strip()]
    lines = extract_answer_lines(text) if answer_format != "boxed" else []
    return _final_answers(text, answer_format, boxed, lines)


def _final_answers(
    text: str, answer_format: str, boxed: list[str], lines: list[str], limit: int | None = None, ends=None
) -> list[str] | None:
    """`final_answers` given the boxes and "Answer:" lines of `text`; None when it reads more than `limit` "the
    answer is" statements. The end of each "the answer is" statement read is appended to `ends` when given."""
    if answer_format == "boxed":
        return boxed
    if answer_format == "answer_line":
        return lines
    if boxed:
        return boxed
    if lines:
        return lines
    stated = _answer_is_statements(text, limit, ends)
    if limit is not None and len(stated) > limit:
        return None
    stated = [_strip_answer(s) for s in stated]
    stated = [s for s in stated if s]
    if stated:
        return stated
    last = _last_expression(text)
    return [last] if last else []


def extract_final_answer(text: str, answer_format: str = DEFAULT_ANSWER_FORMAT) -> str | None:
    """The last final-answer statement of `text` in `answer_format`, or None. (The reward also requires every
    earlier statement to agree with it: see `grade_math`.)"""
    answers = final_answers(text, answer_format)
    return answers[-1] if answers else None


_TEXT_RE = re.compile(r"\\(?:text|textbf|mathrm|mbox)\{([^{}]*)\}")


def _normalize(answer: str) -> str:
    """`answer` as compared as a string: text commands unwrapped, spacing commands and whitespace dropped, `\\dfrac`
    and `\\tfrac` as `\\frac`, lower case, no final period. Short answers are cached (a batch restates the same
    answers and the same gold many times; long ones are not kept)."""
    return _normalize_cached(answer) if len(answer) <= _CACHED_CHARS else _normalize_text(answer)


_CACHED_CHARS = 1_000  # the caches below hold at most 8,192 strings of at most this many characters each


@functools.lru_cache(maxsize=8192)
def _normalize_cached(answer: str) -> str:
    return _normalize_text(answer)


def _normalize_text(answer: str) -> str:
    answer = _TEXT_RE.sub(r"\1", _strip_answer(answer))
    answer = answer.replace("\\!", "").replace("\\,", "").replace("\\ ", "").replace("\\%", "%")
    answer = (
        answer.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\left", "").replace("\\right", "")
    )
    return re.sub(r"\s+", "", answer).lower().rstrip(".")


_PERCENT_RE = re.compile(r"^(.*?)(?:%|percent)$")
_DECIMAL_RE = re.compile(r"-?(?:\d+(?:\.\d*)?|\.\d+)")


def _percent_equal(prediction: str, gold: str) -> bool:
    """Whether a percentage equals the other answer by its number: `12.5\\%` and `12.5` (either side carrying the
    sign), `12.50\\%` and `12.5\\%`. A percentage is also its fraction (`12.5\\%` equals `0.125`): that comparison is
    math-verify's (`answers_match`)."""
    left, right = _normalize(prediction), _normalize(gold)
    stripped = [_PERCENT_RE.match(side) for side in (left, right)]
    if not any(stripped):
        return False
    left, right = (match.group(1) if match else side for match, side in zip(stripped, (left, right)))
    if left == right:
        return bool(left)
    if _DECIMAL_RE.fullmatch(left) and _DECIMAL_RE.fullmatch(right):
        return float(left) == float(right)
    return False


def _answer_pair(prediction: str | None, gold) -> tuple[str, str] | bool:
    """`answers_match` without math-verify: True or False when decided (normalized string equality, empty or too
    long answers), else the stripped (prediction, gold) for math-verify."""
    if prediction is None or gold is None:
        return False
    gold = _strip_answer(str(gold))
    prediction = _strip_answer(prediction)
    if not prediction or not gold:
        return False
    if _normalize(prediction) == _normalize(gold) or _percent_equal(prediction, gold):
        return True
    if len(prediction) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    return prediction, gold


def answers_match(prediction: str | None, gold: str) -> bool:
    """Whether a predicted final answer equals the ground truth (both read after `normalize_text`): normalized string
    equality, else `math_verify` equivalence (numbers, fractions, LaTeX expressions, sets, intervals...), bounded by
    `MATH_VERIFY_TIMEOUT_S`."""
    if prediction is None or gold is None:
        return False
    pair = _answer_pair(normalize_text(prediction) or "", normalize_text(str(gold)) or "")
    if isinstance(pair, bool):
        return pair
    return _math_verify(pair[1], [pair[0]])


# What a stated answer says besides its value (`_alternative_words`): read in its rendering, the skeleton of the
# answer in lower case with LaTeX's text commands unwrapped (`\\text{ or }` is " or "), every other command a space,
# spacing commands and braces removed (`o\\!r`, `\\text{o}\\text{r}` are "or"); words end at letters only ("4or3"
# holds "or").
_RENDER_TEXT_RE = re.compile(
    r"\\(?:text[a-z]*|mbox|hbox|mathrm|mathit|mathbf|mathsf|mathtt|mathnormal|operatorname)\*?\s*"
)
_RENDER_OR_RE = re.compile(r"\\(?:lor|vee)(?![a-z])|∨")  # logical "or" written as a symbol
_RENDER_COMMAND_RE = re.compile(r"\\[a-z]+")
_RENDER_DROP_RE = re.compile(r"\\[^a-z]|[{}]")
ANSWER_ALTERNATIVES = (
    "or",
    "nor",
    "either",
    "alternatively",
    "otherwise",
    "else",
    "unless",
    "if",
    "whether",
    "maybe",
    "perhaps",
    "possibly",
    "probably",
    "likely",
    "guess",
    "unsure",
    r"not\s*sure",
    "could",
    "might",
    r"may\s*be",
    r"one\s*of",
)
"""The words that make a stated answer offer more than one value, or a hedge (read in its rendering, see
`_alternative_words`): "\\boxed{4 \\text{ (or 3)}}", "\\boxed{4 \\text{ if } n \\text{ even}}", "Answer: 4, maybe 3".
A word the ground truth itself holds is allowed; a ground truth that lists several values ("3, 4") allows the list
connectives (`LIST_CONNECTIVES`). Logical or (`\\lor`, `\\vee`, "∨") is "or"."""
LIST_CONNECTIVES = frozenset({"or", "nor", "either"})
_ANSWER_ALTERNATIVES_RE = re.compile(r"(?<![a-z])(?:" + "|".join(ANSWER_ALTERNATIVES) + r")(?![a-z])")
_SPACE_RUN_RE = re.compile(r"\s+")


def _alternative_words(answer: str) -> frozenset[str]:
    """The words of `ANSWER_ALTERNATIVES` in the rendering of `answer` (its spaces collapsed: {"or", "not sure"}).
    Linear in the length of the answer; short answers are cached (the gold's is asked once per completion)."""
    return _alternatives_cached(answer) if len(answer) <= _CACHED_CHARS else _alternatives(answer)


@functools.lru_cache(maxsize=8192)
def _alternatives_cached(answer: str) -> frozenset[str]:
    return _alternatives(answer)


def _alternatives(answer: str) -> frozenset[str]:
    words = skeleton(answer).lower()
    words = _RENDER_OR_RE.sub(" or ", words)
    words = _RENDER_DROP_RE.sub("", _RENDER_COMMAND_RE.sub(" ", _RENDER_TEXT_RE.sub("", words)))
    return frozenset(
        _SPACE_RUN_RE.sub(" ", match.group()) for match in _ANSWER_ALTERNATIVES_RE.finditer(words.replace("~", " "))
    )


def _lists_values(gold: str) -> bool:
    """Whether a ground truth states several values ("3, 4", "x = 1 \\text{ or } x = 2", "2 and 3", "\\pm 1": a
    `\\pm` / `\\mp` gives two)."""
    if "," in gold or ";" in gold or " and " in gold or "±" in gold or "∓" in gold:
        return True
    return bool(re.search(r"\\(?:pm|mp)(?![a-zA-Z])", gold)) or bool(_alternative_words(gold) & LIST_CONNECTIVES)


MAX_VERIFIED_ANSWERS = 16
"""A completion whose stated answers, once normalized, differ as strings from the ground truth in more than this many
ways scores 0 without math-verify: one final answer written in 17 different forms is not one final answer, and each
form costs a math-verify parse (1,000 such boxes took 2-10 s)."""


def grade_math(text: str, gold: str, answer_format: str = DEFAULT_ANSWER_FORMAT) -> float:
    """1.0 when `text` states its final answer in `answer_format` and every final-answer statement (those of the
    format, any other box or "Answer:" line, and the alternatives offered next to a box or after the last final
    answer) equals `gold`, none hedged; else 0.0. `text` and `gold` are read after `normalize_text`."""
    check_answer_format(answer_format)
    text, gold = normalize_text(text), normalize_text(str(gold))
    if text is None or gold is None:
        return 0.0
    return _grade(text, gold, answer_format)


def _grade(text: str, gold: str, answer_format: str, deadline: Deadline | None = None) -> float:
    """`grade_math` on a normalized text and ground truth, math-verify answering before `deadline`."""
    result = _read(text, gold, answer_format)
    if not isinstance(result, tuple):
        return result
    return 1.0 if _math_verify(result[0], result[1], deadline) else 0.0


def _read(text: str, gold: str, answer_format: str) -> float | tuple[str, list[str]]:
    """`_grade` up to math-verify: the score when reading decides it, else (gold, the answers math-verify must find
    equal to it)."""
    spans = _box_spans(text, MAX_STATED_ANSWERS)
    line_ends: list[int] = []
    words = fold_case(skeleton(text))  # where heads, hedge words and offers are read
    heads: list[int] = []
    lines = _answer_lines(text, MAX_STATED_ANSWERS, line_ends, words, heads)
    if spans is None or lines is None:
        return 0.0
    spans = [span for span in spans if span[2].strip()]
    boxed = [content.strip() for _, _, content in spans]
    statement_ends: list[int] = []
    answers = _final_answers(text, answer_format, boxed, lines, MAX_STATED_ANSWERS, statement_ends)
    if not answers:  # None (too many statements) or [] (the format was not followed)
        return 0.0
    # A box or an "Answer:" line outside the format is a stated answer too: it must agree ("\\boxed{3}\nAnswer: 4"),
    # and so is an alternative offered next to a box ("\\boxed{4} (or 3 if n is even)") or after the last final
    # answer ("\\boxed{4}\nThe answer could also be 3."); a hedge there makes the completion a hedge.
    hedged, offered = _box_context(text, spans, words)
    hedged = hedged or hedged_before(words, heads)
    ends = [end for _, end, _ in spans[-1:]] + line_ends[-1:] + statement_ends[-1:]
    if ends:
        tail = _tail_context(text, max(ends), words)
        if tail is None:
            return 0.0
        hedged, offered = hedged or tail[0], offered + tail[1]
    answers = list(dict.fromkeys(answers + boxed + lines + offered))  # each different statement once
    if len(answers) > MAX_STATED_ANSWERS:
        return 0.0
    if hedged and not _HEDGE_RE.search(skeleton(gold)):
        return 0.0
    allowed = _alternative_words(gold) | (LIST_CONNECTIVES if _lists_values(gold) else set())
    if any(_alternative_words(answer) - allowed for answer in answers):
        return 0.0
    answers = list({_normalize(a): a for a in answers}.values())  # a restated answer is checked once
    to_verify = []  # the answers that are not equal to `gold` as strings, for one math-verify call
    for answer in answers:
        pair = _answer_pair(answer, gold)
        if pair is False:
            return 0.0
        if pair is not True:
            to_verify.append(pair[0])
    if len(to_verify) > MAX_VERIFIED_ANSWERS:
        return 0.0
    return (_strip_answer(gold), to_verify) if to_verify else 1.0


def _score(name: str, completions, answer, formats, log_metric) -> list[float]:
    """The scores of a batch. Every completion is read in this thread (linear, bounded: most are decided there, as
    normalized string equality); those that need math-verify are then verified `MATH_VERIFY_WORKERS` at a time, under
    one `Deadline` of `BATCH_SECONDS_PER_COMPLETION` per completion of the batch. Malformed completions, unreadable
    ground truths and failures of the verification score 0.0 and are counted (`report`)."""
    completions = list(completions) if completions is not None else []
    answers = column(answer, len(completions), "answer")
    values: list[float | None] = []
    pending: dict[int, tuple[str, list[str]]] = {}  # completion -> (gold, answers for math-verify)
    for i, completion in enumerate(completions):
        text, gold = clean_text(completion), answers[i]
        if text is None or gold is None or not str(gold).strip():
            values.append(None)
            continue
        text, gold = normalize_text(text), normalize_text(str(gold))
        try:
            result = None if text is None or gold is None else _read(text, gold, formats[i])
        except Exception as exc:  # never raise on a completion
            logger.debug("Reward '%s' failed on completion %d: %r", name, i, exc)
            result = None
        if isinstance(result, tuple):
            pending[i] = result
            result = 0.0
        values.append(result)
    if pending:
        share = _pool.BATCH_SECONDS_PER_COMPLETION
        deadline = Deadline(share * max(1, len(completions)), per_call=share * MATH_VERIFY_WORKERS)

        def verify(i: int) -> tuple[int, bool | None]:
            try:
                return i, _math_verify(pending[i][0], pending[i][1], deadline)
            except Exception as exc:  # a worker that cannot start: 0, counted, never raised on a completion
                logger.debug("Reward '%s' failed on completion %d: %r", name, i, exc)
                return i, None

        if len(pending) == 1:
            verified = [verify(next(iter(pending)))]
        else:
            with ThreadPoolExecutor(
                min(MATH_VERIFY_WORKERS, len(pending)), thread_name_prefix=f"reward-{name}"
            ) as pool:
                verified = list(pool.map(verify, pending))
        for i, ok in verified:
            values[i] = None if ok is None else float(ok)
    report(name, sum(value is None for value in values), len(completions), log_metric)
    return [0.0 if value is None else value for value in values]


def math_reward(
    prompts=None, completions=None, answer=None, answer_format=None, log_metric=None, **kwargs
) -> list[float]:
    """1.0 when the completion's final answer equals the `answer` column (math-verify), else 0.0; each row read in
    its own answer format.

    The format of a row is its `answer_format` column when the dataset has one (healtrl's math tasks set it to the
    format their prompt asks for: "boxed", or "answer_line" for DAPO-Math-17k and the `<task>@answer_line`
    variants), else `DEFAULT_ANSWER_FORMAT` ("boxed"). To fix one format whatever the data says, use
    `math_boxed_reward`, `math_answer_line_reward` or `math_lenient_reward` (`reward_funcs: [math_boxed]`...). The
    reading and scoring rules, and how they differ from TRL's `accuracy_reward`, are in the module docstring:
    every final-answer statement must equal the ground truth, hedged answers score 0, LaTeX is parsed as LaTeX.

    Malformed completions (empty, longer than `MAX_COMPLETION_CHARS` as written or once normalized, invalid unicode,
    wrong type) and unreadable ground truths score 0.0, never raise, and are counted (`rewards/math/malformed`
    through TRL's `log_metric`, else `logging`). A batch is graded in parallel under one deadline (module docstring,
    "Bounds").

    Args:
        prompts: Unused.
        completions: Strings or conversations (`[{"role": "assistant", "content": ...}]`).
        answer: The ground-truth final answers (str), one per completion.
        answer_format: Optional dataset column: "boxed", "answer_line" or "lenient" per row (None: "boxed").
        log_metric: TRL's metric hook (passed by `GRPOTrainer`).
        **kwargs: Other dataset columns, ignored.

    Returns:
        One float per completion.

    Raises:
        ValueError: the `answer_format` column holds an unknown format, or a column is not aligned with the
            completions (errors of the data, not of a completion).
    """
    completions = list(completions) if completions is not None else []
    formats = column(answer_format, len(completions), "answer_format")
    formats = [DEFAULT_ANSWER_FORMAT if f is None else check_answer_format(f, "answer_format value") for f in formats]
    return _score("math", completions, answer, formats, log_metric)


def math_boxed_reward(prompts=None, completions=None, answer=None, log_metric=None, **kwargs) -> list[float]:
    """`math_reward` reading every row in the `boxed` format (the `answer_format` column, if any, is ignored)."""
    completions = list(completions) if completions is not None else []
    return _score("math_boxed", completions, answer, ["boxed"] * len(completions), log_metric)


def math_answer_line_reward(prompts=None, completions=None, answer=None, log_metric=None, **kwargs) -> list[float]:
    """`math_reward` reading every row in the `answer_line` format (DAPO's "Answer: ..." line; the `answer_format`
    column, if any, is ignored)."""
    completions = list(completions) if completions is not None else []
    return _score("math_answer_line", completions, answer, ["answer_line"] * len(completions), log_metric)


def math_lenient_reward(prompts=None, completions=None, answer=None, log_metric=None, **kwargs) -> list[float]:
    """`math_reward` reading every row in the `lenient` format (box, else "Answer:" line, else "the answer is",
    else the last LaTeX span or number; hedges still score 0). Opt-in: it credits answers the prompt did not ask
    for, which RL learns to exploit."""
    completions = list(completions) if completions is not None else []
    return _score("math_lenient", completions, answer, ["lenient"] * len(completions), log_metric)
