"""How the code sandbox (`healtrl.rewards.sandbox`) starts a run: the bootstrap that sets up the namespaces, the
runner of the resource-limits-only isolation, the environment every run gets, and the command line with its resource
limits (`_command`). `limits` below is a `healtrl.rewards.sandbox.SandboxLimits`."""

from __future__ import annotations

import ast
import os
import shutil
import subprocess
import sys

try:  # POSIX only
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

# Runs inside the new namespaces. argv: root disk_bytes uid status_fd cgroup_procs (the cgroup.procs files of the run's
# cgroups, colon-separated; it joins them first). As root (uid >= 0; no user namespace), it still holds real privileges
# here, so it makes the host read-only, then switches to `uid` before starting the program; without root (uid == -1; a
# user namespace maps the caller to namespace-root) it makes the host read-only and drops every capability. Steps: (1)
# every inherited mount read-only (mount_setattr, recursive), so that the program can write none of the host's files
# whoever owns them; (2) a tmpfs working directory holding the program's files; (3) as root, the directories on the way
# to the interpreter that the unprivileged uid could not traverse (e.g. a pyenv under /root) are covered by a tmpfs that
# holds bind mounts of only what the interpreter needs; (4) private /tmp, /var/tmp, /dev/shm; (5) drop privileges,
# no_new_privs; then, as root (the uid switch dropped every capability), run main.py in this interpreter, else exec
# the interpreter on main.py so that the capabilities are recomputed from the emptied bounding set (with -c: Python
# resolves a script path to an absolute path, which the private mounts may hide). It writes b"R" to status_fd just
# before the program starts (and closes it, or lets the exec close it), and b"E<error>" (then exits 125) when any step
# fails, so that its failures are not taken for the program's.
_BOOTSTRAP = r"""
import ctypes, os, shutil, stat, sys
report = int(sys.argv[4])
os.set_inheritable(report, False)  # closed below (or by the exec): the program never holds it
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


def _rlimits(limits, processes: int) -> dict[int, int]:
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


def _nproc_limit(limits, uid: int | None, extra: int) -> int:
    if uid is not None:  # a uid of its own: only the sandbox's processes count
        return limits.max_processes + extra
    if os.geteuid() == 0:
        return 0  # root without a uid to switch to: not enforced (see isolation_level)
    if sys.platform != "linux":
        return limits.max_processes + extra + 512  # no /proc to count the user's processes: a loose bound
    return _user_tasks(os.geteuid()) + limits.max_processes + extra


def _command(isolation: str, root: str, limits, uid: int | None, status_fd: int, cgroup=None):
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


def _prlimit_args(limits, processes: int) -> dict[str, int]:
    names = {
        resource.RLIMIT_AS: "as",
        resource.RLIMIT_CPU: "cpu",
        resource.RLIMIT_FSIZE: "fsize",
        resource.RLIMIT_NOFILE: "nofile",
        resource.RLIMIT_CORE: "core",
        resource.RLIMIT_NPROC: "nproc",
    }
    return {names[kind]: value for kind, value in _rlimits(limits, processes).items()}
