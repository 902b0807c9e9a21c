"""An unchanged rerun answered without importing Dagster or MLflow.

A rerun with nothing to do imported Dagster (~1 s), opened its instance (~1 s) and asked it what every
partition last materialized, then checked each artifact, index and MLflow record: ~3 s, where a cold run of
the example takes ~90 s. Once a run has found nothing due (every step complete, the finalists confirmed, the
registered champion the recommendation's), it records that, with a stamp of everything the answer was read
from: every file under the data dir (Dagster's SQLite instance, the artifacts, the embedded vector stores,
the MLflow store), the sweep's input files, the MLflow store when it lies elsewhere, and the resolved plan
(the sweep file, the environment's store and LLM endpoint, the local models' versions). A later run whose
stamp is the same has nothing to do either: it prints the recorded result. Any write under the data dir (a
run, an asset wiped in the UI, a deleted artifact, a run deleted in MLflow, an alias moved) changes the
stamp, and the run asks Dagster again.

Nothing is recorded where the answer depends on a server, which is always asked: a deployment's instance
($DAGSTER_HOME), a tracking server, a vector store server, a fleet, a data dir on object storage; nor for
an adaptive search or prompt optimization (their drivers decide as they go).
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, NamedTuple

from rag_assets.board_files import leaderboard_path
from rag_assets.orchestration.plans import load_plan, plan_document
from rag_core.components.stores import keeps_files
from rag_sweep.runner.lock import exclusive
from resources.environment import (
    dagster_home,
    default_data_dir,
    executor,
    mlflow_tracking_uri,
    mlflow_ui_url,
)
from resources.storage import atomic_write_bytes, data_root, is_remote, read_parquet
from resources.store_answers import store_state

RECORD = ".rag-sweep.up-to-date.json"
# written by a rerun that changes nothing: the lock and who holds it, the record itself, and what MLflow's store answered
# (resources/store_answers.py: it is checked against the store's own stamp)
NOT_STAMPED = (".rag-sweep.lock", ".rag-sweep.lock.holder", RECORD)
FORMAT = "rag-sweep up-to-date 1"


class Shipping(NamedTuple):
    """What the CLI prints of the MLflow store and the registry after a run."""

    enabled: bool
    runs_url: str | None  # the experiment's runs in the MLflow UI, best first
    display_uri: str  # the tracking URI, its password ***
    resolved_uri: str
    champion: tuple[str, str | None] | None  # the registered champion: (version, config key)


class Remembered(NamedTuple):
    """An unchanged rerun's result, as the CLI prints it (the fields of rag_sweep.runner.sweep.SweepRun it reads)."""

    board: Any  # the leaderboard (polars DataFrame)
    plan: Any
    data: Path
    shipping: Shipping
    search: None = None
    champion_kept: None = None


def shipping_facts(tracking, sweep: str) -> Shipping:
    """`tracking` (an MlflowTracking)'s facts for the sweep (on a local store, answered from its memo)."""
    from resources.shipping.registry import champion_of

    if not tracking.enabled:
        return Shipping(False, None, tracking.display_uri(), tracking.resolved_uri(), None)
    champion = champion_of(tracking, sweep)
    return Shipping(
        True,
        tracking.ranked_runs_url(sweep),
        tracking.display_uri(),
        tracking.resolved_uri(),
        None if champion is None else (champion.version, champion.tags.get("config_key")),
    )


def _local_store(data: Path) -> Path | None:
    """The MLflow SQLite store a run on `data` tracks into, or None (a tracking server)."""
    uri = mlflow_tracking_uri()
    if uri is None:
        return data / "mlflow.db"
    return Path(uri.removeprefix("sqlite:///")) if uri.startswith("sqlite:///") else None


def recordable(plan, data: Path) -> bool:
    """Whether everything a rerun of `plan` on `data` asks is a file here (see the module's docstring)."""
    return (
        not is_remote(data)
        and dagster_home() is None
        and executor() == "in_process"
        and _local_store(data) is not None
        and not plan.sweep.search.adaptive
        and plan.sweep.optimize is None
        and all(keeps_files(store) != "server" for store in plan.stores)
    )


def _file(path: Path) -> list | None:
    try:
        st = path.stat()
    except FileNotFoundError:
        return None
    return [st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns]


def input_files(plan) -> dict[str, list | None]:
    """The sweep's input files as they are now (a run compares them at its start and its end)."""
    return {str(p): _file(p) for p in (plan.sweep.corpus_path, plan.sweep.qa_path)}


def stamp(plan, data: Path) -> str:
    """A digest of what an unchanged rerun's answer was read from (see the module's docstring)."""
    h = hashlib.sha256()
    store = _local_store(data)
    context = {
        "plan": plan_document(plan),
        "tracking": [mlflow_tracking_uri(), mlflow_ui_url()],
        "inputs": input_files(plan),
        # a store outside the data dir too (its path, file and WAL, as its answers' memo stamps it)
        "store": store_state(store),
    }
    h.update(json.dumps(context, sort_keys=True, default=str).encode())
    files = []
    for root, dirs, names in os.walk(data):
        dirs.sort()
        for name in sorted(names):
            path = Path(root, name)
            rel = path.relative_to(data).as_posix()
            if rel in NOT_STAMPED or rel.endswith(".answers.json"):
                continue
            files.append([rel, _file(path)])
    h.update(json.dumps(files).encode())
    return h.hexdigest()


def record(plan, data: Path, shipping: Shipping, inputs_at_start: dict) -> None:
    """After a run that found nothing due: the data dir as it is now has nothing to do for `plan`. Not when
    an input file changed while the run read it (`inputs_at_start`: `input_files` then)."""
    if not recordable(plan, data) or input_files(plan) != inputs_at_start:
        return
    doc = {"format": FORMAT, "stamp": stamp(plan, data), "shipping": list(shipping)}
    atomic_write_bytes(data / RECORD, json.dumps(doc).encode())


def check_settings(plan) -> None:
    """The settings a run checks before its work ($RAG_EXECUTOR, $RAG_DEVICE), checked the same way when the
    rerun is answered from the record: a setting that cannot run is said whether or not there is work."""
    from resources.devices import resolve_device
    from resources.environment import device_setting, executor

    executor()
    if plan.runs_local_models:
        resolve_device(device_setting())


def remembered(spec: str, data_dir: str | None, store: str | None) -> Remembered | None:
    """The result of an unchanged rerun of `spec` on the data dir, when a run recorded that nothing was due
    and nothing it read has changed since; else None (the run asks Dagster)."""
    data = data_root(data_dir or default_data_dir())
    if is_remote(data) or not (data / RECORD).exists():
        return None
    plan = load_plan(spec, store, data)
    if not recordable(plan, data):
        return None
    check_settings(plan)  # what a run would refuse, refused on a rerun that computes nothing too
    with exclusive(data):  # not while another run is writing
        try:
            doc = json.loads((data / RECORD).read_text())
        except (FileNotFoundError, ValueError):
            return None
        if not isinstance(doc, dict) or doc.get("format") != FORMAT or doc.get("stamp") != stamp(plan, data):
            return None
        enabled, runs_url, display_uri, resolved_uri, champion = doc["shipping"]
        shipping = Shipping(
            enabled, runs_url, display_uri, resolved_uri, tuple(champion) if champion else None
        )
        board = read_parquet(leaderboard_path(data, plan.sweep.name))
    return Remembered(board, plan, data, shipping)
