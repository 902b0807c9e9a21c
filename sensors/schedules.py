"""Nightly re-evaluation of every config of a sweep, a batch of configs per run."""

import dagster as dg

from rag_assets.stage_asset import FORCE_TAG
from rag_core.planning.plan import Plan
from rag_core.planning.stages import CONFIG_STAGE


def holdout_keys(plan: Plan, data_dir: str) -> list[str]:
    """The holdout partitions of the finalists the sweep's last leaderboard named (re-asked nightly too,
    so the confirmation measures today's provider); none before a leaderboard or without a holdout."""
    import json

    from rag_core.decision.holdout import HOLDOUT_SUFFIX
    from resources.storage import data_root

    decision = data_root(data_dir) / "leaderboards" / f"{plan.sweep.name}.decision.json"
    if not plan.holdout or not decision.exists():
        return []
    return [k + HOLDOUT_SUFFIX for k in json.loads(decision.read_text()).get("finalists") or []]


def nightly_reevaluation(
    plan: Plan, evaluate_job, cron: str, data_dir: str | None = None
) -> dg.ScheduleDefinition:
    """`data_dir`: where the sweep's leaderboard is (default: the deployment's, $RAG_DATA_DIR)."""

    @dg.schedule(
        name=f"{evaluate_job.name}_nightly",
        job=evaluate_job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus.RUNNING,
        description="Re-answer and re-evaluate every config, and the finalists on the holdout (forced: LLMs "
        "and providers drift, and are asked again); the leaderboard and the confirmation follow through the "
        "automation sensor. Steps read the materialized input snapshots.",
    )
    def _nightly(context: dg.ScheduleEvaluationContext):
        stamp = context.scheduled_execution_time.strftime("%Y-%m-%d")
        from rag_assets.batch import range_tags
        from resources.environment import batch_size, default_data_dir

        keys = [*plan.config_keys, *holdout_keys(plan, data_dir or default_data_dir())]
        size = batch_size()
        # a batch of configs per run (rag_assets/batch.py), as `rag-sweep run` materializes them: not a run
        # per config, each of which would load the code location and wait for a run worker of its own
        for i in range(0, len(keys), size):
            batch = keys[i : i + size]
            one = len(batch) == 1
            yield dg.RunRequest(
                run_key=f"{stamp}:{i // size}",
                partition_key=batch[0] if one else None,
                tags={FORCE_TAG: "true", **({} if one else range_tags(plan, CONFIG_STAGE, batch))},
            )

    return _nightly
