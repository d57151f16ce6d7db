"""The reasoning world's task families: Countdown (search, several correct paths) and sum chains (one path).

**Countdown** (target domain). A problem gives three or four numbers in 1..12 and a target: "2,5,11,12>20". A
solution combines two available numbers per step with `+` or `-`, writes the step out as `a<op>b=c`, joins the steps
with ",", and uses every given number exactly once, the last result being the target: "11+2=13,12-5=7,13+7=20" and
"12+11=23,23-5=18,18+2=20" solve it; "12+11=23,23-5=18,18+3=21" uses a number that is not available,
"12+11=23,23+5=28,28-2=26" misses the target, "12+11=23,23-5=18,18+2=21" is wrong arithmetic. Three numbers take two
steps (~14 characters), four take three (~22): the difficulty is the number of steps.

Two sets of paths are not the same, and the difference matters when reading a reward:

- *The world's paths* (`_paths`, `solutions`, the reference answer of `countdown_problem`, and every demonstration of
  the warm-up, right or wrong) put the larger operand first in every step and keep every result in [1, `MAX_VALUE`):
  no "2+11=13", no "5-5=0". "2,5,11,12>20" has 144 such paths, 18 of which reach 20. Every problem has at least two
  correct ones, so a policy that tries other first steps can find another way; the target is at least 10 and never
  one of the given numbers. A policy that writes one of the world's paths at random solves ~24% of the problems'
  samples (the mean over the problems of their share of correct paths); one that plans solves them all.
- *What the verifier accepts* (`check_countdown`, and through it `verify_countdown` and the `toy` reward that scored
  the runs of `benchmarks/toy_study.py`) is wider: any step with exact arithmetic on available numbers, in either
  operand order, and zero results, which later steps may use ("2+9=11,6-6=0,11+0=11" solves "2,9,6,6>11"). A
  subtraction with the smaller operand first is refused only because its negative result cannot be written ("3-5=-2"
  is not a step). It accepts 64 completions for "2,5,11,12>20" (written without leading zeros or spaces), the 18
  world paths among them. `check_countdown` states the rule exactly.

**Sum chains** (general domain, another skill: no search, one path). "3+5+2+7" -> "3+5=8,8+2=10,10+7=17": the running
sum written left to right. Three or four terms in 1..9.

Both families are finite, fixed lists (`COUNTDOWN_SIZE`, `SUMCHAIN_SIZE` problems: every three-number Countdown
problem and half as many four-number ones), generated from fixed seeds, so a problem index means the same problem on
every machine. `verify_countdown` is the Countdown reward's check (the `toy`
reward calls it for rows of this family); sum chains are scored by exact match of the whole chain.

`demonstration` writes the imperfect demonstrations the world's warm-up trains on: a random correct path with
probability `p_correct`, else a wrong one (a path with exact arithmetic that ends off target, or, one time in three,
a last step that claims the target with wrong arithmetic), both written as world paths are: the larger operand first
in every step, no zero result.
"""

from __future__ import annotations

import itertools
import random
import re
from collections import Counter
from functools import lru_cache

MAX_NUMBER = 12
"""Given numbers lie in 1..MAX_NUMBER."""
MAX_VALUE = 100
"""Every result of the world's paths (`_steps_from`) lies in [1, MAX_VALUE). The verifier does not read it:
its step format caps each written number at two digits, 0..99."""
OPS = ("+", "-")
COUNTDOWN_SIZE = 892
"""Every three-number problem (595) and 297 four-number ones (`countdown_problems`)."""
SUMCHAIN_SIZE = 4000
FOUR_NUMBER_SHARE = 2 / 3
"""Share of sum chains with four terms; the rest have three."""

# One written step `a<op>b=c` of `check_countdown`: a, b and c are one or two ASCII digits each and carry no sign, so
# every number written lies in 0..99 (a leading zero reads as its value: "07" is 7) and a negative result ("3-5=-2")
# is no step at all; the operator is one of OPS. The operand order is not constrained here or anywhere in the verifier.
# ASCII digits only ([0-9], not \d): int() reads fullwidth, Arabic-Indic or math-bold digits too, so a completion could
# spell a correct path in characters the tokenizer's answer never uses.
_STEP_RE = re.compile(r"^([0-9]{1,2})([+\-])([0-9]{1,2})=([0-9]{1,2})$")
_QUESTION_RE = re.compile(r"^([0-9]{1,2}(?:,[0-9]{1,2}){2,3})>([0-9]{1,2})$")


def _apply(a: int, op: str, b: int) -> int:
    """`a op b` in exact integer arithmetic, in the order given (`a - b` is negative when a < b; an `op` other than "+"
    and "-" multiplies, which neither OPS nor `_STEP_RE` admits). No condition on order or sign: `_steps_from` applies
    the world's (larger first, result in [1, MAX_VALUE)), `check_countdown` only compares with the written result."""
    return a + b if op == "+" else a - b if op == "-" else a * b


def _steps_from(pool: tuple[int, ...]):
    """Every (step text, next pool) of the world's paths from a sorted pool: two operands, larger first, result in
    [1, MAX_VALUE). Narrower than what `check_countdown` accepts (either order, zero results)."""
    seen = set()
    for i, j in itertools.combinations(range(len(pool)), 2):
        a, b = max(pool[i], pool[j]), min(pool[i], pool[j])
        rest = tuple(pool[k] for k in range(len(pool)) if k not in (i, j))
        for op in OPS:
            c = _apply(a, op, b)
            if 1 <= c < MAX_VALUE and (a, op, b) not in seen:
                seen.add((a, op, b))
                yield f"{a}{op}{b}={c}", tuple(sorted(rest + (c,)))


@lru_cache(maxsize=1 << 16)
def _paths(pool: tuple[int, ...]) -> tuple[tuple[int, tuple[str, ...]], ...]:
    """Every full world path (steps from `_steps_from`) from a sorted pool, as (final value, steps)."""
    if len(pool) == 1:
        return ((pool[0], ()),)
    return tuple((value, (step,) + rest) for step, nxt in _steps_from(pool) for value, rest in _paths(nxt))


def solutions(numbers, target: int) -> list[str]:
    """Every correct world path of a Countdown problem, as completion texts ("11+2=13,12-5=7,13+7=20"), sorted: the
    larger operand first in each step, every result in [1, MAX_VALUE). `check_countdown` accepts each of them and more
    (the same steps with an addition's operands swapped, paths through a zero result)."""
    return sorted({",".join(steps) for value, steps in _paths(tuple(sorted(numbers))) if value == target})


def countdown_question(numbers, target: int) -> str:
    """The prompt text: "2,5,11,12>20". No whitespace: transformers 5 reloads a saved qwen2 toy checkpoint's tokenizer
    as `Qwen2Tokenizer`, whose pre-tokenizer drops spaces that the toy tokenizer keeps."""
    return ",".join(map(str, numbers)) + f">{target}"


def parse_countdown(question: str) -> tuple[list[int], int] | None:
    """`(numbers, target)` of a Countdown question, or None when `question` is not one."""
    match = _QUESTION_RE.match(question.strip()) if isinstance(question, str) else None
    if match is None:
        return None
    return [int(n) for n in match[1].split(",")], int(match[2])


def check_countdown(numbers, target: int, completion: str) -> bool:
    """Whether `completion` solves the problem. The rule, as implemented (and as the study's runs were scored):

    - `completion` is a string of at most 200 characters: steps separated by ",", whitespace around each step ignored,
      nothing else (no empty step, no trailing comma, no text before or after).
    - Each step matches `_STEP_RE`: `a+b=c` or `a-b=c`, each number one or two ASCII digits without a sign.
    - Its arithmetic is exact: `c` equals `a + b` or `a - b`, in the order written.
    - `a` and `b` are both available when the step is taken: the pool starts as the multiset of `numbers` (each as
      many times as given); a step removes `a` and `b` and adds `c`. Using a number more often than the pool holds it
      (a given number twice, a result before it is made) refuses the completion.
    - After the last step the pool is exactly one number, `target`; any number left over, a zero included, refuses it.
      (Each step shrinks the pool by one, so a solution has `len(numbers) - 1` steps.)

    Nothing asks for the larger operand first or for a positive result. Accepted: an addition in either order
    ("2+11=13"), a subtraction of equal numbers ("6-6=0"), and a zero result used by a later step ("11+0=11",
    "11-0=11", "0+11=11"). Refused: a subtraction with the smaller operand first, only because "3-5=-2" is not a
    step (the result cannot be written), and "3-5=2" is wrong arithmetic. So it accepts more than `solutions` lists
    (64 completions against 18 for "2,5,11,12>20", counting neither leading zeros nor spaces). Issue #40 reports that
    0.4% of sampled completions depend on the difference (not re-measured here)."""
    if not isinstance(completion, str) or len(completion) > 200:
        return False
    pool = Counter(numbers)
    for step in completion.strip().split(","):
        match = _STEP_RE.match(step.strip())
        if match is None:
            return False
        a, op, b, c = int(match[1]), match[2], int(match[3]), int(match[4])
        if _apply(a, op, b) != c:
            return False
        pool[a] -= 1
        pool[b] -= 1
        if pool[a] < 0 or pool[b] < 0:
            return False
        pool[c] += 1
    return +pool == Counter([target])


def verify_countdown(question: str, completion: str) -> bool:
    """`check_countdown` on a question text ("3,5,7,2>22"); False for anything that is not a Countdown question."""
    parsed = parse_countdown(question)
    return parsed is not None and check_countdown(parsed[0], parsed[1], completion)


def _all_problems(size: int) -> list[tuple[tuple[int, ...], int]]:
    """Every problem of `size` numbers in 1..`MAX_NUMBER` (sorted) whose target is >= 10, not a given number, and has at
    least two correct paths, in a fixed order."""
    problems = []
    for numbers in itertools.combinations_with_replacement(range(1, MAX_NUMBER + 1), size):
        found: dict[int, set] = {}
        for value, steps in _paths(numbers):
            found.setdefault(value, set()).add(steps)
        problems += [(numbers, t) for t in sorted(found) if t >= 10 and t not in numbers and len(found[t]) >= 2]
    return problems


@lru_cache(maxsize=1)
def countdown_problems() -> tuple[tuple[tuple[int, ...], int], ...]:
    """The family's problems `(numbers, target)` in a fixed order: every three-number problem and half as many
    four-number ones, drawn with a fixed seed, the numbers of each in a shuffled order."""
    rng = random.Random("healtrl-toy:countdown")
    three = _all_problems(3)
    four = rng.sample(_all_problems(4), len(three) // 2)
    problems = []
    for numbers, target in three + four:
        numbers = list(numbers)
        rng.shuffle(numbers)
        problems.append((tuple(numbers), target))
    rng.shuffle(problems)
    return tuple(problems)


def countdown_problem(index: int) -> tuple[str, str]:
    """(question, the first correct solution in sorted order) of problem `index`; any correct path earns the reward."""
    numbers, target = countdown_problems()[index]
    return countdown_question(numbers, target), solutions(numbers, target)[0]


def sum_chain(terms) -> str:
    """The written-out running sum: [3, 5, 2] -> "3+5=8,8+2=10"."""
    steps, total = [], terms[0]
    for term in terms[1:]:
        steps.append(f"{total}+{term}={total + term}")
        total += term
    return ",".join(steps)


@lru_cache(maxsize=1)
def sumchain_problems() -> tuple[tuple[int, ...], ...]:
    rng, seen, problems = random.Random("healtrl-toy:sumchain"), set(), []
    while len(problems) < SUMCHAIN_SIZE:
        terms = tuple(rng.randint(1, 9) for _ in range(4 if rng.random() < FOUR_NUMBER_SHARE else 3))
        if terms not in seen:
            seen.add(terms)
            problems.append(terms)
    return tuple(problems)


def sumchain_problem(index: int) -> tuple[str, str]:
    terms = sumchain_problems()[index]
    return "+".join(map(str, terms)), sum_chain(terms)


def wrong_path(rng: random.Random, numbers, target: int) -> str:
    """A demonstration that fails: a full world path (`_paths`: larger operand first, results in [1, MAX_VALUE)) with
    exact arithmetic that ends off target, or (one time in three) such a path whose last step claims the target with
    wrong arithmetic. `check_countdown` refuses both."""
    paths = [steps for value, steps in _paths(tuple(sorted(numbers))) if value != target]
    steps = list(rng.choice(paths))
    if rng.random() < 1 / 3:
        head, _, _ = steps[-1].rpartition("=")
        steps[-1] = f"{head}={target}"
    return ",".join(steps)


def demonstration(rng: random.Random, numbers, target: int, p_correct: float) -> str:
    """One imperfect demonstration: a uniformly drawn correct path of `solutions` with probability `p_correct`, else
    `wrong_path`. Every demonstration puts the larger operand first and has no zero result, though the verifier would
    also accept the other operand order and zero results (`check_countdown`)."""
    if rng.random() < p_correct:
        return rng.choice(solutions(numbers, target))
    return wrong_path(rng, numbers, target)
