"""Assert-style code tests (HumanEval / HumanEval+) judged where the candidate cannot reach.

The threat: a completion's program that runs in the same interpreter as the test harness can declare success
without solving anything: read the harness's nonce from a caller's frame and print the pass line, replace
`builtins.exec` so that the test never runs, return an object whose `__eq__` is always true, exit early through an
`atexit` hook, patch `sys.modules`... Any design where the candidate's code shares a process with the verdict loses.

The design: two sandboxed processes (`healtrl.rewards.sandbox`, each with its own namespaces, uid and limits),
connected only by two pipes.

* The **candidate** process holds the completion's program and nothing else: not the test, not the prompt's
  tests, not the nonce, not the expected values. It serves calls: it reads `(args, kwargs)` from one pipe, calls
  the entry point, and writes back the return value (and the arguments, which the call may have mutated) in the
  plain-data wire format of `healtrl.rewards._plain`. A value that is not plain data (numbers, strings, bytes,
  lists, tuples, dicts, sets, None; numpy scalars are converted to Python numbers) is refused.
* The **judge** process holds the dataset's test (`check`), the prompt (for helpers the test calls, as HumanEval/38's
  `encode_cyclic`) and the nonce. It runs `check(candidate)` unchanged, where `candidate` is a stub that sends the
  call over the pipe and returns the decoded value: the test's own comparisons, tolerances (EvalPlus's
  `assertion` with `np.allclose`, HumanEval's `abs(x - y) < 1e-6`) and control flow run on values whose type is
  Python's own, in a process the candidate never touches (numpy's comparisons there refuse to broadcast: below).
  The entry point's name is bound to the stub as well (the old harness shared one namespace, and HumanEval/33's
  test calls `sort_third` by name). The judge prints `<nonce> PASS` when `check` returns.

The candidate can only choose the bytes it sends back, which decode to plain values or fail the test. When the
candidate raises a built-in exception (`ValueError`...), the stub raises the same type, so tests that expect one keep
their meaning; any other failure (an exit, a crash, a non-plain value, a malformed message) raises an exception
that is not an `Exception`, which no `except Exception` in a test can swallow, and the test fails. Arguments the
candidate mutated in place (top-level lists, dicts, sets) are copied back, as an in-process call would leave them.
Once the judge has finished, the candidate's process is killed: a program cannot stall the reward past its verdict.

Numpy comparisons never broadcast in the judge. EvalPlus's tests compare a returned value with the expected one
through numpy (the Hub dataset's `assertion` helper: `np.allclose(out, exp, rtol=1e-07, atol=atol)` when `out !=
exp` and the expected value is a float or a list of floats, or `atol` is given; EvalPlus's own evaluator calls
`np.testing.assert_allclose` there), and numpy broadcasts: `[]` is close to any float (an empty comparison), `[[x]]`
to `[x]`, `[x, x, x]` to `x`. So when the test's source (or the prompt's) mentions numpy, the judge replaces, before
the test runs, numpy's equality and closeness checks as the test reaches them (the attributes `numpy.allclose`,
`isclose`, `array_equal`, `array_equiv`, and `numpy.testing.assert_allclose`, `assert_almost_equal`,
`assert_approx_equal`, `assert_array_almost_equal`, `assert_array_almost_equal_nulp`, `assert_array_equal`,
`assert_array_max_ulp`, `assert_equal`) by wrappers that first compare the structure of the two sides (the first two
arguments, positional or by keyword): numpy arrays and scalars are read as the Python values they hold, then a list or
tuple matches only a list or tuple of the same length whose elements match pairwise, a bool only a bool, a number
(int, float, complex) only a number, and any other value only a value of the same type. When the structures differ,
the checks return False and the assertions raise `AssertionError`; otherwise numpy's own function decides, unchanged.
Limits: broadcasting through operators (`(np.array(out) == exp).all()`, `np.all(np.abs(a - b) < t)`) and order
checks (`assert_array_less`) are not covered; numpy's internal calls (module globals of numpy's own files) are not
affected; a test that broadcasts on purpose through the wrapped functions fails (HumanEval+'s tests reach numpy only
through `assertion`, whose expected value has the shape of a correct return value).
Python's own `==` is the test's: `True == 1` holds there as in any harness.

Limits of the design: arguments must be plain data too (a test that passes a function or a custom object to the
candidate fails; none of HumanEval's 164 does); the candidate's identity (`candidate.__name__`) is the stub's.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from pathlib import Path

from .sandbox import RUN_SLOTS, SANDBOX_ERROR, SandboxLimits, SandboxResult, run_python

__all__ = ["run_assert_test"]

_CODEC = Path(__file__).with_name("_plain.py").read_text(encoding="utf-8")

# The candidate's process: load the solution, then answer calls until the judge closes its pipe.
_SERVER = r"""
def _serve():
    import builtins
    _job = json.load(open("job.json", encoding="utf-8"))
    _requests, _replies = _job["fds"]
    _globals = {"__name__": "solution"}
    try:
        exec(compile(open("solution.py", encoding="utf-8").read(), "solution.py", "exec"), _globals)
        _fn = _globals[_job["entry_point"]]
        _failure = None
    except BaseException as exc:  # SystemExit included: a program that exits while loading answers no call
        _fn, _failure = None, type(exc).__name__
    while True:
        _message = read_frame(_requests)
        if _message is None:
            break
        if _fn is None:
            _reply = dumps(["fail", "load: " + str(_failure)])
        else:
            try:
                _args, _kwargs = loads(_message)
                _result = _fn(*_args, **_kwargs)
                _mutable = [a if type(a) in (list, dict, set) else None for a in _args]
                _reply = dumps(["ok", _result, _mutable])
            except PlainDataError as exc:
                _reply = dumps(["fail", "not plain data: " + str(exc)])
            except BaseException as exc:
                name = type(exc).__name__
                builtin = getattr(builtins, name, None) is type(exc)
                _reply = dumps(["raise", name] if builtin else ["fail", "raised " + name])
        write_frame(_replies, _reply)
    os._exit(0)


_serve()
"""

# The judge's process: the dataset's test against a stub that forwards each call to the candidate.
_JUDGE = r"""
import builtins, sys


class CandidateFailed(BaseException):
    "The candidate crashed, exited, returned something that is not plain data, or broke the protocol."


_NUMPY_CHECKS = ("allclose", "isclose", "array_equal", "array_equiv")
_NUMPY_ASSERTS = (
    "assert_allclose", "assert_almost_equal", "assert_approx_equal", "assert_array_almost_equal",
    "assert_array_almost_equal_nulp", "assert_array_equal", "assert_array_max_ulp", "assert_equal",
)


def _structure_kind(value, numpy):
    if isinstance(value, numpy.ndarray):
        value = value.tolist()
    elif isinstance(value, numpy.generic):
        value = value.item()
    if isinstance(value, (list, tuple)):
        return "sequence", value
    if isinstance(value, bool):
        return "bool", value
    if isinstance(value, (int, float, complex)):
        return "number", value
    return type(value), value


def _same_structure(a, b, numpy):
    "Whether numpy would compare a and b element by element without broadcasting (see the module docstring)."
    pending = [(a, b)]
    while pending:
        (kind_a, a), (kind_b, b) = (_structure_kind(v, numpy) for v in pending.pop())
        if kind_a != kind_b:
            return False
        if kind_a == "sequence":
            if len(a) != len(b):
                return False
            pending.extend(zip(a, b))
    return True


def _strict(numpy, name, original, asserts):
    import functools, inspect

    try:
        first, second = list(inspect.signature(original).parameters)[:2]
    except (TypeError, ValueError):
        first = second = None

    @functools.wraps(original)
    def compare(*args, **kwargs):
        sides = list(args[:2])
        for key in (first, second)[len(sides):]:
            if key in kwargs:
                sides.append(kwargs[key])
        if len(sides) == 2 and not _same_structure(sides[0], sides[1], numpy):
            if asserts:
                raise AssertionError("%s: the two sides differ in type or shape (no broadcasting here)" % name)
            return numpy.False_
        return original(*args, **kwargs)

    return compare


def _guard_numpy():
    "numpy's equality and closeness checks, as the test sees them, refuse two sides of different structure."
    try:
        import numpy, numpy.testing
    except ImportError:
        return  # the test's own import of numpy fails the same way
    for module, names, asserts in ((numpy, _NUMPY_CHECKS, False), (numpy.testing, _NUMPY_ASSERTS, True)):
        for name in names:
            original = getattr(module, name, None)
            if callable(original):
                setattr(module, name, _strict(numpy, name, original, asserts))


def _judge():
    nonce = sys.stdin.readline().strip()
    job = json.load(open("job.json", encoding="utf-8"))
    requests, replies = job["fds"]

    def candidate(*args, **kwargs):
        try:
            message = dumps([args, kwargs])
        except PlainDataError as exc:
            raise CandidateFailed("the test passed an argument that is not plain data: %s" % exc) from None
        try:
            write_frame(requests, message)
            reply = read_frame(replies)
        except (OSError, PlainDataError) as exc:
            raise CandidateFailed("the candidate's pipe broke: %r" % exc) from None
        if reply is None:
            raise CandidateFailed("the candidate exited")
        try:
            reply = loads(reply)
        except PlainDataError as exc:
            raise CandidateFailed("the candidate's reply is not plain data: %s" % exc) from None
        if type(reply) is list and len(reply) == 3 and reply[0] == "ok" and type(reply[2]) is list:
            for before, after in zip(args, reply[2]):
                if after is not None and type(before) is type(after) and before != after:
                    if type(before) is list:
                        before[:] = after
                    elif type(before) in (dict, set):
                        before.clear()
                        before.update(after)
            return reply[1]
        if type(reply) is list and len(reply) == 2 and reply[0] == "raise" and type(reply[1]) is str:
            cls = getattr(builtins, reply[1], None)
            if isinstance(cls, type) and issubclass(cls, Exception):
                raise cls("raised by the candidate")
        raise CandidateFailed("the candidate failed: %r" % (reply,))

    test_source = open("test.py", encoding="utf-8").read()
    prompt_source = open("prompt.py", encoding="utf-8").read()
    if "numpy" in test_source or "numpy" in prompt_source:
        _guard_numpy()
    scope = {"__name__": "__main__"}
    try:  # helpers the test may call (HumanEval/38's encode_cyclic); a prompt that is not valid on its own is skipped
        exec(compile(prompt_source, "prompt.py", "exec"), scope)
    except Exception:
        pass
    scope[job["entry_point"]] = candidate  # tests that call the function by name (HumanEval/33) reach it too
    exec(compile(test_source, "test.py", "exec"), scope)
    scope["check"](candidate)
    print()
    print(nonce + " PASS", flush=True)


_judge()
"""


def run_assert_test(
    code: str, test: str, entry_point: str, prompt: str, limits: SandboxLimits, cancel: threading.Event | None = None
) -> tuple[bool, SandboxResult]:
    """Run `check(entry_point)` of an assert-style test against a solution, judged outside the solution's process.

    Args:
        code: The solution (defines `entry_point`).
        test: The test source, defining `check(candidate)`.
        entry_point: The function under test.
        prompt: The task's prompt (its helper functions are visible to the test), may be empty.
        limits: Sandbox limits, applied to each of the two processes (they run concurrently).
        cancel: When set, the judge is killed (status "cancelled"), and with it the candidate.

    Returns:
        (passed, the judge's `SandboxResult`; the candidate's when the sandbox failed it: status "sandbox_error").
    """
    with _PAIRS:  # both processes of a test hold a sandbox slot at once: never more pairs than slots
        return _run_pair(code, test, entry_point, prompt, limits, cancel)


# A pair waits for its two sandbox slots one after the other; with at most half the slots in pairs, a pair's second
# process never waits on a slot held by another pair waiting for its own second slot.
_PAIRS = threading.BoundedSemaphore(max(1, RUN_SLOTS // 2))


def _run_pair(code: str, test: str, entry_point: str, prompt: str, limits: SandboxLimits, stop=None):
    nonce = secrets.token_hex(16)
    request_read, request_write = os.pipe()
    reply_read, reply_write = os.pipe()
    cancel = threading.Event()
    served: list[SandboxResult] = []

    def serve() -> None:
        files = {
            "solution.py": code,
            "job.json": json.dumps({"fds": [request_read, reply_write], "entry_point": entry_point}),
        }
        served.append(
            run_python(_CODEC + _SERVER, files, limits=limits, pass_fds=(request_read, reply_write), cancel=cancel)
        )

    server = threading.Thread(target=serve, name="healtrl-code-candidate", daemon=True)
    try:
        server.start()
    except BaseException:
        for fd in (request_read, request_write, reply_read, reply_write):
            os.close(fd)
        raise
    try:
        files = {
            "test.py": test,
            "prompt.py": prompt,
            "job.json": json.dumps({"fds": [request_write, reply_read], "entry_point": entry_point}),
        }
        judged = run_python(
            _CODEC + _JUDGE, files, stdin=nonce + "\n", limits=limits, pass_fds=(request_write, reply_read), cancel=stop
        )
    finally:
        cancel.set()  # the verdict is in: whatever the candidate still does is killed
        server.join()
    if served and served[0].status == SANDBOX_ERROR:
        return False, served[0]
    last = judged.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    return judged.status == "ok" and last == f"{nonce} PASS", judged
