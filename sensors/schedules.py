"""Nightly re-evaluation of every config of a sweep."""

import dagster as dg

from rag_assets.stage_asset import FORCE_TAG
from rag_core.plan import Plan


def nightly_reevaluation(plan: Plan, evaluate_job, cron: str) -> dg.ScheduleDefinition:
    @dg.schedule(
        name=f"{evaluate_job.name}_nightly",
        job=evaluate_job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Re-answer and re-evaluate every config (forced: LLMs and providers drift); the "
        "leaderboard follows through the automation sensor. Steps read the materialized input snapshots.",
    )
    def _nightly(context: dg.ScheduleEvaluationContext):
        stamp = context.scheduled_execution_time.strftime("%Y-%m-%d")
        for key in plan.config_keys:
            yield dg.RunRequest(run_key=f"{stamp}:{key}", partition_key=key, tags={FORCE_TAG: "true"})

    return _nightly
