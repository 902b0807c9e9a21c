"""The deployment's holdout driver asks again for a holdout run that failed, up to its limit, then says why
it stopped asking (a leaderboard recorded on a test instance, its decision naming a finalist)."""

from __future__ import annotations

import json

import dagster as dg
from dagster._core.storage.dagster_run import DagsterRun
from dagster._core.utils import make_new_run_id

from rag_assets.holdout_chain import holdout_chain_job
from rag_assets.orchestration.plans import load_plan
from rag_assets.stage_asset import asset_key
from rag_assets.sweep_assets import LOGIC
from sensors import RECHECK_S
from sensors.holdout import (
    HOLDOUT_TAG,
    MAX_ATTEMPTS,
    STEP_TAG,
    holdout_driver,
    holdout_jobs,
    next_holdout_request,
)
from tests.conftest import write_sweep


def _held(slice_data, tmp_path, name: str):
    """A 2-config sweep with a holdout whose last leaderboard decision names its first config a finalist:
    (the plan, the data dir, the holdout's jobs)."""
    spec = write_sweep(
        tmp_path / "s.yaml",
        slice_data,
        name=name,
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [2, 3]},
        decision={"holdout": 0.3},
    )
    data = tmp_path / "data"
    plan = load_plan(spec, data_dir=data)
    (data / "leaderboards").mkdir(parents=True)
    decision = {"finalists": [plan.config_keys[0]]}
    (data / "leaderboards" / f"{name}.decision.json").write_text(json.dumps(decision))
    return plan, data, holdout_jobs(plan, holdout_chain_job(plan, LOGIC))


def test_a_failed_holdout_run_is_asked_again_up_to_the_limit(slice_data, tmp_path):
    plan, data, jobs = _held(slice_data, tmp_path, "held")
    finalist = plan.config_keys[0]
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key(plan, "leaderboard")))
        first, added = next_holdout_request(plan, instance, data, None, jobs)
        # the finalist's partition of the holdout's assets: added with the request (none exists before)
        assert instance.get_dynamic_partitions(plan.finalists_partitions) == []
        # one run of the holdout's chain: every holdout stage of the finalist, from the first
        assert isinstance(first, dg.RunRequest) and first.job_name == "held__holdout"
        assert json.loads(first.tags["rag/partitions"]) == [f"{finalist}~holdout"]
        assert first.tags["rag/holdout_from"] == "retrievals"
        assert added == [f"{finalist}~holdout"]
        instance.add_dynamic_partitions(plan.finalists_partitions, added)
        board = first.tags[HOLDOUT_TAG]
        assert first.run_key == f"holdout:{board}:holdout" and first.tags[STEP_TAG] == "holdout"
        keys = [first.run_key]
        for attempt in range(1, MAX_ATTEMPTS + 1):
            instance.add_run(  # the run failed (a provider outage, a killed worker)
                DagsterRun(
                    job_name=first.job_name,
                    run_id=make_new_run_id(),
                    status=dg.DagsterRunStatus.FAILURE,
                    tags=first.tags,
                )
            )
            again, more = next_holdout_request(plan, instance, data, None, jobs)
            assert more == []  # added once
            if attempt < MAX_ATTEMPTS:
                assert isinstance(again, dg.RunRequest) and again.run_key not in keys  # a new run key
                keys.append(again.run_key)
            else:
                assert isinstance(again, str) and f"failed {MAX_ATTEMPTS} times" in again, again
        assert keys == [
            f"holdout:{board}:holdout",
            *(f"holdout:{board}:holdout:attempt{n}" for n in (2, 3)),
        ]


def test_an_idle_driver_asks_nothing_until_an_event_is_stored_or_its_recheck_is_due(
    slice_data, tmp_path, monkeypatch
):
    """On PostgreSQL each of the ~30 queries of a tick is a new connection (a new server process): while no
    event is stored, the driver says its last skip again, and asks again at least every RECHECK_S."""
    import sensors.holdout as driver_module

    plan, data, jobs = _held(slice_data, tmp_path, "idle")
    sensor = holdout_driver(plan, jobs, str(data))
    asked = []
    real = driver_module.next_holdout_request
    monkeypatch.setattr(driver_module, "next_holdout_request", lambda *a: asked.append(1) or real(*a))
    now = [1000.0]
    monkeypatch.setattr(driver_module.time, "time", lambda: now[0])
    with dg.instance_for_test() as instance:
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key(plan, "other")))
        cursor = None

        def tick():
            nonlocal cursor
            result = sensor.evaluate_tick(dg.build_sensor_context(instance=instance, cursor=cursor))
            cursor = result.cursor
            return result

        assert tick().skip_message == "no leaderboard yet" and len(asked) == 1
        now[0] += RECHECK_S / 2
        assert tick().skip_message == "no leaderboard yet" and len(asked) == 1  # nothing stored: not asked
        now[0] += RECHECK_S / 2
        assert tick().skip_message == "no leaderboard yet" and len(asked) == 2  # due again
        instance.report_runless_asset_event(dg.AssetMaterialization(asset_key(plan, "leaderboard")))
        requested = tick()  # an event: asked at once, and the finalist's holdout requested
        assert len(asked) == 3 and [r.job_name for r in requested.run_requests] == ["idle__holdout"]
