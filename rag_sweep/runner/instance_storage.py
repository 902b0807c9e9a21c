"""The storage of the Dagster instance `rag-sweep run` creates: SQLite files whose connections are kept.

Dagster's SQLite storages open a new engine and a new connection for every event stored and every query
(~5-8 ms each; a sweep stores and asks thousands); these keep one engine per process and its connections
(~1.5 ms). The event log is one file (Dagster's ConsolidatedSqliteEventLogStorage), not a database per run
created and migrated as the run starts. The files and their tables are Dagster's own, so `dagster dev` on
the instance reads them as usual (it loads these classes from the instance's dagster.yaml).
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import sqlalchemy as db

from resources.dagster_private import (
    ConsolidatedSqliteEventLogStorage,
    SqliteRunStorage,
)

# how long a connection waits for another's write lock, as Dagster 1.13's own storages (1.12's: pysqlite's
# 5 s default); a run's steps and the CLI's reads share the files
SQLITE_BUSY_TIMEOUT_SECONDS = 30


class _KeptEngine:
    """One engine for this process, its connections kept; a forked child makes its own."""

    _pooled: tuple[int, db.Engine] | None = None  # (the process it was made in, the engine)
    _conn_string: str

    def _engine(self) -> db.Engine:
        if self._pooled is not None and self._pooled[0] == os.getpid():
            return self._pooled[1]
        if self._pooled is not None:  # a forked child: the parent's connections stay the parent's
            self._pooled[1].dispose(close=False)
        engine = db.create_engine(
            self._conn_string,
            connect_args={"timeout": SQLITE_BUSY_TIMEOUT_SECONDS},
            max_overflow=-1,  # a thread never waits for another's connection
        )
        self._pooled = (os.getpid(), engine)
        return engine

    @contextmanager
    def _transaction(self):
        with self._engine().connect() as conn, conn.begin():
            yield conn

    def release(self) -> None:
        """Close the kept connections (the next query opens new ones). The last connection to close folds
        SQLite's WAL into the database file and removes it: the files then stay as they are until a write."""
        if self._pooled is not None and self._pooled[0] == os.getpid():
            self._pooled[1].dispose()
        self._pooled = None

    def dispose(self):
        super().dispose()  # the Dagster storage's own (this class comes first in the subclasses' bases)
        self.release()


def release_connections(instance) -> None:
    """`release` the instance's storages that keep connections (what the up-to-date record stamps must not
    change when this process exits or another one reads the instance)."""
    for storage in (instance.run_storage, instance.event_log_storage):
        if isinstance(storage, _KeptEngine):
            storage.release()


class PooledSqliteEventLogStorage(_KeptEngine, ConsolidatedSqliteEventLogStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls(inst_data=inst_data, **config_value)

    def _connect(self):
        return self._transaction()

    def has_table(self, table_name: str) -> bool:
        with self._engine().connect() as conn:
            return bool(conn.dialect.has_table(conn, table_name))


class PooledSqliteRunStorage(_KeptEngine, SqliteRunStorage):
    @classmethod
    def from_config_value(cls, inst_data, config_value):
        return cls.from_local(inst_data=inst_data, **config_value)  # Dagster's names its own class

    def connect(self):
        return self._transaction()
