"""The nightly schedule and the input-change sensor."""

import shutil
from datetime import UTC, datetime

import dagster as dg
import polars as pl

from rag_assets.common import FORCE_TAG
from rag_assets.definitions import build_definitions
from rag_core.spec import load_sweep
from tests.conftest import write_sweep


def _setup(tmp_path, slice_data):
    data = {"corpus": tmp_path / "corpus.parquet", "qa": tmp_path / "queries.parquet"}
    shutil.copy(slice_data["corpus"], data["corpus"])
    shutil.copy(slice_data["qa"], data["qa"])
    spec = write_sweep(
        tmp_path / "s.yaml",
        data,
        chunking={"method": "fixed", "chunk_size": 200, "chunk_overlap": 0},
        retrieval={"mode": ["vector", "bm25"], "top_k": [3, 5]},
    )
    sweep = load_sweep(spec)
    return sweep, build_definitions(sweep, str(tmp_path / "data")), data


def test_nightly_schedule_requests_every_config_forced(tmp_path, slice_data):
    sweep, defs, _ = _setup(tmp_path, slice_data)
    schedule = defs.get_repository_def().get_schedule_def("nightly_reevaluation")
    ctx = dg.build_schedule_context(
        scheduled_execution_time=datetime(2026, 11, 22, 2, tzinfo=UTC),
        repository_def=defs.get_repository_def(),
    )
    requests = list(schedule.evaluate_tick(ctx).run_requests)
    assert sorted(r.partition_key for r in requests) == sorted(sweep.config_keys)
    assert all(r.tags[FORCE_TAG] == "true" for r in requests)
    assert schedule.cron_schedule == "0 2 * * *"


def test_input_sensor_fires_on_content_change_only(tmp_path, slice_data):
    _, defs, data = _setup(tmp_path, slice_data)
    sensor = defs.get_repository_def().get_sensor_def("input_change_sensor")
    with dg.instance_for_test() as instance:
        ctx = dg.build_sensor_context(repository_def=defs.get_repository_def(), instance=instance)
        first = sensor.evaluate_tick(ctx)
        assert len(first.run_requests) == 1  # first sight of the inputs
        ctx = dg.build_sensor_context(
            repository_def=defs.get_repository_def(), instance=instance, cursor=first.cursor
        )
        same = sensor.evaluate_tick(ctx)
        assert not same.run_requests and "unchanged" in same.skip_message
        # touching the file without changing its bytes is not a change
        data["qa"].write_bytes(data["qa"].read_bytes())
        assert not sensor.evaluate_tick(
            dg.build_sensor_context(
                repository_def=defs.get_repository_def(), instance=instance, cursor=first.cursor
            )
        ).run_requests
        qa = pl.read_parquet(data["qa"]).head(10)
        qa.write_parquet(data["qa"])
        changed = sensor.evaluate_tick(
            dg.build_sensor_context(
                repository_def=defs.get_repository_def(), instance=instance, cursor=first.cursor
            )
        )
        assert len(changed.run_requests) == 1
        assert changed.run_requests[0].tags["rag/changed"] == "qa"
        assert changed.run_requests[0].run_key != first.run_requests[0].run_key
