"""Accounting of the code sandbox's runs (`healtrl.rewards.sandbox`): every run is counted, those the sandbox itself
failed apart, and a batch's count is logged and warned about."""

from __future__ import annotations

import logging
import threading
from collections import deque

logger = logging.getLogger("healtrl.rewards.sandbox")

_lock = threading.Lock()

SANDBOX_ERROR = "sandbox_error"
"""`SandboxResult.status` of a run that the sandbox itself failed (the program's outcome says nothing about it)."""

RECENT_RUNS = 100
"""Runs in the window of `sandbox_error_counts` and of the warning of `report_sandbox_errors`."""

_counts = {"runs": 0, "sandbox_errors": 0}
_recent: deque[bool] = deque(maxlen=RECENT_RUNS)
_last_error = ""


def record(result) -> None:
    """Count one run (a `SandboxResult`)."""
    global _last_error
    failed = result.status == SANDBOX_ERROR
    with _lock:
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
    with _lock:
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
    with _lock:
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
