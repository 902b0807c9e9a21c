"""The module path an instance made before 2026-12-07 names in its dagster.yaml for its storage (`module:
rag_sweep.runner.instance_storage`): the classes now live in the Dagster shim (resources/dagster_private.py),
the one place the project overrides a private Dagster hook. New instances name the shim."""

from __future__ import annotations

from resources.dagster_private import (
    PooledSqliteEventLogStorage,
    PooledSqliteRunStorage,
    release_connections,
)

__all__ = ["PooledSqliteEventLogStorage", "PooledSqliteRunStorage", "release_connections"]
