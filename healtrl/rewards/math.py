"""Math reward: `math-verify` on the final answer of a completion, read in an explicit answer format, against the
`answer` column.

Answer formats (`ANSWER_FORMATS`):

| format | the final answer is | prompt that asks for it | used by |
|---|---|---|---|
| `boxed` (default) | every `\\boxed{...}` / `\\fbox{...}` (empty boxes ignored) | "... output the final answer within \\boxed{}." (`healtrl.tasks`' math prompt, DeepScaleR / verl) | HEAL, AER, OPEFO evaluation; every healtrl math task except DAPO-Math-17k |
| `answer_line` | every line "Answer: ..." (also "**Final Answer:** ...", the answer may sit on the next line) | DAPO-Math-17k's "The last line of your response should be of the form Answer: $Answer ..." | PosAdv and OPEFO training data (DAPO-Math-17k) |
| `lenient` (opt-in) | the boxes, else the "Answer:" lines, else the "the answer is ..." statements, else the last LaTeX math span or bare number (of the last 2,000 characters) | any | nothing by default: for models that ignore the instruction |

Scoring rules, the same in every format:

* **Every** final-answer statement must equal the ground truth: a completion that states two different answers
  (`\\boxed{3} ... \\boxed{4}`, two "Answer:" lines that disagree) scores 0, whichever comes last. Restating the
  same answer (`\\boxed{4} ... so \\boxed{4}`, or `\\boxed{\\frac12}` and `\\boxed{0.5}`) is fine.
* A hedged answer scores 0: "maybe", "perhaps", "possibly", "probably", "either", "guess", "not sure" in a stated
  answer (unless the ground truth itself contains the word), and in `lenient` mode a last line that offers two
  candidates joined by such a word or by "or" ("3 or maybe 4" scores 0 for gold 4).
* A stated answer is parsed as LaTeX as a whole (`\\frac{2}{4}` is 1/2, never "4"); a list ("3, 4",
  "3 \\text{ or } 4") is a set and equals only a set.
* A completion without a statement in the format scores 0 (the format was not followed): under `boxed` an
  "Answer:" line alone does not count, under `answer_line` a box alone does not. A box or "Answer:" line beside
  the format's own statement is a stated answer all the same and must agree (`\\boxed{3}` then "Answer: 4" scores
  0 in both formats).

Equivalence (`answers_match`): normalized string equality, else `math_verify.verify` on both sides parsed as LaTeX.

Deliberate differences from TRL's `trl.rewards.accuracy_reward` (math-verify's own extraction: boxes first, then
LaTeX after an "answer" anchor, first match), each a row of the table in `tests/test_math_grader.py`:

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

Deliberate differences from the reference graders: the grader DAPO-Math-17k ships with (verl `math_dapo`) reads
the last "Answer:" match in the last 300 characters and compares normalized strings; we read every "Answer:" line and
box (two different answers score 0) and compare with math-verify (`0.5` equals `\\frac{1}{2}`). verl's and
DeepScaleR's boxed graders take the last box; we require all boxes to agree. AER states math-verify (aer.txt §5.1),
as here.
"""

from __future__ import annotations

import functools
import re
import threading

from ._common import column, safe_scores

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

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\b")
# "Answer: x", "**Final Answer:** x", "> answer: x", "The final answer: x"; the answer may start on the next line.
_ANSWER_LINE_RE = re.compile(
    r"(?im)^[ \t>*#_-]*(?:the[ \t]+)?(?:final[ \t]+)?answer[ \t*_]*[:：][ \t*_]*(?:\n[ \t]*)?([^\n]*\S)?[ \t]*$"
)
_ANSWER_IS_RE = re.compile(r"(?i)\b(?:final\s+)?answer\s+is\s*:?\s*([^\n]{1,200})")
_LEADING_PHRASE_RE = re.compile(r"(?i)^(?:the\s+)?(?:final\s+)?answer\s+is\s*:?\s*")
# Bounded lengths keep every search linear in the completion's length (no span or gap longer than an answer).
_MATH_SPAN_RE = re.compile(r"\$\$(.{1,1000}?)\$\$|\$(.{1,1000}?)\$|\\\((.{1,1000}?)\\\)|\\\[(.{1,1000}?)\\\]", re.S)
_BARE_LATEX_RE = re.compile(r"(?:-[ \t]{0,3})?\\[a-zA-Z]+(?:[ \t]{0,3}\{[^{}\n]{0,1000}\})+")
_NUMBER_RE = re.compile(r"(?<![\w.])-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?(?![\w])|(?<![\w.])-?\.\d+(?![\w])")
_HEDGE_RE = re.compile(r"(?i)\b(?:maybe|perhaps|possibly|probably|either|guess|not\s+sure|unsure)\b")
_ALTERNATIVE_RE = re.compile(r"(?i)\b(?:or|maybe|perhaps|possibly|probably|either|guess|not\s+sure|unsure)\b")


def check_answer_format(answer_format, where: str = "answer_format") -> str:
    """`answer_format` if it is one of `ANSWER_FORMATS`, else a ValueError naming `where` and the choices."""
    if answer_format not in ANSWER_FORMATS:
        raise ValueError(
            f"Unknown {where} {answer_format!r}: choose one of {', '.join(ANSWER_FORMATS)} (boxed: the last-line "
            "\\boxed{} of healtrl's math prompts; answer_line: DAPO-Math-17k's 'Answer: ...' line; lenient: any of "
            "these, else the last number)."
        )
    return answer_format


def _closing_braces(text: str) -> dict[int, int]:
    """Index of each "{" of `text` -> index of its matching "}" (unbalanced "{" are left out); one linear pass."""
    pairs, stack = {}, []
    for i, char in enumerate(text):
        if char == "{":
            stack.append(i)
        elif char == "}" and stack:
            pairs[stack.pop()] = i
    return pairs


def extract_boxed(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}` in `text` (balanced braces; `\\boxed 5` too), in order."""
    out = []
    pairs = None
    for match in _BOX_RE.finditer(text):
        i = match.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            if pairs is None:
                pairs = _closing_braces(text)
            if i in pairs:
                out.append(text[i + 1 : pairs[i]])
        elif i > match.end():  # "\boxed 5": one token
            token = re.match(r"[^\s$]+", text[i:])
            if token:
                out.append(token.group(0))
    return out


def _strip_answer(answer: str) -> str:
    answer = answer.strip().strip("*_").strip()
    if len(answer) >= 2 and answer[0] == answer[-1] == "$":
        answer = answer.strip("$").strip()
    elif answer.startswith("\\(") and answer.endswith("\\)"):
        answer = answer[2:-2].strip()
    elif answer.startswith("\\[") and answer.endswith("\\]"):
        answer = answer[2:-2].strip()
    return answer.rstrip(".").strip()


def extract_answer_lines(text: str) -> list[str]:
    """The answers of every "Answer: ..." line of `text` (DAPO's format), in order: delimiters (`$...$`), a leading
    "the answer is" and a final period removed; a box inside the line is unwrapped."""
    out = []
    for content in _ANSWER_LINE_RE.findall(text):
        content = _LEADING_PHRASE_RE.sub("", _strip_answer(content or ""))
        boxes = [b.strip() for b in extract_boxed(content) if b.strip()]
        out.extend(boxes if boxes else [_strip_answer(content)] if content.strip() else [])
    return out


def _mask(text: str, spans) -> str:
    chars = list(text)
    for start, end in spans:
        chars[start:end] = " " * (end - start)
    return "".join(chars)


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
    if len(on_line) > 1 and len({c[2] for c in on_line}) > 1 and _ALTERNATIVE_RE.search(text[line_start:line_end]):
        return None  # "3 or maybe 4": two candidates offered as alternatives
    return answer


def final_answers(text: str, answer_format: str = DEFAULT_ANSWER_FORMAT) -> list[str]:
    """Every final-answer statement of `text` in `answer_format`, in order ([] when the format is not followed)."""
    check_answer_format(answer_format)
    boxed = [b.strip() for b in extract_boxed(text) if b.strip()]
    if answer_format == "boxed":
        return boxed
    lines = extract_answer_lines(text)
    if answer_format == "answer_line":
        return lines
    if boxed:
        return boxed
    if lines:
        return lines
    stated = [_strip_answer(s) for s in _ANSWER_IS_RE.findall(text)]
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
    answer = _TEXT_RE.sub(r"\1", _strip_answer(answer))
    answer = answer.replace("\\!", "").replace("\\,", "").replace("\\ ", "").replace("\\%", "%")
    answer = (
        answer.replace("\\dfrac", "\\frac").replace("\\tfrac", "\\frac").replace("\\left", "").replace("\\right", "")
    )
    return re.sub(r"\s+", "", answer).lower().rstrip(".")


def _timeouts() -> int | None:
    # math-verify's timeouts use signal.alarm, which only works in the main thread; elsewhere run without them (the
    # answers are length-capped by MAX_ANSWER_CHARS).
    return 5 if threading.current_thread() is threading.main_thread() else None


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str, timeout: int | None):
    from math_verify import parse

    return parse(f"\\boxed{{{gold}}}", parsing_timeout=timeout)


def answers_match(prediction: str | None, gold: str) -> bool:
    """Whether a predicted final answer equals the ground truth: normalized string equality, else `math_verify`
    equivalence (numbers, fractions, LaTeX expressions, sets, intervals...)."""
    if prediction is None or gold is None:
        return False
    gold = _strip_answer(str(gold))
    prediction = _strip_answer(prediction)
    if not prediction or not gold:
        return False
    if _normalize(prediction) == _normalize(gold):
        return True
    if len(prediction) > MAX_ANSWER_CHARS or len(gold) > MAX_ANSWER_CHARS:
        return False
    from math_verify import parse, verify

    timeout = _timeouts()
    gold_parsed = _parse_gold(gold, timeout)
    if not gold_parsed:
        return False
    pred_parsed = parse(f"\\boxed{{{prediction}}}", parsing_timeout=timeout)
    if not pred_parsed:
        return False
    return bool(verify(gold_parsed, pred_parsed, timeout_seconds=timeout))


def grade_math(text: str, gold: str, answer_format: str = DEFAULT_ANSWER_FORMAT) -> float:
    """1.0 when `text` states its final answer in `answer_format` and every final-answer statement (those of the
    format, and any other box or "Answer:" line) equals `gold`, none hedged; else 0.0."""
    answers = final_answers(text, answer_format)
    if not answers:
        return 0.0
    # A box or an "Answer:" line outside the format is a stated answer too: it must agree ("\\boxed{3}\nAnswer: 4").
    answers += [b.strip() for b in extract_boxed(text) if b.strip()] + extract_answer_lines(text)
    if not _HEDGE_RE.search(str(gold)) and any(_HEDGE_RE.search(a) for a in answers):
        return 0.0
    answers = list({_normalize(a): a for a in answers}.values())  # a restated answer is checked once
    return 1.0 if all(answers_match(a, str(gold)) for a in answers) else 0.0


def _score(name: str, completions, answer, formats, log_metric) -> list[float]:
    completions = list(completions) if completions is not None else []
    answers = column(answer, len(completions), "answer")

    def score(i, text):
        gold = answers[i]
        if gold is None or not str(gold).strip():
            return None
        return grade_math(text, str(gold), formats[i])

    return safe_scores(name, completions, score, log_metric)


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

    Malformed completions (empty, longer than `MAX_COMPLETION_CHARS`, invalid unicode, wrong type) and unreadable
    ground truths score 0.0, never raise, and are counted (`rewards/math/malformed` through TRL's `log_metric`, else
    `logging`).

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
