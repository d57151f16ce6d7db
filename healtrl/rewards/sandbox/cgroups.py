"""Cgroups of the code sandbox's runs (`healtrl.rewards.sandbox`, as root): where they can be made, and one run's
memory and pids cgroups, which bound all of its processes together."""

from __future__ import annotations

import itertools
import logging
import os
import signal
import sys
import time

logger = logging.getLogger("healtrl.rewards.sandbox")

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


def detect_cgroups() -> tuple[dict[str, str] | None, str]:
    """Where runs' cgroups go (as root only): (controller ("memory", "pids") -> parent directory, version "2" or
    "1"): a cgroup v2 directory (`HEALTRL_SANDBOX_CGROUP`, else this process's own cgroup) with memory and pids for
    its children, else the v1 memory and pids hierarchies; (None, "") for none."""
    if sys.platform != "linux" or os.geteuid() != 0 or os.environ.get("HEALTRL_SANDBOX_CGROUP", "") == "none":
        return None, ""
    try:
        own = _own_cgroups()
    except (OSError, ValueError):
        return None, ""
    unified = os.environ.get("HEALTRL_SANDBOX_CGROUP") or own.get("unified")
    if unified and _usable_cgroup_parent(unified, "2"):
        return {"memory": unified, "pids": unified}, "2"
    if "memory" in own and "pids" in own and all(_usable_cgroup_parent(own[c], "1") for c in ("memory", "pids")):
        return {"memory": own["memory"], "pids": own["pids"]}, "1"
    return None, ""


class RunCgroup:
    """The cgroup(s) of one run: memory (all its processes together, `total_memory_bytes`) and pids."""

    def __init__(self, limits, tasks: int, parents: dict[str, str], version: str):
        name = f"healtrl-{os.getpid()}-{next(_cgroup_serial)}"  # (under _state_lock while isolation_level probes)
        self.version = version
        self.dirs = sorted({os.path.join(parent, name) for parent in parents.values()})
        self.memory = os.path.join(parents["memory"], name)
        self.pids = os.path.join(parents["pids"], name)
        try:
            for directory in self.dirs:
                os.mkdir(directory)
            total = str(limits.total_memory_bytes)
            if self.version == "2":
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
        name = "memory.events" if self.version == "2" else "memory.oom_control"
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
