"""Code reward: run the completion's program against the task's tests in the sandbox (`healtrl.rewards.sandbox`).

The `tests` column holds a JSON test specification, one of:

* `{"kind": "assert", "test": "def check(candidate): ...", "entry_point": "f", "prompt": "def f(x): ..."}`:
  HumanEval(+) style; the solution passes when `check(f)` returns;
* `{"kind": "stdio", "inputs": [...], "outputs": [...]}`: the program reads each input on stdin and must print the
  expected output (compared line by line, numbers with a 1e-6 tolerance); LiveCodeBench's stdin problems;
* `{"kind": "functional", "fn_name": "f", "inputs": [...], "outputs": [...]}`: LeetCode style; each input holds one
  JSON value per line (the arguments of `Solution().f`), each output one JSON value; LiveCodeBench's functional
  problems.

A completion scores 1.0 when every test passes and 0.0 otherwise (including crashes, timeouts, exits before the tests
ran and anything else a hostile program may try). Nothing the program can read or patch decides the verdict: the
expected outputs of stdio and functional tests never enter the sandbox (the program's outputs are compared outside
it), and an assert-style test runs in a second sandboxed process, the judge, which calls the program's function over
a pipe and gets back plain data only (`healtrl.rewards._assert_tests` has the design and its limits).
"""

from __future__ import annotations

import json
import math
import os
import re
import secrets
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from ._assert_tests import run_assert_test
from ._common import clean_text as _clean_text
from ._common import column, report
from .sandbox import SANDBOX_ERROR, SandboxLimits, isolation_level, report_sandbox_errors, run_python

__all__ = ["DEFAULT_LIMITS", "TestReport", "code_reward", "extract_code", "make_code_reward", "run_tests"]

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
            try:
                _value = json.dumps(_result)
            except (TypeError, ValueError):
                _value = json.dumps(repr(_result))
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
    """

    __test__ = False  # not a pytest class
    passed: int
    total: int
    status: str

    @property
    def all_passed(self) -> bool:
        return self.total > 0 and self.passed == self.total


def _numbers_equal(a: str, b: str) -> bool:
    try:
        x, y = float(a), float(b)
    except ValueError:
        return False
    return math.isclose(x, y, rel_tol=1e-6, abs_tol=1e-6)


def _stdout_matches(got: str | None, expected: str) -> bool:
    if got is None:
        return False
    got_lines = [line.strip() for line in got.strip().splitlines()]
    expected_lines = [line.strip() for line in str(expected).strip().splitlines()]
    if got_lines == expected_lines:
        return True
    if len(got_lines) != len(expected_lines):
        return False
    for g, e in zip(got_lines, expected_lines):
        if g == e:
            continue
        g_tokens, e_tokens = g.split(), e.split()
        if len(g_tokens) != len(e_tokens) or not all(
            gt == et or _numbers_equal(gt, et) for gt, et in zip(g_tokens, e_tokens)
        ):
            return False
    return True


def _value_matches(got: str | None, expected: str) -> bool:
    if got is None:
        return False
    try:
        got_value, expected_value = json.loads(got), json.loads(expected)
    except (TypeError, ValueError):
        return False
    if got_value == expected_value:
        return True
    if isinstance(got_value, float) or isinstance(expected_value, float):
        return isinstance(got_value, (int, float)) and _numbers_equal(str(got_value), str(expected_value))
    return False


def run_tests(code: str, spec: dict | str, limits: SandboxLimits = DEFAULT_LIMITS) -> TestReport:
    """Run a solution against a test specification (see the module docstring) in the sandbox.

    Args:
        code: The solution's source code.
        spec: The test specification (dict, or its JSON string).
        limits: Sandbox limits for the whole run.

    Returns:
        A `TestReport`.
    """
    try:
        spec = json.loads(spec) if isinstance(spec, str) else dict(spec)
        kind = spec["kind"]
    except (TypeError, ValueError, KeyError):
        return TestReport(0, 0, "bad_spec")
    if kind == "assert":
        entry_point, test = spec.get("entry_point"), spec.get("test")
        if not isinstance(entry_point, str) or not isinstance(test, str):
            return TestReport(0, 0, "bad_spec")
        if not re.search(rf"\bdef\s+{re.escape(entry_point)}\s*\(", code):  # a completion of the prompt's function
            code = str(spec.get("prompt", "")) + code
        passed, result = run_assert_test(code, test, entry_point, str(spec.get("prompt", "")), limits)
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
    result = run_python(_IO_HARNESS, files, stdin=nonce + "\n", limits=limits)
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
    passed = sum(match(g, e) for g, e in zip(got, outputs))
    return TestReport(passed, len(outputs), result.status)


def make_code_reward(limits: SandboxLimits = DEFAULT_LIMITS, workers: int | None = None, partial: bool = False):
    """A code reward with its own sandbox limits.

    Args:
        limits: Sandbox limits of one completion's run.
        workers: Completions run in parallel (default `min(4, os.cpu_count())`).
        partial: Score the fraction of tests passed instead of 1.0 only when all pass.

    Returns:
        A TRL reward function reading the `tests` column. It raises `RuntimeError` when the sandbox cannot start on
        this machine (see `healtrl.rewards.sandbox`); it never raises because of a completion.
    """

    def code_reward(prompts=None, completions=None, tests=None, log_metric=None, **kwargs) -> list[float]:
        isolation_level()  # a sandbox that cannot start is a setup error (raised), not a malformed completion
        completions = list(completions) if completions is not None else []
        specs = column(tests, len(completions), "tests")
        texts = [_clean_text(c) for c in completions]

        def score(i: int) -> float | None:
            if texts[i] is None or specs[i] is None:
                return None
            try:
                outcome = run_tests(extract_code(texts[i]), specs[i], limits)
            except Exception:  # never raise on a completion
                return None
            if outcome.status == SANDBOX_ERROR:  # the program did not run: 0, counted as the sandbox's failure
                return SANDBOX_ERROR
            if outcome.status == "bad_spec":
                return None
            if partial:
                return outcome.passed / outcome.total
            return 1.0 if outcome.all_passed else 0.0

        n_workers = max(1, min(workers or min(4, os.cpu_count() or 1), len(completions) or 1))
        with ThreadPoolExecutor(max_workers=n_workers) as pool:
            scores = list(pool.map(score, range(len(completions))))
        report("code", sum(s is None for s in scores), len(completions), log_metric)
        report_sandbox_errors(scores.count(SANDBOX_ERROR), sum(s is not None for s in scores), log_metric)
        return [0.0 if s is None or s == SANDBOX_ERROR else float(s) for s in scores]

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
