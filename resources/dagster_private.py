"""The one place the project reaches into Dagster's private modules (`dagster._…`). Nothing else may
(tests/test_dagster_private.py greps every product file), and nothing here assigns into Dagster: each name
is imported and used as Dagster itself uses it. tests/test_dagster_private.py imports every name and checks
the signatures the project relies on, so a Dagster release that moves or changes one fails there first.

| name(s) | used by | why no public form |
|---|---|---|
| `DATA_VERSION_TAG`, `CODE_VERSION_TAG`, `DATA_VERSION_IS_USER_PROVIDED_TAG`, `input_data_version_tag`, `input_event_pointer_tag` | rag_assets/batch.py, resources/artifacts.py, rag_sweep/runner/sweep.py | A batch records each partition as a public `AssetMaterialization` (one run, many partitions, each with its own data version); Dagster reads a materialization's data version, code version and inputs' versions (the UI's staleness) from these tags, but exports their names only privately. The tag strings are stable since Dagster 1.1. |
| `DagsterAssetCheckFailedError` | rag_sweep/runner/step_runs.py | What `materialize()` raises when a blocking check fails; not exported at the top level (its siblings are). |
| `LocalComputeLogManager`, `CapturedLogContext`, `ComputeIOType`, `IO_TYPE_EXTENSION`, `mirror_stream_to_file`, `redirect_to_file`, `fileno`, `ensure_file`, `touch_file` | rag_sweep/runner/compute_logs.py, benchmarks/compute_logs.py | The CLI instance's compute logs are Dagster's local files with another mirror to the terminal; a compute log manager is configured by module and class, and Dagster's base classes and helpers are not exported. |
| `NoOpComputeLogManager` | benchmarks/fleet.py (as `module: resources.dagster_private` in a dagster.yaml) | Dagster's manager that keeps no logs, configurable only by its private module path. |
| `ConsolidatedSqliteEventLogStorage`, `SqliteRunStorage`, subclassed here as `PooledSqliteEventLogStorage`, `PooledSqliteRunStorage` (with `release_connections`) | rag_sweep/runner/instance.py (the CLI instance's dagster.yaml names them by this module) | The CLI instance's SQLite storages keep one engine per process and its connections: Dagster's open a new engine and connection for every event stored and every query (~5-8 ms each; a sweep stores and asks thousands), these ~1.5 ms. The event log is one file (Dagster's consolidated storage), not a database per run created and migrated as the run starts. The files and tables are Dagster's own, so `dg dev` reads them as usual. Their bases are not exported, and the event log's connection hook is the private `_connect`, which reads the private `_conn_string`: the one override of a private method in the project, kept here. |

Besides the names, this module holds those two subclasses: nothing else of the project subclasses a private
Dagster class (tests/test_dagster_private.py), so a release that changes the hook fails here first.
"""

from __future__ import annotations

import os
from contextlib import contextmanager

import sqlalchemy as db
from dagster._core.definitions.data_version import (
    CODE_VERSION_TAG,
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
)
from dagster._core.definitions.data_version import get_input_data_version_tag as input_data_version_tag
from dagster._core.definitions.data_version import get_input_event_pointer_tag as input_event_pointer_tag
from dagster._core.errors import DagsterAssetCheckFailedError
from dagster._core.execution.compute_logs import _fileno as fileno
from dagster._core.execution.compute_logs import mirror_stream_to_file, redirect_to_file
from dagster._core.storage.compute_log_manager import CapturedLogContext, ComputeIOType
from dagster._core.storage.event_log import ConsolidatedSqliteEventLogStorage
from dagster._core.storage.local_compute_log_manager import IO_TYPE_EXTENSION, LocalComputeLogManager
from dagster._core.storage.noop_compute_log_manager import NoOpComputeLogManager
from dagster._core.storage.runs import SqliteRunStorage
from dagster._utils import ensure_file, touch_file

__all__ = [
    "CODE_VERSION_TAG",
    "DATA_VERSION_IS_USER_PROVIDED_TAG",
    "DATA_VERSION_TAG",
    "IO_TYPE_EXTENSION",
    "CapturedLogContext",
    "ComputeIOType",
    "ConsolidatedSqliteEventLogStorage",
    "DagsterAssetCheckFailedError",
    "LocalComputeLogManager",
    "NoOpComputeLogManager",
    "PooledSqliteEventLogStorage",
    "PooledSqliteRunStorage",
    "SqliteRunStorage",
    "ensure_file",
    "fileno",
    "input_data_version_tag",
    "input_event_pointer_tag",
    "mirror_stream_to_file",
    "release_connections",
    "redirect_to_file",
    "touch_file",
]


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
