"""A pool of persistent scorer worker processes that score a batch in parallel under one deadline (third-party
scorers, e.g. reasoning-gym's: see `_scorer_worker` for what a worker does and how it isolates each answer).

Workers are started with `python -c` on the worker file (no `healtrl` import there, no re-run of the trainer's main
module), on first use, and reused. Protocol, one JSON line each way per message: the worker prints "ready" once
started; per request it replies once when the request's data is prepared (`{"entry": true}` or a final
`{"error": ...}`) and once with the result. Start-up and preparation have their own generous timeouts and are not
counted against the scoring deadlines; the scoring is: each request has a hard wall-clock timeout (it holds in any
thread: the parent waits on the pipe with `select`, never on the scorer), and all the requests of one batch share a
deadline (`budget` seconds of scoring time per thread). A worker that runs past a deadline, dies, or replies anything
but a JSON object is killed (SIGKILL) and replaced; its request gets a failure.
"""

from __future__ import annotations

import atexit
import json
import os
import queue
import selectors
import subprocess
import sys
import threading
import time

from ._common import logger

STARTUP_TIMEOUT_S = 300.0
"""Seconds a fresh worker may take to import its scorers (on a loaded machine); not counted in any scoring deadline."""

PREPARE_TIMEOUT_S = 120.0
"""Seconds a worker may take to prepare one request (build its dataset the first time, which
can take seconds); not counted in the scoring deadlines. Past it the worker is killed and the request fails."""

REPLY_MARGIN_S = 1.0
"""Seconds the parent waits for a worker's reply beyond the request's own timeout, which the worker enforces on its
scoring child (forking it and cleaning up after it take milliseconds); past it the worker is killed."""

_WORKER_BOOT = (
    "import runpy, sys; sys.path.pop(0); path = sys.argv.pop(1); sys.argv[0] = path; "
    "runpy.run_path(path, run_name='__main__')"
)
_MAX_REPLY_BYTES = 1 << 16


class WorkerStartError(RuntimeError):
    """A scorer worker did not start (its scorers cannot be imported, or it ran out of time)."""


class WorkerProcess:
    """One persistent worker process running the file `path` (started with `python -c`, see the module docstring):
    its pipes, a line reader with a timeout that holds in any thread, and its kill. `_math_verify_pool`'s worker is
    one too."""

    def __init__(self, path: str):
        self.process = subprocess.Popen(
            [sys.executable, "-c", _WORKER_BOOT, path], stdin=subprocess.PIPE, stdout=subprocess.PIPE
        )
        self.ready = False
        self.buffer = b""
        self.selector = selectors.DefaultSelector()
        self.selector.register(self.process.stdout, selectors.EVENT_READ)

    def read_line(self, timeout: float) -> bytes:
        """One line from the worker (without waiting on Python's buffer: a worker may send two lines at once);
        TimeoutError past `timeout` seconds; what came before the end of the stream when the worker is gone."""
        deadline = time.monotonic() + timeout
        while b"\n" not in self.buffer and len(self.buffer) <= _MAX_REPLY_BYTES:
            left = deadline - time.monotonic()
            if left <= 0 or not self.selector.select(left):
                raise TimeoutError
            chunk = os.read(self.process.stdout.fileno(), 1 << 16)
            if not chunk:
                line, self.buffer = self.buffer, b""
                return line
            self.buffer += chunk
        line, sep, self.buffer = self.buffer.partition(b"\n")
        return line + sep

    def wait_ready(self, name: str) -> None:
        if self.ready:
            return
        try:
            line = self.read_line(STARTUP_TIMEOUT_S)
        except TimeoutError:
            line = b""
        if line != b"ready\n":
            self.kill()
            raise WorkerStartError(
                f"The {name} scorer worker did not start within {STARTUP_TIMEOUT_S:g} s (exit code "
                f"{self.process.poll()}); its stderr above says why. Check that the scorers' package imports in "
                f"`{sys.executable}`."
            )
        self.ready = True

    def send(self, message: dict) -> None:
        self.process.stdin.write((json.dumps(message) + "\n").encode())
        self.process.stdin.flush()

    def reply(self, timeout: float) -> dict:
        """The worker's next reply; TimeoutError past `timeout`, ValueError when it is not a JSON object (or the
        worker is gone)."""
        line = self.read_line(timeout)
        message = json.loads(line.decode("utf-8")) if line.endswith(b"\n") else None
        if not isinstance(message, dict):
            raise ValueError(f"not a JSON object: {line[:100]!r}")
        return message

    def kill(self) -> None:
        try:
            self.process.kill()
        except OSError:
            pass
        self.process.wait()
        self.selector.close()
        for stream in (self.process.stdin, self.process.stdout):
            try:
                stream.close()
            except OSError:
                pass


class ScorerPool:
    """Persistent workers running `worker_path`, at most `size` at once.

    Args:
        name: Shown in messages ("reasoning-gym").
        worker_path: The worker file.
        size: Most workers alive (and requests scored) at once.
    """

    def __init__(self, name: str, worker_path: str, size: int):
        self.name, self.worker_path, self.size = name, worker_path, max(1, int(size))
        self._lock = threading.Lock()
        self._idle: list[WorkerProcess] = []
        self._slots = threading.BoundedSemaphore(self.size)
        atexit.register(self.stop)

    def stop(self) -> None:
        """Kill every idle worker (busy ones are killed by their batch when it ends badly, or at exit)."""
        with self._lock:
            workers, self._idle = self._idle, []
        for worker in workers:
            worker.kill()

    def _take(self) -> WorkerProcess:
        with self._lock:
            if self._idle:
                return self._idle.pop()
        return WorkerProcess(self.worker_path)

    def _give(self, worker: WorkerProcess) -> None:
        with self._lock:
            self._idle.append(worker)

    def run_batch(self, requests: list[dict], timeout: float, budget: float) -> list[dict]:
        """Score `requests` in parallel across the workers.

        Each request is sent with `"timeout": t`, where `t` is `timeout` or less (the rest of the batch's budget),
        and its reply must come within `t + REPLY_MARGIN_S` seconds. Each thread driving a worker stops scoring
        `budget` seconds of scoring time after the batch started (time spent starting workers and preparing
        requests is added to its deadline); requests left then get `{"failure": "deadline"}`.

        Returns:
            One reply per request, in order: the worker's result (`{"score": ...}`, `{"failure": ...}`), its
            `{"error": ...}` for a request it could not prepare, or a failure the parent saw: "timeout" (the worker
            was killed), "died" / "garbage" (it was killed and replaced), "deadline".

        Raises:
            WorkerStartError: a worker could not be started.
        """
        results: list[dict | None] = [None] * len(requests)
        todo: queue.SimpleQueue = queue.SimpleQueue()
        for i in range(len(requests)):
            todo.put(i)
        start = time.monotonic()
        errors: list[BaseException] = []

        def drive() -> None:
            with self._slots:
                worker, excluded = None, 0.0
                try:
                    while True:
                        try:
                            i = todo.get_nowait()
                        except queue.Empty:
                            return
                        if worker is None:
                            worker = self._take()
                        t0 = time.monotonic()
                        worker.wait_ready(self.name)
                        excluded += time.monotonic() - t0
                        left = start + budget + excluded - time.monotonic()
                        if left <= 0:
                            results[i] = {"failure": "deadline"}
                            continue
                        limit = min(timeout, left)
                        results[i], keep = self._ask(worker, requests[i], limit)
                        excluded += results[i].pop("_prepare_s", 0.0)
                        if not keep:
                            worker.kill()
                            worker = WorkerProcess(self.worker_path)  # starts now; waited for (not counted) if needed
                except BaseException as exc:
                    errors.append(exc)
                    if worker is not None:
                        worker.kill()
                        worker = None
                finally:
                    if worker is not None:
                        self._give(worker)

        threads = [threading.Thread(target=drive, daemon=True) for _ in range(min(self.size, len(requests)))]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if errors:
            raise errors[0]
        return [result if result is not None else {"failure": "deadline"} for result in results]

    def _ask(self, worker: WorkerProcess, request: dict, limit: float) -> tuple[dict, bool]:
        """The reply to one request and whether the worker may be kept."""
        t0 = time.monotonic()
        try:
            worker.send({**request, "timeout": limit})
            first = worker.reply(PREPARE_TIMEOUT_S)
        except TimeoutError:
            logger.warning("The %s worker took over %g s to prepare a request; killed.", self.name, PREPARE_TIMEOUT_S)
            return {"failure": "prepare-timeout"}, False
        except (OSError, ValueError):
            return {"failure": "died"}, False
        prepare = time.monotonic() - t0
        if "error" in first:
            return {"error": str(first["error"]), "_prepare_s": prepare}, True
        if first != {"entry": True}:
            return {"failure": "garbage", "_prepare_s": prepare}, False
        try:
            reply = worker.reply(limit + REPLY_MARGIN_S)
        except TimeoutError:
            return {"failure": "timeout", "_prepare_s": prepare}, False
        except (OSError, ValueError):
            return {"failure": "died" if worker.process.poll() is not None else "garbage", "_prepare_s": prepare}, False
        number = (int, float)
        if len(reply) != 1 or not (
            ("score" in reply and isinstance(reply["score"], number) and not isinstance(reply["score"], bool))
            or ("failure" in reply and isinstance(reply["failure"], str))
            or (
                "scores" in reply
                and isinstance(reply["scores"], list)
                and len(reply["scores"]) == len(request.get("answers", ()))
                and all(v is None or (isinstance(v, number) and not isinstance(v, bool)) for v in reply["scores"])
            )
        ):
            return {"failure": "garbage", "_prepare_s": prepare}, False
        return {**reply, "_prepare_s": prepare}, True


def default_workers() -> int:
    """`min(4, CPU cores available to this process)`."""
    try:
        cores = len(os.sched_getaffinity(0))
    except (AttributeError, OSError):
        cores = os.cpu_count() or 1
    return max(1, min(4, cores))
