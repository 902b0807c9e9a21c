"""Schedules and sensors: nightly re-evaluation, input-change detection, declarative automation."""

from __future__ import annotations

import dagster as dg

from rag_core.spec import Sweep
from sensors.input_sensor import build_input_sensor
from sensors.schedules import build_nightly


def build_sensors_and_schedules(sweep: Sweep, job_defs: dict) -> tuple[list, list]:
    automation = dg.AutomationConditionSensorDefinition(
        "rag_automation_sensor",
        target=dg.AssetSelection.all(),
        default_status=dg.DefaultSensorStatus.RUNNING,
        description="Materializes downstream stages when their inputs change (eager conditions on the assets).",
    )
    return (
        [build_nightly(sweep, job_defs["evaluate_job"])],
        [build_input_sensor(sweep, job_defs["inputs_job"]), automation],
    )
