"""The worker process that runs reasoning-gym's scorers for `healtrl.rewards.reasoning_gym` (see `_scorer_pool`).

Started with `python -c` on this file (no `healtrl` import, no re-run of the parent's main module); it holds no
reference to the trainer's objects. It imports reasoning-gym, moves into a fresh private temporary directory, prints
"ready" and answers requests, one JSON line each:

    request: {"spec": {"dataset", "seed", "size", "index", "config"}, "entry": base64 pickle, "answer": str,
              "timeout": seconds}
    reply 1: {"entry": true} once the dataset is built (cached) and the entry read, or {"error": "..."} when they
             cannot be (the last reply then);
    reply 2: {"score": float} (the scorer's value, unchanged: the parent makes it strict), or
             {"failure": "timeout" | "died" | "garbage" | "raised" | "nan"}.

A request may carry "answers" (a list) instead of "answer" (the audit, `benchmarks/rg_audit.py`, scores many answers
of its own per entry): one child scores them one after the other within the one timeout, and the reply is
{"scores": [float or null (NaN, refused), ...]} or a failure for them all.

The entry comes from the parent (pickled; the parent is trusted), which regenerated it in the process that generated
the prompt: some reasoning-gym generators depend on the interpreter's hash seed (`polynomial_multiplication` gives
other polynomials under another PYTHONHASHSEED), so an entry regenerated here could differ from the one the prompt
showed. The worker builds the dataset only for its scorer (`score_answer` reads the dataset's config).

Isolation of each answer. The worker itself (the parent of the scorers) never runs a scorer on an answer: for each
request it forks a child that scores the answer once and exits, so an answer that the scorer evaluates (`eval`,
`sympify`, `parse_expr`: n_queens, polynomial_multiplication, countdown...) cannot change the state that later answers
are scored with. The child, before it calls the scorer:

* runs in its own empty temporary directory (removed after the request), so files a scorer writes land there;
* has a CPU-time limit (RLIMIT_CPU) of `timeout + CPU_MARGIN_S` seconds and an address-space limit (RLIMIT_AS) of its
  current size plus `CHILD_EXTRA_MEMORY_BYTES`;
* installs an audit hook that ends the child at once (no score) on frame and garbage-collector introspection
  (`sys._getframe`, the audited attributes that lead to frames: `tb_frame`, `gi_frame`...; `gc.get_objects`...),
  file writes, process creation, signals, sockets and ctypes: a scorer never needs them, an evaluated answer that reads the expected answer from the scorer's frame does.

The worker waits for the child's reply for at most the request's `timeout` seconds of wall-clock time, then kills it
(SIGKILL) and replies "timeout"; the parent kills the worker itself when that reply does not come (see `_scorer_pool`).
The worker's own CPU-time limit is raised per request, so that a worker whose parent is gone cannot run forever.

Answers that name a NaN or an infinity ("nan", "inf", "infinity", "∞" in any case, with an imaginary unit after them,
or a float literal whose exponent overflows, "1e999") are refused without calling the scorer ("nan") unless the gold
answer names one too: a NaN compares false with everything, and some scorers turn that into full marks
(`min(1.0, exp(-nan))` is 1.0).

Residual risk, stated: the child runs the scorer, and a scorer that evaluates answer text runs that text with the
child's privileges. The audit hook closes the known ways to read the gold answer or tamper with the reply, not every
conceivable one; what it cannot close stays inside one short-lived child with no access to the trainer.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import re
import select
import shutil
import signal
import sys
import tempfile
import unicodedata

CPU_MARGIN_S = 2
"""CPU seconds a scoring child may use beyond its request's deadline before RLIMIT_CPU ends it (the worker kills it at
the deadline; this holds if the worker is stopped)."""

WORKER_CPU_MARGIN_S = 60
"""CPU seconds the worker itself may use per request before its RLIMIT_CPU ends it (it builds datasets and forks)."""

CHILD_EXTRA_MEMORY_BYTES = 2 << 30
"""Address space a scoring child may add to what it holds when forked (RLIMIT_AS), e.g. for a huge integer."""

_FORBIDDEN_EVENTS = (
    "sys._getframe",
    "sys._current_frames",
    "sys.settrace",
    "sys.setprofile",
    "gc.get_objects",
    "gc.get_referrers",
    "gc.get_referents",
    "os.system",
    "os.exec",
    "os.spawn",
    "os.posix_spawn",
    "os.fork",
    "os.forkpty",
    "os.kill",
    "os.killpg",
    "os.putenv",
    "os.unsetenv",
    "os.chdir",
    "os.remove",
    "os.rename",
    "os.rmdir",
    "os.mkdir",
    "os.chmod",
    "os.chown",
    "os.link",
    "os.symlink",
    "os.truncate",
    "os.utime",
    "subprocess.Popen",
    "socket.__new__",
    "socket.connect",
    "socket.bind",
    "ctypes.dlopen",
    "ctypes.dlsym",
    "ctypes.cdata",
    "ctypes.addressof",
    "ctypes.string_at",
    "ctypes.wstring_at",
    "code.__new__",
    "function.__new__",
    "signal.pthread_kill",
    "builtins.input",
    "pdb.Pdb",
)
_FORBIDDEN_PREFIXES = ("ctypes.", "socket.", "winreg.", "_winapi.", "os.exec", "os.spawn", "os.posix_spawn")
_WRITE_MODES = set("wax+")

NOT_EXACT = 0.999
"""Reported instead of 1.0 when a scorer's 1.0 came from its partial-credit path (see `_EXACT_CHECKS`)."""


def _coin_flip_exact(answer: str, entry: dict) -> bool:
    """coin_flip's exact check: its tolerance branch, made relative (1e-4 of the gold; the scorer's absolute 1e-4
    accepts "0" for every probability below 1e-4). Its prefix credit pays 1.0 to "0" for the gold 0.65625."""
    from fractions import Fraction

    try:
        given = float(Fraction(answer.replace(",", "")))
        gold = float(Fraction(str(entry["answer"]).replace(",", "")))
    except (ValueError, ZeroDivisionError, TypeError):
        return False
    return abs(given - gold) <= 1e-4 * abs(gold) + 1e-12


_EXACT_CHECKS = {"CoinFlipDataset": _coin_flip_exact}
"""Dataset classes whose scorer can return 1.0 from a partial-credit path -> their exact check; a 1.0 that the check
rejects is reported as `NOT_EXACT` (partial credit, 0 in strict mode)."""

_NONFINITE_RE = re.compile(r"(?<![a-z])(?:nan|inf(?:inity)?)[ij]?(?![a-z])|\u221e|\d\.?\d*e[+-]?0*\d{3,}")


def names_nonfinite(text: str) -> bool:
    """Whether `text` names a NaN or an infinity: "nan", "inf", "infinity" as words (optionally followed by an
    imaginary unit "i"/"j"), "∞", or a float literal with an exponent of three digits or more; after NFKC
    normalisation, in any case."""
    return bool(_NONFINITE_RE.search(unicodedata.normalize("NFKC", str(text)).casefold()))


def _audit(event: str, args: tuple) -> None:
    if event in _FORBIDDEN_EVENTS or event.startswith(_FORBIDDEN_PREFIXES):
        os._exit(3)
    # audited attribute reads that lead to frames (tb_frame, gi_frame, f_back...); a function's `__code__` and
    # `__defaults__` are allowed (sympy's dispatch reads them)
    if event == "object.__getattr__" and len(args) >= 2:
        name = str(args[1])
        if name.endswith("_frame") or name.startswith(("f_", "tb_")):
            os._exit(3)
    if event == "open" and len(args) >= 2:
        mode, flags = args[1], args[2] if len(args) > 2 else 0
        writes = bool(_WRITE_MODES & set(mode)) if isinstance(mode, str) else False
        if writes or (isinstance(flags, int) and flags & (os.O_WRONLY | os.O_RDWR | os.O_CREAT | os.O_TRUNC)):
            os._exit(3)


def _limit(resource_id: int, value: int) -> None:
    import resource

    soft, hard = resource.getrlimit(resource_id)
    if hard != resource.RLIM_INFINITY:
        value = min(value, hard)
    resource.setrlimit(resource_id, (value, hard))


def _cpu_used() -> float:
    import resource

    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


def _address_space() -> int:
    with open("/proc/self/statm") as handle:
        return int(handle.read().split()[0]) * os.sysconf("SC_PAGE_SIZE")


_datasets: dict = {}


def _dataset(spec: dict):
    """The dataset `spec` names (cached per (name, seed, size, config))."""
    import reasoning_gym

    config = spec.get("config") or {}
    key = (str(spec["dataset"]), int(spec["seed"]), int(spec["size"]), json.dumps(config, sort_keys=True))
    if key not in _datasets:
        if len(_datasets) >= 64:
            _datasets.pop(next(iter(_datasets)))
        _datasets[key] = reasoning_gym.create_dataset(key[0], seed=key[1], size=key[2], **config)
    return _datasets[key]


def _score_in_child(dataset, entry, answers: list, timeout: float, workdir: str) -> dict:
    """Fork a child that scores each of `answers` once (one line each); the reply, or a failure. The child is gone
    when this returns."""
    read_fd, write_fd = os.pipe()
    try:
        memory = _address_space() + CHILD_EXTRA_MEMORY_BYTES
    except OSError:
        memory = None
    pid = os.fork()
    if pid == 0:  # the child: never returns
        try:
            os.close(read_fd)
            os.chdir(workdir)
            import resource

            _limit(resource.RLIMIT_CPU, int(_cpu_used() + timeout + CPU_MARGIN_S) + 1)
            if memory is not None:
                _limit(resource.RLIMIT_AS, memory)
            os.dup2(os.open(os.devnull, os.O_RDONLY), 0)
            sys.addaudithook(_audit)
            for answer in answers:
                if answer is None:
                    os.write(write_fd, b"nan\n")
                    continue
                try:
                    value = dataset.score_answer(answer=answer, entry=entry)
                except Exception:
                    if len(answers) == 1:
                        raise
                    os.write(write_fd, b"nan\n")  # this answer only (the audit's many answers per child)
                    continue
                check = _EXACT_CHECKS.get(type(dataset).__name__)
                if value == 1.0 and check is not None and not check(answer, entry):
                    value = NOT_EXACT  # full credit from a partial-credit path: not exact
                os.write(write_fd, (repr(float(value)) + "\n").encode())
            os._exit(0)
        except BaseException:
            os._exit(4)
    os.close(write_fd)
    try:
        ready, _, _ = select.select([read_fd], [], [], timeout)
        if not ready:
            os.kill(pid, signal.SIGKILL)
            return {"failure": "timeout"}
        data = b""
        while True:
            ready, _, _ = select.select([read_fd], [], [], timeout)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                return {"failure": "timeout"}
            chunk = os.read(read_fd, 64)
            if not chunk:
                break
            data += chunk
            if len(data) > 64 * len(answers):
                return {"failure": "garbage"}
    finally:
        os.close(read_fd)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
    lines = data.split(b"\n")
    if lines[-1] or len(lines) - 1 != len(answers):
        if len(lines) - 1 < len(answers) and not lines[-1]:
            return {"failure": "raised" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 4 else "died"}
        return {"failure": "garbage"}
    try:
        values = [float(line.decode("ascii")) for line in lines[:-1]]
    except (UnicodeDecodeError, ValueError):
        return {"failure": "garbage"}
    return {"scores": [value if value == value else None for value in values]}  # JSON has no NaN


def _handle(request: dict, channel, root: str) -> None:
    try:
        dataset = _dataset(request["spec"])
        entry = pickle.loads(base64.b64decode(request["entry"]))
        single = "answer" in request
        answers = [str(request["answer"])] if single else [str(a) for a in request["answers"]]
        timeout = float(request["timeout"])
        gold = str(entry.get("answer", ""))
    except Exception as exc:
        _reply(channel, {"error": f"{type(exc).__name__}: {exc}"[:500]})
        return
    _reply(channel, {"entry": True})
    nonfinite_gold = names_nonfinite(gold)
    checked = [None if names_nonfinite(a) and not nonfinite_gold else a for a in answers]
    if all(a is None for a in checked):
        reply = {"scores": [None] * len(answers)}
    else:
        workdir = tempfile.mkdtemp(dir=root)
        try:
            reply = _score_in_child(dataset, entry, checked, timeout, workdir)
        finally:
            shutil.rmtree(workdir, ignore_errors=True)
    if single and "scores" in reply:
        value = reply["scores"][0]
        reply = {"score": value} if value is not None else {"failure": "nan"}
    _reply(channel, reply)


def _reply(channel, message: dict) -> None:
    channel.write(json.dumps(message) + "\n")
    channel.flush()


def main() -> None:
    channel = sys.stdout
    sys.stdout = sys.stderr  # anything a generator prints must not mix with the replies
    import resource

    import reasoning_gym  # noqa: F401  (the slow import, before "ready")

    root = tempfile.mkdtemp(prefix="healtrl-rg-scorer-")
    os.chdir(root)
    channel.write("ready\n")
    channel.flush()
    try:
        for line in sys.stdin:
            try:
                request = json.loads(line)
            except ValueError:
                _reply(channel, {"error": "unreadable request"})
                continue
            _limit(resource.RLIMIT_CPU, int(_cpu_used() + WORKER_CPU_MARGIN_S) + 1)
            _handle(request, channel, root)
    finally:
        shutil.rmtree(root, ignore_errors=True)


if __name__ == "__main__":
    main()
