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

* fd hygiene, first thing after the fork (`_fd_hygiene`): /dev/null on fds 0, 1 and 2 (fd 0 and 1 are the worker's
  request and reply pipes to the trainer), every other fd closed except the child's own result pipe: code run in the
  child cannot read the worker's next request, nor write a reply the trainer would read for another completion;
* runs in its own empty temporary directory (removed after the request), so files a scorer writes land there;
* has a CPU-time limit (RLIMIT_CPU) of `timeout + CPU_MARGIN_S` seconds and an address-space limit (RLIMIT_AS) of its
  current size plus `CHILD_EXTRA_MEMORY_BYTES`;
* installs an audit hook that ends the child at once (no score) on frame and garbage-collector introspection
  (`sys._getframe`, the audited attributes that lead to frames: `tb_frame`, `gi_frame`...; `gc.get_objects`...),
  file writes, opening or listing anything under /proc, the memory devices (/dev/mem, /dev/kmem, /dev/port) or the
  links into /proc/self/fd (/dev/fd, /dev/stdin...; `_PRIVATE_ROOTS`, paths as written and resolved), process
  creation, signals, sockets and ctypes: a scorer never needs them; an evaluated answer that reads the expected
  answer from the scorer's frame, or the nonce below, does.

**The child's reply cannot be forged by the child's code.** The worker draws a random 128-bit nonce per request
(`secrets`) and hands it to the child only as an argument of the function that runs after the fork (`_run_child`): it
is in no module global, no environment variable, no file. The child writes one line `<nonce> <score>` per answer; the
worker accepts exactly that (`_parse_child_reply`): a line without the nonce, with another one, or one line too many is
"garbage" and the answer scores 0. An evaluated answer can write to the result pipe (`os.write` is not audited), but
without the nonce what it writes only fails its own request. The functions and values the child needs after the
scorer (`os.write`, `float`, the exact check...) are bound to locals before the scorer runs, so rebinding builtins or
module globals does not change the line written.

The worker waits for the child's reply for at most the request's `timeout` seconds of wall-clock time, then kills it
(SIGKILL) and replies "timeout"; the parent kills the worker itself when that reply does not come (see `_scorer_pool`).
The worker reads, for a request, nothing but its own child's result pipe. The worker's own CPU-time limit is raised
per request, so that a worker whose parent is gone cannot run forever.

Answers that name a NaN or an infinity ("nan", "inf", "infinity", "∞" in any case, with an imaginary unit after them,
or a float literal whose exponent overflows, "1e999") are refused without calling the scorer ("nan") unless the gold
answer names one too: a NaN compares false with everything, and some scorers turn that into full marks
(`min(1.0, exp(-nan))` is 1.0).

Residual risk, stated: a scorer that evaluates answer text runs that text as Python with the child's privileges, and
no audit hook makes that safe. (1) The code can steer its own scorer: it runs inside `score_answer` and can edit the
entry it compares against (the gold is in the evaluating frame's locals for `eval`) or the dataset's state, so its
own answer can score 1.0 whatever the nonce. (2) The hook closes the known ways to read the nonce (frames, the
garbage collector, ctypes, /proc, the memory devices), not every conceivable one; a way found would forge only that
child's own reply. (3) It can read files the worker's user can read outside /proc, and use CPU and memory up to the
limits. What it cannot do: reach the worker's or the trainer's channels (closed), score other completions (each has
its own child and nonce), or outlive the deadline. Hence, as a class, `benchmarks/rg_audit.py` marks every dataset
whose scorer source evaluates text (eval, exec, sympify, parse_expr...) unsafe, and `load_task` refuses those
datasets unless loaded with `?allow_unsafe`.
"""

from __future__ import annotations

import base64
import json
import os
import pickle
import re
import secrets
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


_PATH_EVENTS = ("open", "os.listdir", "os.scandir", "glob.glob", "os.chflags", "os.lchflags")
_PRIVATE_ROOTS = ("/proc", "/dev/mem", "/dev/kmem", "/dev/port", "/dev/fd", "/dev/stdin", "/dev/stdout", "/dev/stderr")
"""Paths whose opening or listing ends a scoring child: /proc (the process's memory, `/proc/self/mem`, its fds and
its parent's), the memory devices and the links into /proc/self/fd. A path is refused when it lies under one of them
as written (made absolute against the working directory, ".." folded) or once resolved (`os.path.realpath`: every
symbolic link followed), so neither a link elsewhere that leads into /proc nor a ".." detour reaches it."""


def _private_path(path) -> bool:
    if path is None or isinstance(path, int):
        return False  # an already-open fd (only /dev/null and the result pipe are open) or the working directory
    try:
        text = os.fsdecode(os.fspath(path))
        forms = (os.path.abspath(text), os.path.realpath(text))
    except Exception:
        return True  # a path that cannot be read is refused, not let through
    return any(form == root or form.startswith(root + "/") for form in forms for root in _PRIVATE_ROOTS)


def _audit(event: str, args: tuple) -> None:
    if event in _FORBIDDEN_EVENTS or event.startswith(_FORBIDDEN_PREFIXES):
        os._exit(3)
    # audited attribute reads that lead to frames (tb_frame, gi_frame, f_back...); a function's `__code__` and
    # `__defaults__` are allowed (sympy's dispatch reads them)
    if event == "object.__getattr__" and len(args) >= 2:
        name = str(args[1])
        if name.endswith("_frame") or name.startswith(("f_", "tb_")):
            os._exit(3)
    if event in _PATH_EVENTS and args and _private_path(args[0]):
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


def _fd_hygiene(keep: int) -> None:
    """In a fresh child: /dev/null on fds 0, 1 and 2 (the worker's request and reply pipes and stderr), every other
    fd closed except `keep` (the child's result pipe)."""
    null = os.open(os.devnull, os.O_RDWR)
    for fd in (0, 1, 2):
        if fd != null:
            os.dup2(null, fd)
    try:
        highest = os.sysconf("SC_OPEN_MAX")
    except (ValueError, OSError):
        highest = 1 << 16
    os.closerange(3, keep)
    os.closerange(keep + 1, max(highest, keep + 2))


def _run_child(dataset, entry, answers: list, timeout: float, workdir: str, memory, write_fd: int, nonce: bytes):
    """The scoring child (never returns). `nonce` lives only in this frame and its caller's (both out of reach of an
    evaluated answer: frames, the garbage collector, ctypes and /proc are refused by `_audit`)."""
    try:
        _fd_hygiene(write_fd)
        os.chdir(workdir)
        import resource

        _limit(resource.RLIMIT_CPU, int(_cpu_used() + timeout + CPU_MARGIN_S) + 1)
        if memory is not None:
            _limit(resource.RLIMIT_AS, memory)
        # bound before the scorer runs: an evaluated answer may rebind builtins and module globals
        write, exit_now, to_float, float_repr = os.write, os._exit, float, float.__repr__
        check, not_exact, score = _EXACT_CHECKS.get(type(dataset).__name__), NOT_EXACT, dataset.score_answer
        prefix, nan_line = nonce + b" ", nonce + b" nan\n"
        sys.addaudithook(_audit)
        for answer in answers:
            if answer is None:
                write(write_fd, nan_line)
                continue
            try:
                value = to_float(score(answer=answer, entry=entry))
            except Exception:
                if len(answers) == 1:
                    exit_now(4)
                write(write_fd, nan_line)  # this answer only (the audit's many answers per child)
                continue
            if value == 1.0 and check is not None and not check(answer, entry):
                value = not_exact  # full credit from a partial-credit path: not exact
            write(write_fd, prefix + float_repr(value).encode("ascii") + b"\n")
        exit_now(0)
    except BaseException:
        os._exit(4)


def _score_in_child(dataset, entry, answers: list, timeout: float, workdir: str) -> dict:
    """Fork a child that scores each of `answers` once (one `<nonce> <score>` line each); the reply, or a failure.
    The child is gone when this returns."""
    nonce = secrets.token_hex(16).encode("ascii")  # this request's; a local, never a global or in the environment
    read_fd, write_fd = os.pipe()
    try:
        memory = _address_space() + CHILD_EXTRA_MEMORY_BYTES
    except OSError:
        memory = None
    pid = os.fork()
    if pid == 0:  # the child
        _run_child(dataset, entry, answers, timeout, workdir, memory, write_fd, nonce)
    os.close(write_fd)
    limit = (len(nonce) + 32) * len(answers)
    try:
        data = b""
        while True:
            ready, _, _ = select.select([read_fd], [], [], timeout)
            if not ready:
                os.kill(pid, signal.SIGKILL)
                return {"failure": "timeout"}
            chunk = os.read(read_fd, 4096)
            if not chunk:
                break
            data += chunk
            if len(data) > limit:
                return {"failure": "garbage"}
    finally:
        os.close(read_fd)
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        _, status = os.waitpid(pid, 0)
    return _parse_child_reply(data, nonce, len(answers), status)


def _parse_child_reply(data: bytes, nonce: bytes, count: int, status: int) -> dict:
    """The scores in a child's output: exactly `count` lines `<nonce> <float>`; any other line, a wrong nonce or a
    missing newline is "garbage"; fewer lines than answers is "raised" (exit code 4) or "died"."""
    lines = data.split(b"\n")
    if lines[-1] or len(lines) - 1 > count:
        return {"failure": "garbage"}
    values = []
    for line in lines[:-1]:
        head, sep, number = line.partition(b" ")
        if not sep or not secrets.compare_digest(head, nonce):
            return {"failure": "garbage"}
        try:
            values.append(float(number.decode("ascii")))
        except (UnicodeDecodeError, ValueError):
            return {"failure": "garbage"}
    if len(values) < count:
        return {"failure": "raised" if os.WIFEXITED(status) and os.WEXITSTATUS(status) == 4 else "died"}
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
