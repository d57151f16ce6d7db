"""The worker process that runs math-verify for `healtrl.rewards.math` (see "Bounds" in its docstring).

Protocol, one JSON line each way: the worker prints "ready" once math-verify is imported and has parsed one answer
(its first parse loads the LaTeX grammar: start-up, not a request's time), then answers each request
`[gold, [prediction, ...], seconds]` (math-verify's own timeouts: `seconds` rounded up, at most `PARSE_TIMEOUT_S`) with
`true` when every prediction is equivalent to the gold answer (both parsed as LaTeX inside `\\boxed{}`), `false` when
one is not, `error` when math-verify raised. It runs in its own process, started with `python -c` (no `healtrl`
import, no re-run of the parent's main module), so math-verify's signal-based timeouts work (this is the main
thread) and the parent can kill it when a request runs past its deadline. Each request also lowers the worker's
CPU-time limit to the time used so far plus a margin over `seconds`: a worker whose parent is gone cannot compute
forever.
"""

from __future__ import annotations

import functools
import json
import math
import sys

PARSE_TIMEOUT_S = 2
"""math-verify's own parsing and verification timeouts (signal.alarm, whole seconds) inside the worker, at most: a
request's own deadline, rounded up, when shorter (the parent kills the worker at that deadline)."""

CPU_MARGIN_S = 30
"""CPU seconds a request may use beyond its deadline before the worker's RLIMIT_CPU ends it (the parent kills it at the
deadline; this holds when the parent is gone)."""


@functools.lru_cache(maxsize=4096)
def _parse_gold(gold: str):
    from math_verify import parse

    return parse(f"\\boxed{{{gold}}}", parsing_timeout=PARSE_TIMEOUT_S)


def verify_all(gold: str, predictions: list[str], seconds: float = PARSE_TIMEOUT_S) -> bool:
    """Whether every prediction is math-verify equivalent to `gold` (math-verify's own timeouts: `seconds` rounded
    up, at most `PARSE_TIMEOUT_S`)."""
    from math_verify import parse, verify

    timeout = max(1, min(PARSE_TIMEOUT_S, math.ceil(seconds)))
    gold_parsed = _parse_gold(gold)
    if not gold_parsed:
        return False
    for prediction in predictions:
        parsed = parse(f"\\boxed{{{prediction}}}", parsing_timeout=timeout)
        if not parsed or not verify(gold_parsed, parsed, timeout_seconds=timeout):
            return False
    return True


def _limit_cpu(seconds: float) -> None:
    try:
        import resource
    except ImportError:  # not POSIX: the parent's kill is the only bound
        return
    usage = resource.getrusage(resource.RUSAGE_SELF)
    soft, hard = resource.getrlimit(resource.RLIMIT_CPU)
    limit = int(usage.ru_utime + usage.ru_stime + seconds + CPU_MARGIN_S) + 1
    if hard != resource.RLIM_INFINITY:
        limit = min(limit, hard)
    resource.setrlimit(resource.RLIMIT_CPU, (limit, hard))


def main() -> None:
    channel = sys.stdout
    sys.stdout = sys.stderr  # anything math-verify prints must not mix with the answers
    import math_verify  # noqa: F401  (the slow import, before "ready")

    verify_all("\\frac{1}{2}", ["0.5", "x^2+1"])  # the first parse loads the grammar: part of the start-up
    channel.write("ready\n")
    channel.flush()
    for line in sys.stdin:
        gold, predictions, seconds = json.loads(line)
        _limit_cpu(seconds)
        try:
            reply = "true\n" if verify_all(gold, predictions, seconds) else "false\n"
        except Exception:
            reply = "error\n"
        channel.write(reply)
        channel.flush()


if __name__ == "__main__":
    main()
