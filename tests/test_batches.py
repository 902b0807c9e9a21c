"""A stage's partitions run in one Dagster run (a batch): each partition is still its own materialization,
fingerprint and metadata; one that fails is that partition's failure, and a rerun computes only it."""

from __future__ import annotations

import dagster as dg
import pytest

from rag_core.planning.batches import batch_reads, batches
from resources.artifacts import ArtifactRef, latest_fingerprints
from tests.conftest import write_sweep


def test_batches_group_a_stage_in_its_partitions_order_and_stages_in_dependency_order():
    steps = [
        ("retrievals", "r2"),
        ("chunksets", "c1"),
        ("retrievals", "r1"),
        ("leaderboard", None),
        ("chunksets", "c2"),
        ("chunksets", "c1"),  # listed twice: once in its batch
    ]
    order = {"chunksets": ["c2", "c1"], "retrievals": ["r1", "r2"]}.get
    assert batches(steps, order, size=100) == [
        ("chunksets", ("c2", "c1")),
        ("retrievals", ("r1", "r2")),
        ("leaderboard", ()),
    ]
    assert batches(steps, order, size=1)[:2] == [("chunksets", ("c2",)), ("chunksets", ("c1",))]
    keys = [f"k{i}" for i in range(7)]
    split = batches([("answers", k) for k in keys], lambda _: keys, size=100, parts=3)
    assert [len(b[1]) for b in split] == [3, 3, 1]
    with pytest.raises(ValueError, match="at least one"):
        batches(steps, order, size=0)


def test_a_batch_waits_for_the_batches_holding_what_it_reads():
    units = [("chunksets", ("c1",)), ("chunksets", ("c2",)), ("retrievals", ("r1", "r2"))]
    reads = {("retrievals", "r1"): [("chunksets", "c1")], ("retrievals", "r2"): [("chunksets", "c2")]}
    of = batch_reads(units, lambda step: reads.get(step, []))
    assert of(("retrievals", ("r1", "r2"))) == [("chunksets", ("c1",)), ("chunksets", ("c2",))]
    assert of(("chunksets", ("c1",))) == []


@pytest.fixture
def three_chunkings(slice_data, tmp_path):
    return write_sweep(
        tmp_path / "three.yaml",
        slice_data,
        name="three",
        chunking={"method": "recursive", "chunk_size": [200, 300, 400], "chunk_overlap": 20},
        retrieval={"mode": "bm25", "top_k": 3},
    )


def _runs_of(instance, key: dg.AssetKey) -> set[str]:
    """The Dagster runs that materialized partitions of an asset."""
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=1000).records
    return {r.run_id for r in records}


def test_a_stage_is_one_run_and_each_partition_its_own_materialization(three_chunkings, tmp_path):
    from rag_sweep.runner import run_sweep

    run = run_sweep(str(three_chunkings), str(tmp_path / "d"), progress=False)
    plan, instance = run.plan, run.instance
    assert len(plan.keys("chunksets")) == 3
    for stage in ("chunksets", "evaluations"):
        assert len(_runs_of(instance, dg.AssetKey(plan.asset_path(stage)))) == 1, stage
    # no run per step: the whole sweep (3 configs, 7 partitioned stages) in a handful of runs
    assert instance.get_runs_count() <= 10
    for stage in ("chunksets", "evaluations"):
        key = dg.AssetKey(plan.asset_path(stage))
        latest = latest_fingerprints(instance, key)
        assert set(latest) == set(plan.keys(stage))
        for partition, fp in latest.items():  # the data version: the fingerprint of its own artifact
            assert ArtifactRef(run.data, stage, fp, partition).intact()
        records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key), limit=100).records
        metadata = {r.partition_key: r.asset_materialization.metadata for r in records}
        assert {k: m["fingerprint"].value for k, m in metadata.items()} == latest
    # provenance as Dagster records it for an Output: each input's data version and materialization
    evaluations, answers = (dg.AssetKey(plan.asset_path(s)) for s in ("evaluations", "answers"))
    latest_answers = {
        r.partition_key: r
        for r in instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=answers), limit=100).records
    }
    for r in instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=evaluations), limit=100).records:
        tags = r.asset_materialization.tags
        upstream = latest_answers[plan.partition("evaluations", r.partition_key).reads["answers"]]
        assert tags[f"dagster/input_event_pointer/{answers.to_user_string()}"] == str(upstream.storage_id)
        assert (
            tags[f"dagster/input_data_version/{answers.to_user_string()}"]
            == (upstream.asset_materialization.tags["dagster/data_version"])
        )
        assert tags["dagster/code_version"] and tags["dagster/data_version_is_user_provided"] == "true"
    assert run.board.height == 3


def test_a_batch_is_recorded_back_to_back_when_it_ends(three_chunkings, tmp_path):
    """A stage's partitions are recorded one after the other when the batch ends, through Dagster's public
    events (no other event of the run between them), so a UI backfill's daemon sees the whole batch at its
    next look and requests the next stage as one run."""
    from rag_sweep.runner import run_sweep

    run = run_sweep(str(three_chunkings), str(tmp_path / "d"), progress=False)
    instance, key = run.instance, dg.AssetKey(run.plan.asset_path("chunksets"))
    (batch,) = _runs_of(instance, key)
    events = [e for e in instance.all_logs(batch) if e.is_dagster_event]
    recorded = [
        i
        for i, e in enumerate(events)
        if e.dagster_event.event_type == dg.DagsterEventType.ASSET_MATERIALIZATION
        and e.dagster_event.asset_key == key
    ]
    assert len(recorded) == 3
    assert recorded == list(range(recorded[0], recorded[0] + 3)), [e.dagster_event.event_type for e in events]
    assert {events[i].dagster_event.partition for i in recorded} == set(run.plan.keys("chunksets"))


def test_a_failed_partition_fails_alone_and_a_rerun_computes_only_it(three_chunkings, tmp_path, monkeypatch):
    from rag_assets.chunksets import Chunksets
    from rag_sweep.runner import StepFailed, run_sweep

    plan_keys: list[str] = []
    original = Chunksets.compute

    def fails_for_300(self, run):
        plan_keys.append(run.partition.key)
        if "300" in run.partition.key:
            raise RuntimeError("disk full")
        return original(self, run)

    monkeypatch.setattr(Chunksets, "compute", fails_for_300)
    data = tmp_path / "d"
    with pytest.raises(StepFailed, match=r"chunksets\[recursive-300-20\]: RuntimeError: disk full"):
        run_sweep(str(three_chunkings), str(data), progress=False)
    assert len(plan_keys) == 3  # the other two were computed after the failure too
    from rag_sweep.runner import local_instance

    instance = local_instance(data)
    from rag_sweep.runner import load_plan

    chunks = dg.AssetKey(load_plan(str(three_chunkings)).asset_path("chunksets"))
    assert sorted(instance.get_materialized_partitions(chunks)) == ["recursive-200-20", "recursive-400-20"]

    computed, done = _rerun_counting_chunksets(three_chunkings, data, monkeypatch, original)
    assert computed == ["recursive-300-20"]
    assert done.board.height == 3


def _rerun_counting_chunksets(spec, data, monkeypatch, original):
    """The sweep run again on `data` with the chunker restored: (the chunksets it computed, the run)."""
    from rag_assets.chunksets import Chunksets
    from rag_sweep.runner import run_sweep

    computed: list[str] = []

    def counted(self, run):
        computed.append(run.partition.key)
        return original(self, run)

    monkeypatch.setattr(Chunksets, "compute", counted)
    return computed, run_sweep(str(spec), str(data), progress=False)


def test_an_interrupted_batch_records_what_it_finished_and_a_rerun_computes_the_rest(
    three_chunkings, tmp_path, monkeypatch
):
    """A batch records its partitions when it ends (a UI backfill's next stage is then one run); Ctrl-C in
    the middle of one records those it finished, so the rerun computes only the others."""
    from rag_assets.chunksets import Chunksets
    from rag_sweep.runner import load_plan, local_instance, run_sweep

    original = Chunksets.compute
    seen: list[str] = []

    def interrupted_at_the_second(self, run):
        seen.append(run.partition.key)
        if len(seen) == 2:
            raise KeyboardInterrupt
        return original(self, run)

    monkeypatch.setattr(Chunksets, "compute", interrupted_at_the_second)
    data = tmp_path / "d"
    with pytest.raises(BaseException) as stopped:  # however Dagster and the runner end an interrupted run
        run_sweep(str(three_chunkings), str(data), progress=False)
    assert not isinstance(stopped.value, AssertionError)
    chunks = dg.AssetKey(load_plan(str(three_chunkings)).asset_path("chunksets"))
    assert sorted(local_instance(data).get_materialized_partitions(chunks)) == [seen[0]]

    computed, done = _rerun_counting_chunksets(three_chunkings, data, monkeypatch, original)
    assert sorted(computed) == sorted(
        k for k in ("recursive-200-20", "recursive-300-20", "recursive-400-20") if k != seen[0]
    )
    assert done.board.height == 3
