"""A batch: one Dagster run over many partitions of a stage (rag_core/planning/batches.py).

The run targets a partition key range (Dagster's range tags; `rag/partitions` names the keys it wants when
they are not the whole range). Dagster records a range's output as one data version for every partition,
while each partition here has its own fingerprint: so the stage's asset (rag_assets/stage_asset.py) loops
over the batch and records each partition itself, as a materialization with the tags Dagster writes for an
Output (data and code versions, each input's data version and materialization), logged as public
`AssetMaterialization` events. This module holds what
that loop needs: the keys, each partition's inputs and context, its tags, the checks merged, the failure.
"""

from __future__ import annotations

import json
from typing import Any

import dagster as dg

from rag_core.decision.holdout import holdout_key, is_holdout_key
from rag_core.planning.plan import Partition, Plan
from rag_core.planning.stages import stage
from resources.artifacts import ArtifactRef
from resources.dagster_private import (
    CODE_VERSION_TAG,
    DATA_VERSION_IS_USER_PROVIDED_TAG,
    DATA_VERSION_TAG,
    input_data_version_tag,
    input_event_pointer_tag,
)

# A run over a range of partitions (a batch) that wants only some of them: their keys, as a JSON list.
BATCH_TAG = "rag/partitions"


def record(context, events: list[dg.AssetMaterialization]) -> None:
    """Log a batch's materializations (one asset's partitions, each with its own data version) through
    Dagster's public event log, back to back when the batch ends: a UI backfill's daemon, which requests a
    downstream partition once its parents are recorded, sees the whole batch at its next look (it could
    split the next stage in two only by looking within the few milliseconds these writes take)."""
    for event in events:
        context.log_event(event)


class PartitionsFailed(Exception):
    """Partitions of a batch that raised; the others were materialized. Names each with its cause."""

    def __init__(self, stage_name: str, failures: list[tuple[str, BaseException]]):
        self.stage, self.failures = stage_name, failures
        causes = "; ".join(f"{stage_name}[{k}]: {type(e).__name__}: {e}" for k, e in failures[:5])
        more = f" (and {len(failures) - 5} more)" if len(failures) > 5 else ""
        super().__init__(f"{len(failures)} partition(s) failed: {causes}{more}")


class _PartitionLog:
    """A batch's logger for one partition: every line names it, `stage[key]: ` (the run's log holds
    many; the runner prints a batch's warnings as they read)."""

    def __init__(self, log, where: str):
        self._log, self._where = log, where

    def __getattr__(self, level: str):
        method = getattr(self._log, level)
        return lambda msg, *a, **kw: method(f"{self._where}: {msg}", *a, **kw)


class OnePartition:
    """The run's context as one partition of a batch sees it: its own partition key, its own log lines."""

    def __init__(self, context: dg.AssetExecutionContext, stage_name: str, key: str):
        self._context, self.partition_key, self.has_partition_key = context, key, True
        self.log = _PartitionLog(context.log, f"{stage_name}[{key}]")

    def __getattr__(self, name: str):
        return getattr(self._context, name)


def partition_order(plan: Plan, stage_name: str, keys, instance=None) -> list[str]:
    """The order of the partitions definition that holds `keys`: a selection stage's static keys; the
    holdout's finalists as the instance added them (`instance`), the ones among `keys` it has not added
    yet after them (a sensor adds them with its run request)."""
    if not any(is_holdout_key(k) for k in keys):
        return plan.keys(stage_name)
    added = list(instance.get_dynamic_partitions(plan.finalists_partitions)) if instance is not None else []
    have = set(added)
    return [*added, *(k for k in dict.fromkeys(keys) if k not in have)]


def range_tags(plan: Plan, stage_name: str, keys, instance=None) -> dict[str, str]:
    """The tags of one run over several partitions of a stage (a batch): the range of the stage's
    partitions they span (Dagster's range tags), and the keys (`rag/partitions`) unless they are all of it.
    `instance`: where the holdout's partitions were added (their order), for holdout keys."""
    index = {k: i for i, k in enumerate(partition_order(plan, stage_name, keys, instance))}
    first, last = min(keys, key=index.__getitem__), max(keys, key=index.__getitem__)
    tags = {"dagster/asset_partition_range_start": first, "dagster/asset_partition_range_end": last}
    if index[last] - index[first] + 1 != len(set(keys)):
        tags[BATCH_TAG] = json.dumps(sorted(set(keys), key=index.__getitem__))
    return tags


def batch_keys(context: dg.AssetExecutionContext) -> list[str]:
    """The partitions a batch materializes: those the run lists (`rag/partitions`: the runner's batches
    want only some keys of the range they span), else the whole range (a UI backfill)."""
    if listed := context.run.tags.get(BATCH_TAG):
        keys = json.loads(listed)
        outside = set(keys) - set(context.partition_keys)
        if outside:
            raise dg.Failure(f"{BATCH_TAG} names partitions outside the run's range: {sorted(outside)[:5]}")
        return keys
    return list(context.partition_keys)


def inputs_of(partition: Partition, loaded: dict[str, Any]) -> dict[str, Any]:
    """A batch partition's own inputs: the upstream partition it reads, out of every one the batch loaded."""
    out = {}
    for name, value in loaded.items():
        if isinstance(value, dict) and name in partition.reads:
            if partition.reads[name] not in value:
                raise dg.Failure(
                    f"{name}[{partition.reads[name]}] is not materialized yet: materialize it first"
                )
            value = value[partition.reads[name]]
        out[name] = value
    return out


def input_pointers(context, plan: Plan, reads, held: bool = False) -> dict[str, dict[str | None, int]]:
    """upstream stage -> partition (None: unpartitioned) -> the storage id of its latest materialization,
    one query per upstream asset for the whole batch; `held`: a holdout stage's (it reads the other holdout
    stages' assets)."""
    from dagster import DagsterEventType

    out: dict[str, dict[str | None, int]] = {}
    for name in reads:
        key = dg.AssetKey(
            plan.asset_path(name, holdout_key("") if held and name in plan.holdout_partitions else None)
        )
        if stage(name).partitioned:
            out[name] = dict(
                context.instance.event_log_storage.get_latest_storage_id_by_partition(
                    key, DagsterEventType.ASSET_MATERIALIZATION
                )
            )
        else:
            records = context.instance.fetch_materializations(key, limit=1).records
            out[name] = {None: records[0].storage_id} if records else {}
    return out


def version_tags(
    plan: Plan, fp: str, code_version: int, reads: dict[str, str], inputs: dict[str, Any], pointers: dict
) -> dict[str, str]:
    """The tags a materialization's data version and provenance are read from, as Dagster writes them for
    an Output: its data and code versions, and each input's data version and materialization. `reads`:
    the upstream partition each partitioned input is read from (`Partition.reads`; none unpartitioned)."""
    tags = {
        DATA_VERSION_TAG: fp,
        DATA_VERSION_IS_USER_PROVIDED_TAG: "true",
        CODE_VERSION_TAG: str(code_version),
    }
    for name, ref in inputs.items():
        if not isinstance(ref, ArtifactRef):
            continue
        upstream = dg.AssetKey(plan.asset_path(name, reads.get(name)))
        tags[input_data_version_tag(upstream)] = ref.fp
        pointer = pointers.get(name, {}).get(reads.get(name))
        if pointer is not None:
            tags[input_event_pointer_tag(upstream)] = str(pointer)
    return tags


def merged_check(key: dg.AssetKey, found: list[tuple[str, dg.AssetCheckResult]]) -> dg.AssetCheckResult:
    """One check's result over a batch: it passes when every partition's passed; otherwise it says which
    failed and what the first one's result said."""
    failed = [(k, r) for k, r in found if not r.passed]
    first = found[0][1]
    if not failed:
        return dg.AssetCheckResult(
            asset_key=key,
            check_name=first.check_name,
            passed=True,
            metadata={"partitions": len(found)} if len(found) > 1 else dict(first.metadata or {}),
        )
    k, r = failed[0]
    meta = {m: getattr(v, "value", v) for m, v in (r.metadata or {}).items()}
    says = meta.get("message") or meta.get("verdict") or ", ".join(f"{m}={v}" for m, v in meta.items())
    severe = any(x.severity == dg.AssetCheckSeverity.ERROR for _, x in failed)
    return dg.AssetCheckResult(
        asset_key=key,
        check_name=first.check_name,
        passed=False,
        severity=dg.AssetCheckSeverity.ERROR if severe else dg.AssetCheckSeverity.WARN,
        metadata={
            **(r.metadata or {}),
            "message": f"{k}: {says}" + (f" (and {len(failed) - 1} more)" if len(failed) > 1 else ""),
            "failed_partitions": dg.MetadataValue.json([k for k, _ in failed]),
        },
    )
