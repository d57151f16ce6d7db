"""Code reward: run the completion's program against the task's tests in the sandbox (`healtrl.rewards.sandbox`).

The `tests` column holds a JSON test specification, one of:

* `{"kind": "assert", "test": "def check(candidate): ...", "entry_point": "f", "prompt": "def f(x): ..."}`:
  HumanEval(+) style; the solution passes when `check(f)` returns;
* `{"kind": "stdio", "inputs": [...], "outputs": [...]}`: the program reads each input on stdin and must print the
  expected output; LiveCodeBench's stdin problems;
* `{"kind": "functional", "fn_name": "f", "inputs": [...], "outputs": [...]}`: LeetCode style; each input holds one
  JSON value per line (the arguments of `Solution().f`, else of a top-level `f`), each output one JSON value;
  LiveCodeBench's functional problems.

stdio and functional specs may also state how floats compare:

* `float_tolerance` (a number in [0, 1), default 0): a float is accepted when `|got - expected| <= t * max(1,
  |expected|)` (absolute or relative error at most t, the rule of competitive-programming statements such as "an
  absolute or relative error of at most 1e-6"). The default 0 is LiveCodeBench's own rule: the decimal values must be
  equal. It never applies to integers.

Any other key, or a `float_tolerance` out of range, makes the specification unreadable ("bad_spec": every completion
scores 0.0 and is counted malformed, and a warning names the key and the fix once per process).

Comparison rules (`_stdout_matches`, `_value_matches`; the expected side is the dataset's):

* **stdio**: the whole output and each of its lines are stripped of whitespace (a trailing newline or spaces never
  matter), lines are split on "\\n" only, and the two outputs need the same number of lines. Lines compare token by
  token (whitespace-separated; runs of spaces never matter). A token equal to the expected one passes. Otherwise:
  an expected **integer** token (`[+-]?[0-9]+`, ASCII digits) is matched only by an integer token of the same value
  (`+5`, `05` and `-0` are integer tokens of the values 5, 5 and 0; `5.0`, `5e0` and `5.` are not integer tokens and
  fail); an expected **float** token (a decimal number written with a point or an exponent, ASCII) is matched by any
  decimal number token (integer or float) within `float_tolerance`, compared as exact decimal values (no binary
  rounding; huge exponents are fine); every other expected token (words, `nan`, `inf`, `1/2`...) only by itself.
  So `nan` or `inf` never equals a number, and equals `nan`/`inf` only when the expected token is that literal.
* **functional**: both sides are JSON values (the program's return value is serialised in the sandbox: tuples become
  lists, numpy scalars their Python value; any other value that JSON cannot hold fails the test). Then: a bool only
  equals the same bool (`True` is not `1`), an integer only the same integer (never a float: `1e18` is not
  `10**18 + 7`, nor is `5.0` `5`), `None` only `None`, a string only the same string; an expected float is matched
  by a float or an integer within `float_tolerance` (exact decimal values of both by default), NaN only by NaN and an
  infinity only by the same infinity; lists compare element by element (same length), objects key by key (same keys).

Where this differs from the graders of the datasets' own harnesses:

* LiveCodeBench (`lcb_runner/evaluation/testing_util.py`: `grade_stdio` strips the output and each line, compares
  the lines exactly, else converts every token of both lines with `Decimal` and compares the lists; `grade_call_based`
  compares `prediction == expected` after turning a tuple into a list): there, `5.0` or `5e0` passes for an expected
  `5` (equal decimals), `True` passes for `1` and `1.0` for `1` (Python's `==`), and non-numeric lines compare as whole
  lines (`a  b` fails for `a b`). Here integers are exact, types are strict and every line compares by tokens; the
  float rule is the same by default (exact decimal values) and can be relaxed by the spec.
* EvalPlus (HumanEval+): its `assertion` helper compares with `==`, and for floats (or any given `atol`) with
  `np.allclose(out, exp, rtol=1e-07, atol=atol)` (`np.testing.assert_allclose` in the evaluator), which broadcasts:
  `[]` passes for any float. Assert-style tests run unchanged here, but in the judge numpy's comparison functions
  refuse two sides of different structure (`healtrl.rewards._assert_tests` states the rule and its limits).

A completion scores 1.0 when every test passes and 0.0 otherwise (including crashes, timeouts, exits before the tests
ran and anything else a hostile program may try). Nothing the program can read or patch decides the verdict: the
expected outputs of stdio and functional tests never enter the sandbox (the program's outputs are compared outside
it), and an assert-style test runs in a second sandboxed process, the judge, which calls the program's function over
a pipe and gets back plain data only (`healtrl.rewards._assert_tests` has the design and its limits).

Bounds: each completion's run is bounded by its sandbox limits (`DEFAULT_LIMITS`: 10 s of wall-clock time for all of
its tests), and a batch of n completions by one deadline, `max(limits.timeout, BATCH_SECONDS_PER_COMPLETION * n)`
seconds, after which what still runs is killed and what has not started is skipped (score 0, counted: see
`make_code_reward`). Running a program takes what it takes: unlike the other rewards, a single completion can use
its whole `limits.timeout`.
"""

from __future__ import annotations

import json
import logging
import math
import os
import re
import secrets
import threading
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from decimal import MAX_EMAX, MIN_EMIN, Context, Decimal, InvalidOperation

from ._assert_tests import run_assert_test
from ._common import clean_text as _clean_text
from ._common import column, report
from .sandbox import SANDBOX_ERROR, SandboxLimits, isolation_level, report_sandbox_errors, run_python

__all__ = [
    "BATCH_SECONDS_PER_COMPLETION",
    "DEFAULT_LIMITS",
    "SANDBOX_MODES",
    "TestReport",
    "code_reward",
    "deadline_counts",
    "extract_code",
    "make_code_reward",
    "run_tests",
]

logger = logging.getLogger(__name__)

DEFAULT_LIMITS = SandboxLimits(timeout=10.0, max_output_bytes=16 << 20)
"""Limits of one completion's run (all of its tests together)."""

# The language tag of a fence's opening line ("```python", "``` py3 extra" -> "py3"). The fences themselves are found
# with str.find (`_fences`, `extract_code`): a regex over "```" * n without a newline backtracks quadratically.
_FENCE_LANG = re.compile(r"[ \t]*([A-Za-z0-9_+-]*)")
_FENCE_MARK = re.compile("```")

# Imports that LiveCodeBench-style solutions assume (they are written for a judge that provides them).
_HEADER = (
    "from typing import *\nimport sys, os, math, re, string, heapq, bisect, itertools, functools, collections, copy\n"
    "from collections import *\nfrom heapq import *\nfrom bisect import *\nfrom itertools import *\n"
    "from functools import *\nfrom math import *\nsys.setrecursionlimit(100000)\n"
)

# Runs solution.py (the extracted code) against the inputs in job.json; prints "<nonce> <json outputs>" last.
_IO_HARNESS = r"""
import io, json, os, sys
_nonce = sys.stdin.readline().strip()


def _numpy_scalar(value):
    if type(value).__module__ == "numpy" and getattr(value, "shape", None) == () and hasattr(value, "item"):
        item = value.item()
        if type(item) in (bool, int, float, str):
            return item
    raise TypeError("not JSON data")


_job = json.load(open("job.json", encoding="utf-8"))
_stdout = sys.stdout
try:
    _code = compile(open("solution.py", encoding="utf-8").read(), "solution.py", "exec")
except BaseException:
    _code = None
_results = []
for _k, _input in enumerate(_job["inputs"]):
    if _code is None:
        _results.append(None)
        continue
    with open("stdin_%d.txt" % _k, "w", encoding="utf-8") as _f:
        _f.write(_input if _job["kind"] == "stdio" else "")
    _fd = os.open("stdin_%d.txt" % _k, os.O_RDONLY)
    if _fd != 0:  # fd 0 may have been closed by the previous case (open(0).read())
        os.dup2(_fd, 0)
        os.close(_fd)
    sys.stdin = io.TextIOWrapper(io.BufferedReader(io.FileIO(0, "r", closefd=False)), encoding="utf-8")
    _buffer = io.BytesIO()
    sys.stdout = io.TextIOWrapper(_buffer, encoding="utf-8", write_through=True)
    _value = None
    try:
        _globals = {"__name__": "__main__" if _job["kind"] == "stdio" else "solution", "__builtins__": __builtins__}
        try:
            exec(_code, _globals)
        except SystemExit:
            pass
        if _job["kind"] == "functional":
            _args = [json.loads(_line) for _line in _input.split("\n") if _line.strip()]
            _owner = _globals["Solution"]() if "Solution" in _globals else None
            _fn = getattr(_owner, _job["fn_name"]) if _owner is not None else _globals[_job["fn_name"]]
            _result = _fn(*_args)
            try:  # plain JSON only (tuples become lists); a value JSON cannot hold fails the test
                _value = json.dumps(_result, default=_numpy_scalar)
            except (TypeError, ValueError, RecursionError):
                _value = None
        else:
            sys.stdout.flush()
            _value = _buffer.getvalue().decode("utf-8", "replace")
    except BaseException:
        _value = None
    finally:
        sys.stdout = _stdout
    _results.append(_value if _value is None or len(_value) <= 4_000_000 else None)
print()
print(_nonce + " " + json.dumps(_results), flush=True)
"""


def _fences(text: str) -> tuple[list[tuple[int, int, int]], int | None]:
    """The closed fenced blocks of `text` as (start of the language tag, its line's newline, closing fence) indices in
    order, and where the text after the last opening line of a fence starts (None when there is none). Linear in the
    text.

    A block opens at "```", takes its language tag from the rest of that line, and closes at the next "```" after the
    line's newline; the search goes on after the closing fence. An opening line is any "```" followed by a newline,
    searched again after each such line: the last one is the line of the last "```" that a newline follows."""
    blocks, pos = [], 0
    while fence := _FENCE_MARK.search(text, pos):
        newline = text.find("\n", fence.end())
        if newline < 0:
            break
        end = _FENCE_MARK.search(text, newline + 1)
        if end is None:  # no closing fence after this opening line, nor after any later one
            break
        blocks.append((fence.end(), newline, end.start()))
        pos = end.end()
    last_newline = text.rfind("\n")
    last_opening = text.rfind("```", 0, last_newline) if last_newline >= 0 else -1
    return blocks, None if last_opening < 0 else text.find("\n", last_opening + 3) + 1


def extract_code(text: str) -> str:
    """The program in a completion: the last fenced code block (```python ... ```; an unterminated last fence runs
    to the end), else the whole text. Linear in the length of the text."""
    blocks, last_opening = _fences(text)
    for tag, newline, end in reversed(blocks):
        if _FENCE_LANG.match(text, tag, newline).group(1).lower() in ("python", "python3", "py", ""):
            return text[newline + 1 : end]
    if last_opening is not None and text.count("```") % 2 == 1:
        return text[last_opening:]
    if blocks:
        return text[blocks[-1][1] + 1 : blocks[-1][2]]
    return text


@dataclass
class TestReport:
    """Outcome of one solution's tests.

    Attributes:
        passed: Tests passed.
        total: Tests run.
        status: The sandbox status ("ok", "error", "timeout", "output_limit", "sandbox_error") or "bad_spec".
        detail: Why the specification is unreadable, where a "bad_spec" has a reason to give; else "".
    """

    __test__ = False  # not a pytest class
    passed: int
    total: int
    status: str
    detail: str = ""

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


# Number tokens of stdio outputs (ASCII only: Python's int() and Decimal() also read other digits and underscores).
_INT_TOKEN = re.compile(r"[+-]?[0-9]+")
_NUMBER_TOKEN = re.compile(r"[+-]?(?:[0-9]+(?:\.[0-9]*)?|\.[0-9]+)(?:[eE][+-]?[0-9]+)?")
_ONE = Decimal(1)


def _decimals_close(got: Decimal, expected: Decimal, tolerance: Decimal) -> bool:
    """`|got - expected| <= tolerance * max(1, |expected|)` on exact decimal values (both finite); tolerance 0:
    equal values. Exponents of any size cost the same: the arithmetic rounds to 60 digits and never traps."""
    if got == expected:
        return True
    if not tolerance:
        return False
    context = Context(prec=60, Emax=MAX_EMAX, Emin=MIN_EMIN, traps=[])
    error = context.copy_abs(context.subtract(got, expected))
    return error <= context.multiply(tolerance, max(_ONE, context.copy_abs(expected)))


def _integer_value(token: str) -> str:
    """The canonical digits of an integer token (`_INT_TOKEN`): sign and leading zeros dropped, "-" kept below 0.
    Linear in the token (no int() conversion: Python refuses those beyond 4,300 digits)."""
    digits = token.lstrip("+-").lstrip("0") or "0"
    return "-" + digits if token[0] == "-" and digits != "0" else digits


def _token_matches(got: str, expected: str, tolerance: Decimal) -> bool:
    """One stdio token against the expected one (the module docstring's rules)."""
    if got == expected:
        return True
    if _INT_TOKEN.fullmatch(expected):
        return _INT_TOKEN.fullmatch(got) is not None and _integer_value(got) == _integer_value(expected)
    if not _NUMBER_TOKEN.fullmatch(expected) or not _NUMBER_TOKEN.fullmatch(got):
        return False
    try:
        return _decimals_close(Decimal(got), Decimal(expected), tolerance)
    except InvalidOperation:  # an exponent beyond what Decimal holds (about 10**18)
        return False


def _lines(text: str) -> list[str]:
    """LiveCodeBench's normalisation: the text stripped, split on newlines, each line stripped."""
    return [line.strip() for line in text.strip().split("\n")]


def _stdout_matches(got: str | None, expected: str, tolerance: Decimal = Decimal(0)) -> bool:
    """Whether a program's stdout matches the expected output (None: the program produced none). The module
    docstring states the rules; `tolerance` is the spec's `float_tolerance`."""
    if got is None:
        return False
    got_lines, expected_lines = _lines(got), _lines(str(expected))
    if len(got_lines) != len(expected_lines):
        return False
    for g, e in zip(got_lines, expected_lines):
        if g == e:
            continue
        g_tokens, e_tokens = g.split(), e.split()
        if len(g_tokens) != len(e_tokens):
            return False
        if not all(_token_matches(gt, et, tolerance) for gt, et in zip(g_tokens, e_tokens)):
            return False
    return True


def _json_values_equal(got, expected, tolerance: Decimal) -> bool:
    """Two parsed JSON values under the functional rules of the module docstring (iterative: any depth)."""
    pending = [(got, expected)]
    while pending:
        g, e = pending.pop()
        kind = type(e)
        if kind is float:
            if type(g) is not float and type(g) is not int:
                return False
            if not math.isfinite(e):  # NaN only by NaN, an infinity only by itself
                if not (type(g) is float and (g == e or (math.isnan(g) and math.isnan(e)))):
                    return False
            elif type(g) is float and not math.isfinite(g):
                return False
            elif not _decimals_close(Decimal(g), Decimal(e), tolerance):
                return False
        elif kind is list:
            if type(g) is not list or len(g) != len(e):
                return False
            pending.extend(zip(g, e))
        elif kind is dict:
            if type(g) is not dict or g.keys() != e.keys():
                return False
            pending.extend((g[k], e[k]) for k in e)
        elif type(g) is not kind or g != e:  # bool, int, str, None: the same type and value
            return False
    return True


def _value_matches(got: str | None, expected: str, tolerance: Decimal = Decimal(0)) -> bool:
    """Whether a function's JSON-serialised return value matches the expected JSON value (None: the call failed).
    The module docstring states the rules; `tolerance` is the spec's `float_tolerance`."""
    if got is None:
        return False
    try:
        got_value, expected_value = json.loads(got), json.loads(expected)
    except (TypeError, ValueError, RecursionError):
        return False
    return _json_values_equal(got_value, expected_value, tolerance)


_IO_KEYS = {"kind", "inputs", "outputs", "fn_name", "float_tolerance"}
_ASSERT_KEYS = {"kind", "test", "entry_point", "prompt"}
_warned_specs: set[str] = set()


class _BadSpec(ValueError):
    """A test specification that cannot be read; the message names the field and the fix."""


def _float_tolerance(spec: dict) -> Decimal:
    """The spec's `float_tolerance` as an exact decimal (its shortest repr: 1e-6 is exactly 0.000001)."""
    value = spec.get("float_tolerance", 0)
    if type(value) not in (int, float) or not 0 <= value < 1:
        raise _BadSpec(
            f"tests spec: float_tolerance must be a number in [0, 1) (the absolute or relative error allowed on "
            f"float outputs), got {value!r}; fix the dataset's tests column"
        )
    return Decimal(repr(value))


def _check_keys(spec: dict, allowed: set[str]) -> None:
    unknown = sorted(set(spec) - allowed)
    if unknown:
        raise _BadSpec(
            f"tests spec of kind {spec['kind']!r}: unknown key(s) {unknown}; the keys are {sorted(allowed)} "
            "(healtrl.rewards.code's module docstring); remove or rename them in the dataset's tests column"
        )


def _bad_spec(error: _BadSpec) -> TestReport:
    message = str(error)
    if message not in _warned_specs:
        _warned_specs.add(message)
        logger.warning("%s (every completion of such a row scores 0.0, counted malformed)", message)
    return TestReport(0, 0, "bad_spec", detail=message)


def run_tests(
    code: str, spec: dict | str, limits: SandboxLimits = DEFAULT_LIMITS, cancel: threading.Event | None = None
) -> TestReport:
    """Run a solution against a test specification (see the module docstring) in the sandbox.

    Args:
        code: The solution's source code.
        spec: The test specification (dict, or its JSON string).
        limits: Sandbox limits for the whole run.
        cancel: When set, the run is killed (status "cancelled"): the reward's batch deadline.

    Returns:
        A `TestReport`.
    """
    try:
        spec = json.loads(spec) if isinstance(spec, str) else dict(spec)
        kind = spec["kind"]
    except (TypeError, ValueError, KeyError):
        return TestReport(0, 0, "bad_spec")
    try:
        _check_keys(spec, _ASSERT_KEYS if kind == "assert" else _IO_KEYS)
        tolerance = _float_tolerance(spec)
    except _BadSpec as error:
        return _bad_spec(error)
    if kind == "assert":
        entry_point, test = spec.get("entry_point"), spec.get("test")
        if not isinstance(entry_point, str) or not isinstance(test, str):
            return TestReport(0, 0, "bad_spec")
        if not re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", code):  # a completion of the prompt's function
            code = str(spec.get("prompt", "")) + code
        passed, result = run_assert_test(code, test, entry_point, str(spec.get("prompt", "")), limits, cancel)
        return TestReport(int(passed), 1, result.status)
    if kind not in ("stdio", "functional"):
        return TestReport(0, 0, "bad_spec")
    inputs, outputs = spec.get("inputs"), spec.get("outputs")
    if not isinstance(inputs, list) or not isinstance(outputs, list) or len(inputs) != len(outputs) or not inputs:
        return TestReport(0, 0, "bad_spec")
    job = {"kind": kind, "inputs": [str(x) for x in inputs], "fn_name": spec.get("fn_name")}
    if kind == "functional" and not isinstance(job["fn_name"], str):
        return TestReport(0, 0, "bad_spec")
    files = {"solution.py": _HEADER + code, "job.json": json.dumps(job)}
    nonce = secrets.token_hex(16)
    result = run_python(_IO_HARNESS, files, stdin=nonce + "\n", limits=limits, cancel=cancel)
    got = None
    for line in reversed(result.stdout.splitlines()):
        if line.startswith(nonce + " "):
            try:
                got = json.loads(line[len(nonce) + 1 :])
            except ValueError:
                got = None
            break
    if not isinstance(got, list) or len(got) != len(outputs):
        return TestReport(0, len(outputs), result.status if result.status != "ok" else "error")
    match = _stdout_matches if kind == "stdio" else _value_matches
    passed = sum(match(g, e, tolerance) for g, e in zip(got, outputs))
    return TestReport(passed, len(outputs), result.status)


BATCH_SECONDS_PER_COMPLETION = 0.5
"""A code reward's batch of n completions is scored within `max(limits.timeout, 0.5 * n)` seconds (`make_code_reward`);
past it, runs are killed and the completions left score 0 (`deadline_counts()`)."""

_DEADLINE = "deadline"
_deadline_lock = threading.Lock()
_DEADLINE_COUNT = {"completions": 0, "batches": 0}


def deadline_counts() -> dict[str, int]:
    """Completions scored 0 because their batch's deadline passed, and the batches that reached it, in this process."""
    with _deadline_lock:
        return dict(_DEADLINE_COUNT)


def _count_deadline(n_late: int, n_total: int, log_metric) -> None:
    if n_late:
        with _deadline_lock:
            _DEADLINE_COUNT["completions"] += n_late
            _DEADLINE_COUNT["batches"] += 1
        logger.warning(
            "Code reward: the batch's deadline passed; %d of %d completions were not run to the end and scored 0.",
            n_late,
            n_total,
        )
    if callable(log_metric):
        try:
            log_metric("rewards/code/deadline", float(n_late))
        except Exception:  # a logging hook must not take the reward down
            pass


def _run_order(n: int) -> list[int]:
    """The order in which a batch's n completions run: a fresh uniformly random permutation of range(n) (from the
    operating system's randomness, so that neither the completions nor a seeded trainer can steer it)."""
    return secrets.SystemRandom().sample(range(n), n)


SANDBOX_MODES = ("namespaces", "strict")
"""`make_code_reward(sandbox=...)`: "namespaces" runs with the best isolation this machine allows and warns once,
naming what is missing, when part of it cannot be set up; "strict" refuses to run (RuntimeError) unless every
guarantee of `healtrl.rewards.sandbox` holds. `HEALTRL_SANDBOX=strict` makes every code reward strict."""


def make_code_reward(
    limits: SandboxLimits = DEFAULT_LIMITS,
    workers: int | None = None,
    partial: bool = False,
    sandbox: str = "namespaces",
):
    """A code reward with its own sandbox limits.

    Args:
        limits: Sandbox limits of one completion's run.
        workers: Completions run in parallel (default `min(4, os.cpu_count())`).
        partial: Score the fraction of tests passed instead of 1.0 only when all pass.
        sandbox: "namespaces" (default: the best isolation available, a warning naming what is missing) or
            "strict" (refuse unless the full isolation holds); see `SANDBOX_MODES`.

    Bound: a batch of n completions is scored under one deadline, `max(limits.timeout, BATCH_SECONDS_PER_COMPLETION
    * n)` seconds from its start (after the sandbox's one-time probe); at the deadline every run still going is
    killed and every run not started is skipped, and those completions score 0, counted as
    `rewards/code/deadline` (`deadline_counts()`). So a policy that writes endless loops stalls a step for at most
    that long, not n x `limits.timeout` / workers. The completions run in a fresh random order on every call
    (`_run_order`), not by position: TRL keeps a prompt's completions together in the batch, so a deadline that cut
    the batch's tail would always take the last prompts' groups; in random order the completions cut are spread over
    the batch.

    Returns:
        A TRL reward function reading the `tests` column. It raises `RuntimeError` when the sandbox cannot start on
        this machine, or, with `sandbox="strict"`, when part of its isolation is missing (see
        `healtrl.rewards.sandbox`); it never raises because of a completion.
    """
    if sandbox not in SANDBOX_MODES:
        raise ValueError(f"make_code_reward: sandbox must be one of {', '.join(SANDBOX_MODES)}, got {sandbox!r}.")
    strict = True if sandbox == "strict" else None  # None: HEALTRL_SANDBOX=strict still applies

    def code_reward(prompts=None, completions=None, tests=None, log_metric=None, **kwargs) -> list[float]:
        # a sandbox that cannot start (or, strict, cannot isolate fully) is a setup error, not a malformed completion
        isolation_level(strict=strict)
        completions = list(completions) if completions is not None else []
        specs = column(tests, len(completions), "tests")
        texts = [_clean_text(c) for c in completions]
        deadline = threading.Event()  # set when the batch's time is up: runs are killed, the rest skipped
        timer = threading.Timer(max(limits.timeout, BATCH_SECONDS_PER_COMPLETION * len(completions)), deadline.set)
        timer.daemon = True

        def score(i: int) -> float | str | None:
            if texts[i] is None or specs[i] is None:
                return None
            if deadline.is_set():
                return _DEADLINE
            try:
                outcome = run_tests(extract_code(texts[i]), specs[i], limits, cancel=deadline)
            except Exception:  # never raise on a completion
                return None
            if outcome.status == "cancelled":
                return _DEADLINE
            if outcome.status == SANDBOX_ERROR:  # the program did not run: 0, counted as the sandbox's failure
                return SANDBOX_ERROR
            if outcome.status == "bad_spec":
                return None
            if partial:
                return outcome.passed / outcome.total
            return 1.0 if outcome.all_passed else 0.0

        n_workers = max(1, min(workers or min(4, os.cpu_count() or 1), len(completions) or 1))
        order = _run_order(len(completions))
        scores: list[float | str | None] = [None] * len(completions)
        timer.start()
        try:
            with ThreadPoolExecutor(max_workers=n_workers) as pool:
                for i, outcome in zip(order, pool.map(score, order)):
                    scores[i] = outcome
        finally:
            timer.cancel()
        report("code", sum(s is None for s in scores), len(completions), log_metric)
        n_late = scores.count(_DEADLINE)
        _count_deadline(n_late, len(completions), log_metric)
        ran = sum(s is not None and s != _DEADLINE for s in scores)
        report_sandbox_errors(scores.count(SANDBOX_ERROR), ran, log_metric)
        return [0.0 if s is None or isinstance(s, str) else float(s) for s in scores]

    code_reward.__name__ = "code_reward"
    code_reward.__doc__ = make_code_reward.__doc__
    return code_reward


def code_reward(prompts=None, completions=None, tests=None, log_metric=None, **kwargs) -> list[float]:
    """1.0 when the completion's program passes every test of the `tests` column, else 0.0.

    The program is the last fenced code block of the completion (else the whole text); it runs in the sandbox of
    `healtrl.rewards.sandbox` with `DEFAULT_LIMITS` (10 s wall clock for all tests, 1 GiB address space, no network,
    a fresh temporary directory), up to 4 completions in parallel. Malformed completions and unreadable test
    specifications score 0.0, never raise, and are counted (`rewards/code/malformed`); programs that the sandbox itself
    failed to run score 0.0 and are counted apart (`rewards/sandbox_errors`, with a warning when frequent: see
    `healtrl.rewards.sandbox.report_sandbox_errors`). `make_code_reward` builds a variant with other limits.

    Args:
        prompts: Unused.
        completions: Strings or conversations.
        tests: JSON test specifications (see the module docstring), one per completion.
        log_metric: TRL's metric hook.
        **kwargs: Other dataset columns, ignored.

    Returns:
        One float per completion.
    """
    return _DEFAULT_REWARD(prompts=prompts, completions=completions, tests=tests, log_metric=log_metric, **kwargs)


_DEFAULT_REWARD = make_code_reward()
