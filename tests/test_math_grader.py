"""healtrl's math grader (`healtrl.rewards.math`) against TRL 1.16's `trl.rewards.accuracy_reward` (math-verify's own
extraction), on the same hand-written completions and ground truths.

Each row of `CASES` states our score, TRL's score, and, where they differ, why the difference is deliberate (the
same list is summarised in the docstring of `healtrl/rewards/math.py`). TRL's score is computed, not copied: if a
TRL or math-verify release changes it, the test says which case moved. The rest of the file tests the answer
formats as users select them: `reward_funcs: [math | math_boxed | math_answer_line | math_lenient]`, the
`answer_format` column that healtrl's math tasks carry, and the `<task>@<format>` task variants.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from healtrl.data import REWARD_FUNCS, get_reward_func
from healtrl.rewards import (
    ANSWER_FORMATS,
    extract_final_answer,
    malformed_counts,
    math_answer_line_reward,
    math_boxed_reward,
    math_lenient_reward,
    math_reward,
    reset_malformed_counts,
)

DATA = Path(__file__).parent / "data" / "tasks"
B, AL, L = "boxed", "answer_line", "lenient"
BY_FORMAT = {B: math_boxed_reward, AL: math_answer_line_reward, L: math_lenient_reward}

# Why we differ from TRL, by kind (each case below names one). The number is the item of the differences listed in
# the docstring of `healtrl/rewards/math.py` (`test_every_difference_is_listed_and_tested` holds the two together).
NOT_BOXED = "(1) boxed format: an unboxed answer does not follow the prompt's format and scores 0; TRL reads any LaTeX"
LINE_NO_DOLLARS = "(1) answer_line format reads the 'Answer:' line as LaTeX without $...$; TRL needs delimiters there"
LINE_NEXT = "(1) the answer may sit on the line after 'Answer:' (as DAPO's regex allows); TRL finds no LaTeX"
LINE_NO_BOX = "(1) answer_line format: a box without an 'Answer:' line does not follow DAPO's format (DAPO's grader: 0)"
CONTRADICTED = "(2) an 'Answer:' line that contradicts the box is a second answer here"
HEDGE = "(3) a hedge inside the stated answer scores 0; TRL's unit normalization drops the text and credits"
GOLD_UNPARSED = "(4) TRL cannot parse this ground truth without $...$ and skips the sample (None); we grade it"
SET_GOLD = "(4) a list ground truth '3, 4' is a set here; TRL parses it otherwise and fails the matching set"
EMPTY_BOX = "(5) an empty \\boxed{} (e.g. quoting the instruction) is not an answer here; TRL reads it first and fails"
FBOX = "(5) \\fbox{} and the brace-less \\boxed 4 are boxes here; math-verify does not read them"
SCI = "(5) 3\\times10^8 equals 3 \\times 10^{8} after our normalization; math-verify fails the exponent"
LENIENT = "(6) lenient format (opt-in) reads an unboxed, undelimited final answer; TRL needs LaTeX after an anchor"
HEDGE_OUTSIDE = "(7) a hedge next to the box, or the box offered as one of two, scores 0; TRL reads the box only"
ALTERNATIVE = "(7) an alternative offered after the box is a second answer and must agree; TRL reads the box only"
PERCENT = "(8) a percentage compares by its number (and its fraction); math-verify credits 25% for 25 only"
NORMALIZED = "(9) normalized before math-verify (final period, thin spaces, \\tfrac); TRL's math-verify fails it"
GOLD_MISREAD = "(10) TRL misreads this undelimited ground truth (2\\pi as 2); we box it and parse it whole"

# (completion, ground truth, answer format, our score, TRL's score, why they differ or "")
CASES = [
    # ------------------------------------------------------------------ boxed (default of `math`)
    ("So the result is \\boxed{4}.", "4", B, 1.0, 1.0, ""),
    ("So the result is \\boxed{5}.", "4", B, 0.0, 0.0, ""),
    ("\\boxed{\\frac{1}{2}}", "0.5", B, 1.0, 1.0, ""),
    ("\\boxed{0.5}", "\\frac{1}{2}", B, 1.0, 1.0, ""),
    ("\\boxed{\\dfrac{3}{4}}", "\\frac34", B, 1.0, None, GOLD_UNPARSED),
    ("\\boxed{\\frac{\\sqrt{2}}{2}}", "\\frac{\\sqrt{2}}{2}", B, 1.0, None, GOLD_UNPARSED),
    ("\\boxed{x = 4}", "4", B, 1.0, 1.0, ""),
    ("\\boxed{5 \\text{ cm}}", "5", B, 1.0, 1.0, ""),
    ("\\boxed{1,000}", "1000", B, 1.0, 1.0, ""),
    ("\\boxed{50\\%}", "50", B, 1.0, 1.0, ""),
    ("\\boxed{30^\\circ}", "30", B, 1.0, 1.0, ""),
    ("\\boxed{-3}", "-3", B, 1.0, 1.0, ""),
    ("\\boxed{(x+1)^2}", "x^2+2x+1", B, 1.0, None, GOLD_UNPARSED),
    ("\\boxed{[1, 2)}", "[1,2)", B, 1.0, None, GOLD_UNPARSED),
    ("\\boxed{(1,2)}", "[1,2]", B, 0.0, None, GOLD_UNPARSED),  # open vs closed interval: wrong, but graded
    ("\\boxed{\\infty}", "\\infty", B, 1.0, None, GOLD_UNPARSED),
    ("\\boxed{\\text{(C)}}", "C", B, 1.0, None, GOLD_UNPARSED),
    ("\\boxed{3, 4}", "3, 4", B, 1.0, 0.0, SET_GOLD),
    ("\\boxed{3 \\text{ or } 4}", "4", B, 0.0, 0.0, ""),  # a set {3, 4} never equals 4
    ("\\boxed{4 \\text{ (maybe 3)}}", "4", B, 0.0, 1.0, HEDGE),
    ("First \\boxed{3}, but wait, it is \\boxed{4}.", "4", B, 0.0, 0.0, ""),  # two different answers
    ("\\boxed{4}. Checking: yes, \\boxed{4}.", "4", B, 1.0, 1.0, ""),  # the same answer restated
    ("\\boxed{}\\boxed{4}", "4", B, 1.0, 0.0, EMPTY_BOX),
    ("\\fbox{4}", "4", B, 1.0, 0.0, FBOX),
    ("\\boxed 4", "4", B, 1.0, 0.0, FBOX),
    ("\\boxed{3\\times10^8}", "3 \\times 10^{8}", B, 1.0, 0.0, SCI),
    ("The answer is $\\frac{1}{2}$.", "\\frac{1}{2}", B, 0.0, 1.0, NOT_BOXED),
    ("Answer: 4", "4", B, 0.0, 0.0, ""),
    ("4", "4", B, 0.0, 0.0, ""),
    ("\\boxed{4}\nAnswer: 3", "4", B, 0.0, 1.0, CONTRADICTED),
    # what is written next to the box (7)
    ("\\boxed{4} (or possibly 3)", "4", B, 0.0, 1.0, HEDGE_OUTSIDE),
    ("\\boxed{4}, although it might be 5", "4", B, 0.0, 1.0, ALTERNATIVE),
    ("\\boxed{4} (or 3 if n is even)", "4", B, 0.0, 1.0, ALTERNATIVE),
    ("\\boxed{4}. Or rather 5.", "4", B, 0.0, 1.0, ALTERNATIVE),
    ("It is probably \\boxed{4}.", "4", B, 0.0, 1.0, HEDGE_OUTSIDE),
    ("\\boxed{4}, but I am not sure.", "4", B, 0.0, 1.0, HEDGE_OUTSIDE),
    ("x is 3 or \\boxed{4}", "4", B, 0.0, 1.0, HEDGE_OUTSIDE),
    ("\\boxed{0.5} (or $\\frac{1}{2}$)", "\\frac{1}{2}", B, 1.0, 1.0, ""),  # an alternative that agrees
    ("Either way, the answer is \\boxed{4}.", "4", B, 1.0, 1.0, ""),  # "either" alone is not a hedge
    ("Since x=2 or x=-2, and x>0, we get \\boxed{2}.", "2", B, 1.0, 1.0, ""),  # an earlier sentence's "or"
    ("\\boxed{4}\nThis might be 5 for other n.", "4", B, 0.0, 1.0, ALTERNATIVE),  # after the last box (issue #39)
    # percentages (8)
    ("\\boxed{12.5\\%}", "12.5", B, 1.0, 0.0, PERCENT),
    ("\\boxed{12.50\\%}", "12.5", B, 1.0, 0.0, PERCENT),
    ("\\boxed{12.5 percent}", "12.5", B, 1.0, 0.0, PERCENT),
    ("\\boxed{0.25}", "25\\%", B, 1.0, 0.0, PERCENT),
    ("\\boxed{12.5}", "12.5\\%", B, 1.0, 1.0, ""),
    ("\\boxed{12.5\\%}", "0.125", B, 1.0, 1.0, ""),
    ("\\boxed{12.5\\%}", "1.25", B, 0.0, 0.0, ""),
    # normalized before math-verify (9), a misread gold (10)
    ("\\boxed{8.}", "8", B, 1.0, 0.0, NORMALIZED),
    ("\\boxed{\\tfrac73}", "\\frac{7}{3}", B, 1.0, 0.0, NORMALIZED),
    ("\\boxed{1\\,000\\,000}", "1000000", B, 1.0, 0.0, NORMALIZED),
    ("\\boxed{2\\pi}", "2\\pi", B, 1.0, 0.0, GOLD_MISREAD),
    ("\\boxed{6.283185}", "2\\pi", B, 1.0, 0.0, GOLD_MISREAD),
    ("\\boxed{2\\pi}", "$2\\pi$", B, 1.0, 1.0, ""),  # delimited, TRL reads it too
    # ------------------------------------------------------------------ answer_line (DAPO-Math-17k)
    ("Answer: 4", "4", AL, 1.0, 0.0, LINE_NO_DOLLARS),
    ("Work...\nAnswer: $\\frac{7}{2}$", "3.5", AL, 1.0, 1.0, ""),
    ("**Final Answer:** 12", "12", AL, 1.0, 0.0, LINE_NO_DOLLARS),
    ("Answer:\n12", "12", AL, 1.0, 0.0, LINE_NEXT),
    ("Answer: \\boxed{12}", "12", AL, 1.0, 1.0, ""),
    ("Answer: 3\nHmm, recheck.\nAnswer: 4", "4", AL, 0.0, 0.0, ""),  # two different answer lines (DAPO: last, 1)
    ("Answer: 3 or maybe 4", "4", AL, 0.0, 0.0, ""),
    ("We get \\boxed{4}.", "4", AL, 0.0, 1.0, LINE_NO_BOX),
    ("\\boxed{3}\n\nAnswer: 4", "4", AL, 0.0, 0.0, ""),  # the box is a second, different answer
    # ------------------------------------------------------------------ lenient (opt-in)
    ("The answer is 3 or maybe 4.", "4", L, 0.0, 0.0, ""),
    ("It is 3, or maybe 4", "4", L, 0.0, 0.0, ""),  # the last number of a hedge is not read
    ("so the ratio is $\\frac{2}{4}$", "4", L, 0.0, 0.0, ""),  # LaTeX parsed as LaTeX: 1/2, not its last digit
    ("so the ratio is $\\frac{2}{4}$", "\\frac{1}{2}", L, 1.0, 0.0, LENIENT),
    ("so the ratio is \\frac{2}{4}.", "\\frac{1}{2}", L, 1.0, 0.0, LENIENT),
    ("3 apples plus 1,200 pears make 1,203 fruits", "1203", L, 1.0, 0.0, LENIENT),
    ("The final answer is 4.", "4", L, 1.0, 0.0, LENIENT),
    ("\\boxed{4} (or 3 if n is even)", "4", L, 0.0, 1.0, ALTERNATIVE),  # a box's context counts in every format
    ("Answer: 4 (or 3 if n is even)", "4", AL, 0.0, 0.0, ""),  # the rest of an "Answer:" line is its answer
]


def _trl_score(completion: str, gold: str):
    from trl.rewards import accuracy_reward

    return accuracy_reward([[{"role": "assistant", "content": completion}]], [gold])[0]


def test_the_table_covers_every_format():
    assert len(CASES) >= 30
    assert {case[2] for case in CASES} == set(ANSWER_FORMATS)
    assert sum(case[3] != case[4] for case in CASES) >= 10  # the deliberate differences are in the table


def test_every_difference_is_listed_and_tested():
    """Each numbered difference of the grader's docstring has a row here, and each row's reason names a listed one."""
    import re

    import healtrl.rewards.math as grader

    section = grader.__doc__.split("Deliberate differences from TRL")[1].split("Deliberate differences from the")[0]
    listed = {int(n) for n in re.findall(r"(?m)^(\d+)\. ", section)}
    assert listed == set(range(1, len(listed) + 1)) and len(listed) >= 10
    tested = {int(re.match(r"\((\d+)\) ", why).group(1)) for *_, why in CASES if why}
    assert tested == listed


@pytest.mark.parametrize("completion, gold, answer_format, ours, trl, why", CASES)
def test_grader_against_trl_accuracy_reward(completion, gold, answer_format, ours, trl, why):
    conversation = [[{"role": "assistant", "content": completion}]]
    assert BY_FORMAT[answer_format](completions=conversation, answer=[gold]) == [ours]
    # `math` with the row's format in the `answer_format` column grades the same
    assert math_reward(completions=conversation, answer=[gold], answer_format=[answer_format]) == [ours]
    assert _trl_score(completion, gold) == trl
    # every difference carries its reason, and a reason is only given for a difference
    assert (ours != trl) == bool(why), why or "agreeing cases need no reason"


# ----------------------------------------------------------------------------------------------------------------
# Selecting the format
# ----------------------------------------------------------------------------------------------------------------
def test_the_formats_are_registered_rewards():
    for name, func in [
        ("math", math_reward),
        ("math_boxed", math_boxed_reward),
        ("math_answer_line", math_answer_line_reward),
        ("math_lenient", math_lenient_reward),
    ]:
        assert get_reward_func(name) is func
        assert REWARD_FUNCS[name].columns == ("answer",)  # `answer_format` is optional


def test_math_follows_the_answer_format_column_and_defaults_to_boxed():
    completions = ["\\boxed{4}", "Answer: 4", "it is 4", "Answer: 4"]
    gold = ["4"] * 4
    assert math_reward(completions=completions, answer=gold) == [1.0, 0.0, 0.0, 0.0]  # no column: boxed
    formats = ["boxed", "answer_line", "lenient", None]  # None: the default, boxed
    assert math_reward(completions=completions, answer=gold, answer_format=formats) == [1.0, 1.0, 1.0, 0.0]
    # a fixed-format reward ignores the column
    assert math_answer_line_reward(completions=completions, answer=gold, answer_format=formats) == [0, 1, 0, 1]
    with pytest.raises(ValueError, match="Unknown answer_format value 'dapo'.*boxed, answer_line, lenient"):
        math_reward(completions=["Answer: 4"], answer=["4"], answer_format=["dapo"])
    with pytest.raises(ValueError, match="one value per completion"):
        math_reward(completions=["Answer: 4"] * 2, answer=["4"] * 2, answer_format=["boxed"])


def test_extract_final_answer_per_format():
    text = "Scratch: 12.\n\\boxed{\\frac{2}{4}}\nAnswer: $0.5$"
    assert extract_final_answer(text) == "\\frac{2}{4}"  # default: boxed
    assert extract_final_answer(text, "answer_line") == "0.5"
    assert extract_final_answer(text, "lenient") == "\\frac{2}{4}"  # a box comes first
    assert extract_final_answer("so we get $\\frac{2}{4}$", "lenient") == "\\frac{2}{4}"  # not "4"
    assert extract_final_answer("so we get $\\frac{2}{4}$", "boxed") is None
    with pytest.raises(ValueError, match="Unknown answer_format 'last_number'"):
        extract_final_answer(text, "last_number")


def test_fixed_format_rewards_count_malformed_under_their_own_name():
    reset_malformed_counts()
    assert math_answer_line_reward(completions=["", "Answer: 2"], answer=["2", "2"]) == [0.0, 1.0]
    assert malformed_counts() == {"math_answer_line": 1}


# ----------------------------------------------------------------------------------------------------------------
# Task formats
# ----------------------------------------------------------------------------------------------------------------
def test_math_tasks_carry_their_answer_format():
    from healtrl.tasks import TASKS, load_task
    from healtrl.tasks._common import DAPO_PREFIX, DAPO_SUFFIX, MATH_INSTRUCTION

    aime = load_task("aime25", path=str(DATA / "aime25.jsonl"))
    assert set(aime["answer_format"]) == {"boxed"} and TASKS["aime25"].answer_format == "boxed"
    dapo = load_task("dapo-math-17k", path=str(DATA / "dapo_math_17k.jsonl"))
    assert set(dapo["answer_format"]) == {"answer_line"} and TASKS["dapo-math-17k"].answer_format == "answer_line"

    line = load_task("aime25@answer_line", path=str(DATA / "aime25.jsonl"))
    assert line["answer"] == aime["answer"] and set(line["task"]) == {"aime25@answer_line"}
    assert set(line["answer_format"]) == {"answer_line"} and line.column_names == aime.column_names
    for plain, dapo_style in zip(aime["prompt"], line["prompt"]):
        problem = plain[0]["content"][: -len(MATH_INSTRUCTION)].strip()
        assert dapo_style == [{"role": "user", "content": f"{DAPO_PREFIX}{problem}{DAPO_SUFFIX}"}]
    # DAPO's own rows are written in exactly that template
    assert dapo["prompt"][0][0]["content"].startswith(DAPO_PREFIX)
    assert dapo["prompt"][0][0]["content"].endswith(DAPO_SUFFIX)

    boxed = load_task("dapo-math-17k@boxed", path=str(DATA / "dapo_math_17k.jsonl"))
    assert boxed["prompt"][0] == [{"role": "user", "content": f"What is $6\\times 7$? {MATH_INSTRUCTION}"}]
    assert set(boxed["answer_format"]) == {"boxed"}


def test_task_reward_grades_each_task_in_its_own_format():
    from healtrl.rewards import task_reward
    from healtrl.tasks import load_task, mix_tasks

    mixed = mix_tasks(
        load_task("aime25", path=str(DATA / "aime25.jsonl")),
        load_task("aime25@answer_line", path=str(DATA / "aime25.jsonl")),
        seed=None,
    )
    columns = {c: mixed[c] for c in mixed.column_names if c != "prompt"}
    boxed = [f"\\boxed{{{a}}}" for a in mixed["answer"]]
    line = [f"Answer: {a}" for a in mixed["answer"]]
    assert task_reward(completions=boxed, **columns) == [1.0, 1.0, 0.0, 0.0]
    assert task_reward(completions=line, **columns) == [0.0, 0.0, 1.0, 1.0]
    assert math_reward(completions=line, **columns) == [0.0, 0.0, 1.0, 1.0]  # `math` reads the same column


@pytest.mark.parametrize(
    "name, message",
    [
        ("commonsenseqa@boxed", "only math tasks take a prompt format suffix"),
        ("aime25@lenient", "unknown prompt format 'lenient'.*aime25@answer_line"),
        ("aime25@answer_line@boxed", "more than one format suffix"),
        ("aime2@answer_line", "Did you mean 'aime25'"),
    ],
)
def test_bad_task_formats_are_refused(name, message):
    from healtrl.tasks import get_task

    with pytest.raises(ValueError, match=message):
        get_task(name)


def test_task_spec_answer_format_is_for_math_only():
    from healtrl.tasks import TaskSpec

    assert TaskSpec("m", "math", "math", "math", None, "d").answer_format == "boxed"
    with pytest.raises(ValueError, match="only for math tasks"):
        TaskSpec("q", "commonsense", "multiple_choice", "multiple_choice", None, "d", answer_format="boxed")
    with pytest.raises(ValueError, match="only for math tasks, one of boxed, answer_line"):
        TaskSpec("m", "math", "math", "math", None, "d", answer_format="lenient")


def test_restyling_refuses_a_prompt_in_another_format(tmp_path):
    import json

    from healtrl.tasks import load_task

    path = tmp_path / "dapo.jsonl"
    row = {
        "prompt": [{"role": "user", "content": "Just a question, no template"}],
        "reward_model": {"ground_truth": "1"},
    }
    path.write_text(json.dumps(row) + "\n")
    assert load_task("dapo-math-17k", path=str(path))["prompt"][0][0]["content"] == "Just a question, no template"
    with pytest.raises(ValueError, match="cannot rewrite a prompt from the answer_line format to boxed"):
        load_task("dapo-math-17k@boxed", path=str(path))


@pytest.mark.parametrize(
    "text",
    [
        "$" * 500_000,
        "\\(" * 300_000,
        "\\boxed{" * 100_000,
        "{" * 500_000,
        "- " * 400_000 + "\\x{1}",
        "answer:\n" * 100_000,
    ],
    ids=["dollars", "open-parens", "open-boxes", "braces", "minus-signs", "empty-answer-lines"],
)
def test_adversarial_completions_grade_in_linear_time(text):
    """Long degenerate completions (up to `MAX_COMPLETION_CHARS`) must not make a reward call hang: every search is
    linear in the completion's length (a quadratic one took minutes on the first of these)."""
    import time

    for answer_format in ANSWER_FORMATS:
        start = time.perf_counter()
        assert BY_FORMAT[answer_format](completions=[text], answer=["4"]) == [0.0]
        assert time.perf_counter() - start < 5.0, answer_format
