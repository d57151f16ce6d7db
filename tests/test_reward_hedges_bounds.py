"""Issue #39, items 5 and 6 for the math and multiple-choice rewards: hedges and multiple answers score 0 in every
answer format (and read the same through Unicode tricks), every hostile answer is refused before it makes sympy
compute a huge number, and a batch returns within `BATCH_SECONDS_PER_COMPLETION` per completion.

Each hostile completion has a correct twin that scores 1, so that a rule cannot pass by refusing everything. The
tests are written per class (an encoding, a way to offer two answers, a way to build a huge number), with several
members each. Timings are wall-clock times measured in a subprocess after its start-up (imports, math-verify's
workers), with a bound of 0.5 s per completion plus a margin for a busy machine."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from pathlib import Path

import pytest

from healtrl.rewards import _math_verify_pool as pool_module
from healtrl.rewards import (
    answers_match,
    extract_choice,
    malformed_counts,
    math_answer_line_reward,
    math_boxed_reward,
    math_lenient_reward,
    math_reward,
    multiple_choice_reward,
    reset_malformed_counts,
)
from healtrl.rewards._common import MAX_COMPLETION_CHARS, normalize_text, skeleton
from healtrl.rewards.math import MAX_STATED_ANSWERS, MAX_VERIFIED_ANSWERS

FORMATS = {"boxed": math_boxed_reward, "answer_line": math_answer_line_reward, "lenient": math_lenient_reward}
OPTIONS = ["Paris", "London", "Rome", "Berlin"]


def math_scores(text: str, gold: str = "4") -> dict[str, float]:
    return {name: reward(completions=[text], answer=[gold])[0] for name, reward in FORMATS.items()}


def mc_score(text: str, gold: str = "A") -> float:
    return multiple_choice_reward(completions=[text], answer=[gold], choices=[OPTIONS])[0]


@pytest.fixture(scope="module", autouse=True)
def warm_worker():
    """Start math-verify's workers once (not part of any bound)."""
    assert answers_match("\\frac{1}{2}", "0.5")


# ---------------------------------------------------------------------------------------------------------------------
# Math: alternatives inside an answer, in every format
# ---------------------------------------------------------------------------------------------------------------------
INSIDE = [
    "4 \\text{ (or 3)}",
    "4 \\mbox{ or } 3",
    "4\\ \\textrm{or}\\ 3",
    "4 \\textbf{ or } 3",
    "4 \\text{o}\\text{r} 3",  # a word split over two text commands
    "4\\text{or}3",  # no spaces
    "4 \\;\\text{ OR }\\; 3",
    "4 \\lor 3",
    "4 \\vee 3",
    "4 ∨ 3",
    "4 \\text{ (maybe 3)}",
    "4 \\text{, possibly } 3",
    "4 \\text{ if } n \\text{ is even}",
    "4 \\text{ otherwise } 3",
    "4 \\text{ unless } n=2",
    "\\text{either } 4 \\text{ or } 3",
    "\\text{one of } 3, 4",
    "4 \\text{ (could be 3)}",
    "4 \\text{ (not sure)}",
]


@pytest.mark.parametrize("answer", INSIDE)
def test_alternatives_inside_an_answer_score_0_in_every_format(answer):
    for text in (f"\\boxed{{{answer}}}", f"Answer: {answer}", f"Answer: \\boxed{{{answer}}}"):
        scores = math_scores(text)
        assert set(scores.values()) == {0.0}, (text, scores)


def test_correct_twins_of_answers_score_1():
    for text in ("\\boxed{4}", "\\boxed{4 \\text{ apples}}", "\\boxed{x = 4}", "\\boxed{4 \\text{ hours}}"):
        assert math_scores(text)["boxed"] == 1.0, text
    assert math_scores("Answer: 4") == {"boxed": 0.0, "answer_line": 1.0, "lenient": 1.0}
    assert math_scores("Answer: \\boxed{4}") == {"boxed": 1.0, "answer_line": 1.0, "lenient": 1.0}


def test_a_list_ground_truth_allows_the_list_connectives_only():
    assert math_reward(completions=["\\boxed{x=2 \\text{ or } x=-2}"], answer=["2, -2"]) == [1.0]
    assert math_reward(completions=["\\boxed{2 \\text{ or } -2}"], answer=["-2, 2"]) == [1.0]
    assert math_reward(completions=["\\boxed{2 \\text{ or maybe } -2}"], answer=["2, -2"]) == [0.0]  # a hedge still
    # words the ground truth itself holds are its own
    assert math_reward(completions=["\\boxed{\\text{either}}"], answer=["\\text{either}"]) == [1.0]


def test_answers_that_look_like_hedge_words_are_not_hedges():
    for text, gold in [
        ("\\boxed{\\text{North}}", "\\text{North}"),  # "or" inside a word
        ("\\boxed{\\text{Oregon}}", "\\text{Oregon}"),
        ("\\boxed{\\text{Monday}}", "\\text{Monday}"),
        ("\\boxed{5 \\text{ hours}}", "5"),
        ("\\boxed{\\{1, 2\\}}", "\\{1, 2\\}"),
        ("\\boxed{[1, 2)}", "[1,2)"),
    ]:
        assert math_reward(completions=[text], answer=[gold]) == [1.0], text


# ---------------------------------------------------------------------------------------------------------------------
# Math: what follows the final answer, and two different final statements
# ---------------------------------------------------------------------------------------------------------------------
AFTER = [
    "\nAlternatively, the answer could be 3.",
    "\n\nIt could also be three.",
    "\nBut maybe it is 3.",
    "\nPerhaps I made an error somewhere.",
    "\n(Or 3, if n is even.)",
    "\nThe answer is 5.",
    "\n\nSo the final answer is $3$.",
    "\nOtherwise 3.",
    "\nI am not sure about this.",
    "\nThe answer might be \\frac{7}{2} instead.",
    "\n" + "Some padding. " * 500 + "Probably wrong though.",  # far after the box
    "\n(3 is also correct)",
    "\n3 would also work.",
    "\nAnother answer: 3",
    "\n<!-- or 3 -->",
    "\nⓜⓐⓨⓑⓔ 3",  # circled letters
]


@pytest.mark.parametrize("after", AFTER, ids=range(len(AFTER)))
def test_a_hedge_or_another_answer_after_the_final_answer_scores_0(after):
    assert math_scores("\\boxed{4}" + after)["boxed"] == 0.0
    assert math_scores("Answer: 4" + after)["answer_line"] == 0.0
    assert math_scores("\\boxed{4}" + after)["lenient"] == 0.0


@pytest.mark.parametrize(
    "after",
    [
        "",
        ".",
        "\n\nThe answer is 4.",
        "\nThis is because 2+2=4 or 1+3=4.",  # calculations, not offered answers
        "\n</think>",
        "\nEither way, the result holds.",
        "\n\nI hope this helps!",
    ],
)
def test_correct_twins_after_the_final_answer_score_1(after):
    assert math_scores("\\boxed{4}" + after)["boxed"] == 1.0
    assert math_scores("Answer: 4" + after)["answer_line"] == 1.0


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{4}\nAnswer: 5",
        "Answer: 5\n\\boxed{4}",
        "Answer: 4\rAnswer: 5",
        "Answer: 4\vAnswer: 5",
        "Answer: 4\fAnswer: 5",
        "Answer: 4\x85Answer: 5",
        "Answer: 4\u2028Answer: 5",
        "Answer: 4\u2029Answer: 5",
        "\\boxed{4} \\boxed{5}",
        "\\boxed{4}. Thus the answer is 5.",
    ],
)
def test_two_different_final_statements_score_0_in_every_format(text):
    assert set(math_scores(text).values()) == {0.0}, text


def test_restated_final_answers_score_1_through_any_line_break():
    for br in ("\r", "\r\n", "\v", "\f", "\x85", "\u2028", "\u2029"):
        assert math_scores(f"Answer: 4{br}Answer: 4")["answer_line"] == 1.0, repr(br)
        assert math_scores(f"Work{br}Answer: 4")["answer_line"] == 1.0, repr(br)


CUED_AFTER = [
    "\n\nWait, it's 3.",
    "\nWait. It's three.",  # the cue and the value in different sentences
    "\nCorrection: 3.",
    "\n(Either way, 3 also fits.)",
    "\nP.S. 3 works too.",
    "\nActually, $\\frac{7}{2}$.",
    "\nOops: 2+1.",  # a value written as a calculation is its result
    "\nOn second thought, 3.",
    "\nHmm, 3 should be right as well.",
    "\nEdit: \\frac{7}{2}",
    "\nFinal answer - 3",
    "\nFinal answer — 3",
    "\nThe answer = 3",
]


@pytest.mark.parametrize("after", CUED_AFTER, ids=range(len(CUED_AFTER)))
def test_a_cued_value_after_the_final_answer_is_a_stated_answer(after):
    """After the final answer, every value from the sentence of a correction / offer cue on must agree."""
    assert math_scores("\\boxed{4}" + after)["boxed"] == 0.0
    assert math_scores("Answer: 4" + after)["answer_line"] == 0.0
    assert math_scores("\\boxed{4}" + after)["lenient"] == 0.0
    agreeing = after.replace("2+1", "2+2").replace("\\frac{7}{2}", "\\frac{8}{2}").replace("3", "4")
    assert math_scores("\\boxed{4}" + agreeing.replace("three", "four"))["boxed"] == 1.0, agreeing


@pytest.mark.parametrize(
    "after",
    [
        "\nThis took 3 steps.",  # a value without a cue
        "\nCheck: 2 + 2 = 4.",
        "\nWe used 2 apples and 2 pears.",
        "\nThis also holds since 2 + 2 = 4.",  # a cue, and a calculation whose result is the answer
        "\nNote that it also grows for n > 3.",  # a bound after a comparison is not a value
        "\nIt is also equal to $2^2$.",
        "\n\nFinal answer - 4",
        "\n\nVerified: yes.",
    ],
)
def test_honest_explanations_after_the_final_answer_score_1(after):
    assert math_scores("\\boxed{4}" + after)["boxed"] == 1.0
    assert math_scores("Answer: 4" + after)["answer_line"] == 1.0


@pytest.mark.parametrize(
    ("text", "gold"),
    [
        # a clause that rejects a value does not offer it
        ("\\boxed{3}\nWe reject the other solution x = -2 since x must be positive.", "3"),
        ("\\boxed{3}\n\nNote: the other root, x = -2, is extraneous because the log is undefined there.", "3"),
        # a clause that verifies with an "=" does not offer the values of its computation
        ("\\boxed{4}\n\nWe can also verify: substituting x = 4 gives 2(4) - 3 = 5. ✓", "4"),
        # rates in two units convert one quantity; "$18 " is a price, not a math span
        ("\\boxed{18}\n\nThis means Janet earns $18 per day, or $126 per week.", "18"),
        # a ground truth with \pm lists two values
        ("\\boxed{-1 \\text{ or } 1}", "\\pm 1"),
    ],
)
def test_honest_rejections_checks_and_conversions_after_the_answer_score_1(text, gold):
    assert math_reward(completions=[text], answer=[gold]) == [1.0]


@pytest.mark.parametrize(
    "after",
    [
        "\nWait, it's 3.",
        "\nWait, we reject 4 and take 3.",  # the rejection's clause ends at "and"
        "\nWait, 4 is not right, it's 3.",
        "\nWait, it is not 4 since it's 3.",
        "\nActually, checking again gives 3.",  # a check without a computation offers its value
        "\nWait, it's 3 per day.",  # one rate: offered
        "\nCorrection: 3, not 4.",
    ],
)
def test_rejections_and_checks_still_offer_the_values_of_other_clauses(after):
    assert math_reward(completions=["\\boxed{4}" + after], answer=["4"]) == [0.0]


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{4} (though 3 is also plausible)",
        "\\boxed{4}, alternately 3",
        "\\boxed{4}, and if not, then 3",
        "\\boxed{4}, conceivably 3",
        "\\boxed{4} (3 in the other case)",
        "\\boxed{4}, but I am not certain.",
        "\\boxed{4} (uncertain)",
        "\\boxed{4}; unclear.",
        "Maybe.\n\\boxed{4}",  # a hedge in the sentence before the box's line
        "perhaps\n\\boxed{4}",
        "Probably:\n\n$$\\boxed{4}$$",
    ],
)
def test_hedge_words_next_to_the_box_and_on_the_line_before_score_0(text):
    assert math_scores(text)["boxed"] == 0.0
    assert math_scores(text.replace("\\boxed{4}", "\nAnswer: 4").replace("$$", ""))["answer_line"] == 0.0


@pytest.mark.parametrize("text", ["So:\n\\boxed{4}", "The result follows.\n\\boxed{4}", "Step 2. Add.\n\n\\boxed{4}"])
def test_a_plain_sentence_before_the_box_keeps_1(text):
    assert math_scores(text)["boxed"] == 1.0
    assert math_scores(text.replace("\\boxed{4}", "Answer: 4"))["answer_line"] == 1.0


# ---------------------------------------------------------------------------------------------------------------------
# Unicode: the same rules through normalisation
# ---------------------------------------------------------------------------------------------------------------------
CYRILLIC_MAYBE = "m\u0430yb\u0435"  # Cyrillic а and е
CYRILLIC_OR = "\u043er"  # Cyrillic о
GREEK_OR = "\u03bfr"  # Greek omicron
ZW_PERHAPS = "per\u200bhaps"
SOFT_PERHAPS = "per\u00adhaps"
BIDI_MAYBE = "may\u202ebe"
MARKED_MAYBE = "mayb\u0301e"
ACCENTED_MAYBE = "maybé"
FULLWIDTH_MAYBE = "ｍａｙｂｅ"
BOLD_OR = "𝐨𝐫"
JOINER_OR = "o\u2060r"
HEDGES = [CYRILLIC_MAYBE, ZW_PERHAPS, SOFT_PERHAPS, BIDI_MAYBE, MARKED_MAYBE, ACCENTED_MAYBE, FULLWIDTH_MAYBE]
ORS = [CYRILLIC_OR, GREEK_OR, BOLD_OR, JOINER_OR, "ＯＲ"]


@pytest.mark.parametrize("word", HEDGES + ORS)
def test_hedge_words_through_unicode_tricks_score_0(word):
    assert math_scores(f"It is {word} \\boxed{{4}}")["boxed"] == 0.0
    assert math_scores(f"\\boxed{{4 \\text{{ {word} 3}}}}")["boxed"] == 0.0
    assert math_scores(f"Answer: 4 {word} 3")["answer_line"] == 0.0
    assert math_scores(f"\\boxed{{4}}\n{word} 3")["boxed"] == 0.0
    assert mc_score(f"\\boxed{{A {word} B}}") == 0.0


SMALL_CAPITALS = {
    "or": "\u1d0f\u0280",
    "maybe": "\u1d0d\u1d00\u028f\u0299\u1d07",
    "perhaps": "\u1d18\u1d07\u0280\u029c\u1d00\u1d18\ua731",
}


@pytest.mark.parametrize("word", list(SMALL_CAPITALS))
def test_small_capitals_read_as_letters(word):
    written = SMALL_CAPITALS[word]
    assert skeleton(written).lower() == word
    assert math_scores(f"\\boxed{{4}} {written} 3")["boxed"] == 0.0
    assert math_scores(f"Answer: 4 {written} 3")["answer_line"] == 0.0
    assert mc_score(f"\\boxed{{A {written} B}}") == 0.0


def test_latin_look_alikes_fold_one_for_one():
    lookalikes = "\u1d00\u0299\u1d04\u1d05\u026a\u0262\u029c\u028f\u0274\u029f\u1ea1\u0253\u2c65\u01c0"
    assert skeleton(lookalikes) == "ABCDIGHYNLabа|".replace("а", "a")
    assert mc_score("\\boxed{\u1d00}") == 1.0  # a small-capital A is A


def test_an_answer_head_with_confusable_letters_is_a_head():
    cyrillic_a = "\u0410"
    assert math_scores(f"Answer: 4\n{cyrillic_a}nswer: 3")["answer_line"] == 0.0
    assert math_scores(f"\\boxed{{4}}\n{cyrillic_a}nswer: 3")["boxed"] == 0.0
    assert math_scores(f"{cyrillic_a}nswer: 4")["answer_line"] == 1.0
    assert mc_score(f"Answer: A\n{cyrillic_a}nswer: B") == 0.0


def test_unicode_answers_read_as_their_plain_twins():
    assert math_reward(completions=["\\boxed{４２}"], answer=["42"]) == [1.0]  # fullwidth digits
    assert math_reward(completions=["\\boxed{4\u200b2}"], answer=["42"]) == [1.0]  # zero-width inside
    assert math_reward(completions=["\\boxed{x²}"], answer=["x^2"]) == [1.0]  # a superscript is a power, not "x2"
    assert math_reward(completions=["\\boxed{x²}"], answer=["x2"]) == [0.0]
    assert math_reward(completions=["\\boxed{x²³}"], answer=["x^{23}"]) == [1.0]
    assert math_reward(completions=["\\boxed{½}"], answer=["\\frac{1}{2}"]) == [1.0]
    assert math_reward(completions=["\\boxed{a₁}"], answer=["a_1"]) == [1.0]
    assert math_answer_line_reward(completions=["Answer：4"], answer=["4"]) == [1.0]  # fullwidth colon
    assert math_answer_line_reward(completions=["Ａnswer: 4"], answer=["4"]) == [1.0]


def test_normalisation_rules():
    assert normalize_text("a\r\nb\rc\vd\fe\x85f\u2028g\u2029h") == "a\nb\nc\nd\ne\nf\ng\nh"
    assert normalize_text("per\u200bh\u00adaps\ufeff") == "perhaps"
    assert normalize_text("ｘ＋１") == "x+1"
    assert normalize_text("x²+y₁₀") == "x^{2}+y_{10}"
    assert skeleton("mаybe Оr Α") == "maybe Or A"  # Cyrillic а, О and Greek Α
    assert len(skeleton("é" * 20_000)) == 20_000  # one character for one (the numpy path too)
    assert normalize_text("\ufdfa" * (MAX_COMPLETION_CHARS // 10)) is None  # expands 18-fold: past the cap


@pytest.mark.parametrize(
    "text",
    [
        "a" * MAX_COMPLETION_CHARS,
        "a\r" * (MAX_COMPLETION_CHARS // 2),
        "é" * MAX_COMPLETION_CHARS,
        "x\u0301" * (MAX_COMPLETION_CHARS // 2),
        "\u200b" * MAX_COMPLETION_CHARS,
        "²a" * (MAX_COMPLETION_CHARS // 2),
        "\ufdfa" * MAX_COMPLETION_CHARS,
        "¨" * MAX_COMPLETION_CHARS,
        "\u2028" * MAX_COMPLETION_CHARS,
    ],
    ids=["ascii", "cr", "accented", "marks", "zero-width", "superscripts", "expanding", "spacing-mark", "ls"],
)
def test_normalisation_is_linear_and_cheap(text):
    start = time.process_time()
    normalized = normalize_text(text)
    if normalized is not None:
        skeleton(normalized)
    assert time.process_time() - start < 0.25  # ~0.05 s on an idle core; plain ASCII ~1 ms
    assert math_reward(completions=[text], answer=["4"]) == [0.0]


# ---------------------------------------------------------------------------------------------------------------------
# Multiple choice
# ---------------------------------------------------------------------------------------------------------------------
TWO_OPTIONS = [
    "\\boxed{A (or B)}",
    "\\boxed{A|B}",
    "\\boxed{A; B}",
    "\\boxed{A/B}",
    "\\boxed{A \\text{ or } B}",
    "\\boxed{A \\lor B}",
    "\\boxed{A, maybe B}",
    "\\boxed{(A) or (B)}",
    "\\boxed{A vs B}",
    "\\boxed{A & B}",
    "Answer: A, B",
    "Answer: A and/or B",
    "Answer: A or perhaps B",
    "Answer: (A)/(B)",
    "The answer is A (or B).",
    "\\boxed{А or В}",  # Cyrillic А, В
    "\\boxed{Ａ|Ｂ}",  # fullwidth
    "\\boxed{A}\nOr maybe B.",
    "\\boxed{A}\nAlternatively, the answer could be (B).",
    "\\boxed{A}\nAnswer: B",
    "\\boxed{A}\nBut I am not sure.",
    "Answer: A\vmaybe B",
    "\\boxed{A} (B is also possible)",
    "\\boxed{A\\\\B}",
    "\\boxed{A \\text{ and/or } B}",
    "Answer: B\rAnswer: A",  # two different statements, split by any line break
    "Answer: B\u2028Answer: A",
    "Answer: A\x85Answer: B",
    "Answer: B\n\\boxed{A}",  # a statement and a box that disagree
    # any separator between two standalone letters: dashes, bars, slashes, LaTeX relations, other scripts' words
    "\\boxed{A \\mid B}",
    "\\boxed{A\u2013B}",
    "\\boxed{A \\vert B}",
    "\\boxed{A \\setminus B}",
    "\\boxed{A \\backslash B}",
    "\\boxed{A\\|B}",
    "Answer: A\u2215B",
    "Answer: A\u2223B",
    "Answer: A\u01c0B",
    "Answer: A \u2016 B",
    "Answer: A \u2014 B",
    "Answer: A \u6216 B",  # Chinese "or"
    "\\boxed{\u1d00|\u0299}",  # small capitals
    "\\boxed{A}\nFinal answer - B",
    "\\boxed{A} (though B is also plausible)",
    # a second letter as the subject of a clause that endorses it, or reached through "or", "/", "|"
    "Answer: A, B is also correct",
    "Answer: A; B is right",
    "Answer: A and B are both correct",
    "Answer: A or B is correct",
    "Answer: A / B is wrong",
    "Answer: A, B works too",
]


@pytest.mark.parametrize("text", TWO_OPTIONS)
def test_multiple_choice_naming_two_options_scores_0(text):
    assert mc_score(text, "A") == 0.0
    assert mc_score(text, "B") == 0.0


@pytest.mark.parametrize(
    "text",
    [
        "\\boxed{A}",
        "\\boxed{А}",  # Cyrillic А is A
        "\\boxed{Ａ}",  # fullwidth
        "\\boxed{\\text{(A)}}",
        "Answer: A",
        "Answer: (A) Paris",
        "Answer: A. B is wrong.",
        "I think the answer is (A) because B is wrong",
        "\\boxed{A}\nThe answer is A.",
        "\\boxed{A}\nAnswer: A",
        "Answer: A, I think",
        "\\boxed{Ｐａｒｉｓ}",  # an option's text, fullwidth
        "Answer: A - Paris",
        "Answer: A. Paris",
        "Answer: A: Paris",
        # a letter that is the subject of a clause is not a second chosen option
        "The answer is A, and D is wrong.",
        "The answer is A (B is London).",
        "The answer is A - D is Berlin.",
        "The answer is A; B, C and D are wrong.",
        "The answer is A; D is a distractor.",
    ],
)
def test_multiple_choice_correct_twins_score_1(text):
    assert mc_score(text, "A") == 1.0


def test_multiple_choice_hedge_after_the_answer_scores_0_without_another_option():
    """A hedge word after the final answer weighs the choice itself (module docstring): 0 even with no other option."""
    assert mc_score("\\boxed{A}\nThis is likely the intended answer.") == 0.0


def test_extract_choice_reads_normalised_text():
    assert extract_choice("\\boxed{В}", OPTIONS) == "B"  # Cyrillic В
    assert extract_choice("Answer: В or С", OPTIONS) is None
    assert extract_choice("\\boxed{L\u200bondon}", OPTIONS) == "B"


# ---------------------------------------------------------------------------------------------------------------------
# Bounds: the cost pre-check
# ---------------------------------------------------------------------------------------------------------------------
COSTLY = {
    "factorial of a product or power": [
        "(9999^{2})!",
        "(99999*99999)!",
        "10^{10}!",
        "(10^{5})!",
        "\\left(10^{7}\\right)!",
    ],
    "double factorial": ["99999!!", "(10^{6})!!"],
    "factorial of a factorial": ["(10!)!", "(n!)!", "((5!)!)!"],
    "gamma": [
        "\\Gamma(10^{6})",
        "\\operatorname{Gamma}(99999)",
        "\\Gamma\\left(10^{7}\\right)",
        "\\mathrm{\\Gamma}(10^7)",
    ],
    "binomial": ["\\binom{10^{9}}{3}", "\\dbinom{10^{6}}{500000}", "{10^{6} \\choose 5000}", "\\binom{n}{10^{7}}"],
    "sum and product bounds": ["\\sum_{k=1}^{10^{10}} k", "\\sum_{k=1}^{10^{7}} k!", "\\prod_{k=1}^{100000} k"],
    "towers in ^": ["9^{9^{9^{9}}}", "9^9^9", "{9}^{9}^{9}", "{{9}}^{{9}^{9}}", "2^{2^{2^{2^{2^{2}}}}}"],
    "towers in ** and arrows": ["9**9**9", "2**2**2**2**2**2", "3\\uparrow\\uparrow 4", "9 ↑ 9 ↑ 9"],
    "factorial in an exponent": ["2^{100!}", "2^{n!}", "9^{9!}"],
    "fraction of a tower": ["\\frac{9^{9^{9}}}{2}", "\\tfrac{1}{9^{9^{9}}}", "\\frac12 e^{e^{e^{10}}}"],
    "powers of sums": ["(x+1)^{1000}", "(1+i)^{1000}", "(2+\\sqrt{3})^{10000}"],
    "functions of huge numbers": ["\\sin(10^{1000})", "\\cos(9^{9^{5}})", "\\exp(\\exp(100))", "\\log(10^{10^{5}})"],
    "huge products": ["(2^{100000})^{100000}", "(10^{100000})^{20}"],
    "deep nesting": ["(" * 200 + "1" + ")" * 200, "\\sqrt{" * 100 + "2" + "}" * 100],
    # exponents above MAX_EXPONENT (10,000) on integer, rational and symbolic bases
    "exponents above 10,000": [
        "9^{99999}",
        "(\\frac13+\\frac17)^{99999}",
        "x^{99999}",
        "\\lfloor 10^{99999}\\pi\\rfloor",
    ],
    "powers of numbers that are not rational": ["\\sin(1)^{99999}", "\\sin(1)^{100}", "\\pi^{99999}", "e^{500}"],
    "terms of sums, products and integrals": [
        "\\sum_{k=1}^{100} k^{99999}",
        "\\prod_{k=1}^{100} k^{999}",
        "\\int_0^1 x^{99999} dx",
        "\\int_0^1 x^{500} dx",
    ],
    "binomials above 10,000": ["\\binom{99999}{50000}", "{99999 \\choose 50000}"],
    "nested functions": ["\\sin(" * 6 + "x" + ")" * 6, "\\sin(" * 9 + "x" + ")" * 9, "\\log(" * 8 + "x" + ")" * 8],
}
# Measured on an idle core before they were refused (math-verify, warm): 9^{99999} 1.1 s, \binom{99999}{50000} 0.96 s,
# \sin(1)^{100} 1-2 s, \sin(...(x)) 8 deep 0.9-3 s; refused now, each answers_match returns in < 0.1 s.
SLOW_BEFORE = [
    "\\sin(1)^{99999}", "\\sum_{k=1}^{100} k^{99999}", "\\int_0^1 x^{99999} dx", "9^{99999}", "\\prod_{k=1}^{100} k^{999}",
    "\\binom{99999}{50000}", "(\\frac13+\\frac17)^{99999}", "\\lfloor 10^{99999}\\pi\\rfloor",
    "\\sin(" * 8 + "x" + ")" * 8,
]  # fmt: skip
FINE = [
    "2^{16}^{2}", "{2}^{3}", "x^2^3", "e^{i\\pi}", "3\\times10^8", "5!", "(n+1)!", "10!",
    "\\binom{10}{3}", "\\binom{n}{2}", "\\frac{1}{2}", "\\frac12", "[1,2)", "(x+1)^2", "(1-\\frac{1}{2})^{20}",
    "\\sum_{k=1}^{\\infty} \\frac{1}{k^2}", "\\sum_{k=1}^{10} k", "\\log_{2}(2^{64})", "\\Gamma(\\frac{1}{2})",
    "\\{1, 2, 3\\}", "x \\in (0, \\infty)", "12.5\\%", "30^\\circ", "\\sqrt{2}^{10}", "2^{10}", "2^{100}", "2^{10000}",
    "10^{10000}", "x^{2}+1", "\\binom{100}{50}", "\\sum_{k=1}^{100} k^{2}", "\\int_0^1 x^{2} dx", "\\sin(\\sin(x))",
    "\\pi^{2}", "\\sin(1)^{2}", "(1+\\sqrt{2})^{16}", "\\sqrt{\\log(\\sin(x))}",
]  # fmt: skip


@pytest.mark.parametrize("kind", COSTLY)
def test_costly_answers_are_refused_before_math_verify(kind):
    for answer in COSTLY[kind]:
        assert pool_module._too_costly(answer), answer
        # superscripts are read as powers: the same huge numbers written with them
    assert pool_module._too_costly(normalize_text("9⁹⁹⁹⁹⁹⁹"))
    assert pool_module._too_costly(normalize_text("(9999²)!"))


def test_ordinary_answers_pass_the_cost_pre_check():
    assert [answer for answer in FINE if pool_module._too_costly(answer)] == []
    completions = ["\\boxed{5!}", "\\boxed{2^{10}}", "\\boxed{\\binom{10}{3}}", "\\boxed{\\frac{10!}{2 \\cdot 9!}}"]
    assert math_reward(completions=completions, answer=["120", "1024", "120", "5"]) == [1.0] * 4


def test_answers_that_stalled_math_verify_return_at_once():
    for answer in SLOW_BEFORE:
        assert pool_module._too_costly(answer), answer
        start = time.perf_counter()
        assert answers_match(answer, "7") is False
        assert time.perf_counter() - start < 0.1, answer


def test_the_cost_reader_is_fast_on_any_answer():
    start = time.process_time()
    for answer in ["(" * 1000, "{" * 1000, "^" * 1000, "9^" * 500, "\\sin" * 250, "!" * 1000, "1+" * 500, "x" * 1000]:
        assert isinstance(pool_module._too_costly(answer), bool)
    assert time.process_time() - start < 0.2


def test_equal_boxes_are_compared_once_and_different_forms_are_capped():
    same = "\\boxed{\\frac{1}{2}}\n" * MAX_STATED_ANSWERS
    start = time.perf_counter()
    assert math_reward(completions=[same], answer=["0.5"]) == [1.0]
    assert time.perf_counter() - start < 0.5
    forms = "".join(f"\\boxed{{\\frac{{{i}}}{{{2 * i}}}}}" for i in range(1, MAX_STATED_ANSWERS + 1))
    start = time.perf_counter()
    assert math_reward(completions=[forms], answer=["0.5"]) == [0.0]  # 1,000 forms of 1/2: not one final answer
    assert time.perf_counter() - start < 0.5
    few = "".join(f"\\boxed{{\\frac{{{i}}}{{{2 * i}}}}}" for i in range(1, MAX_VERIFIED_ANSWERS + 1))
    assert math_reward(completions=[few], answer=["0.5"]) == [1.0]


def test_batches_keep_their_order_and_count_malformed():
    reset_malformed_counts()
    completions = ["\\boxed{\\frac{1}{2}}", "", "\\boxed{0.25}", "\\boxed{\\frac{2}{4}}", None, "\\boxed{0.5}"] * 3
    scores = math_reward(completions=completions, answer=["1/2"] * len(completions))
    assert scores == [1.0, 0.0, 0.0, 1.0, 0.0, 1.0] * 3
    assert malformed_counts() == {"math": 6}


# ---------------------------------------------------------------------------------------------------------------------
# Bounds: wall time of whole batches, in a subprocess
# ---------------------------------------------------------------------------------------------------------------------
ROOT = Path(__file__).resolve().parent.parent
MARGIN_S = 2.0
"""Added to 0.5 s per completion for a busy machine (the subprocess's start-up is not timed)."""


HANGING = 4
"""Hostile completions in the deadline test (each followed in its batch by an honest one)."""

TIMED_SCRIPT = f"""
import json, time
from healtrl.rewards import math_reward
from healtrl.rewards import _math_verify_pool as pool
from tests.test_reward_hedges_bounds import COSTLY

workers = pool.MATH_VERIFY_WORKERS
warm = [f"\\\\boxed{{{{\\\\frac{{{{{{k}}}}}}{{{{{{2 * k}}}}}}}}}}" for k in range(1, 2 * workers + 1)]
assert math_reward(completions=warm, answer=["0.5"] * len(warm)) == [1.0] * len(warm)  # start-up: not timed
start = time.perf_counter()
fresh = pool._Worker()
assert fresh.ask(b'["1", ["1"], 5]\\n', 60.0)
fresh.kill()
startup = time.perf_counter() - start
kills = []
kill = pool._Worker.kill
pool._Worker.kill = lambda self: (kills.append(1), kill(self))[1]


def timed(completions, answers):
    kills.clear()
    start = time.perf_counter()
    scores = math_reward(completions=completions, answer=answers)
    seconds = time.perf_counter() - start
    twins = math_reward(completions=["\\\\boxed{{\\\\frac{{1}}{{2}}}}"] * 4, answer=["0.5"] * 4)
    return {{"scores": scores, "seconds": seconds, "twins": twins, "kills": len(kills), "startup": startup}}


results = {{}}
costly = [f"\\\\boxed{{{{{{answer}}}}}}" for answers in COSTLY.values() for answer in answers]
results["costly"] = timed(costly, ["1"] * len(costly))
# The pre-check off and the per-completion timeout back at 10 s: power towers reach math-verify and hang it.
pool._too_costly = lambda answer: False
pool.MATH_VERIFY_TIMEOUT_S = 10.0
hostile = ["\\\\boxed{{9^{{9^{{9^{{9}}}}}}}}"] * {HANGING}
results["hanging"] = timed(hostile + ["\\\\boxed{{\\\\frac{{3}}{{6}}}}"] * {HANGING}, ["0.5"] * {2 * HANGING})
print(json.dumps(results))
"""


@pytest.fixture(scope="module")
def timings() -> dict:
    """Run `TIMED_SCRIPT` in a fresh interpreter: it starts every math-verify worker and times a fresh worker's
    start-up (none of it timed), then times `math_reward` on a batch of costly answers, and on a batch whose hostile
    answers hang math-verify (the pre-check off), counting the workers it killed (each is replaced by a fresh one,
    whose start-up the bound does not count); after each batch it scores correct twins."""
    done = subprocess.run([sys.executable, "-c", TIMED_SCRIPT], capture_output=True, text=True, timeout=150, cwd=ROOT)
    assert done.returncode == 0, done.stderr[-2000:]
    return json.loads(done.stdout.strip().splitlines()[-1])


def test_a_batch_of_costly_answers_returns_in_time(timings):
    result = timings["costly"]
    n = len(result["scores"])
    assert n == sum(map(len, COSTLY.values()))
    assert result["scores"] == [0.0] * n and result["kills"] == 0  # refused before math-verify
    assert result["seconds"] < 0.5 * n + MARGIN_S, result
    assert result["twins"] == [1.0] * 4


def test_the_batch_deadline_holds_when_answers_hang_math_verify(timings):
    """The hanging batch returns within 0.5 s per completion, plus the start-up of the workers that replace the hung
    ones (without the deadline: 10 s per hung answer and worker), and its honest completions, after the hostile
    ones, still verify."""
    result, n = timings["hanging"], HANGING
    assert result["scores"] == [0.0] * n + [1.0] * n
    assert 1 <= result["kills"] <= n
    bound = 0.5 * 2 * n + result["kills"] * result["startup"] + MARGIN_S
    assert result["seconds"] < bound, result
    assert result["twins"] == [1.0] * 4  # fresh workers took over


MC_TAIL_ENDORSED = [
    "\\boxed{C}\nB works too.",
    "\\boxed{C}\n(B is also defensible)",
    "Answer: C\nB is equally right.",
    "\\boxed{C}\nOption D would be acceptable as well.",
    "\\boxed{C}\nB is true too.",
]
MC_TAIL_HONEST = [
    "\\boxed{C}\nA is also wrong.",
    "\\boxed{C}\nB is not correct, since Berlin is in Germany.",
    "\\boxed{C}\nI think C is right; B is Berlin.",
    "\\boxed{C}\nC is right but B is Berlin.",
    "Answer: C\nOption A is London, which is incorrect.",
]


@pytest.mark.parametrize("text", MC_TAIL_ENDORSED)
def test_multiple_choice_another_option_endorsed_after_the_answer_scores_0(text):
    assert mc_score(text, "C") == 0.0


@pytest.mark.parametrize("text", MC_TAIL_HONEST)
def test_multiple_choice_other_options_discussed_after_the_answer_keep_1(text):
    assert mc_score(text, "C") == 1.0
