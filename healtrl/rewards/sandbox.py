"""Run untrusted Python (model completions) in a subprocess that cannot harm the trainer.

Every run gets a fresh temporary working directory, a wall-clock timeout that kills everything the program started,
resource limits (address space, CPU time, file size, processes, open files), capped stdout/stderr, and an empty
environment (no proxies, no tokens). Two isolation levels; the first run probes the chosen one:

"namespaces" (Linux with util-linux `unshare` and `prlimit`, kernel >= 5.12, and, without root, user namespaces
enabled; the usual case). What is guaranteed:

* no network: a new network namespace holds only a loopback interface that is down, so every connect fails;
* no stray processes: the program runs in a new PID namespace whose first process is the program; when it exits or
  is killed, the kernel kills every process it started (double forks and `setsid` included), and nothing is ever
  orphaned to the trainer (see "Processes and zombies" below);
* a read-only host: every file system the trainer sees is read-only in the program's mount namespace, whoever owns
  the files; it writes only to its working directory, a fresh tmpfs of `disk_bytes`, and to private 1 MiB tmpfs on
  `/tmp`, `/var/tmp` and `/dev/shm` (`RLIMIT_FSIZE` caps any single file); it sees its own `/proc`;
* no privileges: without root, the program is root of a user namespace with every capability dropped; as root, the
  program runs as an unprivileged uid (`HEALTRL_SANDBOX_UID_BASE`, default 1,990,000,000, plus a slot number per
  concurrent run), and directories on the way to the interpreter that this uid could not traverse (a pyenv under
  `/root`) are bridged with bind mounts of just the interpreter's directories;
* bounded processes: `RLIMIT_NPROC` caps the processes and threads it may create (fork bombs fail with EAGAIN);
  without root it counts all of the user's processes, so the limit is set to their current number plus
  `max_processes`.

"rlimits" (opt-in, for machines without namespaces, e.g. macOS): the same resource limits, a new
session killed as a group and a fresh temporary directory; as root, the switch to an unprivileged uid (which must be
able to execute the interpreter, else the sandbox refuses to start). Python-level `socket` connections are refused,
but a program that makes raw system calls can still reach the network, processes that leave the session can outlive
the run, the disk is only bounded per file, and without root the program can write wherever the user can. It is never
chosen silently: where namespaces are unavailable the first run raises `RuntimeError` with the fix, and
`HEALTRL_SANDBOX=rlimits` opts into this level.

Processes and zombies: nothing of a run is left for the trainer to reap, also when the trainer inherits orphans
(PID 1 of a container, or a child subreaper): a zombie it never reaps would count against the slot uid's
`RLIMIT_NPROC` forever, until every run of that slot failed at start-up. Under "namespaces" a run is stopped by killing
the namespace's first process, so that `unshare`, the trainer's only child, exits after it (the program and what it
started die with the namespace). As root, once a run is over, whatever its slot's uid still runs is killed (under
"rlimits" this also ends the processes that left the session), and each run ends by reaping the zombie children the
trainer inherited from it: processes of that slot's uid (no other run uses the slot meanwhile) and first processes of
a PID namespace. No other child of the trainer is reaped (dataloader workers, another library's `Popen`). Not
covered: without root under "rlimits", processes that left the session outlive the run and, when the trainer is a
subreaper, end as its zombies: they run as the trainer's own uid and cannot be told apart from its other children
(the process limit is then relative to the user's current processes, so they do not starve later runs).

Memory: a run's processes together are bounded by `SandboxLimits.total_memory_bytes`, `(max_processes + 1) *
memory_bytes` (5 GiB by default: the program and 4 more processes of 1 GiB). `RLIMIT_AS` bounds each process's address
space and `RLIMIT_NPROC` their number, which enforces it exactly as root, where every concurrent run has a uid of its
own (without root the process limit counts all of the user's processes, and concurrent runs can use each other's
headroom). As root, where a cgroup can be made, each run also gets cgroups of its own: memory (v2 `memory.max`, swap
0; v1 `memory.limit_in_bytes` and `memory.memsw.limit_in_bytes`) at `total_memory_bytes` for all of its processes,
their files on its tmpfs included, and `pids.max` at `max_processes + 1`; a run that reaches the memory limit is
killed by the kernel (status "error", and `stderr` says so), and after the run whatever is left in its cgroups is
killed and the cgroups removed. Which cgroups: a v2 directory named by `HEALTRL_SANDBOX_CGROUP` or else the trainer's
own v2 cgroup, when it can enable memory and pids for its children (in practice a delegated cgroup without processes,
prepared for the trainer, or the root of a host); else the v1 memory and pids hierarchies (hosts with the hybrid
layout); else none, and the rlimits alone bound a run. `HEALTRL_SANDBOX_CGROUP=none` turns cgroups off. The first run
logs (INFO) which bound is in force.

Sandbox errors: a run that the sandbox itself failed gets the status "sandbox_error", not the program's outcome: no
temporary directory, pipe or fork; `prlimit` or `unshare` failed; the bootstrap could not mount or switch uid; the
program's exec was refused (without root, `EAGAIN` from a full process limit; as root the program runs in the
bootstrap's interpreter, no exec); its exit status could not be collected. The machinery reports on a pipe the
program never holds (b"R" just before the program starts, b"E<error>" on a failure),
so a program cannot pass its own failure (exit code 125, an error message) for the sandbox's. Every run is counted
(`sandbox_error_counts`), and `report_sandbox_errors` logs a batch's count (`rewards/sandbox_errors`, through TRL's
`log_metric`) and warns when sandbox errors are frequent; `healtrl.rewards.code` scores such completions 0 and
reports them apart from malformed ones.

Start-up: the interpreters start with `-S` and the module search path of `python -I` here (asked once), so that no
`.pth` file runs in the sandbox; as root, the program runs in the bootstrap's interpreter once it has switched to
the unprivileged uid (every capability gone), instead of starting a second one.
"""

from __future__ import annotations

import dataclasses
import logging
import os
import selectors
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ._sandbox_accounting import (
    SANDBOX_ERROR,
    _record,
    report_sandbox_errors,
    reset_sandbox_error_counts,
    sandbox_error_counts,
)
from ._sandbox_cgroups import _detect_cgroups, _RunCgroup
from ._sandbox_procs import _kill, _read_status, _reap, _wait_exit
from ._sandbox_programs import _ENV, _command

try:  # POSIX only
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

__all__ = [
    "SANDBOX_ERROR",
    "SandboxLimits",
    "SandboxResult",
    "isolation_level",
    "report_sandbox_errors",
    "reset_sandbox_error_counts",
    "run_python",
    "sandbox_error_counts",
]

logger = logging.getLogger("healtrl.rewards.sandbox")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    Attributes:
        timeout: Wall-clock seconds before everything the program started is killed.
        memory_bytes: Address space of each process (`RLIMIT_AS`); all processes together: `total_memory_bytes`.
        cpu_seconds: CPU seconds of each process (`RLIMIT_CPU`); default `ceil(timeout) + 1`.
        file_size_bytes: Largest file a process may write (`RLIMIT_FSIZE`).
        disk_bytes: Size of the tmpfs working directory ("namespaces" isolation).
        max_processes: Processes and threads the program may create besides itself (`RLIMIT_NPROC`; as root, the
            run's own uid holds at most `max_processes + 1` of them).
        max_open_files: Open file descriptors per process (`RLIMIT_NOFILE`).
        max_output_bytes: stdout and stderr kept (each); a program that prints more is killed.
    """

    timeout: float = 10.0
    memory_bytes: int = 1 << 30
    cpu_seconds: int | None = None
    file_size_bytes: int = 16 << 20
    disk_bytes: int = 64 << 20
    max_processes: int = 4
    max_open_files: int = 64
    max_output_bytes: int = 1 << 20

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None and not value > 0:
                raise ValueError(f"SandboxLimits.{field.name} must be positive, got {value!r}.")

    @property
    def total_memory_bytes(self) -> int:
        """Address space of one run's processes together: `(max_processes + 1) * memory_bytes` (5 GiB by default).

        `RLIMIT_AS` bounds each process and `RLIMIT_NPROC` their number, so this is the bound the two enforce together
        (exactly as root, where each concurrent run has a uid of its own; without root the process limit counts all of
        the user's processes, and concurrent runs can use each other's headroom). Threads share their process's
        address space: they count against `max_processes` but add nothing here.
        """
        return (self.max_processes + 1) * self.memory_bytes


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run.

    Attributes:
        status: "ok" (exit code 0), "error" (non-zero exit or killed by a signal), "timeout", "output_limit" (printed
            more than `max_output_bytes`), "cancelled" (the caller's `cancel` event) or "sandbox_error" (the sandbox failed, not the program: it did not run, or
            its outcome is unknown; `stderr` ends with the reason).
        returncode: Exit code (negative: killed by that signal), None if it never ran.
        stdout: Captured standard output (UTF-8, undecodable bytes replaced), at most `max_output_bytes`.
        stderr: Captured standard error, likewise capped.
        duration: Wall-clock seconds.
        isolation: "namespaces" or "rlimits".
    """

    status: str
    returncode: int | None
    stdout: str
    stderr: str
    duration: float
    isolation: str


# Programs and environment: healtrl/rewards/_sandbox_programs.py; cgroups: _sandbox_cgroups.py; processes:
# _sandbox_procs.py.

_state_lock = threading.Lock()
_isolation: str | None = None
_uid_mode: str | None = None  # as root: "per-slot" or "nobody"; otherwise "none" (the caller's own uid)
_slots_free = threading.Condition()
_free_slots: list[int] = list(range(64))


_cgroup_parents: dict[str, str] | None = None  # controller ("memory", "pids") -> directory of the runs' cgroups
_cgroup_version = ""  # "2", "1" or "" (none: the total memory bound is RLIMIT_AS x RLIMIT_NPROC)


# Accounting: healtrl/rewards/_sandbox_accounting.py.


def _uid_for(slot: int) -> int | None:
    """The uid a run switches to (root only): one per concurrent slot, else nobody; None without root."""
    if _uid_mode == "per-slot":
        base = int(os.environ.get("HEALTRL_SANDBOX_UID_BASE", "1990000000"))
        return base + (os.getpid() % 100_000) * 64 + slot
    if _uid_mode == "nobody":
        return 65534
    return None


_PROBE = """
import os
print(os.getpid(), os.getuid())
try:
    open('../write-probe', 'w')  # the run's directory on the host file system
    print('host-writable')
except OSError:
    print('host-protected')
"""


def _probe(isolation: str, uid: int | None) -> bool:
    result = _run(_PROBE, {}, b"", SandboxLimits(timeout=20), isolation, uid, probing=True)
    lines = result.stdout.split()
    if result.status != "ok" or len(lines) != 3:
        return False
    if isolation == "namespaces":
        return lines[0] == "1" and lines[2] == "host-protected"
    return True


def isolation_level() -> str:
    """The isolation this process uses ("namespaces" or "rlimits"), probed on first call (see the module docstring).

    Raises:
        RuntimeError: the sandbox cannot start here (no Linux namespaces and `HEALTRL_SANDBOX=rlimits` not set, or
            that level failed too); the message says what is missing.
    """
    global _isolation, _uid_mode, _cgroup_parents, _cgroup_version
    with _state_lock:
        if _isolation is not None:
            return _isolation
        if resource is None:
            raise RuntimeError("healtrl's code sandbox needs a POSIX system (Linux, or macOS with weaker isolation).")
        wanted = os.environ.get("HEALTRL_SANDBOX", "").strip().lower()
        if wanted not in ("", "namespaces", "rlimits"):
            raise ValueError(f"HEALTRL_SANDBOX must be 'namespaces' or 'rlimits', got {wanted!r}.")
        # the weaker "rlimits" isolation only when asked for: it cannot keep a program from the user's files
        candidates = ["rlimits"] if wanted == "rlimits" else ["namespaces"]
        if sys.platform != "linux" or not (shutil.which("unshare") and shutil.which("prlimit")):
            candidates = [c for c in candidates if c != "namespaces"]
        uid_modes = ["per-slot", "nobody"] if os.geteuid() == 0 else ["none"]
        for isolation in candidates:
            for mode in uid_modes:
                _uid_mode = mode
                if _probe(isolation, _uid_for(0)):
                    _isolation = isolation
                    break
            if _isolation is not None:
                break
        if _isolation is None:
            _uid_mode = None
            raise RuntimeError(
                "healtrl's code sandbox cannot isolate untrusted code here: "
                + (
                    "Linux namespaces are unavailable (it needs Linux >= 5.12, util-linux's `unshare` and `prlimit`, "
                    "and, without root, user namespaces enabled, e.g. `sysctl kernel.unprivileged_userns_clone=1` or "
                    "`kernel.apparmor_restrict_unprivileged_userns=0`). Set HEALTRL_SANDBOX=rlimits to run code with "
                    "resource limits only, which cannot keep a program from this user's files."
                    if wanted != "rlimits"
                    else f"even the resource-limits-only sandbox failed to start {sys.executable}"
                    + (
                        " as an unprivileged uid (an interpreter under /root cannot be executed by one)."
                        if os.geteuid() == 0
                        else "."
                    )
                )
            )
        _cgroup_parents, _cgroup_version = _detect_cgroups()
        if _cgroup_parents is not None and not _probe(_isolation, _uid_for(0)):
            logger.warning("healtrl's code sandbox cannot run programs in a cgroup here: %s", _cgroup_parents)
            _cgroup_parents = None
        logger.info(
            "healtrl's code sandbox: %s isolation; a run's processes together are bounded by %s.",
            _isolation,
            f"a cgroup v{_cgroup_version} (memory and pids)" if _cgroup_parents else "RLIMIT_AS x RLIMIT_NPROC",
        )
        if _isolation != "namespaces":
            logger.warning(
                "healtrl's code sandbox runs with resource limits only (no Linux namespaces): network isolation is "
                "best effort, processes that leave the session can outlive a run, and %s. See "
                "healtrl.rewards.sandbox.",
                "the program runs as an unprivileged uid"
                if os.geteuid() == 0
                else "the program can write wherever this user can",
            )
        return _isolation


# ----------------------------------------------------------------------------------------------------------- running
def run_python(
    source: str,
    files: Mapping[str, str | bytes] | None = None,
    stdin: str | bytes = b"",
    limits: SandboxLimits | None = None,
    *,
    pass_fds: Sequence[int] = (),
    cancel: threading.Event | None = None,
) -> SandboxResult:
    """Run a Python program in the sandbox.

    Args:
        source: The program (run as `main.py` in the working directory, with `__name__ == "__main__"`).
        files: Extra files written next to it (name -> content); names must be plain file names.
        stdin: Standard input (the program sees end-of-file after it).
        limits: Resource limits (default `SandboxLimits()`).
        pass_fds: File descriptors the program inherits under the same numbers (e.g. the ends of pipes to another
            sandboxed program). This function closes the caller's copies once the program has started (or could
            not), so that the other end sees end-of-file when the program exits.
        cancel: When set while the program runs, everything it started is killed (status "cancelled").

    Returns:
        A `SandboxResult`; its status is "sandbox_error" when the sandbox itself failed (the program did not run, or
        its outcome is unknown), which is counted (`sandbox_error_counts`). Never raises for anything the program
        does.
    """
    limits = limits or SandboxLimits()
    try:
        isolation = isolation_level()
    except BaseException:
        _close_all(pass_fds)
        raise
    with _slots_free:  # one run per slot at a time: as root, a slot's uid is the run's alone (see `_reap`)
        while not _free_slots:
            _slots_free.wait()
        slot = _free_slots.pop(0)
    try:
        result = _run(source, files or {}, stdin, limits, isolation, _uid_for(slot), pass_fds=pass_fds, cancel=cancel)
    finally:
        with _slots_free:
            _free_slots.append(slot)
            _slots_free.notify()
    _record(result)
    return result


def _close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _run(source, files, stdin, limits, isolation, uid, probing=False, pass_fds=(), cancel=None) -> SandboxResult:
    start = time.monotonic()
    named = {**files, "main.py": source}
    owned = list(pass_fds)  # closed exactly once: right after the program's start, else on the way out
    for name in named:
        if os.path.basename(name) != name or name in ("", ".", ".."):
            _close_all(owned)
            raise ValueError(f"Sandbox file names must be plain names, got {name!r}.")
    data = stdin.encode("utf-8", "surrogatepass") if isinstance(stdin, str) else bytes(stdin)
    root = proc = status_r = status_w = cgroup = None
    try:
        if _cgroup_parents is not None:
            cgroup = _RunCgroup(limits, limits.max_processes + 1, _cgroup_parents, _cgroup_version)
        root = tempfile.mkdtemp(prefix="healtrl-sandbox-")
        os.chmod(root, 0o755)
        target = os.path.join(root, "files") if isolation == "namespaces" else os.path.join(root, "work")
        os.makedirs(target, mode=0o755)
        os.makedirs(os.path.join(root, "work"), mode=0o755, exist_ok=True)
        for name, content in named.items():
            payload = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else bytes(content)
            with open(os.path.join(target, name), "wb") as handle:
                handle.write(payload)
            os.chmod(os.path.join(target, name), 0o644)
        if isolation != "namespaces" and uid is not None:
            os.chown(os.path.join(root, "work"), uid, uid)
        status_r, status_w = os.pipe()
        argv, preexec = _command(isolation, root, limits, uid, status_w, cgroup)
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=os.path.join(root, "work") if isolation != "namespaces" else root,
            env=dict(_ENV),
            start_new_session=True,
            preexec_fn=preexec,
            close_fds=True,
            pass_fds=(status_w, *owned),
        )
        os.close(status_w)
        status_w = None
        _close_all(owned)
        owned = []
        result = _communicate(proc, data, limits, start, isolation, status_r, cancel)
        if cgroup is not None and result.status != SANDBOX_ERROR and cgroup.oom_killed():
            result.stderr += (
                f"\nhealtrl sandbox: the run's processes together reached its memory limit "
                f"({limits.total_memory_bytes} bytes) and were killed"
            )
        return result
    except Exception as exc:  # the machinery failed (no fork, no pipe, no disk, ...): the program is not to blame
        if proc is not None:
            _kill(proc, isolation)
            try:
                proc.wait(timeout=2.0)
            except subprocess.TimeoutExpired:
                pass
        if not probing:
            logger.debug("The code sandbox failed: %r", exc)
        return SandboxResult(
            SANDBOX_ERROR,
            None if proc is None else proc.returncode,
            "",
            f"healtrl sandbox: {exc!r}",
            time.monotonic() - start,
            isolation,
        )
    finally:
        _close_all(owned)
        for fd in (status_r, status_w):
            if fd is not None:
                os.close(fd)
        if root is not None:
            shutil.rmtree(root, ignore_errors=True)
        if cgroup is not None:
            cgroup.remove()
        try:
            _reap(uid if _uid_mode == "per-slot" else None)
        except OSError as exc:  # no /proc to read: nothing to reap either
            logger.debug("Could not look for the sandbox's leftover processes: %r", exc)


def _communicate(proc, data: bytes, limits: SandboxLimits, start: float, isolation: str, status_fd: int, cancel=None):
    """Feed stdin and read stdout/stderr without blocking, until exit, timeout or too much output."""
    deadline = start + limits.timeout
    out = {proc.stdout: bytearray(), proc.stderr: bytearray()}
    status = None
    selector = selectors.DefaultSelector()
    for stream in out:
        os.set_blocking(stream.fileno(), False)
        selector.register(stream, selectors.EVENT_READ)
    if data:
        os.set_blocking(proc.stdin.fileno(), False)
        selector.register(proc.stdin, selectors.EVENT_WRITE)
    else:
        proc.stdin.close()
    view, kill_at = memoryview(data), None
    try:
        while selector.get_map():
            now = time.monotonic()
            if kill_at is None and now >= deadline:
                status, kill_at = "timeout", now
                _kill(proc, isolation)
            elif kill_at is None and cancel is not None and cancel.is_set():
                status, kill_at = "cancelled", now
                _kill(proc, isolation)
            if kill_at is not None and now - kill_at > 1.0:  # killed, but something still holds the pipes
                break
            for key, _ in selector.select(timeout=max(0.0, min(0.05, deadline - now)) if kill_at is None else 0.05):
                stream = key.fileobj
                if stream is proc.stdin:
                    try:
                        written = os.write(stream.fileno(), view[:65536])
                        view = view[written:]
                    except (BrokenPipeError, OSError):
                        view = view[:0]
                    if not len(view):
                        selector.unregister(stream)
                        stream.close()
                    continue
                try:
                    chunk = os.read(stream.fileno(), 65536)
                except BlockingIOError:
                    continue
                except OSError:
                    chunk = b""
                if not chunk:
                    selector.unregister(stream)
                    continue
                buffer = out[stream]
                room = limits.max_output_bytes - len(buffer)
                buffer += chunk[: max(room, 0)]
                if len(chunk) > room and kill_at is None:
                    status, kill_at = "output_limit", time.monotonic()
                    _kill(proc, isolation)
    finally:
        selector.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
    # Wait for the exit without reaping, so that the process group id cannot be reused before the group is killed.
    wait_until = (time.monotonic() + 2.0) if kill_at is not None else max(deadline, time.monotonic() + 0.1)
    exited = _wait_exit(proc, wait_until)
    if not exited:
        status = status or "timeout"
    _kill(proc, isolation)  # whatever is left of the session (what the PID namespace already did under "namespaces")
    try:
        returncode = proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        returncode = None
    stderr = out[proc.stderr].decode("utf-8", "replace")
    report = _read_status(status_fd)
    problem = None
    if report != b"R":  # the program never ran: the machinery failed (or was too slow to start it)
        if report[:1] == b"E" or report[1:2] == b"E":
            problem = "the sandbox failed before the program ran: " + report.split(b"E", 1)[1].decode(
                "utf-8", "replace"
            )
        elif status == "timeout":
            problem = "the sandbox did not start the program within the time limit"
        else:
            problem = f"the sandbox failed before the program ran (exit status {returncode})"
    elif returncode is None:
        problem = "the sandbox could not collect the program's exit status"
    if problem is not None:
        status, stderr = SANDBOX_ERROR, (stderr + "\n" if stderr else "") + "healtrl sandbox: " + problem
    elif status is None:
        status = "ok" if returncode == 0 else "error"
    return SandboxResult(
        status=status,
        returncode=returncode,
        stdout=out[proc.stdout].decode("utf-8", "replace"),
        stderr=stderr,
        duration=time.monotonic() - start,
        isolation=isolation,
    )
