"""Nightly re-evaluation of every config of a sweep, a batch of configs per run."""

import dagster as dg

from rag_assets.stage_asset import FORCE_TAG
from rag_core.planning.plan import Plan
from rag_core.planning.stages import CONFIG_STAGE
from resources.environment import nightly_status


def holdout_keys(plan: Plan, data_dir: str, instance) -> list[str]:
    """The holdout partitions of the finalists the sweep's last leaderboard named (re-asked nightly too,
    so the confirmation measures today's provider), among those the holdout's assets hold (added when the
    holdout ran); none before a leaderboard or without a holdout."""
    import json

    from rag_core.decision.holdout import holdout_key
    from resources.storage import data_root

    decision = data_root(data_dir) / "leaderboards" / f"{plan.sweep.name}.decision.json"
    if not plan.holdout or not decision.exists():
        return []
    added = set(instance.get_dynamic_partitions(plan.finalists_partitions))
    finalists = json.loads(decision.read_text()).get("finalists") or []
    return [holdout_key(k) for k in finalists if holdout_key(k) in added]


def nightly_reevaluation(
    plan: Plan, evaluate_job, cron: str, data_dir: str | None = None, held: bool = False
) -> dg.ScheduleDefinition:
    """`data_dir`: where the sweep's leaderboard is (default: the deployment's, $RAG_DATA_DIR); `held`: the
    schedule `<sweep>__evaluate_holdout_nightly` of the holdout's chain (`<sweep>__holdout`: the finalists'
    holdout answers and evaluations, one run), beside the selection's. Off until turned on in the UI or by
    $RAG_NIGHTLY_STATUS=running."""

    @dg.schedule(
        name=f"{plan.prefix}__evaluate_holdout_nightly" if held else f"{evaluate_job.name}_nightly",
        job=evaluate_job,
        cron_schedule=cron,
        execution_timezone="UTC",
        default_status=dg.DefaultScheduleStatus(nightly_status().upper()),
        description=(
            "Re-answer and re-evaluate the last leaderboard's finalists on the holdout (forced: LLMs and "
            "providers drift, and are asked again); the confirmation follows the new leaderboard through "
            "the holdout driver."
            if held
            else "Re-answer and re-evaluate every config (forced: LLMs and providers drift, and are asked "
            "again); the leaderboard and the confirmation follow through the automation sensor and the "
            "holdout driver. Steps read the materialized input snapshots."
        ),
    )
    def _nightly(context: dg.ScheduleEvaluationContext):
        stamp = context.scheduled_execution_time.strftime("%Y-%m-%d")
        from rag_assets.batch import range_tags
        from resources.environment import batch_size, default_data_dir

        if held:  # the finalists' answers and evaluations, one run of the holdout's chain
            from rag_assets.holdout_chain import chain_tags

            if keys := holdout_keys(plan, data_dir or default_data_dir(), context.instance):
                yield dg.RunRequest(run_key=stamp, tags={FORCE_TAG: "true", **chain_tags(keys, "answers")})
            return
        keys = plan.config_keys
        size = batch_size()
        # a batch of configs per run (rag_assets/batch.py), as `rag-sweep run` materializes them: not a run
        # per config, each of which would load the code location and wait for a run worker of its own
        for i in range(0, len(keys), size):
            batch = keys[i : i + size]
            one = len(batch) == 1
            yield dg.RunRequest(
                run_key=f"{stamp}:{i // size}",
                partition_key=batch[0] if one else None,
                tags={
                    FORCE_TAG: "true",
                    **({} if one else range_tags(plan, CONFIG_STAGE, batch)),
                },
            )

    return _nightly
