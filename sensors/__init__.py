"""Schedules and sensors: the nightly re-evaluation of each sweep, and the deployment's automation sensor
(eager conditions on the stages; the input files are observable source assets observed on a cron)."""

from __future__ import annotations

import dagster as dg


def automation_sensor() -> dg.AutomationConditionSensorDefinition:
    return dg.AutomationConditionSensorDefinition(
        "rag_automation_sensor",
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        # every 10 s, not Dagster's 30: a UI sweep's chain (holdout stages, champion) follows it step by step
        minimum_interval_seconds=10,
        description="Observes the input files on a cron and materializes downstream stages when their "
        "inputs change (the eager conditions on the assets).",
    )
