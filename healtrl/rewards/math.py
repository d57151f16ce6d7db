"""Math reward: `math-verify` on the final answer of a completion (the last `\\boxed{}`, else the last "Answer:"
statement, else the last number), against the `answer` column."""

from __future__ import annotations

import functools
import re
import threading

from ._common import column, safe_scores

__all__ = ["answers_match", "extract_boxed", "extract_final_answer", "math_reward"]

MAX_ANSWER_CHARS = 1_000
"""Extracted answers longer than this are compared as strings only (sympy parsing of huge expressions can hang)."""

_BOX_RE = re.compile(r"\\(?:boxed|fbox)\b")
_ANSWER_LINE_RE = re.compile(r"(?im)^[ \t>*#_]*(?:final[ \t]+)?answer[ \t*_]*[:：][ \t]*(.+?)[ \t]*$")
_ANSWER_IS_RE = re.compile(r"(?i)\banswer\s+is\s*:?\s*([^\n]{1,200})")
_NUMBER_RE = re.compile(r"-?\d[\d,]*(?:\.\d+)?(?:\s*/\s*\d+)?|-?\.\d+")


def extract_boxed(text: str) -> list[str]:
    """The contents of every `\\boxed{...}` / `\\fbox{...}` in `text` (balanced braces; `\\boxed 5` too), in order."""
    out = []
    for match in _BOX_RE.finditer(text):
        i = match.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            depth, j = 0, i
            while j < len(text):
                if text[j] == "{":
                    depth += 1
                elif text[j] == "}":
                    depth -= 1
                    if depth == 0:
                        break
                j += 1
            if depth == 0:
                out.append(text[i + 1 : j])
        elif i > match.end():  # "\boxed 5": one token
            token = re.match(r"[^\s$]+", text[i:])
            if token:
                out.append(token.group(0))
    return out


def _strip_answer(answer: str) -> str:
    answer = answer.strip().strip("*_").strip()
    if len(answer) >= 2 and answer[0] == answer[-1] == "$":
        answer = answer[1:-1].strip()
    elif answer.startswith("\\(") and answer.endswith("\\)"):
        answer = answer[2:-2].strip()
    return answer.rstrip(".").strip()


def extract_final_answer(text: str) -> str | None:
    """The final answer of a completion: the last `\\boxed{}`, else the last "Answer: ..." line (DAPO's format) or
    "the answer is ...", else the last number. None when there is none."""
    boxed = extract_boxed(text)
    if boxed:
        return boxed[-1].strip()
    lines = _ANSWER_LINE_RE.findall(text)
    if lines:
        return _strip_answer(lines[-1])
    stated = _ANSWER_IS_RE.findall(text)
    if stated:
        return _strip_answer(stated[-1])
    numbers = _NUMBER_RE.findall(text)
    if numbers:
        return numbers[-1].replace(",", "").replace(" ", "")
    return None


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


def math_reward(prompts=None, completions=None, answer=None, log_metric=None, **kwargs) -> list[float]:
    """1.0 when the completion's final answer equals the `answer` column (math-verify), else 0.0.

    The final answer is the last `\\boxed{}` (the papers' "output the final answer within \\boxed{}"), else the last
    "Answer: ..." line (DAPO-Math-17k's format), else the last number. Malformed completions (empty, longer than
    `MAX_COMPLETION_CHARS`, invalid unicode, wrong type) and unreadable ground truths score 0.0, never raise, and are
    counted (`rewards/math/malformed` through TRL's `log_metric`, else `logging`).

    Args:
        prompts: Unused.
        completions: Strings or conversations (`[{"role": "assistant", "content": ...}]`).
        answer: The ground-truth final answers (str), one per completion.
        log_metric: TRL's metric hook (passed by `GRPOTrainer`).
        **kwargs: Other dataset columns, ignored.

    Returns:
        One float per completion.
    """
    completions = list(completions) if completions is not None else []
    answers = column(answer, len(completions), "answer")

    def score(i, text):
        gold = answers[i]
        if gold is None or not str(gold).strip():
            return None
        return 1.0 if answers_match(extract_final_answer(text), str(gold)) else 0.0

    return safe_scores("math", completions, score, log_metric)
