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
  Python's own, in a process the candidate never touches. The entry point's name is bound to the stub as well (the
  old harness shared one namespace, and HumanEval/33's test calls `sort_third` by name). The judge prints
  `<nonce> PASS` when `check` returns.

The candidate can only choose the bytes it sends back, which decode to plain values or fail the test. When the
candidate raises a built-in exception (`ValueError`...), the stub raises the same type, so tests that expect one keep
their meaning; any other failure (an exit, a crash, a non-plain value, a malformed message) raises an exception
that is not an `Exception`, which no `except Exception` in a test can swallow, and the test fails. Arguments the
candidate mutated in place (top-level lists, dicts, sets) are copied back, as an in-process call would leave them.
Once the judge has finished, the candidate's process is killed: a program cannot stall the reward past its verdict.

Limits of the design: arguments must be plain data too (a test that passes a function or a custom object to the
candidate fails; none of HumanEval's 164 does); the candidate's identity (`candidate.__name__`) is the stub's.
"""

from __future__ import annotations

import json
import os
import secrets
import threading
from pathlib import Path

from . import sandbox
from .sandbox import SANDBOX_ERROR, SandboxLimits, SandboxResult, run_python

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

    scope = {"__name__": "__main__"}
    try:  # helpers the test may call (HumanEval/38's encode_cyclic); a prompt that is not valid on its own is skipped
        exec(compile(open("prompt.py", encoding="utf-8").read(), "prompt.py", "exec"), scope)
    except Exception:
        pass
    scope[job["entry_point"]] = candidate  # tests that call the function by name (HumanEval/33) reach it too
    exec(compile(open("test.py", encoding="utf-8").read(), "test.py", "exec"), scope)
    scope["check"](candidate)
    print()
    print(nonce + " PASS", flush=True)


_judge()
"""


def run_assert_test(
    code: str, test: str, entry_point: str, prompt: str, limits: SandboxLimits
) -> tuple[bool, SandboxResult]:
    """Run `check(entry_point)` of an assert-style test against a solution, judged outside the solution's process.

    Args:
        code: The solution (defines `entry_point`).
        test: The test source, defining `check(candidate)`.
        entry_point: The function under test.
        prompt: The task's prompt (its helper functions are visible to the test), may be empty.
        limits: Sandbox limits, applied to each of the two processes (they run concurrently).

    Returns:
        (passed, the judge's `SandboxResult`; the candidate's when the sandbox failed it: status "sandbox_error").
    """
    with _PAIRS:  # both processes of a test hold a sandbox slot at once: never more pairs than slots
        return _run_pair(code, test, entry_point, prompt, limits)


# A pair waits for its two sandbox slots one after the other; with at most half the slots in pairs, a pair's second
# process never waits on a slot held by another pair waiting for its own second slot.
_PAIRS = threading.BoundedSemaphore(max(1, len(sandbox._free_slots) // 2))


def _run_pair(code: str, test: str, entry_point: str, prompt: str, limits: SandboxLimits):
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
            _CODEC + _JUDGE, files, stdin=nonce + "\n", limits=limits, pass_fds=(request_write, reply_read)
        )
    finally:
        cancel.set()  # the verdict is in: whatever the candidate still does is killed
        server.join()
    if served and served[0].status == SANDBOX_ERROR:
        return False, served[0]
    last = judged.stdout.rstrip("\n").rsplit("\n", 1)[-1]
    return judged.status == "ok" and last == f"{nonce} PASS", judged
