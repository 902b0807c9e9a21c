"""Schedules and sensors: the nightly re-evaluation of each sweep, and the deployment's automation sensor
(eager conditions on the stages; the input files are observable source assets observed on a cron)."""

from __future__ import annotations

import time

import dagster as dg

# A driver sensor (the search's, the holdout's) that has nothing new to go on says its last answer again,
# and asks everything again at least this often, in case something changed that it does not watch.
RECHECK_S = 30.0
# A driver asks again for its own runs that failed (a new run key, counted); Dagster's run retries
# (deploy/dagster.yaml's run_retries) would ask a second time beside it.
DRIVER_RUN_TAGS = {"dagster/max_retries": "0"}


def seen_lately(last: dict, key: str, value) -> bool:
    """Whether a driver's cursor `last` (its JSON, with `at`: when) recorded `value` under `key` less than
    RECHECK_S ago."""
    return last.get(key) == value and time.time() - last.get("at", 0.0) < RECHECK_S


def automation_sensor() -> dg.AutomationConditionSensorDefinition:
    return dg.AutomationConditionSensorDefinition(
        "rag_automation_sensor",
        # the input files too: their cron observation is a condition, and left out Dagster adds a
        # `default_automation_condition_sensor` of its own for them, stopped
        target=dg.AssetSelection.all(include_sources=True),
        default_status=dg.DefaultSensorStatus.RUNNING,
        # every 10 s, not Dagster's 30: a UI sweep's chain (holdout stages, champion) follows it step by step
        minimum_interval_seconds=10,
        description="Observes the input files on a cron and materializes downstream stages when their "
        "inputs change (the eager conditions on the assets).",
    )
