"""The Dagster definitions of one sweep, read from its plan: its assets (rag_assets/sweep_assets.py), for a
grid sweep the job that runs it in one run (`<sweep>__sweep`), the evaluation job and its nightly schedule,
the drift alerts, for an adaptive search the job that starts it and the sensor that drives it, for a grid
sweep with a holdout the sensor that confirms each leaderboard on it, and for prompt optimization the sensor
that requests it. Shared parts (resources, the automation sensor) are added once per deployment
(definitions.py).
"""

from __future__ import annotations

import warnings

import dagster as dg

from rag_assets.holdout_chain import holdout_chain_job
from rag_assets.stage_asset import asset_key
from rag_assets.sweep_assets import LOGIC, stage_assets
from rag_assets.sweep_chain import chained, sweep_chain_job
from rag_core.planning.plan import Plan
from rag_core.planning.stages import CONFIG_STAGE
from sensors.alerts import drift_alerts
from sensors.holdout import holdout_driver, holdout_jobs
from sensors.prompt_optimization import optimization_jobs, prompt_optimization_driver
from sensors.schedules import nightly_reevaluation
from sensors.search import search_driver, search_job, step_jobs

# The evaluation job runs the answers and the evaluations, whose backfill policies differ on purpose
# (rag_assets/stage_asset.py); the job takes the smaller batches, which is what it should do.
warnings.filterwarnings("ignore", message="Asset job .* materializes assets with varying BackfillPolicies")


def sweep_definitions(
    plan: Plan, nightly_cron: str | None = "0 2 * * *", data_dir: str | None = None
) -> dg.Definitions:
    evaluate_job = dg.define_asset_job(
        f"{plan.prefix}__evaluate",
        selection=[asset_key(plan, "answers"), asset_key(plan, CONFIG_STAGE)],
        description=f"Answer and evaluate configs of sweep {plan.sweep.name} (their rerankings must exist).",
    )
    # the finalists on the holdout: every holdout stage in one run (the drivers', the runner's, the nightly's)
    chain = holdout_chain_job(plan, LOGIC) if plan.holdout else None
    adaptive = plan.sweep.search.adaptive
    steps = step_jobs(plan, chain) if adaptive else {}
    optimizing = optimization_jobs(plan) if plan.optimizable_keys else {}
    # a grid sweep's holdout (an adaptive search's driver confirms its own leaderboard)
    holdout = holdout_jobs(plan, chain) if plan.holdout and not adaptive else {}
    # what the UI launches for a grid sweep: its stages to the leaderboard in one run (sweep_chain.py)
    whole = [sweep_chain_job(plan, LOGIC)] if chained(plan) else []
    return dg.Definitions(
        assets=stage_assets(plan),
        jobs=[
            evaluate_job,
            *whole,
            *([chain] if chain else []),
            *(
                [search_job(plan, data_dir), *(j for j in steps.values() if j is not chain)]
                if adaptive
                else []
            ),
            *optimizing.values(),
            *(j for j in holdout.values() if j is not chain),
        ],
        schedules=[
            nightly_reevaluation(plan, evaluate_job, nightly_cron, data_dir),
            *([nightly_reevaluation(plan, chain, nightly_cron, data_dir, held=True)] if chain else []),
        ]
        if nightly_cron
        else [],
        sensors=[
            drift_alerts(plan.sweep.name, asset_key(plan, "leaderboard"), f"{plan.prefix}__drift_alerts"),
            *([search_driver(plan, steps, data_dir)] if adaptive else []),
            *([prompt_optimization_driver(plan, optimizing, data_dir)] if optimizing else []),
            *([holdout_driver(plan, holdout, data_dir)] if holdout else []),
        ],
    )
