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
program's exec was refused (`EAGAIN` from a full process limit); its exit status could not be collected. The
machinery reports on a pipe the program never holds (b"R" just before the program's exec, b"E<error>" on a failure),
so a program cannot pass its own failure (exit code 125, an error message) for the sandbox's. Every run is counted
(`sandbox_error_counts`), and `report_sandbox_errors` logs a batch's count (`rewards/sandbox_errors`, through TRL's
`log_metric`) and warns when sandbox errors are frequent; `healtrl.rewards.code` scores such completions 0 and
reports them apart from malformed ones.

Start-up: the interpreters start with `-S` and the module search path of `python -I` here (asked once), so that no
`.pth` file runs in the sandbox; as root, the program runs in the bootstrap's interpreter once it has switched to
the unprivileged uid (every capability gone), instead of starting a second one.
"""

from __future__ import annotations

import ast
import dataclasses
import itertools
import logging
import os
import selectors
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
from collections import deque
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

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


# --------------------------------------------------------------------------------------------------------- isolation
# Runs inside the new namespaces. argv: root disk_bytes uid status_fd cgroup_procs (the cgroup.procs files of the run's
# cgroups, colon-separated; it joins them first). As root (uid >= 0; no user namespace), it still holds real privileges
# here, so it makes the host read-only, then switches to `uid` before starting the program; without root (uid == -1; a
# user namespace maps the caller to namespace-root) it makes the host read-only and drops every capability. Steps: (1)
# every inherited mount read-only (mount_setattr, recursive), so that the program can write none of the host's files
# whoever owns them; (2) a tmpfs working directory holding the program's files; (3) as root, the directories on the way
# to the interpreter that the unprivileged uid could not traverse (e.g. a pyenv under /root) are covered by a tmpfs that
# holds bind mounts of only what the interpreter needs; (4) private /tmp, /var/tmp, /dev/shm; (5) drop privileges,
# no_new_privs, exec the interpreter on main.py (with -c: Python resolves a script path to an absolute path, which the
# private mounts may hide). It writes b"R" to status_fd just before the exec, and b"E<error>" (then exits 125) when any
# step fails, so that its failures are not taken for the program's.
_BOOTSTRAP = r"""
import ctypes, os, shutil, stat, sys
report = int(sys.argv[4])
os.set_inheritable(report, False)  # closed by the exec below: the program never holds it
def failed(kind, exc, tb):  # any error of the bootstrap is the sandbox's, told apart from the program's
    try:
        os.write(report, b"E" + repr(exc).encode("utf-8", "replace")[:2000])
    finally:
        os._exit(125)
sys.excepthook = failed
for procs in filter(None, sys.argv[5].split(":")):  # the run's cgroups, before the host turns read-only
    with open(procs, "w") as handle:
        handle.write("0")
libc = ctypes.CDLL(None, use_errno=True)
libc.syscall.restype = ctypes.c_long
def check(ret, what):
    if ret != 0:
        err = ctypes.get_errno()
        raise OSError(err, os.strerror(err), what)
def tmpfs(target, size, mode):
    check(libc.mount(b"tmpfs", target.encode(), b"tmpfs", 6, b"size=%d,mode=%s" % (size, mode)), target)
class MountAttr(ctypes.Structure):
    _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64), ("prop", ctypes.c_uint64), ("ns", ctypes.c_uint64)]
attr = MountAttr(1, 0, 0, 0)  # MOUNT_ATTR_RDONLY; mount_setattr(AT_FDCWD, "/", AT_RECURSIVE, ...)
check(libc.syscall(442, -100, b"/", 0x8000, ctypes.byref(attr), ctypes.sizeof(attr)), "mount_setattr /")
root, disk, uid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
python_path = __import__("ast").literal_eval(sys.argv[6])  # `python -I`'s path (this interpreter runs with -S)
exe = os.path.realpath(sys.executable)  # a venv's python is a link that the private mounts below may hide
work = os.path.join(root, "work")
tmpfs(work, disk, b"0700" if uid >= 0 else b"0777")
for name in os.listdir(os.path.join(root, "files")):
    shutil.copyfile(os.path.join(root, "files", name), os.path.join(work, name))
    if uid >= 0:
        os.chown(os.path.join(work, name), uid, uid)
if uid >= 0:
    os.chown(work, uid, uid)
os.chdir(work)
if uid >= 0:
    needed = set()
    for path in [sys.executable, sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix, *python_path]:
        if path and os.path.exists(path):
            needed.add(os.path.realpath(path))
            needed.add(os.path.dirname(os.path.realpath(path)))
    def blocked_ancestor():
        for path in sorted(needed):
            parts = path.strip("/").split("/")
            for k in range(1, len(parts) + 1):
                ancestor = "/" + "/".join(parts[:k])
                if os.path.isdir(ancestor) and not os.stat(ancestor).st_mode & stat.S_IXOTH:
                    return ancestor
        return None
    for _ in range(64):
        blocked = blocked_ancestor()
        if blocked is None:
            break
        children = sorted({p[len(blocked) + 1 :].split("/")[0] for p in needed if p.startswith(blocked + "/")})
        fds = {c: os.open(os.path.join(blocked, c), os.O_PATH) for c in children}
        tmpfs(blocked, 1 << 20, b"0755")
        for child, fd in fds.items():
            target = os.path.join(blocked, child)
            if stat.S_ISDIR(os.fstat(fd).st_mode):
                os.mkdir(target)
            else:
                open(target, "w").close()
            check(libc.mount(b"/proc/self/fd/%d" % fd, target.encode(), None, 4096 | 16384, None), target)
            os.close(fd)
    else:
        raise OSError("cannot make the interpreter reachable")
for path in ("/tmp", "/var/tmp", "/dev/shm"):
    # an interpreter that lives there keeps the (read-only) host directory
    if os.path.isdir(path) and not os.path.islink(path) and not exe.startswith(path + "/"):
        tmpfs(path, 1 << 20, b"1777")
if uid >= 0:
    os.setgroups([])
    os.setgid(uid)
    os.setuid(uid)
else:
    for cap in range(64):
        if libc.prctl(24, cap, 0, 0, 0) != 0 and ctypes.get_errno() == 22:  # PR_CAPBSET_DROP until EINVAL
            break
check(libc.prctl(38, 1, 0, 0, 0), "no_new_privs")  # PR_SET_NO_NEW_PRIVS
os.environ["HOME"] = work
if uid >= 0:
    # setuid to a non-root uid cleared every capability: nothing privileged is left in this interpreter, so the
    # program runs here, saving an interpreter start. The credential change made the process non-dumpable (its
    # /proc files root-owned); an exec would have reset that, so reset it here.
    check(libc.prctl(4, 1, 0, 0, 0), "dumpable")  # PR_SET_DUMPABLE
    sys.excepthook = sys.__excepthook__  # from here on, errors are the program's
    os.write(report, b"R")  # the machinery is done
    os.close(report)  # the program never holds it
    del libc, attr, MountAttr, check, tmpfs, failed, report
    sys.path[:] = python_path
    sys.argv = ["main.py"]
    exec(compile(open("main.py", encoding="utf-8").read(), "main.py", "exec"), {"__name__": "__main__"})
    sys.exit(0)
# in a user namespace the process keeps its capabilities until an exec recomputes them from the emptied bounding set
os.write(report, b"R")  # the machinery is done: what fails from here on is the program's (unless execv raises)
os.execv(exe, [exe, "-I", "-S", "-c", "import sys\nsys.path[:] = %r\nsys.argv = ['main.py']\n"
         "exec(compile(open('main.py', encoding='utf-8').read(), 'main.py', 'exec'), {'__name__': '__main__'})"
         % (python_path,)])
"""

# The fallback: report the start (argv[1] is the status pipe), refuse Python-level sockets (best effort), then run
# the program.
_FALLBACK_RUNNER = r"""
import os, socket, sys
os.write(int(sys.argv[1]), b"R")
os.close(int(sys.argv[1]))
def _no_network(*args, **kwargs):
    raise OSError("network access is disabled in the healtrl sandbox")
socket.socket.connect = socket.socket.connect_ex = socket.socket.bind = _no_network
socket.create_connection = socket.getaddrinfo = _no_network
del socket, _no_network
sys.argv = ["main.py"]
exec(compile(open("main.py", encoding="utf-8").read(), "main.py", "exec"), {"__name__": "__main__"})
"""

_ENV = {
    "PATH": "/usr/local/bin:/usr/bin:/bin",
    "LANG": "C.UTF-8",
    "LC_ALL": "C.UTF-8",
    "OMP_NUM_THREADS": "1",
    "OPENBLAS_NUM_THREADS": "1",
    "MKL_NUM_THREADS": "1",
    "NUMEXPR_NUM_THREADS": "1",
}

_state_lock = threading.Lock()
_isolation: str | None = None
_uid_mode: str | None = None  # as root: "per-slot" or "nobody"; otherwise "none" (the caller's own uid)
_slots_free = threading.Condition()
_free_slots: list[int] = list(range(64))


# ----------------------------------------------------------------------------------------------------------- cgroups
_cgroup_parents: dict[str, str] | None = None  # controller ("memory", "pids") -> directory of the runs' cgroups
_cgroup_version = ""  # "2", "1" or "" (none: the total memory bound is RLIMIT_AS x RLIMIT_NPROC)
_cgroup_serial = itertools.count()


def _own_cgroups() -> dict[str, str]:
    """This process's cgroup directories: "unified" (v2), and "memory", "pids" of the v1 hierarchies mounted."""
    mounts = {}  # controller -> (mount root, mount point)
    with open("/proc/self/mountinfo", encoding="utf-8") as handle:
        for line in handle:
            fields, _, tail = line.partition(" - ")
            fields, tail = fields.split(), tail.split()
            if len(fields) < 5 or len(tail) < 3:
                continue
            if tail[0] == "cgroup2":
                mounts.setdefault("unified", (fields[3], fields[4]))
            elif tail[0] == "cgroup":
                for controller in ("memory", "pids"):
                    if controller in tail[2].split(","):
                        mounts.setdefault(controller, (fields[3], fields[4]))
    found = {}
    with open("/proc/self/cgroup", encoding="utf-8") as handle:
        for line in handle:
            _, controllers, path = line.rstrip("\n").split(":", 2)
            for name in controllers.split(",") if controllers else ["unified"]:
                if name in mounts:
                    root, point = mounts[name]
                    relative = os.path.relpath(path, root) if root != "/" else path.lstrip("/")
                    if not relative.startswith(".."):
                        found[name] = os.path.normpath(os.path.join(point, relative))
    return found


def _usable_cgroup_parent(directory: str, version: str) -> bool:
    """Whether runs' cgroups can be made under `directory` (a v2 one needs memory and pids enabled for its children)."""
    try:
        if version == "2":
            enabled = open(os.path.join(directory, "cgroup.subtree_control"), encoding="utf-8").read().split()
            if not {"memory", "pids"} <= set(enabled):
                with open(os.path.join(directory, "cgroup.subtree_control"), "w", encoding="utf-8") as handle:
                    handle.write("+memory +pids")  # refused (EBUSY) where the directory holds processes
        probe = os.path.join(directory, f"healtrl-probe-{os.getpid()}")
        os.mkdir(probe)
        try:
            files = set(os.listdir(probe))
        finally:
            os.rmdir(probe)
        wanted = {"memory.max", "pids.max"} if version == "2" else {"memory.limit_in_bytes", "pids.max"}
        return bool(wanted & files) and "cgroup.procs" in files
    except OSError:
        return False


def _detect_cgroups() -> None:
    """Choose where runs' cgroups go (as root only): a cgroup v2 directory (`HEALTRL_SANDBOX_CGROUP`, else this
    process's own cgroup) with memory and pids for its children, else the v1 memory and pids hierarchies, else none."""
    global _cgroup_parents, _cgroup_version
    _cgroup_parents, _cgroup_version = None, ""
    if sys.platform != "linux" or os.geteuid() != 0 or os.environ.get("HEALTRL_SANDBOX_CGROUP", "") == "none":
        return
    try:
        own = _own_cgroups()
    except (OSError, ValueError):
        return
    unified = os.environ.get("HEALTRL_SANDBOX_CGROUP") or own.get("unified")
    if unified and _usable_cgroup_parent(unified, "2"):
        _cgroup_parents, _cgroup_version = {"memory": unified, "pids": unified}, "2"
    elif "memory" in own and "pids" in own and all(_usable_cgroup_parent(own[c], "1") for c in ("memory", "pids")):
        _cgroup_parents, _cgroup_version = {"memory": own["memory"], "pids": own["pids"]}, "1"


class _RunCgroup:
    """The cgroup(s) of one run: memory (all its processes together, `total_memory_bytes`) and pids."""

    def __init__(self, limits: SandboxLimits, tasks: int):
        name = f"healtrl-{os.getpid()}-{next(_cgroup_serial)}"  # (under _state_lock while isolation_level probes)
        self.dirs = sorted({os.path.join(parent, name) for parent in _cgroup_parents.values()})
        self.memory = os.path.join(_cgroup_parents["memory"], name)
        self.pids = os.path.join(_cgroup_parents["pids"], name)
        try:
            for directory in self.dirs:
                os.mkdir(directory)
            total = str(limits.total_memory_bytes)
            if _cgroup_version == "2":
                self._write(self.memory, "memory.max", total)
                self._write(self.memory, "memory.swap.max", "0", optional=True)
            else:
                self._write(self.memory, "memory.limit_in_bytes", total)
                self._write(self.memory, "memory.memsw.limit_in_bytes", total, optional=True)
            self._write(self.pids, "pids.max", str(tasks))
        except OSError:
            self.remove()
            raise
        self.procs = [os.path.join(directory, "cgroup.procs") for directory in self.dirs]

    @staticmethod
    def _write(directory: str, name: str, value: str, optional: bool = False) -> None:
        try:
            with open(os.path.join(directory, name), "w", encoding="ascii") as handle:
                handle.write(value)
        except OSError:
            if not optional:
                raise

    def join(self) -> None:
        """Move the calling process into the run's cgroups (between fork and exec: only system calls)."""
        for path in self.procs:
            fd = os.open(path, os.O_WRONLY)
            try:
                os.write(fd, b"0")
            finally:
                os.close(fd)

    def oom_killed(self) -> bool:
        name = "memory.events" if _cgroup_version == "2" else "memory.oom_control"
        try:
            with open(os.path.join(self.memory, name), encoding="ascii") as handle:
                return any(line.split()[:1] == ["oom_kill"] and line.split()[1] != "0" for line in handle)
        except (OSError, IndexError):
            return False

    def remove(self) -> None:
        """Kill whatever is left in the cgroups and remove them."""
        for directory in self.dirs:
            kill_file = os.path.join(directory, "cgroup.kill")
            for _ in range(200):
                try:
                    os.rmdir(directory)
                    break
                except FileNotFoundError:
                    break
                except OSError:
                    if os.path.exists(kill_file):
                        self._write(directory, "cgroup.kill", "1", optional=True)
                    else:
                        try:
                            with open(os.path.join(directory, "cgroup.procs"), encoding="ascii") as handle:
                                pids = [int(pid) for pid in handle.read().split()]
                        except OSError:
                            pids = []
                        for pid in pids:
                            try:
                                os.kill(pid, signal.SIGKILL)
                            except OSError:
                                pass
                    time.sleep(0.01)
            else:
                logger.warning("Could not remove the sandbox's cgroup %s.", directory)


# -------------------------------------------------------------------------------------------------------- accounting
SANDBOX_ERROR = "sandbox_error"
"""`SandboxResult.status` of a run that the sandbox itself failed (the program's outcome says nothing about it)."""

RECENT_RUNS = 100
"""Runs in the window of `sandbox_error_counts` and of the warning of `report_sandbox_errors`."""

_counts = {"runs": 0, "sandbox_errors": 0}
_recent: deque[bool] = deque(maxlen=RECENT_RUNS)
_last_error = ""


def _record(result: SandboxResult) -> None:
    global _last_error
    failed = result.status == SANDBOX_ERROR
    with _state_lock:
        _counts["runs"] += 1
        _counts["sandbox_errors"] += failed
        _recent.append(failed)
        if failed:
            _last_error = result.stderr.rstrip().rsplit("\n", 1)[-1][:500]
    if failed:
        logger.debug("Sandbox error: %s", result.stderr[-2000:])


def sandbox_error_counts() -> dict:
    """Runs of `run_python` in this process and how many of them the sandbox failed ("sandbox_error"), in total and
    over the last `RECENT_RUNS` runs, with the last error's message."""
    with _state_lock:
        return {
            "runs": _counts["runs"],
            "sandbox_errors": _counts["sandbox_errors"],
            "recent_runs": len(_recent),
            "recent_sandbox_errors": sum(_recent),
            "last_error": _last_error,
        }


def reset_sandbox_error_counts() -> None:
    """Set the counters of `sandbox_error_counts` back to zero."""
    global _last_error
    with _state_lock:
        _counts.update(runs=0, sandbox_errors=0)
        _recent.clear()
        _last_error = ""


def report_sandbox_errors(n_errors: int, n_runs: int, log_metric=None) -> bool:
    """Log a batch's sandbox errors as `rewards/sandbox_errors` (through TRL's `log_metric` hook when given) and warn
    when they are frequent.

    The warning fires for a batch with sandbox errors when more than half of its runs failed that way, or when more
    than 10% of this process's last `RECENT_RUNS` runs did (once at least 20 ran).

    Returns:
        Whether it warned.
    """
    if callable(log_metric):
        try:
            log_metric("rewards/sandbox_errors", float(n_errors))
        except Exception:  # a logging hook must not take the reward down
            pass
    if not n_errors:
        return False
    counts = sandbox_error_counts()
    recent, recent_errors = counts["recent_runs"], counts["recent_sandbox_errors"]
    if not (2 * n_errors > n_runs or (recent >= 20 and 10 * recent_errors > recent)):
        logger.info("The code sandbox failed %d of %d runs of this batch.", n_errors, n_runs)
        return False
    logger.warning(
        "The code sandbox failed %d of %d runs of this batch (%d of the last %d runs, %d in total): those "
        "completions scored 0 without their programs having run. Last error: %s. Check the machine's free memory and "
        "process limits (`ulimit -u`, `/proc/sys/kernel/pid_max`), leftover processes of the sandbox's uids "
        "(HEALTRL_SANDBOX_UID_BASE; `ps -eo uid,stat,pid,args`), and that `unshare`/`prlimit` still work; see "
        "healtrl.rewards.sandbox.",
        n_errors,
        n_runs,
        recent_errors,
        recent,
        counts["sandbox_errors"],
        counts["last_error"] or "unknown",
    )
    return True


def _uid_for(slot: int) -> int | None:
    """The uid a run switches to (root only): one per concurrent slot, else nobody; None without root."""
    if _uid_mode == "per-slot":
        base = int(os.environ.get("HEALTRL_SANDBOX_UID_BASE", "1990000000"))
        return base + (os.getpid() % 100_000) * 64 + slot
    if _uid_mode == "nobody":
        return 65534
    return None


def _rlimits(limits: SandboxLimits, processes: int) -> dict[int, int]:
    cpu = limits.cpu_seconds or int(limits.timeout) + 2
    out = {
        resource.RLIMIT_AS: limits.memory_bytes,
        resource.RLIMIT_CPU: cpu,
        resource.RLIMIT_FSIZE: limits.file_size_bytes,
        resource.RLIMIT_NOFILE: limits.max_open_files,
        resource.RLIMIT_CORE: 0,
    }
    if processes:
        out[resource.RLIMIT_NPROC] = processes
    return out


def _user_tasks(uid: int) -> int:
    """Processes and threads of `uid` (RLIMIT_NPROC counts them all)."""
    count = 0
    for pid in os.listdir("/proc"):
        if pid.isdigit():
            try:
                count += len(os.listdir(f"/proc/{pid}/task")) if os.stat(f"/proc/{pid}").st_uid == uid else 0
            except OSError:
                pass
    return count


def _nproc_limit(limits: SandboxLimits, uid: int | None, extra: int) -> int:
    if uid is not None:  # a uid of its own: only the sandbox's processes count
        return limits.max_processes + extra
    if os.geteuid() == 0:
        return 0  # root without a uid to switch to: not enforced (see isolation_level)
    if sys.platform != "linux":
        return limits.max_processes + extra + 512  # no /proc to count the user's processes: a loose bound
    return _user_tasks(os.geteuid()) + limits.max_processes + extra


def _command(isolation: str, root: str, limits: SandboxLimits, uid: int | None, status_fd: int, cgroup=None):
    """The argv and preexec_fn of one run; the machinery reports on `status_fd` (see `_BOOTSTRAP`); the program's
    processes go into `cgroup` (a `_RunCgroup`) when given."""
    if isolation == "namespaces":
        # counted: the program, plus unshare when it runs as the caller's uid (no root)
        processes = _nproc_limit(limits, uid, 1 if uid is not None else 2)
        args = [f"--{name}={value}" for name, value in _prlimit_args(limits, processes).items()]
        argv = [shutil.which("prlimit"), *args, "--", shutil.which("unshare")]
        # as root: real privileges for the bootstrap, which then switches to `uid`; otherwise a user namespace
        argv += ["--mount"] if uid is not None else ["--user", "--map-root-user", "--mount"]
        argv += ["--pid", "--fork", "--kill-child", "--mount-proc", "--net", sys.executable, "-I", "-S", "-c"]
        procs = ":".join(cgroup.procs) if cgroup is not None else ""
        args = [root, str(limits.disk_bytes), str(-1 if uid is None else uid), str(status_fd), procs]
        return [*argv, _BOOTSTRAP, *args, repr(_python_path())], None
    rlimits = _rlimits(limits, _nproc_limit(limits, uid, 1))
    strict = sys.platform == "linux"

    def preexec():  # only system calls: this runs between fork and exec
        if cgroup is not None:
            cgroup.join()
        if uid is not None:
            os.setgroups([])
            os.setgid(uid)
            os.setuid(uid)
        for kind, value in rlimits.items():
            try:
                resource.setrlimit(kind, (value, value))
            except (OSError, ValueError):
                if strict:  # elsewhere (macOS) some limits cannot be set: best effort, as documented
                    raise

    runner = f"import sys\nsys.path[:] = {_python_path()!r}\n" + _FALLBACK_RUNNER
    return [sys.executable, "-I", "-S", "-c", runner, str(status_fd)], preexec


_PYTHON_PATH: list[str] | None = None


def _python_path() -> list[str]:
    """The module search path of `python -I` here (stdlib and site-packages), asked once. Sandboxed interpreters
    start with `-S` (no `site`: its .pth files cost tens of milliseconds per start in a typical environment and run
    code the program does not need) and get this path instead, so that they import the same installed packages."""
    global _PYTHON_PATH
    if _PYTHON_PATH is None:
        out = subprocess.run(
            [sys.executable, "-I", "-c", "import sys; print(repr([p for p in sys.path if p]))"],
            capture_output=True,
            text=True,
            env=dict(_ENV),
            timeout=60,
            check=True,
        ).stdout
        path = ast.literal_eval(out.strip())
        if not isinstance(path, list) or not all(isinstance(p, str) for p in path):
            raise RuntimeError(f"Unexpected module search path from {sys.executable}: {out!r}")
        _PYTHON_PATH = path
    return _PYTHON_PATH


def _prlimit_args(limits: SandboxLimits, processes: int) -> dict[str, int]:
    names = {
        resource.RLIMIT_AS: "as",
        resource.RLIMIT_CPU: "cpu",
        resource.RLIMIT_FSIZE: "fsize",
        resource.RLIMIT_NOFILE: "nofile",
        resource.RLIMIT_CORE: "core",
        resource.RLIMIT_NPROC: "nproc",
    }
    return {names[kind]: value for kind, value in _rlimits(limits, processes).items()}


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
    global _isolation, _uid_mode, _cgroup_parents
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
        _detect_cgroups()
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
            cgroup = _RunCgroup(limits, tasks=limits.max_processes + 1)
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


# ---------------------------------------------------------------------------------------------------------- reaping
def _proc_status(pid: str) -> dict[str, str] | None:
    """The fields of /proc/PID/status (zombies keep theirs), None when it is gone."""
    try:
        with open(f"/proc/{pid}/status", encoding="utf-8", errors="replace") as handle:
            text = handle.read()
    except OSError:
        return None
    fields = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        fields[key] = value.strip()
    return fields


def _reap(uid: int | None, wait: float = 2.0) -> int:
    """Reap the zombie children of this process that a run left, and with `uid` (as root, the finished run's own
    slot uid) kill whatever that uid still runs. Returns how many processes of `uid` are left.

    When the trainer is PID 1 of its container or a child subreaper, orphans of a run become its children, and as
    zombies they would count against the slot's `RLIMIT_NPROC` forever. Only two kinds of process are reaped here,
    so that children of other code in the trainer (whose exit status a `Popen` waits for) are never taken: processes
    of the slot's uid (nobody else runs as it, and no run of this slot is in flight) and initial processes of a PID
    namespace ("namespaces" isolation can orphan nothing else: `unshare` is the trainer's child, and everything the
    program starts dies with its namespace).
    """
    if sys.platform != "linux":
        return 0
    me, until, killed = str(os.getpid()), time.monotonic() + wait, False
    while True:
        left = 0
        for pid in filter(str.isdigit, os.listdir("/proc")):
            fields = _proc_status(pid)
            if fields is None:
                continue
            owned = uid is not None and fields.get("Uid", "").split()[:1] == [str(uid)]
            namespace_init = fields.get("NSpid", "").split()[1:][-1:] == ["1"]
            if not (owned or namespace_init):
                continue
            if fields.get("PPid") == me and fields.get("State", "").startswith("Z"):
                try:
                    os.waitpid(int(pid), os.WNOHANG)
                    continue
                except ChildProcessError:
                    pass
            left += owned
        if not left or time.monotonic() >= until:
            if left:
                logger.warning("The code sandbox's uid %s still owns %d processes after a run.", uid, left)
            return left
        if not killed:  # "rlimits" isolation: what left the run's session (or a start-up race) is still running
            _kill_uid(uid)
            killed = True
        time.sleep(0.01)


def _kill_uid(uid: int) -> None:
    """SIGKILL every process of `uid`: a helper switches to it and signals -1 (all that it may signal)."""

    def preexec():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)
        try:
            os.kill(-1, signal.SIGKILL)
        except OSError:
            pass

    try:
        subprocess.run(
            [shutil.which("true") or "/bin/true"],
            stdin=subprocess.DEVNULL,
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
            env={},
            preexec_fn=preexec,
            close_fds=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError) as exc:
        logger.debug("Could not kill the processes of uid %s: %r", uid, exc)


def _children(pid: int) -> list[int]:
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        fields = _proc_status(entry)
        if fields is not None and fields.get("PPid") == str(pid):
            found.append(int(entry))
    return found


def _kill(proc: subprocess.Popen, isolation: str) -> None:
    if isolation == "namespaces" and sys.platform == "linux" and not _wait_exit(proc, time.monotonic()):
        # Kill the namespace's first process and let `unshare` exit after it: killed first, `unshare` would leave
        # its child to this process when it is a subreaper (or PID 1). (Once `unshare` exited, its child is gone.)
        inits = _children(proc.pid)
        for pid in inits:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if inits and _wait_exit(proc, time.monotonic() + 1.0):
            return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass


def _wait_exit(proc: subprocess.Popen, until: float) -> bool:
    """Whether the process exited before `until` (left unreaped where the system allows it)."""
    pid = proc.pid
    if not hasattr(os, "waitid"):  # macOS: poll, which reaps
        while proc.poll() is None:
            if time.monotonic() >= until:
                return False
            time.sleep(0.005)
        return True
    while True:
        try:
            if os.waitid(os.P_PID, pid, os.WEXITED | os.WNOHANG | os.WNOWAIT) is not None:
                return True
        except ChildProcessError:
            return True
        if time.monotonic() >= until:
            return False
        time.sleep(0.005)


def _read_status(fd: int) -> bytes:
    """What the machinery wrote on its status pipe (b"R": the program started; b"E...": the machinery failed)."""
    os.set_blocking(fd, False)
    chunks = []
    while True:
        try:
            chunk = os.read(fd, 4096)
        except (BlockingIOError, OSError):
            break
        if not chunk:
            break
        chunks.append(chunk)
    return b"".join(chunks)


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
