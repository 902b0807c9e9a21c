"""Locks every process of a deployment sees: a PostgreSQL advisory lock when the deployment has a database
(workers on other machines share nothing else), else `flock` on a file in the local data dir.

Both are released when their holder ends, even when killed (the kernel closes the file; PostgreSQL ends
the session of a dropped connection).
"""

from __future__ import annotations

import fcntl
import hashlib
import os
import stat
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

from resources.environment import Unreachable, shared_database_address, shared_database_url
from resources.no_links import open_lock_file, refuse_links_below
from resources.storage import atomic_write_bytes, is_remote


class NoSharedLock(RuntimeError):
    """A data dir on object storage with no database to lock in."""


def _key(name: str) -> int:
    """A lock's name as PostgreSQL's advisory-lock key (a signed 64-bit integer)."""
    return int.from_bytes(hashlib.sha256(name.encode()).digest()[:8], "big", signed=True)


@contextmanager
def shared_lock(name: str, local_file: Path, waiting: Callable[[str], None] | None = None) -> Iterator[None]:
    """Hold the lock `name` (`local_file`: its file when the data dir is local and there is no database).
    `waiting(holder)` is called once when another process holds it, before waiting for it."""
    url = shared_database_url()
    if url:
        import psycopg2

        try:
            conn = psycopg2.connect(url, application_name=f"rag-sweep lock {name}"[:63], connect_timeout=10)
        except psycopg2.OperationalError as e:  # not running, a wrong host, port or password
            from resources.environment import redact

            reason = redact(str(e).strip().splitlines()[0], os.environ.get("DAGSTER_PG_PASSWORD"))
            raise Unreachable(
                f"PostgreSQL at {shared_database_address()} (the deployment's database, set by $DAGSTER_PG_HOST, "
                f"$DAGSTER_PG_PORT, $DAGSTER_PG_USER, $DAGSTER_PG_PASSWORD, $DAGSTER_PG_DB): cannot connect "
                f"({reason}); start it or fix those variables"
            ) from None
        try:
            conn.autocommit = True
            with conn.cursor() as cur:
                cur.execute("SELECT pg_try_advisory_lock(%s)", (_key(name),))
                if not cur.fetchone()[0]:
                    if waiting:
                        waiting("another process")
                    cur.execute("SELECT pg_advisory_lock(%s)", (_key(name),))
            yield
        finally:
            conn.close()  # ends the session, which releases the lock
        return
    if is_remote(local_file):
        raise NoSharedLock(
            f"{name}: a data dir on object storage needs the deployment's PostgreSQL to lock in "
            "($DAGSTER_PG_HOST ...: see docs/guides/deployment.md)"
        )
    refuse_links_below(local_file.parent)
    local_file.parent.mkdir(parents=True, exist_ok=True)
    fd = open_lock_file(local_file)
    holder = local_file.with_name(local_file.name + ".holder")
    try:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            if waiting:
                waiting(_holder(holder) or "another process")
            fcntl.flock(fd, fcntl.LOCK_EX)
        # who holds it, for a second process to say: a new file renamed onto its name (never written into)
        atomic_write_bytes(holder, f"pid {os.getpid()}".encode())
        yield
    finally:
        os.close(fd)  # releases the lock


def _holder(file: Path) -> str:
    """What the holder wrote (`pid N`), read without following a link; '' when there is none."""
    try:
        fd = os.open(file, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return ""
        text = os.read(fd, 64).decode(errors="replace").strip()
    finally:
        os.close(fd)
    return text if text.startswith("pid ") and text[4:].isdigit() else ""
