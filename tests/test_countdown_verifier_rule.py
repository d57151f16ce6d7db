"""The Countdown verifier's rule as implemented (issue #40): what `check_countdown` accepts and refuses, pinned case by
case, apart from the narrower set of paths the world itself writes (`solutions`, the demonstrations).

The study's runs were scored with this rule, so these tests pin the behaviour rather than the world's conventions: a
change that makes any of them fail changes what the cached runs' rewards mean. Each accepted case that matters is
paired with a refused twin that differs in the one point the case is about.
"""

from __future__ import annotations

import itertools
import random
import statistics
from pathlib import Path

import pytest

from healtrl.toy import countdown
from healtrl.toy.countdown import check_countdown
from healtrl.toy.world import CARD_NOTES

CARD = Path(__file__).resolve().parents[1] / "benchmarks" / "results" / "reasoning_world.md"


@pytest.mark.parametrize(
    "step, matches",
    [
        ("5-3=2", True),  # the world's form: larger operand first, positive result
        ("2+11=13", True),  # smaller operand first: the format does not order the operands
        ("6-6=0", True),  # a zero result can be written
        ("0+11=11", True),  # so can a zero operand
        ("07+2=09", True),  # leading zeros: one or two digits each
        ("3-5=-2", False),  # a negative result cannot be written (no sign)
        ("-3+5=2", False),  # nor a negative operand
        ("60+50=110", False),  # three digits
        ("11*2=22", False),  # only + and -
        ("\uff13+1=4", False),  # a fullwidth digit
        ("11+2=13 ", False),  # the regex itself takes no whitespace (check_countdown strips each step first)
    ],
)
def test_step_format(step, matches):
    assert (countdown._STEP_RE.match(step) is not None) is matches


@pytest.mark.parametrize(
    "numbers, target, completion, ok",
    [
        # Operand order: an addition in either order is accepted; a subtraction with the smaller operand first is not,
        # because its result is negative and cannot be written, or, written without the sign, is wrong arithmetic.
        ((2, 5, 11, 12), 20, "11+2=13,12-5=7,13+7=20", True),
        ((2, 5, 11, 12), 20, "2+11=13,12-5=7,7+13=20", True),
        ((2, 5, 11, 12), 20, "11+2=13,5-12=-7,13+7=20", False),
        ((2, 5, 11, 12), 20, "11+2=13,5-12=7,13+7=20", False),
        # Zero results: made from two equal numbers, usable later in any position, never left over.
        ((2, 9, 6, 6), 11, "2+9=11,6-6=0,11+0=11", True),
        ((2, 9, 6, 6), 11, "2+9=11,6-6=0,11-0=11", True),
        ((2, 9, 6, 6), 11, "2+9=11,6-6=0,0+11=11", True),
        ((2, 9, 6, 6), 11, "6-6=0,2+9=11", False),  # the 0 is left over
        ((2, 9, 6, 6), 11, "2+9=11,6-6=0,0-11=11", False),  # wrong arithmetic (0-11 is -11)
        # Availability: a given number as many times as it is given, a result only once it is made.
        ((2, 9, 6), 11, "2+9=11,6-6=0,11+0=11", False),  # 6 given once, used twice
        ((2, 11, 11), 20, "11+11=22,22-2=20", True),
        ((2, 11), 20, "11+11=22,22-2=20", False),  # 11 given once, used twice
        ((2, 5, 11, 12), 20, "13+7=20,11+2=13,12-5=7", False),  # 13 and 7 used before they are made
        ((2, 5, 11, 12), 20, "11+2=13,12-5=7,13+7=20,20-0=20", False),  # 0 is never made
        ((2, 5, 11, 12), 20, "11+2=13,12-5=7,13+7=20,20+13=33,33-13=20", False),  # 13 was used up
        # The end: exactly one number left, the target.
        ((5, 11, 12), 18, "12+11=23,23-5=18", True),
        ((2, 5, 11, 12), 18, "12+11=23,23-5=18", False),  # 2 is left over
        ((2, 5, 11, 12), 20, "12+11=23,23-5=18,18+2=20,20-0=20", False),  # a step past the target needs a 0
        ((2, 9, 6, 6), 11, "2+9=11,11+6=17,17-6=11", True),  # reaching the target early is fine if all are used
        ((2, 9, 6, 6), 11, "2+9=11,11+6=17", False),  # a 6 left over and 17 is not the target
        # Written form: leading zeros read as their value, whitespace around steps is ignored, nothing else is.
        ((2, 5, 11, 12), 20, "11+02=13,12-05=07,13+07=20", True),
        ((2, 5, 11, 12), 20, " 11+2=13 ,\n12-5=7 , 13+7=20\n", True),
        ((2, 5, 11, 12), 20, "11+2=13,12-5=7,13+7=20,", False),  # trailing comma: an empty step
        ((2, 5, 11, 12), 20, "11+2=13,12-5=7,13+7=20 done", False),  # text after the last step
        ((2, 5, 11, 12), 20, "so 11+2=13,12-5=7,13+7=20", False),  # text before the first step
        ((2, 5, 11, 12), 20, "11+2=13;12-5=7;13+7=20", False),  # another separator
        ((60, 39), 99, "60+39=99", True),
        ((60, 50), 110, "60+50=110", False),  # exact, but 110 has three digits
    ],
)
def test_check_countdown_cases(numbers, target, completion, ok):
    assert check_countdown(numbers, target, completion) is ok


def test_length_cap_is_200_characters():
    """Padding a correct path with spaces keeps it correct up to 200 characters and refuses it beyond."""
    path = "11+2=13,12-5=7,13+7=20"
    assert check_countdown((2, 5, 11, 12), 20, path.ljust(200)) is True
    assert check_countdown((2, 5, 11, 12), 20, path.ljust(201)) is False


def _written_paths(pool: tuple[int, ...]):
    """Every completion made of steps on `pool`'s numbers: any ordered operand pair, + or -, the true result written
    in full (a negative one with its sign), each next pool built by hand, independently of `countdown`'s code."""
    if len(pool) == 1:
        yield pool[0], ()
        return
    for i, j in itertools.permutations(range(len(pool)), 2):
        a, b = pool[i], pool[j]
        rest = [pool[k] for k in range(len(pool)) if k not in (i, j)]
        for op, c in (("+", a + b), ("-", a - b)):
            for value, tail in _written_paths(tuple(sorted(rest + [c]))):
                yield value, (f"{a}{op}{b}={c}",) + tail


def test_verifier_accepts_more_than_the_worlds_paths():
    """For "2,5,11,12>20": of every completion that writes true steps on available numbers, the verifier accepts the 64
    that reach 20 with no negative result; the world's 144 paths include 18 correct ones, all among those 64; the
    other 46 have an addition's smaller operand first or a zero result (numbers the module docstrings cite)."""
    numbers, target = (2, 5, 11, 12), 20
    candidates = {",".join(steps): value for value, steps in _written_paths(tuple(sorted(numbers)))}
    accepted = {text for text in candidates if check_countdown(numbers, target, text)}
    assert accepted == {text for text, value in candidates.items() if value == target and "=-" not in text}
    assert any(value == target and "=-" in text for text, value in candidates.items())  # a refused negative detour
    assert len(accepted) == 64
    assert len(countdown._paths(tuple(sorted(numbers)))) == 144
    world = set(countdown.solutions(numbers, target))
    assert len(world) == 18 and world <= accepted
    for text in accepted - world:
        steps = [countdown._STEP_RE.match(step).groups() for step in text.split(",")]
        assert any(int(a) < int(b) or int(c) == 0 for a, _, b, c in steps), text


def _world_form(step: str) -> bool:
    """Whether a written step has the world's form: the larger (or equal) operand first, a result of at least 1."""
    a, _, b, c = countdown._STEP_RE.match(step).groups()
    return int(a) >= int(b) and 1 <= int(c) < countdown.MAX_VALUE


def test_worlds_paths_and_demonstrations_put_the_larger_operand_first_and_have_no_zero():
    """What the world writes (every problem's `solutions`, and demonstrations right or wrong) keeps the narrower
    form, although the verifier also accepts paths outside it (here a zero-result path for 2,9,6,6>11)."""
    problems = countdown.countdown_problems()
    for numbers, target in problems:
        for path in countdown.solutions(numbers, target):
            assert all(_world_form(step) for step in path.split(",")), (numbers, target, path)
    rng = random.Random(0)
    for _ in range(2000):
        numbers, target = problems[rng.randrange(len(problems))]
        demo = countdown.demonstration(rng, numbers, target, p_correct=0.5)
        assert all(_world_form(step) for step in demo.split(",")), (numbers, target, demo)
    zero_path = "2+9=11,6-6=0,11+0=11"
    assert check_countdown((2, 9, 6, 6), 11, zero_path) and zero_path not in countdown.solutions((2, 9, 6, 6), 11)


def test_a_random_world_path_solves_about_a_quarter():
    """The module docstring's "~24%": the mean over the problems of their share of correct world paths."""
    shares = [
        len(countdown.solutions(numbers, target)) / len(countdown._paths(tuple(sorted(numbers))))
        for numbers, target in countdown.countdown_problems()
    ]
    assert 0.235 <= statistics.mean(shares) < 0.245


def test_card_carries_the_notes_it_is_built_with():
    """The committed card holds `CARD_NOTES` (the verifier rule the study was scored with, and why the build's numbers
    vary by machine) word for word, as `benchmarks/reasoning_world.py` writes them."""
    card = CARD.read_text()
    assert CARD_NOTES
    for paragraph in CARD_NOTES:
        assert paragraph in card
