"""An exclusive inter-process file lock, for the caches that several ranks may fill at once (toy models, converted
offline models). Correctness never depends on it (cached folders are published by an atomic rename); it only makes
concurrent processes build once while the others wait. Where `fcntl` is missing (Windows) it does nothing."""

from __future__ import annotations

import contextlib
from pathlib import Path

try:  # POSIX
    import fcntl
except ImportError:  # pragma: no cover - Windows
    fcntl = None


@contextlib.contextmanager
def file_lock(path: Path):
    """Hold an exclusive advisory lock on `path` (created if missing) for the duration of the block."""
    if fcntl is None:  # pragma: no cover
        yield
        return
    with open(path, "a") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)
