"""One sweep run per data dir at a time."""

from __future__ import annotations

import fcntl
import os
import sys
from contextlib import contextmanager
from pathlib import Path

from runner.errors import DataDirError


@contextmanager
def exclusive(data: Path):
    """A second run on the same data dir waits for the first, then reuses its work (Dagster's and MLflow's
    SQLite stores must not be set up or migrated by two processes at once). The kernel releases the lock
    when its process ends, even when killed."""
    try:
        data.mkdir(parents=True, exist_ok=True)
        lock = open(data / ".rag-sweep.lock", "a+")  # noqa: SIM115 (closed below; its errors named here)
    except OSError as e:  # a read-only disk or mount, a folder of another user, a file in the way
        raise DataDirError(
            f"data dir {data}: cannot write there ({e.strerror}); choose another with --data-dir or "
            "$RAG_DATA_DIR"
        ) from e
    with lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            lock.seek(0)
            holder = lock.read().strip() or "another process"
            print(f"waiting for the rag-sweep run on {data} ({holder}) to finish ...", file=sys.stderr)
            fcntl.flock(lock, fcntl.LOCK_EX)
        lock.seek(0)
        lock.truncate()
        lock.write(f"pid {os.getpid()}")
        lock.flush()
        yield
