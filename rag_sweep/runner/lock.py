"""One sweep run per data dir at a time, and one sweep per Dagster prefix in a data dir."""

from __future__ import annotations

import os
import sys
from contextlib import contextmanager
from pathlib import Path

from rag_core.planning.spec import SpecError
from rag_sweep.runner.errors import DataDirError
from resources.locks import shared_lock
from resources.no_links import open_lock_file
from resources.storage import atomic_write_bytes, is_remote


@contextmanager
def exclusive(data: Path):
    """A second run on the same data dir waits for the first, then reuses its work (Dagster's and MLflow's
    SQLite stores must not be set up or migrated by two processes at once). A file lock in a local data dir;
    the deployment's PostgreSQL when it has one (resources/locks.py)."""
    if not is_remote(data):
        try:
            data.mkdir(parents=True, exist_ok=True)
            os.close(open_lock_file(data / ".rag-sweep.lock"))  # never through a link (resources/no_links.py)
        except OSError as e:  # a read-only disk or mount, a folder of another user, a file in the way
            raise DataDirError(
                f"data dir {data}: cannot write there ({e.strerror}); choose another with --data-dir or "
                "$RAG_DATA_DIR"
            ) from e

    def waiting(holder: str) -> None:
        print(f"waiting for the rag-sweep run on {data} ({holder}) to finish ...", file=sys.stderr)

    with shared_lock(f"sweep run on {data}", data / ".rag-sweep.lock", waiting):
        yield


def claim_prefix(data: Path, name: str, prefix: str) -> None:
    """Record which sweep owns a Dagster prefix in this data dir: `a-b` and `a_b` share the prefix `a_b`, so
    on one data dir (one instance) their materializations would alternate and each would show the other's
    board. The second is refused in one line naming both, before any work."""
    claim = data / "sweep_prefixes" / f"{prefix}.txt"
    if claim.exists():
        owner = claim.read_text().strip()
        if owner != name:
            raise SpecError(
                f"sweep {name!r} shares the Dagster prefix {prefix!r} with sweep {owner!r}, already run on data "
                f"dir {data}: rename one of them, or use another data dir"
            )
        return
    atomic_write_bytes(claim, name.encode())
