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
| `ConsolidatedSqliteEventLogStorage`, `SqliteRunStorage` | rag_sweep/runner/instance_storage.py | The CLI instance's SQLite storages keep their connections (Dagster's open one per event); configured by module and class, their bases are not exported. |
"""

from __future__ import annotations

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
    "SqliteRunStorage",
    "ensure_file",
    "fileno",
    "input_data_version_tag",
    "input_event_pointer_tag",
    "mirror_stream_to_file",
    "redirect_to_file",
    "touch_file",
]
