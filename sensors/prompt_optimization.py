"""Prompt optimization on a deployment (`optimize:`): the sensor `<sweep>__prompt_optimization` does what
`rag-sweep run` does after the leaderboard, so a deployment optimizes without the CLI.

- Once the leaderboard has named its decision, it requests the optimizations `optimize.configs` asks for
  (named configs, the recommendation or its top tier) that are not complete for the inputs as last
  materialized: a run of the job `<sweep>__optimize` per config, its run key the optimization's
  fingerprint, so an optimization is requested once per inputs (a failed one: launch it again by hand).
- What an optimization finds joins the plan when the code location loads again (the plan reads it from the
  data dir): the daemon loads its code locations again every minute, the UI on "Reload definitions". Then
  the sensor requests the optimized config's first changed stage (the first its prompts change), and its
  later stages, the leaderboard and the confirmation follow through the automation sensor, as any config's.
"""

from __future__ import annotations

import dagster as dg

from rag_assets.board_files import leaderboard_path, read_decision
from rag_assets.orchestration.todo import completed, input_fingerprints
from rag_assets.prompt_optimization import OPTIMIZATION, optimization_ref, optimized_prompts
from rag_assets.stage_asset import asset_key
from rag_core.planning.plan import Plan
from resources.environment import default_data_dir
from resources.storage import data_root


def optimization_jobs(plan: Plan) -> dict[str, dg.UnresolvedAssetJobDefinition]:
    """The optimization's job, and a job per stage an optimized config's own work can begin at (the first
    its prompts change: `optimize.first_stage` or, when GEPA kept a component's seed text, a later one)."""
    return {
        OPTIMIZATION: dg.define_asset_job(
            f"{plan.prefix}__optimize",
            selection=[asset_key(plan, OPTIMIZATION)],
            description=f"GEPA prompt optimization of a config of sweep {plan.sweep.name} (its partition).",
        ),
        **{
            stage: dg.define_asset_job(
                f"{plan.prefix}__optimized_{stage}",
                selection=[asset_key(plan, stage)],
                description=f"The {stage} of a config of sweep {plan.sweep.name} that prompt optimization found.",
            )
            for stage in plan.sweep.optimize.rerun_stages
        },
    }


def pending_configs(plan: Plan, data) -> list[str]:
    """Labels of the optimized configs the data dir holds that the loaded plan does not (yet)."""
    out = []
    for base, found in optimized_prompts(data, plan.prefix).items():
        if found.get("improved") and base in plan.config_keys:
            key = plan.key_of(plan.config(base).with_texts(found["best"]))
            if key not in plan.config_keys:
                out.append(f"{plan.labels.get(base, base)}·optimized")
    return out


def next_requests(plan: Plan, data, instance, jobs: dict) -> tuple[list[dg.RunRequest], str]:
    """(the runs to request now, what the sensor waits for when there is none)."""
    if not leaderboard_path(data, plan.sweep.name).with_suffix(".decision.json").exists():
        return [], "no leaderboard decision yet: the optimization starts after the leaderboard"
    decision = read_decision(data, plan.sweep.name)
    inputs = input_fingerprints(plan, instance)
    if not all(inputs.values()):
        return [], "the input snapshots are not materialized"
    fps = plan.fingerprints(inputs)

    def request(stage: str, partition: str, fp: str) -> dg.RunRequest:
        # keyed by what the run makes: requested once per artifact, again when its inputs change
        return dg.RunRequest(
            run_key=f"{stage}:{partition}:{fp}",
            job_name=jobs[stage].name,
            partition_key=partition,
            tags={"sweep": plan.sweep.name},
        )

    requests = []
    for key in plan.optimization_starts(decision):
        ref = optimization_ref(plan, key, data, inputs, fps)
        if not ref.intact():
            requests.append(request(OPTIMIZATION, key, ref.fp))
    complete = completed(plan, instance, data)
    for key in plan.optimized_from:
        first = plan.first_changed_stage(key)
        part = plan.key_of(plan.config(key), first)
        if complete(first, part) is None:
            requests.append(request(first, part, fps[(first, part)]))
    if requests:
        return requests, ""
    if pending := pending_configs(plan, data):
        return [], (
            f"{', '.join(pending)} found: it joins the plan when the code location loads again (the daemon "
            "does so every minute; the UI on Reload definitions)"
        )
    return [], "every optimization the sweep asks for is complete, and its configs requested"


def prompt_optimization_driver(
    plan: Plan, jobs: dict, data_dir: str | None = None, interval_s: int = 10
) -> dg.SensorDefinition:
    """`<sweep>__prompt_optimization`: every `interval_s`, the optimizations and optimized configs due."""

    @dg.sensor(
        name=f"{plan.prefix}__prompt_optimization",
        jobs=list(jobs.values()),
        minimum_interval_seconds=interval_s,
        default_status=dg.DefaultSensorStatus.RUNNING,
        description=(
            f"Requests the prompt optimizations of sweep {plan.sweep.name} (optimize.configs) once the "
            "leaderboard has decided, then the first optimized stage of each optimized config."
        ),
    )
    def _driver(context: dg.SensorEvaluationContext):
        data = data_root(data_dir or default_data_dir())
        requests, why = next_requests(plan, data, context.instance, jobs)
        return requests or dg.SkipReason(why)

    return _driver
