"""Nightly re-evaluation of every config of the sweep."""

import dagster as dg

from rag_assets.common import FORCE_TAG
from rag_core.spec import Sweep


def build_nightly(sweep: Sweep, evaluate_job) -> dg.ScheduleDefinition:
    @dg.schedule(
        name="nightly_reevaluation",
        job=evaluate_job,
        cron_schedule="0 2 * * *",
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Every night, re-answer and re-evaluate every config (forced: LLMs and providers drift); "
        "the leaderboard follows through the automation sensor.",
    )
    def nightly_reevaluation(context: dg.ScheduleEvaluationContext):
        stamp = context.scheduled_execution_time.strftime("%Y-%m-%d")
        for key in sweep.config_keys:
            yield dg.RunRequest(run_key=f"{stamp}:{key}", partition_key=key, tags={FORCE_TAG: "true"})

    return nightly_reevaluation
