"""One sweep run per data dir at a time."""

from __future__ import annotations

import sys
from contextlib import contextmanager
from pathlib import Path

from resources.locks import shared_lock
from resources.storage import is_remote
from runner.errors import DataDirError


@contextmanager
def exclusive(data: Path):
    """A second run on the same data dir waits for the first, then reuses its work (Dagster's and MLflow's
    SQLite stores must not be set up or migrated by two processes at once). A file lock in a local data dir;
    the deployment's PostgreSQL when it has one (resources/locks.py)."""
    if not is_remote(data):
        try:
            data.mkdir(parents=True, exist_ok=True)
            (data / ".rag-sweep.lock").touch()
        except OSError as e:  # a read-only disk or mount, a folder of another user, a file in the way
            raise DataDirError(
                f"data dir {data}: cannot write there ({e.strerror}); choose another with --data-dir or "
                "$RAG_DATA_DIR"
            ) from e

    def waiting(holder: str) -> None:
        print(f"waiting for the rag-sweep run on {data} ({holder}) to finish ...", file=sys.stderr)

    with shared_lock(f"sweep run on {data}", data / ".rag-sweep.lock", waiting):
        yield
