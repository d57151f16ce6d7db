"""math-verify for `healtrl.rewards.math` in persistent worker processes under a hard timeout (any thread), and the
pre-check that keeps answers which would make sympy compute a huge number away from it (see "Bounds" in that
module's docstring)."""

from __future__ import annotations

import atexit
import json
import math
import os
import re
import threading
import time

from ._common import logger
from ._scorer_pool import WorkerProcess

MATH_VERIFY_TIMEOUT_S = 2.0
"""Wall-clock seconds math-verify may spend on the answers of one completion (or one `answers_match` call) in its
worker process, at most (a batch's deadline, `BATCH_SECONDS_PER_COMPLETION`, can leave less); past it the worker is
killed and replaced and the answers do not match. It holds in any thread. The answers that reach math-verify (those
not equal to the ground truth as strings, past the cost pre-check) take 10-100 ms each on an idle core; 2 s leaves
room for a loaded machine (the worker's first parse, which loads math-verify's grammar, is made before it reports
ready and is not counted)."""

MATH_VERIFY_WORKERS = max(1, min(4, os.cpu_count() or 1))
"""Worker processes running math-verify at once (each holds sympy, ~150 MB): one per CPU core, at most 4; more
callers wait for a free one."""

BATCH_SECONDS_PER_COMPLETION = 0.5
"""A math reward call on n completions gives math-verify n times this many seconds in all (`Deadline`): its
completions are graded in parallel, `MATH_VERIFY_WORKERS` at a time, and a completion still waiting for math-verify
at the deadline does not match. One completion's math-verify call may take `MATH_VERIFY_WORKERS` times this (its
share of the workers' time), so that hostile completions early in a batch cannot use up the time of the honest ones
after them. Not counted: a worker's start-up, and waiting for a worker that another reward call holds (the bound is
for one reward call; calls made at once share the workers)."""

_STARTUP_TIMEOUT_S = 300.0  # importing math-verify (sympy) in a fresh worker, on a loaded machine

MAX_EXPONENT = 10_000
"""An answer with an exponent (`^`) worth more than this, whatever its base (an integer `9^{99999}`, a rational
`(\\frac13+\\frac17)^{99999}`, a symbol), or a factorial of more than `MAX_FACTORIAL`, is not sent to math-verify
(it does not match): sympy would compute the number (`9^{99999}` takes ~1 s, `9^{9^{9^{9}}}` hours). Exponents are
read as integers, or as power towers of integers; an exponent with anything else in it (`2^{n}`) is left to
math-verify and its timeout."""

MAX_FACTORIAL = 10_000
"""See `MAX_EXPONENT`."""

MAX_BINOMIAL = 10_000
"""A binomial coefficient (`\\binom`, `\\dbinom`, `{n \\choose k}`) of a number above this is not sent to math-verify
(`\\binom{99999}{50000}` takes ~1 s)."""

MAX_IRRATIONAL_EXPONENT = 20
"""A power of a number that is not a plain rational number (a function value `\\sin(1)`, `\\pi`, `e`, a root
`\\sqrt{2}`, a sum holding one) with an exponent above this is not sent to math-verify (sympy expands or evaluates it:
`\\sin(1)^{100}` takes ~1 s, `\\sin(1)^{50}` ~0.3 s, `\\sin(1)^{20}` ~0.1 s). Powers of symbols (`x^{200}`) are
bounded by `MAX_EXPONENT` only."""

MAX_OPERATOR_EXPONENT = 100
"""After a `\\sum`, `\\prod` or `\\int`, in the rest of the group that holds it (the whole answer at the top level),
an exponent above this is not sent to math-verify (`\\sum_{k=1}^{100} k^{99999}`, `\\prod_{k=1}^{100} k^{999}`,
`\\int_0^1 x^{99999} dx`: sympy computes every term)."""

MAX_FUNCTION_NESTING = 5
"""Function applications (`\\sin`, `\\log`, `\\sqrt`...) nested deeper than this are not sent to math-verify:
`\\sin(\\sin(...(x)))` takes ~0.3 s 5 deep, ~0.9 s 8 deep."""

MAX_SUM_TERMS = 100
"""A `\\sum` or `\\prod` with a numeric bound above this is not sent to math-verify (sympy adds the terms one by one:
`\\sum_{k=1}^{10^{7}} k!` runs for minutes); symbolic and infinite bounds are left to math-verify."""

MAX_FUNCTION_ARGUMENT_DIGITS = 20
"""A function (`\\sin`, `\\log`, `\\exp`'s exponent aside...) of a number with more digits than this is not sent to
math-verify (`\\cos(9^{9^{5}})`: sympy reduces a 56,000-digit argument for seconds)."""

MAX_COMPOUND_EXPONENT = 16
"""A power of a sum that is not a plain rational number (`(x+1)^{n}`, `(1+i)^{n}`, `(2+\\sqrt{3})^{n}`) with an exponent
above this is not sent to math-verify (sympy expands it: `(x+1)^{100}` takes seconds)."""

MAX_DIGITS = 1_000_000
"""A number (a power, a product...) with more digits than this is not sent to math-verify."""

MAX_NESTING = 60
"""An answer nested deeper than this (brackets, braces, fractions) is not sent to math-verify."""

_TOKEN_RE = re.compile(r"(?a)\d+(?:\.\d*)?|\.\d+|\\[a-zA-Z]+|\\.|\*\*|!!|\S")
# Rewritten before tokens are read: spacing and sizing commands vanish, operators get one spelling.
_PREPARE = [
    (re.compile(r"\\(?:left|right|[bB]igg?[lr]?|displaystyle|textstyle|[,;:! ]|quad|qquad)(?![a-zA-Z])|~"), " "),
    (re.compile(r"\\operatorname\*?\s*\{\s*\\?([a-zA-Z]+)\s*\}|\\math(?:rm|it)\s*\{\s*\\?(Gamma)\s*\}"), r"\\\1\2"),
    (re.compile(r"\\(?:cdot|times|ast)(?![a-zA-Z])"), "*"),
    (re.compile(r"\\div(?![a-zA-Z])"), "/"),
    (re.compile(r"\*\*|\\uparrow(?![a-zA-Z])|↑"), "^"),
    (re.compile(r"\\[dtc]frac(?![a-zA-Z])"), r"\\frac"),
    (re.compile(r"\\[dt]binom(?![a-zA-Z])"), r"\\binom"),
]
_FUNCTIONS = frozenset(
    "sin cos tan cot sec csc arcsin arccos arctan arccot sinh cosh tanh coth sech csch log ln lg exp sqrt Gamma "
    "floor ceil lfloor lceil zeta erf".split()
)
_CONSTANTS = frozenset({"pi", "e"})  # numbers that are not rational (sizes < 1)
_SEPARATORS = frozenset(",;=<>|") | frozenset(
    "\\leq \\geq \\le \\ge \\neq \\ne \\approx \\pm \\mp \\cup \\cap \\in \\to \\mid \\lor \\vee \\land \\wedge "
    "\\setminus \\implies \\iff \\rightarrow \\Rightarrow \\quad \\text".split()
)
_OPENERS = {
    "(": ")",
    "[": "]",
    "{": "}",
    "\\{": "\\}",
    "\\langle": "\\rangle",
    "\\lfloor": "\\rfloor",
    "\\lceil": "\\rceil",
}
_CLOSERS = frozenset(_OPENERS.values())
_DIGITS = "0123456789"
_LOG10_MAX_EXPONENT = math.log10(MAX_EXPONENT)
_LOG10_MAX_BINOMIAL = math.log10(MAX_BINOMIAL)
_BIG_OPERATORS = frozenset({"\\sum", "\\prod", "\\int", "\\iint", "\\iiint", "\\oint"})
_LOG10_MAX_FACTORIAL = math.log10(MAX_FACTORIAL)
_LOG10_MAX_SUM_TERMS = math.log10(MAX_SUM_TERMS)


class _Costly(Exception):
    """The answer would make sympy compute a huge number (`_too_costly`)."""


class _Size:
    """What `_CostReader` knows of a sub-expression: `digits`, log10 of an upper bound of its magnitude (of its
    numeric part when it is `symbolic`); `exact`, a plain rational number; `compound`, a sum at its top level;
    `factorial`, holds a factorial."""

    __slots__ = ("digits", "symbolic", "exact", "compound", "factorial")

    def __init__(self, digits=0.0, symbolic=False, exact=True, compound=False, factorial=False):
        self.digits, self.symbolic, self.exact = max(0.0, digits), symbolic, exact
        self.compound, self.factorial = compound, factorial


def _value_bound(size: _Size) -> float:
    """An upper bound of the value of a numeric sub-expression (inf when too large for a float)."""
    return float("inf") if size.digits > 300 else 10**size.digits


class _CostReader:
    """A recursive-descent reader of a LaTeX answer that bounds the size of every number sympy would compute, and
    raises `_Costly` at the first that is too large (see `_too_costly` for the rules). It never evaluates anything
    and accepts any text: what it does not know is a symbol."""

    def __init__(self, answer: str):
        for pattern, replacement in _PREPARE:
            answer = pattern.sub(replacement, answer)
        self.tokens = _TOKEN_RE.findall(answer)
        self.i = 0
        self.depth = 0
        self.functions = 0  # function applications being read, nested
        self.operator = False  # a \sum / \prod / \int was read earlier in the current group

    def peek(self) -> str | None:
        return self.tokens[self.i] if self.i < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.i += token is not None
        return token

    def read(self) -> None:
        while self.peek() is not None:
            self.expression()
            if self.peek() in _CLOSERS:
                self.take()  # an unmatched closer ("[1, 2)" is read as a group; a stray one is skipped)

    def expression(self) -> _Size:
        """Terms joined by "+", "-", separators (",", "=", "\\le"...) and "\\choose", up to a closer or the end."""
        outer = self.operator
        try:
            return self._expression()
        finally:
            self.operator = outer  # a big operator's scope ends with its group

    def _expression(self) -> _Size:
        parts, compound = [], False
        while True:
            token = self.peek()
            if token is None or token in _CLOSERS:
                break
            if token in ("+", "-") or token in _SEPARATORS:
                compound = compound or token in ("+", "-")
                self.take()
                continue
            if token == "\\choose":
                self.take()
                self.binomial(parts[-1] if parts else _Size(), self.term())
                continue
            parts.append(self.term())
        if not parts:
            return _Size()
        return _Size(
            max(p.digits for p in parts) + math.log10(len(parts)),
            any(p.symbolic for p in parts),
            all(p.exact for p in parts),
            compound or len(parts) > 1,
            any(p.factorial for p in parts),
        )

    def term(self) -> _Size:
        """Factors multiplied or divided (explicitly or by juxtaposition): their digits add up."""
        factors = [self.power()]
        while True:
            token = self.peek()
            if token in ("*", "/"):
                self.take()
                continue
            if token is None or token in _CLOSERS or token in ("+", "-", "\\choose") or token in _SEPARATORS:
                break
            factors.append(self.power())
        if len(factors) == 1:
            return factors[0]
        digits = sum(f.digits for f in factors)
        if digits > MAX_DIGITS:
            raise _Costly
        return _Size(
            digits, any(f.symbolic for f in factors), all(f.exact for f in factors), False,
            any(f.factorial for f in factors),
        )  # fmt: skip

    def power(self) -> _Size:
        """A primary with its postfix factorials and its exponent chain (`9^9^9` is `9^(9^9)`)."""
        base = self.postfix(self.primary())
        if self.peek() != "^":
            return base
        self.take()
        if self.peek() == "^":  # "^^", Knuth's arrows (`\\uparrow\\uparrow`): a tower of unbounded height
            raise _Costly
        exponent = self.power_operand()
        return self.postfix(self.raise_to(base, exponent))

    def power_operand(self) -> _Size:
        """The exponent after a "^": a braced group, a run of digits or one symbol, and the rest of a chain."""
        token = self.peek()
        if token in _OPENERS:
            operand = self.primary()
        elif token is not None and token[0] in _DIGITS:
            operand = self.number(self.take())
        else:
            operand = self.primary()
        operand = self.postfix(operand)
        if self.peek() == "^":
            self.take()
            self.depth += 1
            if self.depth > MAX_NESTING:
                raise _Costly
            operand = self.raise_to(operand, self.power_operand())
            self.depth -= 1
        return operand

    def raise_to(self, base: _Size, exponent: _Size) -> _Size:
        if exponent.factorial:
            raise _Costly
        if exponent.symbolic:
            return _Size(base.digits, True, False, False, base.factorial)
        if exponent.digits > _LOG10_MAX_EXPONENT:
            raise _Costly
        value = _value_bound(exponent)
        if base.compound and not base.exact and value > MAX_COMPOUND_EXPONENT:
            raise _Costly
        if not base.exact and not base.symbolic and value > MAX_IRRATIONAL_EXPONENT:
            raise _Costly
        if self.operator and value > MAX_OPERATOR_EXPONENT:
            raise _Costly
        digits = base.digits * value
        if digits > MAX_DIGITS:
            raise _Costly
        return _Size(digits, base.symbolic, base.exact, False, base.factorial)

    def postfix(self, size: _Size) -> _Size:
        while self.peek() in ("!", "!!"):
            self.take()
            size = self.factorial(size)
        return size

    def factorial(self, argument: _Size) -> _Size:
        """n!, n!! and Gamma(n): a number above `MAX_FACTORIAL`, or a factorial of a factorial, is refused."""
        if argument.factorial:
            raise _Costly
        if argument.symbolic:
            return _Size(argument.digits, True, False, False, True)
        if argument.digits > _LOG10_MAX_FACTORIAL:
            raise _Costly
        return _Size(_value_bound(argument) * max(argument.digits, 1.0), False, argument.exact, False, True)

    def binomial(self, top: _Size, bottom: _Size) -> _Size:
        if any(not s.symbolic and s.digits > _LOG10_MAX_BINOMIAL for s in (top, bottom)):
            raise _Costly
        if top.factorial or bottom.factorial:
            raise _Costly
        return _Size(top.digits * _value_bound(bottom) if not bottom.symbolic else top.digits, top.symbolic)

    def argument(self) -> _Size:
        """A command's argument: a group, else one token, of which a run of digits gives its first (`\\frac12`)."""
        token = self.peek()
        if token is not None and token[0] in _DIGITS and len(token) > 1:
            self.tokens[self.i] = token[1:]
            return self.number(token[0])
        return self.primary()

    def number(self, token: str) -> _Size:
        whole = token.split(".")[0] or "0"
        value = int(whole[:300])
        digits = (len(whole) - 300 + math.log10(value)) if len(whole) > 300 else (math.log10(value) if value else 0)
        return _Size(digits, False, True)

    def primary(self) -> _Size:
        """One operand, with its depth counted (`MAX_NESTING`)."""
        self.depth += 1
        if self.depth > MAX_NESTING:
            raise _Costly
        try:
            return self._primary()
        finally:
            self.depth -= 1

    def _primary(self) -> _Size:
        token = self.take()
        if token is None:
            return _Size()
        if token[0] in _DIGITS or token[0] == ".":
            return self.number(token)
        if token in _OPENERS:
            inside = self.expression()
            if self.peek() in _CLOSERS:
                self.take()
            return inside
        if token in ("\\frac", "\\binom"):
            top, bottom = self.argument(), self.argument()
            if token == "\\binom":
                return self.binomial(top, bottom)
            return _Size(top.digits + bottom.digits, top.symbolic or bottom.symbolic, top.exact and bottom.exact,
                         False, top.factorial or bottom.factorial)  # fmt: skip
        if token in _BIG_OPERATORS:
            self.operator = True
            for _ in range(2):  # _{lower} and ^{upper}, in either order
                if self.peek() in ("_", "^"):
                    self.take()
                    bound = self.argument()
                    counted = token in ("\\sum", "\\prod")
                    if counted and not bound.symbolic and bound.digits > _LOG10_MAX_SUM_TERMS:
                        raise _Costly
            return _Size(0, True, False)
        if token.startswith("\\") and token[1:] in _FUNCTIONS:
            name = token[1:]
            if name == "sqrt" and self.peek() == "[":
                self.primary()
            if self.peek() == "_":  # \log_{2}
                self.take()
                self.argument()
            if self.peek() == "^":  # \sin^{2} x
                self.take()
                self.power_operand()
            self.functions += 1
            if self.functions > MAX_FUNCTION_NESTING:
                raise _Costly
            try:  # `\sin(1)^{50}` is `(\sin 1)^{50}`: a bracketed argument ends at its closer, the power applies to
                # the function's value (in `power`); `\sin x^{2}` is `\sin(x^{2})`
                argument = self.postfix(self.primary()) if self.peek() in _OPENERS else self.power()
            finally:
                self.functions -= 1
            if name == "exp":
                return self.raise_to(_Size(0.5, False, False), argument)
            if name == "Gamma":
                return self.factorial(argument)
            if not argument.symbolic and argument.digits > MAX_FUNCTION_ARGUMENT_DIGITS:
                raise _Costly
            digits = argument.digits / 2 if name == "sqrt" else argument.digits
            return _Size(digits, argument.symbolic, False, False, argument.factorial)
        if token.lstrip("\\") in _CONSTANTS:
            return _Size(0.5, False, False)
        return _Size(0, True, False)  # a symbol, or anything unknown


def _too_costly(answer: str) -> bool:
    """Whether sympy would compute a huge number for `answer` (at most `MAX_ANSWER_CHARS` characters), or work on it for
    long, read by `_CostReader` without evaluating anything. Refused: an exponent above `MAX_EXPONENT` or holding a
    factorial (power towers in `^`, `**`, `\\uparrow` and braces are bounded from the inside out: `9^{9^{9}}`, `9^9^9`
    read as `9^(9^9)`, `{9}^{9}`); a factorial (`n!`, `n!!`, `\\Gamma(n)`, `\\operatorname{Gamma}`) of a number above
    `MAX_FACTORIAL` or of a factorial, whatever expression gives it (`(9999^{2})!`, `10^{10}!`, `(10!)!`); a binomial
    coefficient (`\\binom`, `\\dbinom`, `{n \\choose k}`) with a number above `MAX_BINOMIAL`; a `\\sum` / `\\prod`
    with a numeric bound above `MAX_SUM_TERMS`; after a `\\sum` / `\\prod` / `\\int`, in the rest of its group, an
    exponent above `MAX_OPERATOR_EXPONENT`; a function of a number with more than `MAX_FUNCTION_ARGUMENT_DIGITS`
    digits; function applications nested deeper than `MAX_FUNCTION_NESTING`; a power above `MAX_IRRATIONAL_EXPONENT`
    of a number that is not a plain rational (`\\sin(1)`, `\\pi`, `\\sqrt{2}`; a function's bracketed argument ends
    at its closer: `\\sin(1)^{50}` is a power of `\\sin(1)`); a power above `MAX_COMPOUND_EXPONENT` of a sum that is
    not a plain rational number; any number with more than `MAX_DIGITS` digits; nesting deeper than `MAX_NESTING`.
    Numbers are bounded from above (a sum of n terms by n times the largest, a product and a fraction by the product
    of the parts); `e` and `\\pi` are numbers."""
    try:
        _CostReader(answer).read()
    except (_Costly, RecursionError):
        return True
    return False


class Deadline:
    """A wall-clock deadline shared by the math-verify calls of one reward call, which waits that are not its own
    (worker start-up, workers held by other calls) push back, and the most one of its calls may take (`per_call`)."""

    def __init__(self, seconds: float, per_call: float = float("inf")):
        self._end = time.monotonic() + seconds
        self._lock = threading.Lock()
        self.per_call = per_call  # the most one math-verify call may take

    def remaining(self) -> float:
        with self._lock:
            return self._end - time.monotonic()

    def extend(self, seconds: float) -> None:
        with self._lock:
            self._end += seconds


class _Worker(WorkerProcess):
    """One math-verify worker process (`_math_verify_worker`)."""

    def __init__(self):
        super().__init__(os.path.join(os.path.dirname(os.path.abspath(__file__)), "_math_verify_worker.py"))

    def ask(self, request: bytes, timeout: float, deadline: Deadline | None = None) -> bool:
        """The worker's answer to one request; TimeoutError past `timeout` seconds (not counting its start-up, by
        which `deadline` is pushed back)."""
        if not self.ready:
            started = time.monotonic()
            try:
                line = self.read_line(_STARTUP_TIMEOUT_S)
            except TimeoutError:
                line = b""
            if line != b"ready\n":
                raise RuntimeError(f"The math-verify worker did not start (exit code {self.process.poll()}).")
            self.ready = True
            if deadline is not None:
                deadline.extend(time.monotonic() - started)
                timeout = min(timeout, deadline.remaining())
        self.process.stdin.write(request)
        self.process.stdin.flush()
        reply = self.read_line(timeout)
        if reply not in (b"true\n", b"false\n"):
            raise RuntimeError(f"The math-verify worker failed on this answer ({reply[:100]!r}).")
        return reply == b"true\n"


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


def _math_verify(gold: str, predictions: list[str], deadline: Deadline | None = None) -> bool:
    """Whether every prediction is math-verify equivalent to `gold`, decided in a worker process within
    `MATH_VERIFY_TIMEOUT_S` and before `deadline` (False past either, and for answers `_too_costly` refuses)."""
    if any(_too_costly(prediction) for prediction in predictions):
        return False
    started = time.monotonic()
    if not _worker_slots.acquire(timeout=_STARTUP_TIMEOUT_S):
        logger.warning("No math-verify worker came free in %g s; the answer does not match.", _STARTUP_TIMEOUT_S)
        return False
    try:
        if deadline is not None:
            deadline.extend(time.monotonic() - started)  # a worker held by another call
        timeout = MATH_VERIFY_TIMEOUT_S
        if deadline is not None:
            timeout = min(timeout, deadline.per_call, deadline.remaining())
        if timeout <= 0:
            logger.warning("The reward call's math-verify deadline passed; an answer does not match.")
            return False
        request = (json.dumps([gold, predictions, timeout]) + "\n").encode()
        with _pool_lock:
            worker = _idle_workers.pop() if _idle_workers else None
        worker = worker or _Worker()
        try:
            result = worker.ask(request, timeout, deadline)
        except TimeoutError:
            logger.warning("math-verify ran past its %.2g s on an answer; it does not match.", timeout)
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
    finally:
        _worker_slots.release()
