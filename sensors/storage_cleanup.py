"""Storage cleanup on a deployment: a job that removes what none of its sweeps needs (rag_assets/orchestration/gc.py,
`rag-sweep gc`), and a weekly schedule for it, off until a person turns it on in the UI."""

from collections.abc import Callable

import dagster as dg  # no `from __future__ import annotations`: Dagster reads the config class itself

from rag_core.planning.plan import Plan

CRON = "0 4 * * 0"  # Sundays 04:00 UTC, after the nightly runs


class CleanupConfig(dg.Config):
    older_than: str = "30d"  # leave what was written more recently (a deployment's run takes no lock)
    apply: bool = True  # false: only list it, in the run's logs and metadata


def storage_cleanup(plans: Callable[[], list[Plan]]) -> tuple[dg.JobDefinition, dg.ScheduleDefinition]:
    """`plans`: every sweep the deployment serves, read when the job runs (its files as they are then)."""

    @dg.op(required_resource_keys={"artifacts"}, out=dg.Out(dg.Nothing))  # nothing to store: no pickle
    def remove_unneeded_storage(context: dg.OpExecutionContext, config: CleanupConfig) -> dg.Output:
        from rag_assets.orchestration.gc import collect, parse_age, remove
        from resources.locks import shared_lock
        from resources.storage import data_root

        data = data_root(context.resources.artifacts.data_dir)
        age = parse_age(config.older_than)
        # the lock `rag-sweep run` holds on this data dir: a run of it started meanwhile waits
        with shared_lock(f"sweep run on {data}", data / ".rag-sweep.lock"):
            garbage = collect(plans(), data, context.instance, age)
            if config.apply:
                remove(garbage, data)
        lines = garbage.lines(config.apply, "run the job with apply: true")
        for line in lines:
            context.log.info(line)
        return dg.Output(
            None,
            metadata={
                "applied": config.apply,
                "artifact_files": len(garbage.files),
                "cache_parts": len(garbage.cache_parts),
                "collections": len(garbage.collections),
                "bytes": garbage.bytes,
                "kept_files": garbage.kept_files,
                "report": dg.MetadataValue.md("```\n" + "\n".join(lines) + "\n```"),
            },
        )

    @dg.job(
        name="storage_cleanup",
        description="Remove the artifacts, vector collections and embedding-cache parts none of the "
        "deployment's sweeps needs now (what `rag-sweep gc --apply` removes), older than `older_than`.",
        tags={"rag/kind": "storage_cleanup"},
    )
    def job():
        remove_unneeded_storage()

    schedule = dg.ScheduleDefinition(
        name="storage_cleanup_weekly",
        job=job,
        cron_schedule=CRON,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.STOPPED,
        description="Weekly storage cleanup; off until turned on (it deletes: check `rag-sweep gc` first).",
    )
    return job, schedule
