"""Processes of the code sandbox's runs (`healtrl.rewards.sandbox`): stopping a run, killing what its uid left,
reaping the zombies the trainer inherits from it, and reading the machinery's status pipe."""

from __future__ import annotations

import logging
import os
import shutil
import signal
import subprocess
import sys
import time

logger = logging.getLogger("healtrl.rewards.sandbox")


def proc_status(pid: str) -> dict[str, str] | None:
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


def reap(uid: int | None, wait: float = 2.0) -> int:
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
            fields = proc_status(pid)
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
        fields = proc_status(entry)
        if fields is not None and fields.get("PPid") == str(pid):
            found.append(int(entry))
    return found


def kill_run(proc: subprocess.Popen, isolation: str) -> None:
    if isolation == "namespaces" and sys.platform == "linux" and not wait_exit(proc, time.monotonic()):
        # Kill the namespace's first process and let `unshare` exit after it: killed first, `unshare` would leave
        # its child to this process when it is a subreaper (or PID 1). (Once `unshare` exited, its child is gone.)
        inits = _children(proc.pid)
        for pid in inits:
            try:
                os.kill(pid, signal.SIGKILL)
            except (ProcessLookupError, PermissionError):
                pass
        if inits and wait_exit(proc, time.monotonic() + 1.0):
            return
    try:
        os.killpg(proc.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    try:
        proc.kill()
    except (ProcessLookupError, PermissionError, OSError):
        pass


def wait_exit(proc: subprocess.Popen, until: float) -> bool:
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


def read_status(fd: int) -> bytes:
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
