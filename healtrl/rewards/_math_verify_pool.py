"""math-verify for `healtrl.rewards.math` in persistent worker processes under a hard timeout (any thread), and the
pre-check that keeps answers which would make sympy compute a huge number away from it (see "Bounds" in that
module's docstring)."""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import selectors
import subprocess
import sys
import threading

from ._common import logger

MATH_VERIFY_TIMEOUT_S = 10.0
"""Wall-clock seconds math-verify may spend on the answers of one completion (or one `answers_match` call) in its
worker process; past it the worker is killed and replaced and the answers do not match. It holds in any thread."""

MATH_VERIFY_WORKERS = 2
"""Worker processes running math-verify at once (each holds sympy, ~150 MB); more callers wait for a free one."""

_STARTUP_TIMEOUT_S = 300.0  # importing math-verify (sympy) in a fresh worker, on a loaded machine

MAX_EXPONENT = 100_000
"""An answer with an exponent (`^`) worth more than this, a factorial of more than `MAX_FACTORIAL`, or a binomial
coefficient of a number above `MAX_EXPONENT` is not sent to math-verify (it does not match): sympy would compute the
number, `9^{9^{9^{9}}}` for hours. Exponents are read as integers, or as power towers of integers; an exponent with
anything else in it (`2^{n}`) is left to math-verify and its timeout."""

MAX_FACTORIAL = 10_000
"""See `MAX_EXPONENT`."""

_WORKER_BOOT = (
    "import runpy, sys; sys.path.pop(0); path = sys.argv.pop(1); sys.argv[0] = path; "
    "runpy.run_path(path, run_name='__main__')"
)
_INTEGER_RE = re.compile(r"\d+")
_FACTORIAL_RE = re.compile(r"(?:(\d+)|[)\]}])\s*!")  # "12!" (group 1: the integer) or "(...)!" (the bracket)
_BINOMIAL_RE = re.compile(r"\\[dt]?binom|\\choose")


def _operand_after(answer: str, i: int) -> tuple[str, int]:
    """The operand of `^` that starts at `answer[i]` (blanks skipped): a braced group (its contents), a run of
    digits or one character; and the index after it."""
    while i < len(answer) and answer[i] in " \t":
        i += 1
    if i < len(answer) and answer[i] == "{":
        depth = 0
        for j in range(i, len(answer)):
            depth += {"{": 1, "}": -1}.get(answer[j], 0)
            if depth == 0:
                return answer[i + 1 : j], j + 1
        return answer[i + 1 :], len(answer)
    digits = _INTEGER_RE.match(answer, i)
    if digits:
        return digits.group(0), digits.end()
    return answer[i : i + 1], i + 1


def _tower_log10(expression: str, depth: int = 0) -> float | None:
    """log10 of the value of `expression` when it is an integer or a power tower of integers (`9^{9^9}`, `9^9^9`
    read right to left as LaTeX readers do, bases and exponents in braces or not), else None. Infinite when too
    large to hold."""
    expression = expression.strip()
    if depth > 50:  # deeper nesting is left to math-verify and its timeout
        return None
    if expression.isdigit():
        value = int(expression[:300])  # 300 digits decide whether it exceeds any bound here
        return len(expression) - 1 if len(expression) > 300 else (math.log10(value) if value else float("-inf"))
    if expression.startswith("{"):
        base_text, i = _operand_after(expression, 0)
    else:
        digits = _INTEGER_RE.match(expression)
        if not digits:
            return None
        base_text, i = digits.group(0), digits.end()
    while i < len(expression) and expression[i] in " \t":
        i += 1
    if i >= len(expression):
        return _tower_log10(base_text, depth + 1) if expression.startswith("{") else None
    if expression[i] != "^":
        return None
    base, power = _tower_log10(base_text, depth + 1), _tower_log10(expression[i + 1 :], depth + 1)
    if base is None or power is None:
        return None
    if base <= 0 or power == float("-inf"):
        return 0.0
    return float("inf") if power > 300 else 10**power * base


def _exponent_after(answer: str, i: int) -> str:
    """The exponent of the `^` before `answer[i]`: its operand, and with it the rest of a chain `a^b^c` (LaTeX readers
    take `9^9^9` as `9^(9^9)`)."""
    exponent, end = _operand_after(answer, i)
    j = end
    while True:
        k = j
        while k < len(answer) and answer[k] in " \t":
            k += 1
        if k >= len(answer) or answer[k] != "^":
            break
        _, j = _operand_after(answer, k + 1)
    return exponent if j == end else answer[i:j]


def _group_before(answer: str, end: int) -> str:
    """The contents of the bracketed group that closes at `answer[end]` (")", "]" or "}")."""
    depth = 0
    for i in range(end, -1, -1):
        depth += {")": 1, "]": 1, "}": 1, "(": -1, "[": -1, "{": -1}.get(answer[i], 0)
        if depth == 0:
            return answer[i + 1 : end]
    return answer[:end]


def _too_costly(answer: str) -> bool:
    """Whether sympy would compute a huge number for `answer`: an exponent above `MAX_EXPONENT` (integers and power
    towers of integers are evaluated), a factorial in an exponent, a factorial of an integer above `MAX_FACTORIAL`,
    of a group holding one or holding a factorial (`(10!)!`), a binomial coefficient with an integer above
    `MAX_EXPONENT`. Answers have at most `MAX_ANSWER_CHARS` characters."""
    bound = math.log10(MAX_EXPONENT)
    i = answer.find("^")
    while i >= 0:
        exponent = _exponent_after(answer, i + 1)
        size = _tower_log10(exponent)
        if (size is not None and size > bound) or _FACTORIAL_RE.search(exponent.replace("\\!", "")):
            return True
        i = answer.find("^", i + 1)
    factorial_bound = math.log10(MAX_FACTORIAL)
    for match in _FACTORIAL_RE.finditer(answer):
        if match.group(1) is not None:
            if _tower_log10(match.group(1)) > factorial_bound:
                return True
            continue
        group = _group_before(answer, match.start()).replace("\\!", "")
        if "!" in group or any(_tower_log10(n) > factorial_bound for n in _INTEGER_RE.findall(group)):
            return True
    if _BINOMIAL_RE.search(answer):
        return any(_tower_log10(n) > bound for n in _INTEGER_RE.findall(answer))
    return False


class _Worker:
    """One math-verify worker process (`_math_verify_worker`)."""

    def __init__(self):

        path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "_math_verify_worker.py")
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.ready = False
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)

    def _read_line(self, timeout: float) -> bytes:
        if not self.selector.select(timeout):
            raise TimeoutError
        return self.process.stdout.readline()

    def ask(self, request: bytes, timeout: float) -> bool:
        """The worker's answer to one request; TimeoutError past `timeout` seconds (not counting its start-up)."""
        if not self.ready:
            try:
                line = self._read_line(_STARTUP_TIMEOUT_S)
            except TimeoutError:
                line = b""
            if line != b"ready\n":
                raise RuntimeError(f"The math-verify worker did not start (exit code {self.process.poll()}).")
            self.ready = True
        self.process.stdin.write(request)
        self.process.stdin.flush()
        reply = self._read_line(timeout)
        if reply not in (b"true\n", b"false\n"):
            raise RuntimeError(f"The math-verify worker failed on this answer ({reply[:100]!r}).")
        return reply == b"true\n"

    def kill(self) -> None:
        self.process.kill()
        self.process.wait()
        self.selector.close()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


_pool_lock = threading.Lock()
_idle_workers: list[_Worker] = []
_worker_slots = threading.BoundedSemaphore(MATH_VERIFY_WORKERS)


@atexit.register
def _stop_workers() -> None:
    with _pool_lock:
        workers = list(_idle_workers)
        _idle_workers.clear()
    for worker in workers:
        worker.kill()


def _math_verify(gold: str, predictions: list[str]) -> bool:
    """Whether every prediction is math-verify equivalent to `gold`, decided in a worker process within
    `MATH_VERIFY_TIMEOUT_S` (False past it, and for answers `_too_costly` refuses)."""
    if any(_too_costly(prediction) for prediction in predictions):
        return False
    request = (json.dumps([gold, predictions, MATH_VERIFY_TIMEOUT_S]) + "\n").encode()
    with _worker_slots:
        with _pool_lock:
            worker = _idle_workers.pop() if _idle_workers else None
        worker = worker or _Worker()
        try:
            result = worker.ask(request, MATH_VERIFY_TIMEOUT_S)
        except TimeoutError:
            logger.warning("math-verify ran past %g s on an answer; it does not match.", MATH_VERIFY_TIMEOUT_S)
            worker.kill()
            with _pool_lock:
                _idle_workers.append(_Worker())  # loads math-verify while the rewards go on
            return False
        except BaseException:
            worker.kill()
            raise
        with _pool_lock:
            _idle_workers.append(worker)
        return result
