"""Content-addressed Parquet artifacts, written and read by one IO manager.

Every stage's artifact is `<data_dir>/<stage>/<fingerprint>.parquet`; the fingerprint is the asset
materialization's data version. An asset returns an `Artifact` (its reference and, when it computed it,
the frame); the IO manager writes it atomically (resources/storage.py; side tables first, the main file
last, so a main file's presence means the artifact is complete). Inputs come from what upstream
*materialized*: the IO manager reads the upstream partition's latest data version from the instance and
hands the asset an `ArtifactRef`, read only when the asset needs its rows. A changed input file therefore
never changes what a downstream step reads until its snapshot is materialized again.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg
import polars as pl

from resources.dagster_private import DATA_VERSION_TAG
from resources.storage import atomic_write_parquet, data_root, parquet_columns, read_parquet, readable_parquet


@dataclass(frozen=True)
class ArtifactRef:
    """One stage's artifact: `<root>/<stage>/<fp>.parquet`, plus optional side tables `<fp>.<part>.parquet`."""

    root: Path
    stage: str
    fp: str
    partition: str | None = None

    def path(self, part: str | None = None) -> Path:
        return self.root / self.stage / (f"{self.fp}.{part}.parquet" if part else f"{self.fp}.parquet")

    def exists(self) -> bool:
        return self.path().exists()

    def files(self) -> list[Path]:
        """The main file and every side table on disk."""
        return [self.path(), *sorted(self.path().parent.glob(f"{self.fp}.*.parquet"))]

    def intact(self) -> bool:
        """The artifact exists and every file of it is a whole Parquet file (footer readable): a file cut
        short by a full disk or a copy is never trusted."""
        return self.exists() and all(readable_parquet(p) for p in self.files())

    def failed_calls(self) -> int:
        """How many failed LLM calls the artifact holds (its stage's `failures` column; 0 when none)."""
        from rag_core.planning.stages import BY_NAME

        column = BY_NAME[self.stage].failures if self.stage in BY_NAME else None
        if column is None or column not in parquet_columns(self.path()):
            return 0
        values = read_parquet(self.path(), columns=[column])[column]
        return int(values.drop_nulls().len() if values.dtype == pl.String else values.fill_null(0).sum())

    def read(self, part: str | None = None) -> pl.DataFrame:
        path = self.path(part)
        where = f"{self.stage}[{self.partition}]" if self.partition else self.stage
        if not path.exists():
            raise dg.Failure(
                f"{where}: artifact {path} is missing (deleted since it was materialized?): "
                f"materialize {where} again"
            )
        try:
            return read_parquet(path)
        except Exception as e:  # polars raises ComputeError, OSError ... on a damaged file
            raise dg.Failure(f"{where}: artifact {path} is damaged ({e}): materialize {where} again") from e


@dataclass(frozen=True)
class QuestionSubset(ArtifactRef):
    """A rung of successive halving: the QA set's first `n` questions in the search's seeded order, with
    its own fingerprint, so every artifact computed from it is told apart from the full set's."""

    source: ArtifactRef | None = None
    n: int = 0
    seed: int = 0

    @classmethod
    def of(cls, qa: ArtifactRef, n: int, seed: int) -> QuestionSubset:
        from rag_core.search.halving import subset_fingerprint

        return cls(qa.root, qa.stage, subset_fingerprint(qa.fp, n, seed), qa.partition, qa, n, seed)

    def read(self, part: str | None = None) -> pl.DataFrame:
        from rag_core.search.halving import question_subset

        return question_subset(self.source.read(part), self.n, self.seed)


@dataclass(frozen=True)
class QuestionSplit(ArtifactRef):
    """One split of the QA set (rag_core/decision/holdout.py: the selection or the holdout), with its own
    fingerprint, so every artifact computed from it is told apart from the other split's."""

    source: ArtifactRef | None = None
    split: str = ""
    share: float = 0.0
    seed: int = 0

    @classmethod
    def of(cls, qa: ArtifactRef, split: str, share: float, seed: int) -> QuestionSplit:
        from rag_core.decision.holdout import split_fingerprint

        fp = split_fingerprint(qa.fp, split, share, seed)
        return cls(qa.root, qa.stage, fp, qa.partition, qa, split, share, seed)

    def read(self, part: str | None = None) -> pl.DataFrame:
        from rag_core.decision.holdout import split_rows

        return split_rows(self.source.read(part), self.split, self.share, self.seed)


@dataclass
class Artifact:
    """An asset's output: its reference, and the frames to write when it was computed (None: reused)."""

    ref: ArtifactRef
    frame: pl.DataFrame | None = None
    parts: dict[str, pl.DataFrame] = field(default_factory=dict)


def latest_fingerprint(instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None) -> str | None:
    """The data version (= artifact fingerprint) of the latest materialization of an asset partition."""
    record = instance.get_latest_data_version_record(key, is_source=False, partition_key=partition)
    if record is None:
        return None
    return recorded_version(record.event_log_entry)


def recorded_version(entry) -> str | None:
    """The data version an event log entry's materialization recorded (its data version tag), else None."""
    materialization = entry.asset_materialization
    return (materialization.tags or {}).get(DATA_VERSION_TAG) if materialization is not None else None


def materialized_fingerprints(
    instance: dg.DagsterInstance, key: dg.AssetKey, partition: str | None
) -> set[str]:
    """The data versions (= artifact fingerprints) every materialization of an asset partition recorded:
    a halving rung's artifact the partition materialized before it moved on to the next rung."""
    records = instance.fetch_materializations(
        dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1000
    ).records
    versions = (recorded_version(r.event_log_entry) for r in records)
    return {v for v in versions if v is not None}


def latest_fingerprints(instance: dg.DagsterInstance, key: dg.AssetKey) -> dict[str, str]:
    """partition -> the data version of its latest materialization, for every partition of an asset in
    one query (the event log indexes the data version tag): asking partition by partition takes minutes on
    a sweep of thousands of configs."""
    tags = instance.event_log_storage.get_latest_tags_by_partition(
        key, dg.DagsterEventType.ASSET_MATERIALIZATION, [DATA_VERSION_TAG]
    )
    latest = {p: t[DATA_VERSION_TAG] for p, t in tags.items() if DATA_VERSION_TAG in t}
    # a process killed between storing a materialization and indexing its tags (two writes on PostgreSQL)
    # leaves a latest event the index does not know: read those few from the events themselves
    for partition in instance.get_materialized_partitions(key) - latest.keys():
        if fp := latest_fingerprint(instance, key, partition):
            latest[partition] = fp
    return latest


def store_artifact(obj: Artifact) -> None:
    """Write a computed artifact, its side tables first: the main file last marks it whole."""
    if obj.frame is None:  # reused: the artifact is already on disk
        return
    for part, frame in obj.parts.items():
        atomic_write_parquet(frame, obj.ref.path(part))
    atomic_write_parquet(obj.frame, obj.ref.path())


class ArtifactIOManager(dg.ConfigurableIOManager):
    """Stores every stage's artifacts under `data_dir`; see the module docstring."""

    data_dir: str

    @property
    def root(self) -> Path:
        return data_root(self.data_dir)

    def ref(self, stage: str, fp: str, partition: str | None = None) -> ArtifactRef:
        return ArtifactRef(self.root, stage, fp, partition)

    def handle_output(self, context: dg.OutputContext, obj: Artifact) -> None:
        store_artifact(obj)

    def load_input(self, context: dg.InputContext) -> ArtifactRef | dict[str, ArtifactRef]:
        from rag_core.decision.holdout import stage_of_asset

        key = context.asset_key
        stage = stage_of_asset(key.path[-1])  # a holdout asset holds its stage's artifacts
        if not context.has_asset_partitions:
            return self.latest(context.instance, key, stage, None)
        if not (context.definition_metadata or {}).get("all_partitions"):
            keys = context.asset_partition_keys
            if len(keys) == 1:  # every partition reads one upstream partition
                return self.latest(context.instance, key, stage, keys[0])
        # a batch (each of its partitions picks its own), a holdout stage's selection input or the
        # leaderboard: every partition materialized so far
        latest = self.latest_partitions(context.instance, key, stage)
        return {k: latest[k] for k in context.asset_partition_keys if k in latest}

    def latest_partitions(
        self, instance: dg.DagsterInstance, key: dg.AssetKey, stage: str
    ) -> dict[str, ArtifactRef]:
        """partition -> the artifact of its latest materialization, for every materialized partition of an
        asset (their fingerprints in one query)."""
        return {k: self.ref(stage, fp, k) for k, fp in latest_fingerprints(instance, key).items()}

    def latest(
        self,
        instance: dg.DagsterInstance,
        key: dg.AssetKey,
        stage: str,
        partition: str | None = None,
    ) -> ArtifactRef:
        """The artifact of an asset (partition)'s latest materialization; a Failure when there is none."""
        fp = latest_fingerprint(instance, key, partition)
        if fp is None:
            where = f"{key.to_user_string()}[{partition}]" if partition else key.to_user_string()
            raise dg.Failure(f"{where} is not materialized yet: materialize it first")
        return self.ref(stage, fp, partition)
