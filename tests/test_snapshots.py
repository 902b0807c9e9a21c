"""Inputs are snapshots: steps read what `corpus` and `qa_set` materialized, never the current files, so an
edited input changes nothing downstream until it is observed and snapshotted again. Also the nightly
schedule and the observable input files."""

from __future__ import annotations

import json
import shutil
from datetime import UTC, datetime

import dagster as dg
import polars as pl
import pytest
from dagster._core.definitions.observe import observe

from rag_assets.stage_asset import FORCE_TAG
from rag_core.planning.plan import Plan
from rag_core.planning.spec import load_sweep
from rag_sweep.definitions import build_definitions
from resources.artifacts import latest_fingerprint, latest_fingerprints
from tests.conftest import write_sweep

QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


def _setup(tmp_path, slice_data, **sections):
    data = {"corpus": tmp_path / "corpus.parquet", "qa": tmp_path / "queries.parquet"}
    shutil.copy(slice_data["corpus"], data["corpus"])
    shutil.copy(slice_data["qa"], data["qa"])
    spec = write_sweep(
        tmp_path / "s.yaml",
        data,
        name="snap",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        **(sections or {"retrieval": {"mode": ["vector", "bm25"], "top_k": [3, 5]}}),
    )
    plan = Plan.resolve(load_sweep(spec))
    return plan, build_definitions([plan], str(tmp_path / "data")), data


def _materialize(defs, instance, name: str, key: str | None = None):
    return dg.materialize(
        list(defs.assets),
        selection=[dg.AssetKey(["snap", name])],
        partition_key=key,
        instance=instance,
        resources=defs.resources,
        run_config=QUIET,
    )


def test_nightly_schedule_requests_every_config_forced(tmp_path, slice_data):
    plan, defs, _ = _setup(tmp_path, slice_data)
    schedule = defs.get_repository_def().get_schedule_def("snap__evaluate_nightly")
    ctx = dg.build_schedule_context(
        scheduled_execution_time=datetime(2026, 11, 22, 2, tzinfo=UTC),
        repository_def=defs.get_repository_def(),
    )
    requests = list(schedule.evaluate_tick(ctx).run_requests)
    (request,) = requests  # every config in one run (a batch: rag_assets/batch.py)
    assert request.partition_key is None and request.tags[FORCE_TAG] == "true"
    keys = plan.all_keys("evaluations")
    start, end = (request.tags[f"dagster/asset_partition_range_{e}"] for e in ("start", "end"))
    listed = json.loads(request.tags["rag/partitions"]) if "rag/partitions" in request.tags else None
    spanned = keys[keys.index(start) : keys.index(end) + 1]
    assert sorted(listed or spanned) == sorted(plan.config_keys)
    assert schedule.cron_schedule == "0 2 * * *"


def test_nightly_holdout_schedule_requests_the_finalists_the_holdout_holds(tmp_path, slice_data):
    """The finalists of the last leaderboard, re-asked on the holdout (forced), among the partitions the
    holdout's assets hold: a finalist whose holdout never ran has no partition to re-ask."""
    grid = {"retrieval": {"mode": ["vector", "bm25"], "top_k": [3, 5]}}
    plan, defs, _ = _setup(tmp_path, slice_data, decision={"holdout": 0.3}, **grid)
    schedule = defs.get_repository_def().get_schedule_def("snap__evaluate_holdout_nightly")
    finalists = plan.config_keys[:3]
    board = tmp_path / "data" / "leaderboards" / "snap.decision.json"
    board.parent.mkdir(parents=True)
    board.write_text(json.dumps({"finalists": finalists}))
    # the schedule's context as a context manager: a tick opens an instance of its own, which the context
    # closes (left open, Dagster's current definitions state points at it after it is gone)
    with (
        dg.instance_for_test() as instance,
        dg.build_schedule_context(
            instance=instance,
            scheduled_execution_time=datetime(2026, 11, 22, 2, tzinfo=UTC),
            repository_def=defs.get_repository_def(),
        ) as ctx,
    ):
        assert list(schedule.evaluate_tick(ctx).run_requests or []) == []  # none added yet
        # added out of the plan's order: a batch's range follows the order the instance holds
        instance.add_dynamic_partitions(
            plan.finalists_partitions, [f"{finalists[2]}~holdout", "other~holdout"]
        )
        instance.add_dynamic_partitions(plan.finalists_partitions, [f"{k}~holdout" for k in finalists[:2]])
        (request,) = schedule.evaluate_tick(ctx).run_requests
    # one run of the holdout's chain, from the answers (the retrievals and rerankings do not drift)
    assert schedule.job_name == "snap__holdout" and request.tags[FORCE_TAG] == "true"
    assert request.tags["rag/holdout_from"] == "answers" and request.partition_key is None
    assert sorted(json.loads(request.tags["rag/partitions"])) == sorted(f"{k}~holdout" for k in finalists)


def test_input_files_are_observed_by_content(tmp_path, slice_data):
    from rag_sweep.runner import unobserved

    _, defs, data = _setup(tmp_path, slice_data)
    sources = [a for a in defs.assets if isinstance(a, dg.SourceAsset) or a.is_observable]
    key = dg.AssetKey(["snap", "qa_file"])
    with dg.instance_for_test() as instance:

        def version() -> str:
            observe(sources, instance=instance, run_config=QUIET)
            record = instance.get_latest_data_version_record(key, is_source=True)
            return record.asset_observation.data_version

        assert unobserved(instance, sources) == sources  # never observed
        first = version()
        data["qa"].write_bytes(data["qa"].read_bytes())  # touched, same bytes
        assert unobserved(instance, sources) == []  # `rag-sweep run` starts no run to observe them
        assert version() == first
        pl.read_parquet(data["qa"]).head(10).write_parquet(data["qa"])
        assert [s.key for s in unobserved(instance, sources)] == [key]
        assert version() != first


def test_editing_the_corpus_after_its_snapshot_changes_nothing_downstream(tmp_path, slice_data):
    """Regression: steps re-hashed the current file and failed with 'corpus is not materialized yet'."""
    plan, defs, data = _setup(tmp_path, slice_data)
    chunkset = plan.keys("chunksets")[0]
    with dg.instance_for_test() as instance:
        for name in ("corpus", "qa_set"):
            assert _materialize(defs, instance, name).success
        snapshot = latest_fingerprint(instance, dg.AssetKey(["snap", "corpus"]), None)
        corpus = pl.read_parquet(data["corpus"])
        corpus.head(10).write_parquet(data["corpus"])  # the file changes; no new snapshot yet
        assert _materialize(defs, instance, "chunksets", chunkset).success
        first = latest_fingerprint(instance, dg.AssetKey(["snap", "chunksets"]), chunkset)
        chunks = pl.read_parquet(tmp_path / "data" / "chunksets" / f"{first}.parquet")
        assert chunks["doc_id"].n_unique() == corpus.height  # chunked from the snapshot, not the file
        # a new snapshot of the edited file gives new chunks under a new fingerprint
        assert _materialize(defs, instance, "corpus").success
        assert latest_fingerprint(instance, dg.AssetKey(["snap", "corpus"]), None) != snapshot
        assert _materialize(defs, instance, "chunksets", chunkset).success
        second = latest_fingerprint(instance, dg.AssetKey(["snap", "chunksets"]), chunkset)
        assert second != first
        # every partition's latest fingerprint in one query (what the CLI reads): the same answer
        assert latest_fingerprints(instance, dg.AssetKey(["snap", "chunksets"])) == {chunkset: second}
        assert (
            pl.read_parquet(tmp_path / "data" / "chunksets" / f"{second}.parquet")["doc_id"].n_unique() == 10
        )


@pytest.mark.slow
def test_editing_the_qa_set_after_its_snapshot_changes_nothing_downstream(tmp_path, slice_data):
    plan, defs, data = _setup(tmp_path, slice_data, retrieval={"mode": "bm25", "top_k": 3})
    (retrieval,) = plan.keys("retrievals")
    p = plan.partition("retrievals", retrieval)
    with dg.instance_for_test() as instance:
        for name in ("corpus", "qa_set"):
            assert _materialize(defs, instance, name).success
        for name in ("chunksets", "embeddings", "vector_index"):
            assert _materialize(defs, instance, name, plan.key_of(p.config, name)).success
        assert p.reads["qa_set"] is None
        pl.read_parquet(data["qa"]).head(5).write_parquet(data["qa"])
        assert _materialize(defs, instance, "retrievals", retrieval).success
        fp = latest_fingerprint(instance, dg.AssetKey(["snap", "retrievals"]), retrieval)
        assert pl.read_parquet(tmp_path / "data" / "retrievals" / f"{fp}.parquet").height == 20
        assert _materialize(defs, instance, "qa_set").success  # the edited file, snapshotted
        assert _materialize(defs, instance, "retrievals", retrieval).success
        fp2 = latest_fingerprint(instance, dg.AssetKey(["snap", "retrievals"]), retrieval)
        assert fp2 != fp and pl.read_parquet(tmp_path / "data" / "retrievals" / f"{fp2}.parquet").height == 5


def test_automation_starts_nothing_until_an_input_file_changes(tmp_path, slice_data):
    """Opening the UI on finished (or no) results requests nothing; a changed file re-snapshots its input."""
    _, defs, data = _setup(tmp_path, slice_data)
    assets = list(defs.assets)
    sources = [a for a in assets if isinstance(a, dg.SourceAsset) or a.is_observable]
    with dg.instance_for_test() as instance:
        # the input files' own observation is due at every quarter hour (rag_assets/inputs.py): only the
        # stages count, or an evaluation across a quarter hour would see it
        files = {key for a in sources for key in ([a.key] if isinstance(a, dg.SourceAsset) else a.keys)}

        def requested(cursor=None):
            result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
            stages = {r.key.path[-1] for r in result.results if r.true_subset.size and r.key not in files}
            return stages, result.cursor

        stages, cursor = requested()
        assert stages == set()  # nothing materialized: nothing starts by itself
        observe(sources, instance=instance, run_config=QUIET)
        for name in ("corpus", "qa_set"):
            assert _materialize(defs, instance, name).success
        # the UI opens on these results (a new automation cursor): nothing starts
        stages, cursor = requested()
        assert stages == set()
        observe(sources, instance=instance, run_config=QUIET)  # the files, observed again unchanged
        stages, cursor = requested(cursor)
        assert stages == set()
        pl.read_parquet(data["corpus"]).head(50).write_parquet(data["corpus"])
        observe(sources, instance=instance, run_config=QUIET)
        stages, cursor = requested(cursor)
        assert "corpus" in stages and "leaderboard" not in stages
