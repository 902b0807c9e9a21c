"""What the embedded (in-process, on-disk) stores share: an alias directory for atomic rebuilds and a
per-process cache of clients for stores whose storage admits one client at a time.

A collection is an alias: each build writes a new physical collection, and an alias file (replaced
atomically) points readers at the finished one together with its filterable fields (and the analyzer of a
keyword index that segments its texts, which its queries are segmented with); the previous build is dropped
afterwards. Readers never see a half-built index.

Qdrant's local mode and Milvus Lite lock their storage to one client (one process). Each physical
collection therefore gets its own storage path, so different index partitions never contend; a second
process that opens the same index waits for the lock (up to `lock_timeout_s`), which serializes
parallel steps over one index. Clients stay open for the process (opening one loads the collection), and
are closed when a Dagster step ends (`teardown_after_execution`).
"""

from __future__ import annotations

import abc
import contextlib
import json
import shutil
import threading
import time
import uuid
from collections.abc import Callable
from pathlib import Path
from typing import Any, ClassVar

import dagster as dg

from rag_core.data.filters import filterable_attributes
from resources.storage import atomic_write_bytes, data_root
from resources.vector_stores.base import VectorStore, keyword_rows, reserved_fields


class AliasDirectory:
    def __init__(self, root: str | Path):
        self.root = data_root(root)

    def _path(self, collection: str) -> Path:
        return self.root / "_aliases" / f"{collection}.json"

    def get(self, collection: str) -> dict | None:
        """{'physical': name, 'fields': {name: type}, 'count': rows at publishing or None, 'analyzer': the
        segmenting keyword analyzer or None} or None."""
        path = self._path(collection)
        if not path.exists():
            return None
        try:
            record = json.loads(path.read_text())
        except FileNotFoundError:  # removed since (object storage tells existence and content apart)
            return None
        # alias files written before filters existed name the table only
        return {
            "physical": record.get("physical") or record["table"],
            "fields": record.get("fields") or {"doc_id": "str"},
            "count": record.get("count"),  # records written before counts were kept have none
            "analyzer": record.get("analyzer"),  # only a segmenting analyzer is recorded
            "ann": record.get("ann"),  # only an approximate index is recorded (its type and settings)
        }

    def point(
        self,
        collection: str,
        physical: str,
        fields: dict[str, str],
        count: int | None = None,
        analyzer: str | None = None,
        ann: dict | None = None,
    ) -> dict | None:
        """Move the alias to `physical` (a finished build of `count` rows, its keyword index segmented by
        `analyzer`, None: plain or english; its approximate vector index `ann`, None: exact); return the
        previous record."""
        previous = self.get(collection)
        record = {"physical": physical, "fields": fields, "count": count}
        if analyzer:  # a plain or english build's record is as before
            record["analyzer"] = analyzer
        if ann:  # an exact build's likewise
            record["ann"] = ann
        atomic_write_bytes(self._path(collection), json.dumps(record).encode())
        return previous

    def remove(self, collection: str) -> dict | None:
        previous = self.get(collection)
        with contextlib.suppress(FileNotFoundError):
            self._path(collection).unlink()
        return previous


def new_physical(collection: str) -> str:
    return f"{collection}__{uuid.uuid4().hex[:8]}"


class ClientCache:
    """One open client per storage path and process, opened with a wait for another process's lock."""

    def __init__(self, name: str, is_locked: Callable[[Exception], bool]):
        self.name, self._is_locked = name, is_locked
        self._clients: dict[str, Any] = {}
        self._lock = threading.RLock()

    def get(self, path: Path, open_client: Callable[[str], Any], timeout_s: float) -> Any:
        key = str(path)
        with self._lock:
            if key in self._clients:
                return self._clients[key]
            deadline = time.monotonic() + timeout_s
            while True:
                try:
                    client = open_client(key)
                    break
                except Exception as e:
                    if not self._is_locked(e):
                        raise
                    if time.monotonic() > deadline:
                        raise TimeoutError(
                            f"{self.name} storage {key} stayed locked by another process for {timeout_s:.0f} s "
                            "(embedded mode admits one process per index; use a server for parallel readers)"
                        ) from e
                    time.sleep(0.5)
            self._clients[key] = client
            return client

    def close(self, path: Path) -> None:
        with self._lock:
            client = self._clients.pop(str(path), None)
            if client is not None:
                client.close()

    def close_under(self, root: Path) -> None:
        with self._lock:
            for key in [k for k in self._clients if Path(k).is_relative_to(root)]:
                self.close(Path(key))

    def drop(self, path: Path) -> None:
        """Close the client of `path` and remove its storage."""
        self.close(path)
        shutil.rmtree(path, ignore_errors=True)


class EmbeddedStore(VectorStore):
    """A store whose builds live under one local folder behind an AliasDirectory. Subclasses build, count
    and drop builds; the upsert template (build, verify the count, drop on failure, publish), filter
    fields, delete and info are the same for all. With a segmenting analyzer (chinese, japanese, thai), `_build`
    gets rows that also hold `keywords` (base.keyword_rows), to index for BM25 split only at spaces, and its
    `_keyword_search` gets queries segmented the same way; the alias record names the analyzer."""

    def upsert(self, collection: str, rows: list[dict], vectors, analyzer: str = "plain", ann=None) -> int:
        self._check_analyzer(analyzer)
        ann = ann if ann is not None and ann.approximate else None
        self._check_ann(ann)
        fields, values = filterable_attributes(rows, reserved_fields(analyzer))
        rows = keyword_rows(rows, analyzer)
        physical = new_physical(collection)
        try:
            # a store without approximate indexes (Qdrant's local mode, a plug-in's) never gets `ann`
            self._build(physical, rows, vectors, fields, values, analyzer, **({"ann": ann} if ann else {}))
            count = self._count(physical)
            if count != len(rows):
                raise RuntimeError(f"{collection}: {self.backend} holds {count} of {len(rows)} rows")
        except BaseException:
            self._drop(physical)  # nothing half-built is left behind
            raise
        segmenting = analyzer if reserved_fields(analyzer) else None
        self._publish(collection, physical, fields, count, segmenting, ann.model_dump() if ann else None)
        return len(rows)

    @abc.abstractmethod
    def _build(
        self,
        physical: str,
        rows: list[dict],
        vectors,
        fields: dict[str, str],
        values: list[dict],
        analyzer: str,
        ann=None,
    ) -> None:
        """Write a new build: every row with its vector, the filterable `fields` (typed `values`), a
        keyword index with the BM25 `analyzer` (a segmenting one: over the rows' `keywords`, split at spaces
        only) and the approximate vector index `ann` (rag_core/planning/ann.py AnnIndex; None: exact)."""

    @property
    @abc.abstractmethod
    def _root(self) -> str:
        """The folder holding the builds and the `_aliases` directory."""

    @abc.abstractmethod
    def _count(self, physical: str) -> int: ...

    def _build_present(self, physical: str) -> bool | None:
        """Whether a build's files are there, told without opening the store; None: only opening tells."""
        return None

    @abc.abstractmethod
    def _drop(self, physical: str) -> None:
        """Remove a build (and close what holds it open)."""

    @property
    def _aliases(self) -> AliasDirectory:
        return AliasDirectory(self._root)

    def _record(self, collection: str) -> dict:
        record = self._aliases.get(collection)
        if record is None:
            raise LookupError(f"{self.backend} collection {collection!r} does not exist under {self._root}")
        return record

    def _read(self, collection: str, run: Callable[[str], Any]) -> Any:
        """`run(physical)` against the collection's current build; if a concurrent rebuild dropped that
        build mid-read, run it once more against the new one."""
        physical = self._record(collection)["physical"]
        try:
            return run(physical)
        except Exception:
            latest = self._aliases.get(collection)
            if latest is None or latest["physical"] == physical:
                raise
            return run(latest["physical"])

    def _publish(
        self,
        collection: str,
        physical: str,
        fields: dict[str, str],
        count: int,
        analyzer: str | None = None,
        ann: dict | None = None,
    ) -> None:
        """Point the collection at a finished build, then drop the build it replaced."""
        previous = self._aliases.point(collection, physical, fields, count, analyzer, ann)
        if previous:
            self._drop(previous["physical"])

    def _build_folder(self, physical: str) -> Path | None:
        """The one local folder that holds a build whole (to ship it), or None where a build is not one
        self-contained folder (object storage, a store that keeps builds together)."""
        return None

    def shipped_build(self, collection: str) -> tuple[Path, dict] | None:
        """The collection's current build as files to ship with a model (its folder and alias record), or
        None where it cannot be (see `_build_folder`). An approximate index is one random draw of its
        training: the model serves the build that was evaluated, copied, not a new draw."""
        record = self._aliases.get(collection)
        folder = None if record is None else self._build_folder(record["physical"])
        return (folder, record) if folder is not None and folder.is_dir() else None

    def adopt_build(self, collection: str, folder: Path, record: dict) -> None:
        """Make a shipped build (`shipped_build`'s folder and record) this store's `collection`: its files
        copied under this store's root as they are, the alias pointed at them."""
        target = self._build_folder(record["physical"])
        if target is None:
            raise ValueError(f"{self.backend} under {self._root}: a shipped build cannot be adopted here")
        target.parent.mkdir(parents=True, exist_ok=True)
        shutil.copytree(folder, target)
        fields = record["fields"]
        self._publish(
            collection, record["physical"], fields, record["count"], record["analyzer"], record["ann"]
        )

    def filter_fields(self, collection: str) -> dict[str, str]:
        return self._record(collection)["fields"]

    def _segmentation(self, collection: str) -> str | None:
        return self._record(collection)["analyzer"]

    def _ann(self, collection: str) -> dict:
        """The approximate index the collection's build has ({} exact): its type and settings."""
        return self._record(collection)["ann"] or {}

    def delete(self, collection: str) -> None:
        previous = self._aliases.remove(collection)
        if previous:
            self._drop(previous["physical"])

    def info(self, collection: str) -> dict:
        for _ in range(2):  # a rebuild may have dropped the build the alias named a moment ago: look again
            record = self._aliases.get(collection)
            present = None if record is None else self._build_present(record["physical"])
            if present is not False:
                break
        if record is None or present is False:
            return {"exists": False, "count": 0, "backend": self.backend}
        if present and record["count"] is not None:
            count = record["count"]  # a published build never changes: its count at publishing stands
        else:
            count = self._read(collection, self._count)
        return {"exists": True, "count": count, "backend": self.backend, "build": record["physical"]}


class SingleClientStore(dg.ConfigurableResource, EmbeddedStore):
    """An embedded store whose storage admits one client (one process): each build gets its own folder
    under `path`, opened through the class's ClientCache (waiting up to `lock_timeout_s` for another
    process's lock), and closed when a Dagster step ends."""

    path: str
    lock_timeout_s: float = 600.0

    CLIENTS: ClassVar[ClientCache]
    open_client: ClassVar[Callable[[str], Any]]  # opens the client of one build folder

    @property
    def _root(self) -> str:
        return self.path

    def _client(self, physical: str):
        return self.CLIENTS.get(Path(self.path) / physical, self.open_client, self.lock_timeout_s)

    def _drop(self, physical: str) -> None:
        self.CLIENTS.drop(Path(self.path) / physical)

    def _build_folder(self, physical: str) -> Path | None:
        return Path(self.path) / physical

    def shipped_build(self, collection: str) -> tuple[Path, dict] | None:
        found = super().shipped_build(collection)
        if found is not None:  # its storage is written whole only once its one client has closed it
            self.CLIENTS.close(found[0])
        return found

    def teardown_after_execution(self, context) -> None:
        self.CLIENTS.close_under(Path(self.path))
