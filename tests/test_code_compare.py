"""Code tests compare like a careful grader (healtrl/rewards/code.py, healtrl/rewards/_assert_tests.py): integers
exactly, floats with the spec's tolerance (exact decimal values by default, LiveCodeBench's rule), strings exactly after
LiveCodeBench's whitespace normalisation, strict types in functional tests, and no numpy broadcasting in the judge of
assert-style tests."""

from __future__ import annotations

import importlib.util
import json
import time
from decimal import Decimal

import pytest

from healtrl.rewards.code import _stdout_matches, _value_matches, make_code_reward, run_tests
from healtrl.rewards.sandbox import SandboxLimits
from tests.helpers import evalplus_assertion_test, sandbox_expected

needs_sandbox = pytest.mark.skipif(not sandbox_expected(), reason="the code sandbox is built for Linux")
needs_numpy = pytest.mark.skipif(importlib.util.find_spec("numpy") is None, reason="numpy not installed")

LIMITS = SandboxLimits(timeout=5.0, max_output_bytes=1 << 16)
TOL6 = Decimal("0.000001")
BIG = str(10**18 + 7)

# (program's stdout, expected output, float tolerance, passes)
STDOUT_CASES = [
    # integers: exact, however large
    ("998244352\n", "998244352", 0, True),
    ("998244353\n", "998244352", 0, False),
    ("998244353\n", "998244352", TOL6, False),  # a tolerance never applies to integers
    (BIG, BIG, 0, True),
    (str(10**18), BIG, TOL6, False),
    ("1" + "0" * 5000, "1" + "0" * 5000, 0, True),  # beyond int()'s 4,300 digits: compared as digit strings
    ("1" + "0" * 4999 + "1", "1" + "0" * 5000, 0, False),
    ("-7", "-7", 0, True),
    ("7", "-7", 0, False),
    # an integer printed as a float fails; sign and leading zeros are the same integer (as in LiveCodeBench)
    ("5.0", "5", 0, False),
    ("5.", "5", 0, False),
    ("5e0", "5", 0, False),
    ("1e18", str(10**18), 0, False),
    ("+5", "5", 0, True),
    ("005", "5", 0, True),
    ("-0", "0", 0, True),
    ("0x5", "5", 0, False),
    ("1_000", "1000", 0, False),
    ("٥", "5", 0, False),  # other scripts' digits are not ASCII integers
    # floats: exact decimal values by default, the spec's tolerance otherwise
    ("2.5", "2.50", 0, True),
    ("3", "3.0", 0, True),  # a float's value may be printed as an integer
    ("0.3333333", "0.33333333", 0, False),
    ("0.3333333", "0.33333333", TOL6, True),
    ("0.333", "0.33333333", TOL6, False),
    ("1000000.5", "1000000.0", TOL6, True),  # relative error 5e-7
    ("1000002.5", "1000000.0", TOL6, False),
    ("1.0000005e-9", "0.0", TOL6, True),  # absolute error below 1e-6
    ("1e-5", "0.0", TOL6, False),
    ("1.5E+3", "1500.0", 0, True),
    ("1e999999999", "1e999999999", 0, True),  # huge exponents compare as decimals, fast
    ("1e999999999", "1.0", TOL6, False),
    ("1e99999999999999999999", "1.0", TOL6, False),  # beyond Decimal's exponents: not a number
    ("-0.0", "0.0", 0, True),
    # nan and inf: never equal a number; equal only the same literal
    ("nan", "nan", 0, True),
    ("nan", "1.5", TOL6, False),
    ("inf", "1e400", TOL6, False),
    ("inf", "inf", 0, True),
    ("Infinity", "inf", 0, False),
    ("1.5", "nan", TOL6, False),
    # strings: exact after whitespace normalisation
    ("Yes", "Yes", 0, True),
    ("YES", "Yes", 0, False),
    ("Yes.", "Yes", 0, False),
    ("  1   2  \n\n", "1 2", 0, True),  # surrounding whitespace, a trailing newline, runs of spaces
    ("1 2\r\n3\r\n", "1 2\n3\n", 0, True),  # CRLF line ends
    ("1 2\n3", "1 2 3", 0, False),  # lines count
    ("1 2 3", "1 2\n3", 0, False),
    ("a\n\nb", "a\nb", 0, False),  # an empty line inside the output counts
    ("1\r2", "1\n2", 0, False),  # lines split on "\n" only
    ("1 2", "1 2 0", 0, False),
    ("", "", 0, True),
    ("\n", "0", 0, False),
    ("abc def", "abc  def", 0, True),
]


@pytest.mark.parametrize(("got", "expected", "tolerance", "passes"), STDOUT_CASES, ids=range(len(STDOUT_CASES)))
def test_stdout_comparison(got, expected, tolerance, passes):
    assert _stdout_matches(got, expected, Decimal(tolerance)) is passes


def test_stdout_without_output_fails():
    assert _stdout_matches(None, "") is False


# (JSON of the returned value, expected JSON, float tolerance, passes)
VALUE_CASES = [
    ("3", "3", 0, True),
    ("4", "3", 0, False),
    (BIG, BIG, 0, True),
    ("1e18", BIG, TOL6, False),  # a float never equals an integer
    ("1000000000000000000.0", str(10**18), TOL6, False),
    ("5.0", "5", 0, False),
    ("5", "5.0", 0, True),  # an expected float is matched by an integer of its value
    (BIG, "1e18", 0, False),
    (BIG, "1e18", TOL6, True),
    ("true", "1", 0, False),  # True is not 1
    ("1", "true", 0, False),
    ("1.0", "true", 0, False),
    ("false", "0", 0, False),
    ("true", "true", 0, True),
    ("null", "0", 0, False),
    ("null", "null", 0, True),
    ('"1"', "1", 0, False),
    ('"abc"', '"abc"', 0, True),
    ('"abc "', '"abc"', 0, False),  # strings exactly
    ("0.30000000000000004", "0.3", 0, False),  # LiveCodeBench compares floats exactly too
    ("0.30000000000000004", "0.3", TOL6, True),
    ("0.3001", "0.3", TOL6, False),
    ("NaN", "NaN", 0, True),
    ("NaN", "1.5", TOL6, False),
    ("1.5", "NaN", TOL6, False),
    ("Infinity", "Infinity", 0, True),
    ("-Infinity", "Infinity", 0, False),
    ("Infinity", "1e308", TOL6, False),
    ("1e308", "Infinity", TOL6, False),
    # containers: element by element with the same rules
    ("[1, [2, 3.0]]", "[1, [2, 3.0]]", 0, True),
    ("[1, [2, 3]]", "[1, [2, 3.0]]", 0, True),
    ("[1, [2.0, 3]]", "[1, [2, 3.0]]", 0, False),
    ("[1, [true, 3]]", "[1, [1, 3]]", 0, False),
    ("[[1, 2]]", "[1, 2]", 0, False),
    ("[1, 2, 3]", "[1, 2]", 0, False),
    ("[]", "0.5", 0, False),
    ("[0.5]", "0.5", 0, False),
    ('{"a": [1, 2]}', '{"a": [1, 2]}', 0, True),
    ('{"a": [1, true]}', '{"a": [1, 1]}', 0, False),
    ('{"a": 1, "b": 2}', '{"a": 1}', 0, False),
    ("[" * 500 + "1" + "]" * 500, "[" * 500 + "1" + "]" * 500, 0, True),  # deep nesting: compared iteratively
    ("[" * 500 + "true" + "]" * 500, "[" * 500 + "1" + "]" * 500, 0, False),
    ("[" * 100_000 + "]" * 100_000, "[]", 0, False),  # too deep for json: fails, does not raise
    ("not json", "1", 0, False),
]


@pytest.mark.parametrize(("got", "expected", "tolerance", "passes"), VALUE_CASES, ids=range(len(VALUE_CASES)))
def test_functional_comparison(got, expected, tolerance, passes):
    assert _value_matches(got, expected, Decimal(tolerance)) is passes


def test_value_without_result_fails():
    assert _value_matches(None, "null") is False


STDIO = {"kind": "stdio", "inputs": ["1\n"], "outputs": ["998244352\n"]}


def test_spec_keys_are_checked():
    # a misspelt or out-of-range option is refused with a message naming it (no sandbox run: the spec is read first)
    report = run_tests("print(1)", {**STDIO, "float_tol": 1e-6}, LIMITS)
    assert report.status == "bad_spec" and "float_tol" in report.detail and "float_tolerance" in report.detail
    for bad in (-1e-6, 1, 2.5, True, "1e-6", None, float("nan")):
        report = run_tests("print(1)", {**STDIO, "float_tolerance": bad}, LIMITS)
        assert report.status == "bad_spec" and "float_tolerance must be a number in [0, 1)" in report.detail, bad
    assert run_tests("x", {"kind": "assert", "test": "", "entry_point": "f", "float_tolerance": 0}).status == "bad_spec"


HALVE = {
    "kind": "assert",
    "prompt": "def f(x):\n",
    "test": evalplus_assertion_test([[1.0], [5.0]], [0.5, 2.5]),
    "entry_point": "f",
}
PAIR = {
    "kind": "assert",
    "prompt": "def f(x):\n",
    "test": evalplus_assertion_test([[1.0], [3.0]], [[0.5, 0.5], [1.5, 1.5]]),
    "entry_point": "f",
}
# numpy's own behaviour, checked inside the judge: the wrapped functions refuse broadcasting, keep the rest
NUMPY_RULES = {
    "kind": "assert",
    "prompt": "def f(x):\n",
    "entry_point": "f",
    "test": (
        "import numpy as np\n"
        "from numpy import allclose\n"
        "from numpy.testing import assert_allclose\n\n"
        "def refused(fn, *args, **kwargs):\n"
        "    try:\n        fn(*args, **kwargs)\n    except AssertionError:\n        return True\n    return False\n\n"
        "def check(candidate):\n"
        "    assert candidate(1) == 1\n"
        "    assert not np.allclose([], 0.5) and not allclose([], 0.5)\n"
        "    assert not np.allclose(a=[], b=0.5) and not np.allclose([], b=0.5)\n"
        "    assert not np.allclose([[0.5], [0.5]], [0.5, 0.5])\n"
        "    assert not np.allclose([0.5, 0.5, 0.5], 0.5) and not np.allclose([[0.5]], [0.5])\n"
        "    assert not np.allclose(True, 1.0) and not np.array_equal([True], [1])\n"
        "    assert not np.isclose([], 1.0).all() and not np.array_equiv([1, 1], 1)\n"
        "    assert refused(np.testing.assert_allclose, [], 3.5) and refused(assert_allclose, [[1.0]], [1.0])\n"
        "    assert refused(np.testing.assert_array_equal, [], 0) and refused(np.testing.assert_equal, [1], [[1]])\n"
        "    assert refused(np.testing.assert_almost_equal, [0.5], 0.5)\n"
        "    assert np.allclose([0.5, 1.0], (0.5, 1.0000000001)) and np.allclose(np.array([1.0, 2.0]), [1, 2])\n"
        "    assert np.allclose(0.5, np.float64(0.5)) and np.allclose([[1.0, 2.0]], np.array([[1.0, 2.0]]))\n"
        "    assert np.array_equal([], []) and np.isclose(1.0, 1.0 + 1e-12) and not np.allclose([1.0], [2.0])\n"
        "    assert not refused(np.testing.assert_allclose, [1.0, 2.0], [1.0, 2.0 + 1e-9])\n"
        "    assert refused(np.testing.assert_allclose, [1.0, 2.0], [1.0, 2.1])\n"
    ),
}
FUNCTIONAL = {"kind": "functional", "fn_name": "f", "inputs": ["3"], "outputs": [BIG]}
FLOATS = {"kind": "functional", "fn_name": "f", "inputs": ["3"], "outputs": ["[0.5, 1.5]"], "float_tolerance": 1e-6}


@needs_sandbox
@needs_numpy
def test_end_to_end_scores():
    cases = [  # (program, spec, expected score)
        ("print(998244353)", STDIO, 0.0),
        ("print(998244352.0)", STDIO, 0.0),
        ("print(998244352)", STDIO, 1.0),
        ("def f(x):\n    return 1e18\n", FUNCTIONAL, 0.0),
        ("def f(x):\n    return True if x else 0\n", {**FUNCTIONAL, "outputs": ["1"]}, 0.0),
        ("def f(x):\n    return {1, 2}\n", {**FUNCTIONAL, "outputs": ["[1, 2]"]}, 0.0),  # not JSON: fails
        ("def f(x):\n    return 10**18 + x + 4\n", FUNCTIONAL, 1.0),
        ("import numpy as np\ndef f(x):\n    return np.int64(10**18 + 7)\n", FUNCTIONAL, 1.0),  # numpy scalar
        ("class Solution:\n    def f(self, x):\n        return (0.5, 1.5 + 1e-9)\n", FLOATS, 1.0),  # tuple: list
        ("def f(x):\n    return []\n", HALVE, 0.0),
        ("def f(x):\n    return [x / 2]\n", HALVE, 0.0),
        ("def f(x):\n    return [[x / 2]]\n", HALVE, 0.0),
        ("def f(x):\n    return x / 2\n", HALVE, 1.0),
        ("def f(x):\n    return [[x / 2], [x / 2]]\n", PAIR, 0.0),  # right length, wrong nesting, broadcastable
        ("def f(x):\n    return [[x / 2, x / 2]]\n", PAIR, 0.0),
        ("def f(x):\n    return x / 2\n", PAIR, 0.0),
        ("def f(x):\n    return (x / 2, x / 2)\n", PAIR, 1.0),
        ("def f(x):\n    return x\n", NUMPY_RULES, 1.0),
    ]
    reward = make_code_reward(limits=LIMITS, workers=4)
    completions = [f"```python\n{program}\n```" for program, _, _ in cases]
    scores = reward(completions=completions, tests=[json.dumps(spec) for _, spec, _ in cases])
    wrong = {program: (score, want) for (program, _, want), score in zip(cases, scores) if score != want}
    assert wrong == {}


def test_make_code_reward_sandbox_mode(monkeypatch):
    """`sandbox=` is checked when the reward is built, and "strict" reaches the sandbox's isolation check at the
    reward's call (which refuses there when part of the isolation is missing: tests/test_sandbox_isolation.py)."""
    from healtrl.rewards import code as code_module

    with pytest.raises(ValueError, match="sandbox must be one of namespaces, strict"):
        code_module.make_code_reward(sandbox="loose")
    asked = []

    def refusing(strict=None):
        asked.append(strict)
        if strict:
            raise RuntimeError("strict mode refuses: missing a private file-system view")
        return "namespaces"

    monkeypatch.setattr(code_module, "isolation_level", refusing)
    with pytest.raises(RuntimeError, match="strict mode refuses"):
        code_module.make_code_reward(sandbox="strict")(completions=["print(1)"], tests=[None])
    assert code_module.make_code_reward()(completions=["print(1)"], tests=[None]) == [0.0]
    assert asked == [True, None]


def test_a_batch_of_endless_loops_stops_at_the_batch_deadline(monkeypatch):
    """Eight endless loops after one honest program, one at a time, 2 s each: without the batch deadline the call
    takes ~17 s; with it, max(2 s, 0.5 s x 9) = 4.5 s. The honest program, run first (the random run order is fixed
    to the positions here), keeps its 1."""
    from healtrl.rewards import code as code_module

    monkeypatch.setattr(code_module, "_run_order", lambda n: list(range(n)))

    spec = json.dumps({"kind": "stdio", "inputs": ["1\n"], "outputs": ["2"]})
    reward = make_code_reward(SandboxLimits(timeout=2.0), workers=1)
    reward(completions=["print(int(input()) + 1)"], tests=[spec])  # the sandbox's one-time probe, not timed
    before = code_module.deadline_counts()
    logged = []
    completions = ["print(int(input()) + 1)"] + ["while True:\n    pass"] * 8
    start = time.monotonic()
    scores = reward(completions=completions, tests=[spec] * 9, log_metric=lambda k, v: logged.append((k, v)))
    elapsed = time.monotonic() - start
    assert scores == [1.0] + [0.0] * 8
    assert elapsed < 4.5 + 3.0, elapsed  # the deadline plus the kill and a loaded machine's slack
    after = code_module.deadline_counts()
    late = after["completions"] - before["completions"]
    assert 5 <= late <= 8 and after["batches"] == before["batches"] + 1, (before, after)
    assert ("rewards/code/deadline", float(late)) in logged


def test_run_order_is_a_fresh_random_permutation():
    from healtrl.rewards.code import _run_order

    orders = [_run_order(8) for _ in range(20)]
    assert all(sorted(order) == list(range(8)) for order in orders)
    assert len({tuple(order) for order in orders}) > 1  # 20 equal draws: probability 8!^-19
    assert any(order != list(range(8)) for order in orders)
    assert _run_order(0) == [] and _run_order(1) == [0]


def test_the_batch_deadline_does_not_always_cut_the_tail(monkeypatch):
    """One worker, 10 completions of 50 ms each and a 0.1 s batch deadline: about 2 run, the rest are cut. Cut by
    position, the cut ones would always be the last 8; in random order, which are cut varies between calls."""
    from healtrl.rewards import code as code_module

    def fake_run_tests(code, spec, limits, cancel=None):
        time.sleep(0.05)
        return code_module.TestReport(passed=1, total=1, status="ok")

    monkeypatch.setattr(code_module, "isolation_level", lambda strict=None: "namespaces")
    monkeypatch.setattr(code_module, "run_tests", fake_run_tests)
    monkeypatch.setattr(code_module, "BATCH_SECONDS_PER_COMPLETION", 0.01)
    reward = code_module.make_code_reward(SandboxLimits(timeout=0.1), workers=1)
    spec = json.dumps({"kind": "stdio", "inputs": [""], "outputs": [""]})
    cut_sets = []
    for _ in range(6):
        scores = reward(completions=["print(1)"] * 10, tests=[spec] * 10)
        cut = frozenset(i for i, s in enumerate(scores) if s == 0.0)
        assert 0 < len(cut) < 10, scores
        cut_sets.append(cut)
    tails = {frozenset(range(10 - len(cut), 10)) for cut in cut_sets}
    assert any(cut not in tails for cut in cut_sets), cut_sets  # by position, every cut is a tail
    assert len(set(cut_sets)) > 1, cut_sets
