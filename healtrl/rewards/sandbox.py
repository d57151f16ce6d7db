"""Run untrusted Python (model completions) in a subprocess that cannot harm the trainer.

Every run gets a fresh temporary working directory, a wall-clock timeout that kills everything the program started,
resource limits (address space, CPU time, file size, processes, open files), capped stdout/stderr, and an empty
environment (no proxies, no tokens). Two isolation levels; the first run probes the chosen one:

"namespaces" (Linux with util-linux `unshare` and `prlimit`, kernel >= 5.12, and, without root, user namespaces
enabled; the usual case). What is guaranteed:

* no network: a new network namespace holds only a loopback interface that is down, so every connect fails;
* no stray processes: the program runs in a new PID namespace whose first process is the program; when it exits or
  is killed, the kernel kills every process it started (double forks and `setsid` included);
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

Start-up: the interpreters start with `-S` and the module search path of `python -I` here (asked once), so that no
`.pth` file runs in the sandbox; as root, the program runs in the bootstrap's interpreter once it has switched to
the unprivileged uid (every capability gone), instead of starting a second one. A run costs about a third of the CPU
time it did with two full interpreter starts (`benchmarks/code_judge_throughput.py`).

Memory: `RLIMIT_AS` bounds each process, so the program and its children together use at most
`(max_processes + 1) * memory_bytes` of address space.
"""

from __future__ import annotations

import ast
import dataclasses
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
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

try:  # POSIX only
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

__all__ = ["SandboxLimits", "SandboxResult", "isolation_level", "run_python"]

logger = logging.getLogger("healtrl.rewards.sandbox")


@dataclass(frozen=True)
class SandboxLimits:
    """Resource limits of one sandboxed run.

    Attributes:
        timeout: Wall-clock seconds before everything the program started is killed.
        memory_bytes: Address space of each process (`RLIMIT_AS`).
        cpu_seconds: CPU seconds of each process (`RLIMIT_CPU`); default `ceil(timeout) + 1`.
        file_size_bytes: Largest file a process may write (`RLIMIT_FSIZE`).
        disk_bytes: Size of the tmpfs working directory ("namespaces" isolation).
        max_processes: Processes and threads the program may create besides itself (`RLIMIT_NPROC`).
        max_open_files: Open file descriptors per process (`RLIMIT_NOFILE`).
        max_output_bytes: stdout and stderr kept (each); a program that prints more is killed.
    """

    timeout: float = 10.0
    memory_bytes: int = 1 << 30
    cpu_seconds: int | None = None
    file_size_bytes: int = 16 << 20
    disk_bytes: int = 64 << 20
    max_processes: int = 8
    max_open_files: int = 64
    max_output_bytes: int = 1 << 20

    def __post_init__(self):
        for field in dataclasses.fields(self):
            value = getattr(self, field.name)
            if value is not None and not value > 0:
                raise ValueError(f"SandboxLimits.{field.name} must be positive, got {value!r}.")


@dataclass
class SandboxResult:
    """Outcome of one sandboxed run.

    Attributes:
        status: "ok" (exit code 0), "error" (non-zero exit or killed by a signal), "timeout", "output_limit" (printed
            more than `max_output_bytes`), "cancelled" (the caller's `cancel` event) or "failed_to_start".
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
# Runs inside the new namespaces. argv: root disk_bytes uid. As root (uid >= 0; no user namespace), it still holds
# real privileges here, so it makes the host read-only, then switches to `uid` before starting the program; without
# root (uid == -1; a user namespace maps the caller to namespace-root) it makes the host read-only and drops every
# capability. Steps: (1) every inherited mount read-only (mount_setattr, recursive), so that the program can write
# none of the host's files whoever owns them; (2) a tmpfs working directory holding the program's files; (3) as root,
# the directories on the way to the interpreter that the unprivileged uid could not traverse (e.g. a pyenv under
# /root) are covered by a tmpfs that holds bind mounts of only what the interpreter needs; (4) private /tmp, /var/tmp,
# /dev/shm; (5) drop privileges, no_new_privs, exec the interpreter on main.py (with -c: Python resolves a script path
# to an absolute path, which the private mounts may hide).
_BOOTSTRAP = r"""
import ctypes, os, shutil, stat, sys
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
root, disk, uid, python_path = (
    sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), __import__("ast").literal_eval(sys.argv[4]))
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
    # program runs here, saving an interpreter start. A credential change made the process non-dumpable (its /proc
    # files root-owned); an exec would have reset that, so reset it here.
    check(libc.prctl(4, 1, 0, 0, 0), "dumpable")  # PR_SET_DUMPABLE
    del libc, attr, MountAttr, check, tmpfs
    sys.path[:] = python_path
    sys.argv = ["main.py"]
    exec(compile(open("main.py", encoding="utf-8").read(), "main.py", "exec"), {"__name__": "__main__"})
    sys.exit(0)
# in a user namespace the process keeps its capabilities until an exec recomputes them from the emptied bounding set
os.execv(exe, [exe, "-I", "-S", "-c", "import sys\nsys.path[:] = %r\nsys.argv = ['main.py']\n"
         "exec(compile(open('main.py', encoding='utf-8').read(), 'main.py', 'exec'), {'__name__': '__main__'})"
         % (python_path,)])
"""

# The fallback: refuse Python-level sockets (best effort), then run the program.
_FALLBACK_RUNNER = r"""
import socket, sys
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
_free_slots: list[int] = list(range(64))


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


def _command(isolation: str, root: str, limits: SandboxLimits, uid: int | None):
    """The argv and preexec_fn of one run."""
    if isolation == "namespaces":
        # counted: the program, plus unshare when it runs as the caller's uid (no root)
        processes = _nproc_limit(limits, uid, 1 if uid is not None else 2)
        args = [f"--{name}={value}" for name, value in _prlimit_args(limits, processes).items()]
        argv = [shutil.which("prlimit"), *args, "--", shutil.which("unshare")]
        # as root: real privileges for the bootstrap, which then switches to `uid`; otherwise a user namespace
        argv += ["--mount"] if uid is not None else ["--user", "--map-root-user", "--mount"]
        argv += ["--pid", "--fork", "--kill-child", "--mount-proc", "--net", sys.executable, "-I", "-S", "-c"]
        return [
            *argv,
            _BOOTSTRAP,
            root,
            str(limits.disk_bytes),
            str(-1 if uid is None else uid),
            repr(_python_path()),
        ], None
    rlimits = _rlimits(limits, _nproc_limit(limits, uid, 1))
    strict = sys.platform == "linux"

    def preexec():  # only system calls: this runs between fork and exec
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

    return [
        sys.executable,
        "-I",
        "-S",
        "-c",
        f"import sys\nsys.path[:] = {_python_path()!r}\n" + _FALLBACK_RUNNER,
    ], preexec


_PYTHON_PATH: list[str] | None = None


def _python_path() -> list[str]:
    """The module search path of `python -I` here (stdlib and site-packages), asked once. Sandboxed interpreters
    start with `-S` (no `site`: its .pth files cost ~60 ms per start in a typical environment and run code the
    program does not need) and get this path instead, so that they import the same installed packages."""
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
    global _isolation, _uid_mode
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
            sandboxed program). This function closes the caller's copies once the program has started (or failed
            to), so that the other end sees end-of-file when the program exits.
        cancel: When set while the program runs, everything it started is killed (status "cancelled").

    Returns:
        A `SandboxResult`. Never raises for anything the program does.
    """
    limits = limits or SandboxLimits()
    try:
        isolation = isolation_level()
    except BaseException:
        _close_all(pass_fds)
        raise
    with _state_lock:
        slot = _free_slots.pop(0) if _free_slots else None
    try:
        uid = _uid_for(slot if slot is not None else 63)
        return _run(source, files or {}, stdin, limits, isolation, uid, pass_fds=pass_fds, cancel=cancel)
    finally:
        if slot is not None:
            with _state_lock:
                _free_slots.append(slot)


def _run(source, files, stdin, limits, isolation, uid, probing=False, pass_fds=(), cancel=None) -> SandboxResult:
    start = time.monotonic()
    try:
        root = tempfile.mkdtemp(prefix="healtrl-sandbox-")
    except BaseException:
        _close_all(pass_fds)
        raise
    try:
        os.chmod(root, 0o755)
        target = os.path.join(root, "files") if isolation == "namespaces" else os.path.join(root, "work")
        os.makedirs(target, mode=0o755)
        os.makedirs(os.path.join(root, "work"), mode=0o755, exist_ok=True)
        for name, content in {**files, "main.py": source}.items():
            if os.path.basename(name) != name or name in ("", ".", ".."):
                raise ValueError(f"Sandbox file names must be plain names, got {name!r}.")
            data = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else bytes(content)
            with open(os.path.join(target, name), "wb") as handle:
                handle.write(data)
            os.chmod(os.path.join(target, name), 0o644)
        if isolation != "namespaces" and uid is not None:
            os.chown(os.path.join(root, "work"), uid, uid)
        argv, preexec = _command(isolation, root, limits, uid)
        data = stdin.encode("utf-8", "surrogatepass") if isinstance(stdin, str) else bytes(stdin)
        try:
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
                pass_fds=tuple(pass_fds),
            )
        except (OSError, subprocess.SubprocessError, ValueError) as exc:
            if not probing:
                logger.warning("The code sandbox could not start a program: %r", exc)
            return SandboxResult("failed_to_start", None, "", repr(exc), time.monotonic() - start, isolation)
        finally:
            _close_all(pass_fds)
            pass_fds = ()
        return _communicate(proc, data, limits, start, isolation, cancel)
    finally:
        _close_all(pass_fds)
        shutil.rmtree(root, ignore_errors=True)


def _close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _kill(proc: subprocess.Popen) -> None:
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


def _communicate(proc, data: bytes, limits: SandboxLimits, start: float, isolation: str, cancel=None) -> SandboxResult:
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
                _kill(proc)
            elif kill_at is None and cancel is not None and cancel.is_set():
                status, kill_at = "cancelled", now
                _kill(proc)
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
                    _kill(proc)
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
    _kill(proc)  # whatever is left of the session (what the PID namespace already did under "namespaces")
    try:
        returncode = proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        returncode = None
    if status is None:
        status = "ok" if returncode == 0 else "error"
    return SandboxResult(
        status=status,
        returncode=returncode,
        stdout=out[proc.stdout].decode("utf-8", "replace"),
        stderr=out[proc.stderr].decode("utf-8", "replace"),
        duration=time.monotonic() - start,
        isolation=isolation,
    )
