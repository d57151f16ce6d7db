"""Tests of the code sandbox's accounting: every process a run leaves is reaped (also when the trainer is a child
subreaper, as PID 1 of a container is), the total memory bound of a run, and sandbox failures counted apart from the
program's own failures."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from healtrl.rewards import SandboxLimits, isolation_level, make_code_reward, run_python, sandbox_error_counts
from healtrl.rewards.sandbox import accounting as accounting_module
from healtrl.rewards.sandbox import programs as programs_module
from healtrl.rewards.sandbox import runner as runner_module
from tests.helpers import sandbox_expected

needs_sandbox = pytest.mark.skipif(not sandbox_expected(), reason="the code sandbox is built for Linux")

ADD = {"kind": "assert", "entry_point": "add", "test": "def check(candidate):\n    assert candidate(1, 2) == 3\n"}
GOOD = "```python\ndef add(a, b):\n    return a + b\n```"
WRONG = "```python\ndef add(a, b):\n    return a - b\n```"


def _per_slot_uids() -> bool:
    """As root, each concurrent run has a uid of its own: RLIMIT_NPROC counts only that run's processes."""
    isolation_level()
    return os.geteuid() == 0 and runner_module._uid_mode == "per-slot"


# ------------------------------------------------------------------------------------------------------------ reaping
# Runs in a child process that makes itself a child subreaper (what PID 1 of a container is by nature): orphans of
# the sandbox become its children. Two slots only, each reused six times by programs that leave orphans; with
# max_processes=2 three leftover zombies in a slot would make every later run of that slot fail at start-up.
_SUBREAPER_SCRIPT = r"""
import ctypes, json, os, shutil, sys, threading
libc = ctypes.CDLL(None, use_errno=True)
assert libc.prctl(36, 1, 0, 0, 0) == 0  # PR_SET_CHILD_SUBREAPER
if os.environ.get("HEALTRL_SANDBOX") == "rlimits" and os.geteuid() == 0:
    # the unprivileged uid cannot execute an interpreter under /root: run the programs with the system's python
    for candidate in ("/usr/bin/python3", "/usr/local/bin/python3"):
        if os.path.exists(candidate) and not os.path.realpath(candidate).startswith("/root/"):
            sys.executable = candidate
            break
import importlib, types  # the sandbox modules alone (stdlib only): importing healtrl would load torch and TRL
package = types.ModuleType("healtrl_rewards_alone")
package.__path__ = [sys.argv[1]]  # healtrl/rewards, without its __init__
sys.modules[package.__name__] = package
sandbox = importlib.import_module("healtrl_rewards_alone.sandbox")
runner = importlib.import_module("healtrl_rewards_alone.sandbox.runner")
procs = importlib.import_module("healtrl_rewards_alone.sandbox.processes")
try:
    sandbox.isolation_level()
except RuntimeError as exc:
    print(json.dumps({"skip": str(exc)}))
    sys.exit(0)
runner._free_slots[:] = [0, 1]
limits = sandbox.SandboxLimits(timeout=1.0, max_processes=2)
programs = [
    # killed at the time limit with a child
    "import os, time\nif os.fork() == 0:\n    time.sleep(30)\ntime.sleep(30)",
    # a double fork that leaves the session, then the time limit
    "import os, time\nif os.fork() == 0:\n    os.setsid()\n    if os.fork() == 0:\n        time.sleep(30)\n"
    "    os._exit(0)\ntime.sleep(30)",
    # exits at once, leaving an orphan that exits a moment later (a zombie of whoever inherits it)
    "import os, time\nif os.fork() == 0:\n    if os.fork() == 0:\n        time.sleep(0.3)\n    os._exit(0)\n"
    "print('bye')",
    # a fork bomb, bounded by RLIMIT_NPROC
    "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass",
]
results = []
def worker(offset):
    for k in range(6):
        results.append(sandbox.run_python(programs[(offset + k) % len(programs)], limits=limits).status)
threads = [threading.Thread(target=worker, args=(k,)) for k in range(2)]
for thread in threads:
    thread.start()
for thread in threads:
    thread.join()
me = str(os.getpid())
zombies, leftovers = [], []
for pid in filter(str.isdigit, os.listdir("/proc")):
    fields = procs.proc_status(pid)
    if fields is None:
        continue
    if fields.get("PPid") == me and fields.get("State", "").startswith("Z"):
        zombies.append(pid)
    slot_uids = (runner._uid_for(0), runner._uid_for(1)) if runner._uid_mode == "per-slot" else ()
    if int(fields["Uid"].split()[0]) in slot_uids:
        leftovers.append(pid)
# a correct program still runs in every slot
after = [sandbox.run_python("print(6 * 7)", limits=limits) for _ in range(2)]
print(json.dumps({
    "isolation": sandbox.isolation_level(), "statuses": results, "zombies": zombies, "leftovers": leftovers,
    "after": [[r.status, r.stdout, r.stderr[-300:]] for r in after], "counts": sandbox.sandbox_error_counts(),
}))
"""


@needs_sandbox
@pytest.mark.parametrize("isolation", ["namespaces", "rlimits"])
def test_no_zombies_when_the_trainer_is_a_subreaper(isolation):
    done = subprocess.run(
        [sys.executable, "-c", _SUBREAPER_SCRIPT, str(Path(runner_module.__file__).parents[1])],
        env={**os.environ, "HEALTRL_SANDBOX": isolation},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr[-3000:]
    outcome = json.loads(done.stdout.strip().splitlines()[-1])
    if "skip" in outcome:
        pytest.skip(f"{isolation} isolation cannot start here: {outcome['skip']}")
    assert outcome["isolation"] == isolation
    assert len(outcome["statuses"]) == 12 and "sandbox_error" not in outcome["statuses"], outcome
    assert outcome["zombies"] == [], outcome
    assert outcome["leftovers"] == [], outcome  # as root: nothing of the slots' uids survives its run
    assert [r[:2] for r in outcome["after"]] == [["ok", "42\n"]] * 2, outcome["after"]
    assert outcome["counts"]["sandbox_errors"] == 0, outcome["counts"]


@needs_sandbox
def test_a_full_slot_is_bounded_and_is_cleared(monkeypatch):
    """A slot whose uid already holds its process limit (leftovers of an earlier run): the program starts (as root it
    runs in the bootstrap's interpreter, no exec) but can start no process of its own, and the sweep after the run
    frees the slot."""
    if not _per_slot_uids():
        pytest.skip("needs root with a uid per slot")
    monkeypatch.setattr(runner_module, "_free_slots", [5])
    uid = runner_module._uid_for(5)
    limits = SandboxLimits(timeout=5, max_processes=2)

    def become_slot_uid():
        os.setgroups([])
        os.setgid(uid)
        os.setuid(uid)

    squatters = [
        subprocess.Popen(["sleep", "60"], preexec_fn=become_slot_uid, stdin=subprocess.DEVNULL)
        for _ in range(limits.max_processes + 2)  # the limit counts the program itself
    ]
    fork = "import os\ntry:\n    pid = os.fork()\nexcept OSError as e:\n    print('refused', e.errno)\nelse:\n"
    fork += "    if pid == 0:\n        os._exit(0)\n    os.waitpid(pid, 0)\n    print('forked')\n"
    try:
        before = sandbox_error_counts()["sandbox_errors"]
        blocked = run_python(fork, limits=limits)
        assert (blocked.status, blocked.stdout) == ("ok", "refused 11\n"), blocked  # EAGAIN: no process to spare
        assert sandbox_error_counts()["sandbox_errors"] == before
        # killed (and reaped: they were this process's children of the slot's uid) by the sweep after the run
        assert [s.pid for s in squatters if os.path.exists(f"/proc/{s.pid}")] == []
        again = run_python(fork, limits=limits)
        assert (again.status, again.stdout) == ("ok", "forked\n"), again
    finally:
        for squatter in squatters:
            squatter.kill()
            squatter.wait()


# -------------------------------------------------------------------------------------------------------- memory bound
def test_total_memory_bound_is_stated():
    assert SandboxLimits().total_memory_bytes == 5 << 30  # 4 processes besides the program, 1 GiB each
    assert SandboxLimits(memory_bytes=256 << 20, max_processes=2).total_memory_bytes == 3 * (256 << 20)


@needs_sandbox
def test_children_together_stay_within_the_total_memory_bound():
    if not _per_slot_uids():
        pytest.skip("the bound is exact as root, where each run has a uid of its own")
    limits = SandboxLimits(timeout=10, memory_bytes=160 << 20, max_processes=2)
    # each child holds 100 MiB until the parent is done; one more child than the bound allows, and one child asking
    # for more than a process may have
    program = textwrap.dedent(
        """
        import os, sys, time
        held = 0
        reader, writer = os.pipe()
        for size in (100, 100, 100, 200):
            try:
                pid = os.fork()
            except OSError:
                print("no fork", size)
                continue
            if pid == 0:
                try:
                    block = bytearray(size << 20)
                    os.write(writer, b"+")
                except MemoryError:
                    os.write(writer, b"-")
                time.sleep(3)
                os._exit(0)
            answer = os.read(reader, 1)
            held += size if answer == b"+" else 0
            print("child", size, answer.decode())
        print("held", held)
        """
    )
    result = run_python(program, limits=limits)
    assert result.status == "ok", result
    lines = result.stdout.splitlines()
    assert lines.count("no fork 100") == 1 and "no fork 200" in lines, lines  # RLIMIT_NPROC: two children only
    assert lines[-1] == "held 200", lines
    assert 200 << 20 < limits.total_memory_bytes
    big = run_python("import os\nif os.fork() == 0:\n    x = bytearray(200 << 20)\n    print('got it')", limits=limits)
    assert "got it" not in big.stdout and "MemoryError" in big.stderr, big  # RLIMIT_AS: each process alone


@needs_sandbox
def test_cgroup_bounds_all_processes_together():
    """Files on the run's tmpfs are memory too: no per-process limit sees them, the run's memory cgroup does."""
    if isolation_level() != "namespaces" or runner_module._cgroup_parents is None:
        pytest.skip("no cgroup for the runs here (root, and a usable cgroup v2 or v1 memory hierarchy, needed)")
    limits = SandboxLimits(
        timeout=10, memory_bytes=64 << 20, max_processes=1, disk_bytes=512 << 20, file_size_bytes=512 << 20
    )
    fill = "f = open('big', 'wb')\nfor i in range({}):\n    f.write(b'x' * (1 << 20))\n    f.flush()\nprint('done')"
    within = run_python(fill.format(32), limits=limits)
    assert (within.status, within.stdout) == ("ok", "done\n"), within
    beyond = run_python(fill.format(300), limits=limits)  # 300 MiB > total_memory_bytes = 128 MiB
    assert beyond.status == "error" and "done" not in beyond.stdout, beyond
    assert "reached its memory limit (134217728 bytes)" in beyond.stderr, beyond
    leftovers = [
        name
        for parent in set(runner_module._cgroup_parents.values())
        for name in os.listdir(parent)
        if name.startswith(f"healtrl-{os.getpid()}-")
    ]
    assert leftovers == []  # every run's cgroup removed


# ----------------------------------------------------------------------------------------------------- error accounting
def _metrics():
    logged = {}
    return logged, lambda key, value: logged.__setitem__(key, value)


@needs_sandbox
def test_sandbox_failures_are_counted_and_warned(monkeypatch, caplog):
    isolation = isolation_level()
    reward = make_code_reward(limits=SandboxLimits(timeout=5), workers=2)
    tests = [json.dumps(ADD)] * 2

    # a normal wrong program is the program's failure: no sandbox error, no warning
    logged, log_metric = _metrics()
    before = sandbox_error_counts()
    with caplog.at_level(logging.WARNING, logger="healtrl.rewards.sandbox"):
        assert reward(completions=[GOOD, WRONG], tests=tests, log_metric=log_metric) == [1.0, 0.0]
    assert logged == {"rewards/code/malformed": 0.0, "rewards/code/deadline": 0.0, "rewards/sandbox_errors": 0.0}
    assert sandbox_error_counts()["sandbox_errors"] == before["sandbox_errors"]
    assert sandbox_error_counts()["runs"] == before["runs"] + 4  # an assert test runs a judge and the candidate
    assert not [r for r in caplog.records if "sandbox failed" in r.getMessage()]

    # the machinery fails after the process started (the bootstrap, or the fallback runner, raises)
    if isolation == "namespaces":
        broken = programs_module._BOOTSTRAP.replace("os.chdir(work)", "raise OSError('forced failure')")
        assert broken != programs_module._BOOTSTRAP
        monkeypatch.setattr(programs_module, "_BOOTSTRAP", broken)
    else:
        monkeypatch.setattr(programs_module, "_FALLBACK_RUNNER", "raise OSError('forced failure')")
    logged, log_metric = _metrics()
    caplog.clear()
    with caplog.at_level(logging.WARNING, logger="healtrl.rewards.sandbox"):
        assert reward(completions=[GOOD, WRONG], tests=tests, log_metric=log_metric) == [0.0, 0.0]
    assert logged == {"rewards/code/malformed": 0.0, "rewards/code/deadline": 0.0, "rewards/sandbox_errors": 2.0}
    assert sandbox_error_counts()["sandbox_errors"] == before["sandbox_errors"] + 4  # both processes of each test
    warnings = [r.getMessage() for r in caplog.records if "sandbox failed 2 of 2 runs" in r.getMessage()]
    assert len(warnings) == 1 and "forced failure" in warnings[0] and "Check" in warnings[0], caplog.text


@needs_sandbox
def test_failed_start_is_a_sandbox_error(monkeypatch):
    isolation_level()

    def no_fork(*args, **kwargs):
        raise BlockingIOError(11, "Resource temporarily unavailable")

    monkeypatch.setattr(runner_module.subprocess, "Popen", no_fork)
    before = sandbox_error_counts()["sandbox_errors"]
    result = run_python("print(1)", limits=SandboxLimits(timeout=2))
    assert (result.status, result.returncode) == ("sandbox_error", None), result
    assert "Resource temporarily unavailable" in result.stderr
    assert sandbox_error_counts()["sandbox_errors"] == before + 1


@needs_sandbox
def test_programs_cannot_pass_for_sandbox_errors():
    """The machinery reports on a pipe the program never holds: exit code 125, a fake message or a closed stdout are
    the program's own failures."""
    limits = SandboxLimits(timeout=3)
    before = sandbox_error_counts()["sandbox_errors"]
    for program in (
        "import os\nos._exit(125)",
        "import sys\nprint('healtrl sandbox: E failed', file=sys.stderr)\nraise SystemExit(1)",
        "import os\nfor fd in range(3, 64):\n    try:\n        os.write(fd, b'E')\n    except OSError:\n        pass\n"
        "os._exit(3)",
    ):
        result = run_python(program, limits=limits)
        assert result.status == "error", (program, result)
    assert sandbox_error_counts()["sandbox_errors"] == before


def test_warning_rule():
    """Warn when more than half of a batch failed, or more than 10% of the recent runs (at least 20 of them)."""
    rule = accounting_module.report_sandbox_errors
    saved = (dict(accounting_module._counts), list(accounting_module._recent), accounting_module._last_error)
    try:
        accounting_module.reset_sandbox_error_counts()
        assert not rule(0, 8)
        assert rule(5, 8)  # more than half of the batch
        assert not rule(1, 8)  # one in eight, with no history
        accounting_module._recent.extend([False] * 17 + [True] * 3)  # 15% of the last 20 runs
        assert rule(1, 8)
        assert not rule(0, 8)  # a batch without sandbox errors never warns
        accounting_module._recent.extend([False] * 80)  # 3% of the last 100 runs
        assert not rule(1, 8)
    finally:
        accounting_module._counts.update(saved[0])
        accounting_module._recent.clear()
        accounting_module._recent.extend(saved[1])
        accounting_module._last_error = saved[2]
