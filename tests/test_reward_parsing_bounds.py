"""Bounded parsing of the verifiable rewards (issue #25): every reward reads a hostile completion of up to
`MAX_COMPLETION_CHARS` characters in well under a second, and math-verify runs under a timeout that holds in any
thread. Each pathological input must finish within `LIMIT_S` of CPU time (the issue's bound; CPU time, so that a busy
machine does not fail it) with the score it should get; the rewritten scans must give what the regexes they replace
gave (those patterns are copied below as the reference)."""

from __future__ import annotations

import random
import re
import string
import threading
import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from healtrl.rewards import (
    MAX_COMPLETION_CHARS,
    answers_match,
    extract_boxed,
    extract_choice,
    extract_code,
    malformed_counts,
    math_answer_line_reward,
    math_lenient_reward,
    math_reward,
    multiple_choice_reward,
    reset_malformed_counts,
)
from healtrl.rewards import _boxes as boxes_module
from healtrl.rewards import _math_verify_pool as pool_module
from healtrl.rewards import math as math_module
from healtrl.rewards._common import fold_case
from healtrl.rewards.code import _FENCE_LANG, _fences
from healtrl.rewards.math import MAX_STATED_ANSWERS, _answer_is_statements, _answer_line_contents
from healtrl.rewards.multiple_choice import _statements
from healtrl.rewards.reasoning_gym import _answer_tags

LIMIT_S = 0.5
"""The issue's bound for one pathological completion (the new code takes well under 0.1 s on each)."""

N = MAX_COMPLETION_CHARS
MC = {"answer": ["B"], "choices": [["red", "green", "blue", "black"]]}


def timed(fn, *args, **kwargs):
    """`fn`'s result and the CPU seconds this process spent on it: CPU time, not wall time, so that other work on a
    busy machine does not count (the quadratic scans these inputs were made for took minutes of CPU)."""
    start = time.process_time()
    result = fn(*args, **kwargs)
    return result, time.process_time() - start


WALL_LIMIT_S = 3.0
"""Wall-clock bound where the work may leave this process (math-verify's workers), with room for a busy machine (an
answer that reached math-verify is cut at the call's deadline, `BATCH_SECONDS_PER_COMPLETION` per completion; the
refusals themselves are checked by `_too_costly` in `tests/test_reward_hedges_bounds.py`)."""


def timed_wall(fn, *args, **kwargs):
    """`fn`'s result and the wall-clock seconds it took."""
    start = time.perf_counter()
    result = fn(*args, **kwargs)
    return result, time.perf_counter() - start


def fill(unit: str, chars: int = N) -> str:
    return unit * (chars // len(unit))


@pytest.fixture(scope="module", autouse=True)
def warm_worker():
    """Start the math-verify worker once (its start-up imports sympy; it is not part of any bound)."""
    assert answers_match("\\frac{1}{2}", "0.5")


def rewards_all_score(text: str, expected: float = 0.0, gold: str = "4") -> None:
    """The three math formats and the multiple-choice reward score `text` `expected` within `LIMIT_S` each."""
    for reward in (math_reward, math_answer_line_reward, math_lenient_reward):
        scores, seconds = timed(reward, completions=[text], answer=[gold])
        assert scores == [expected], reward.__name__
        assert seconds < LIMIT_S, (reward.__name__, seconds)
    scores, seconds = timed(multiple_choice_reward, completions=[text], **MC)
    assert scores == [0.0] and seconds < LIMIT_S, seconds


# --- code: the fence bomb ---


def test_fence_bomb_1m_characters():
    text = fill("```")
    code, seconds = timed(extract_code, text)
    assert code == text and seconds < LIMIT_S, seconds  # no newline: no fence opens, the whole text is the program
    closed = "```python\n" + fill("```", N // 2) + "\nx = 1\n```"
    code, seconds = timed(extract_code, closed)
    assert code == "x = 1\n" and seconds < LIMIT_S, seconds  # the run of fences closes blocks, the last is python
    unterminated = fill("```js\nx\n```\n", N - 20) + "```python\ny = 1\n"
    code, seconds = timed(extract_code, unterminated)
    assert code == "y = 1\n" and seconds < LIMIT_S, seconds  # no python block: the unterminated last fence


# --- "Answer:" statements ---


def test_answer_and_newlines_bomb_1m_characters():
    text = "Answer:" + "\n" * (N - 7)
    rewards_all_score(text)
    assert _statements(text) == [] and _answer_line_contents(text) == [""]
    text = "The answer is" + "\n" * (N - 13)
    rewards_all_score(text)
    assert _answer_is_statements(text) == []


def test_answer_and_blanks_then_a_carriage_return():
    text = "Answer:" + " " * (N - 10) + "x\r"
    rewards_all_score(text)
    assert _answer_line_contents(text) == []  # the old pattern: no answer on a line that ends in "\r"


def test_many_answer_lines():
    text = fill("Answer: B\n")
    scores, seconds = timed(multiple_choice_reward, completions=[text], **MC)
    assert scores == [1.0] and seconds < LIMIT_S, seconds  # the last statement chooses B
    text = fill("Answer: 4\n")
    scores, seconds = timed(math_answer_line_reward, completions=[text], answer=["4"])
    assert scores == [0.0] and seconds < LIMIT_S, seconds  # more than MAX_STATED_ANSWERS statements
    restated = "Answer: 4\n" * MAX_STATED_ANSWERS
    assert math_answer_line_reward(completions=[restated], answer=["4"]) == [1.0]
    assert math_answer_line_reward(completions=[restated + "Answer: 4\n"], answer=["4"]) == [0.0]


def test_many_answer_words_without_a_statement():
    for unit in ("xanswer: 4\n", "answer is ", "correct option "):
        rewards_all_score(fill(unit), gold="7")


# --- boxes and braces ---


def test_nested_braces_1m_deep():
    depth = N // 2 - 8
    text = "\\boxed{" + "{" * depth + "4" + "}" * depth + "}"
    rewards_all_score(text)  # one box, as long as the text: compared as a string only
    boxes, seconds = timed(extract_boxed, text)
    assert boxes == [text[7:-1]] and seconds < LIMIT_S, seconds


def test_unclosed_boxes_1m_characters():
    text = fill("\\boxed{")
    rewards_all_score(text)
    assert extract_boxed(fill("\\boxed{", 70_000)) == []  # none closes


def test_bare_boxed_repeated_1m_times_over():
    rewards_all_score(fill("\\boxed"))
    rewards_all_score(fill("\\boxed 5 "))


def test_nested_boxes_are_malformed():
    depth = MAX_STATED_ANSWERS // 2  # 500 boxes around 100,000 characters: 5 * 10^7 characters of contents
    text = "\\boxed{" * depth + "4" * 100_000 + "}" * depth
    reset_malformed_counts()
    rewards_all_score(text)
    assert malformed_counts() == {"math": 1, "math_answer_line": 1, "math_lenient": 1, "multiple_choice": 1}
    with pytest.raises(ValueError, match="nest too deep"):
        extract_boxed(text)
    assert extract_boxed("\\boxed{\\boxed{4}}") == ["\\boxed{4}", "4"]  # 2 deep is fine


def test_many_boxes():
    rewards_all_score(fill("\\boxed{4}"))  # more than MAX_STATED_ANSWERS: 0 whatever they say
    rewards_all_score(fill("\\boxed{B}"))
    restated = "\\boxed{4}" * MAX_STATED_ANSWERS
    assert math_reward(completions=[restated], answer=["4"]) == [1.0]
    assert extract_choice("\\boxed{B}" * MAX_STATED_ANSWERS, ["a", "b"]) == "B"
    # All different as written, all "4" once normalized: one answer to check.
    thin_space = "\\,"
    distinct = "".join(f"\\boxed{{{' ' * (i % 50)}4{thin_space * (i // 50)}}}" for i in range(MAX_STATED_ANSWERS))
    assert math_reward(completions=[distinct], answer=["4"]) == [1.0]


# --- lenient mode and runs of one character ---


@pytest.mark.parametrize("unit", ["$", "\\(", "1,", " ", "not ", "\\frac{", "\\text{x"])
def test_runs_of_one_unit(unit):
    rewards_all_score("x" + fill(unit, N - 1))


def test_reasoning_gym_unclosed_answer_tags():
    tags, seconds = timed(_answer_tags, fill("<answer>"))
    assert tags == [] and seconds < LIMIT_S, seconds
    assert _answer_tags("<ANSWER>3</answer> <answer>4</Answer>") == ["3", "4"]


# --- math-verify: refused answers and the hard timeout ---

TOWER = "\\boxed{9^{9^{9^{9}}}}"
BOMBS = [TOWER, "\\boxed{100000!}", "\\boxed{(10!)!}", "\\boxed{2^{100!}}", "\\boxed{\\binom{10^{9}}{5000000}}"]
BOMBS += [
    "\\boxed{9^9^9}",
    "\\boxed{{9}^{9}^{9}}",
    "\\boxed{9^{9}^{9}}",
    "\\boxed{{{9}}^{{9}^{9}}}",
]  # chains, braced bases


def score_in_thread(text: str, gold: str) -> tuple[list[float], float]:
    with ThreadPoolExecutor(1) as pool:
        return pool.submit(timed_wall, math_reward, completions=[text], answer=[gold]).result(timeout=60)


@pytest.mark.parametrize("bomb", BOMBS)
def test_huge_numbers_are_refused_before_math_verify(bomb):
    scores, seconds = timed(math_reward, completions=[bomb], answer=["1"])
    assert scores == [0.0] and seconds < LIMIT_S, seconds
    scores, seconds = score_in_thread(bomb, "1")
    assert scores == [0.0] and seconds < WALL_LIMIT_S, seconds


def test_chains_and_braced_bases_are_read_as_towers():
    for bomb in BOMBS[-4:]:
        assert pool_module._too_costly(bomb[len("\\boxed{") : -1]), bomb
    for fine in ["2^{16}^{2}", "{2}^{3}", "x^2^3", "e^{i\\pi}", "3\\times10^8", "2^{10000}"]:
        assert not pool_module._too_costly(fine), fine


def test_small_powers_and_factorials_still_reach_math_verify():
    completions = ["\\boxed{5!}", "\\boxed{2^{10}}", "\\boxed{2^{2^{3}}}", "\\boxed{\\binom{10}{3}}"]
    assert math_reward(completions=completions, answer=["120", "1024", "256", "120"]) == [1.0, 1.0, 1.0, 1.0]


def test_hard_timeout_in_a_worker_thread_and_in_the_main_thread(monkeypatch):
    """With the pre-check off, the power tower reaches math-verify: the worker is killed at the timeout."""
    monkeypatch.setattr(pool_module, "_too_costly", lambda answer: False)
    monkeypatch.setattr(pool_module, "MATH_VERIFY_TIMEOUT_S", 1.0)
    monkeypatch.setattr(pool_module, "BATCH_SECONDS_PER_COMPLETION", 10.0)  # the timeout, not the batch's deadline
    scores, seconds = score_in_thread(TOWER, "1")
    assert scores == [0.0] and 1.0 <= seconds < 1.0 + WALL_LIMIT_S, seconds
    assert answers_match("\\frac{1}{2}", "0.5")  # a fresh worker took over
    assert threading.current_thread() is threading.main_thread()
    scores, seconds = timed_wall(math_reward, completions=[TOWER], answer=["1"])
    assert scores == [0.0] and 1.0 <= seconds < 1.0 + WALL_LIMIT_S, seconds
    assert answers_match("\\frac{1}{2}", "0.5")


def test_threads_share_the_workers():
    texts = ["\\boxed{\\frac{1}{2}}", "\\boxed{0.5}", "\\boxed{\\frac{2}{4}}", "\\boxed{0.25}"] * 2
    with ThreadPoolExecutor(8) as pool:
        scores = list(pool.map(lambda text: math_reward(completions=[text], answer=["1/2"])[0], texts))
    assert scores == [1.0, 1.0, 1.0, 0.0] * 2


# --- the rewritten scans give what the old patterns gave (reference: the patterns before issue #25) ---

OLD_ANSWER_LINE = re.compile(
    r"(?im)^[ \t>*#_-]*(?:the[ \t]+)?(?:final[ \t]+)?answer[ \t*_]*[:：][ \t*_]*(?:\n[ \t]*)?([^\n]*\S)?[ \t]*$"
)
OLD_ANSWER_IS = re.compile(r"(?i)\b(?:final\s+)?answer\s+is\s*:?\s*([^\n]{1,200})")
OLD_STATEMENT = re.compile(
    r"(?i)(?:final\s+answer|answer|correct\s+(?:option|choice|answer)|option|choice)\s*(?:is|:|：|=)\s*[:\s]*([^\n]{1,200})"
)
OLD_FENCE = re.compile(r"```[ \t]*([A-Za-z0-9_+-]*)[^\n]*\n(.*?)```", re.S)
OLD_OPEN_FENCE = re.compile(r"```[ \t]*(?:python3?|py)?[^\n]*\n", re.I)
OLD_ANSWER_TAG = re.compile(r"<answer>(.*?)</answer>", re.S | re.I)
ATOMS = (
    ["answer", "Answer", "ANSWER", "anſwer", " is", "is", ":", "：", "=", " ", "\t", "\n", "\r", "\x0b", "*", "_"]
    + ["x", "4", "B", ">", "#", "-", "the ", "final ", "Final Answer", "option", "correct ", "choice", "$", "```"]
    + ["python", "py", "\\boxed", "{", "}", "<answer>", "</ANSWER>"]
)


def old_boxed(text: str) -> list[str]:
    """`extract_boxed` before issue #25 (a stack over every character)."""
    pairs, stack = {}, []
    for i, char in enumerate(text):
        if char == "{":
            stack.append(i)
        elif char == "}" and stack:
            pairs[stack.pop()] = i
    out = []
    for match in re.finditer(r"\\(?:boxed|fbox)\b", text):
        i = match.end()
        while i < len(text) and text[i] == " ":
            i += 1
        if i < len(text) and text[i] == "{":
            if i in pairs:
                out.append(text[i + 1 : pairs[i]])
        elif i > match.end():
            token = re.match(r"[^\s$]+", text[i:])
            if token:
                out.append(token.group(0))
    return out


def test_scans_equal_the_old_patterns_on_random_texts():
    rng = random.Random(25)
    for _ in range(4_000):
        text = "".join(rng.choice(ATOMS) for _ in range(rng.randint(0, 16)))
        assert _answer_line_contents(text) == [a or "" for a in OLD_ANSWER_LINE.findall(text)], repr(text)
        assert _answer_is_statements(text) == OLD_ANSWER_IS.findall(text), repr(text)
        assert _statements(text) == OLD_STATEMENT.findall(text), repr(text)
        spans, last_opening = _fences(text)
        blocks = [
            (_FENCE_LANG.match(text, tag, newline).group(1), text[newline + 1 : end]) for tag, newline, end in spans
        ]
        assert blocks == OLD_FENCE.findall(text), repr(text)
        openings = list(OLD_OPEN_FENCE.finditer(text))
        assert last_opening == (openings[-1].end() if openings else None), repr(text)
        assert _answer_tags(text) == OLD_ANSWER_TAG.findall(text), repr(text)


@pytest.mark.parametrize("vectorized", [False, True])
def test_box_braces_equal_the_old_stack(monkeypatch, vectorized):
    if vectorized:
        monkeypatch.setattr(boxes_module, "_PYTHON_BRACES", -1)  # numpy for any number of braces
    rng = random.Random(int(vectorized))
    for _ in range(3_000):
        text = "".join(
            rng.choice(["\\boxed", "\\fbox", "{", "}", "{{", "}}", "x", " "]) for _ in range(rng.randint(1, 30))
        )
        old = old_boxed(text)
        if sum(map(len, old)) > math_module.MAX_BOXED_CHARS_FACTOR * len(text):
            with pytest.raises(ValueError):
                extract_boxed(text)
        else:
            assert extract_boxed(text) == old, repr(text)


def test_fold_case_matches_the_case_insensitive_regex_engine():
    everything = "".join(map(chr, range(0x110000)))
    matched = set(re.findall("(?i)[a-z]", everything))
    folded = fold_case(everything)
    assert len(folded) == len(everything)
    changed = {char for char, fold in zip(everything, folded) if char != fold}
    assert matched == changed | set(string.ascii_lowercase)
    assert all(fold in string.ascii_lowercase for char, fold in zip(everything, folded) if char != fold)


@pytest.mark.parametrize(
    "text, expected",
    [
        (("\\boxed{4}" + " or a" * 60) * (MAX_STATED_ANSWERS - 1), 1.0),  # "or"s offering no answer: no alternative
        ("\\boxed{4}" + " or 5" * (N // 5 - 2), 0.0),  # one box, a 1M-character line of alternatives after it
        (" or " * (N // 4 - 3) + "\\boxed{4}", 0.0),  # ... a line ending in "or" before it
        (("x. " * 100 + "\\boxed{4}") * (MAX_STATED_ANSWERS - 1), 1.0),  # many sentence ends before each box
    ],
    ids=["many-boxes-with-or", "long-line-after", "long-line-before", "sentences-before"],
)
def test_box_context_is_read_in_bounded_time(text, expected):
    """The text around each box (`_box_context`) is read within `BOX_CONTEXT_CHARS` of it: linear in the number of
    boxes, whatever the length of their lines."""
    from healtrl.rewards.math import BOX_CONTEXT_CHARS, _box_context, _box_spans

    assert BOX_CONTEXT_CHARS <= 1_000
    spans = _box_spans(text, MAX_STATED_ANSWERS)
    _, seconds = timed(_box_context, text, spans)
    assert seconds < LIMIT_S, seconds
    scores, seconds = timed(math_reward, completions=[text], answer=["4"])
    assert scores == [expected] and seconds < LIMIT_S, seconds
