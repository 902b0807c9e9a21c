"""A grid sweep in one run (`<sweep>__sweep`, rag_assets/sweep_chain.py): every stage from the input
snapshots to the leaderboard records each partition as its asset's materialization, with the fingerprint
and provenance the stage's own asset records; the stages' eager conditions do not request again what a
chain's run recorded, and still follow a stage's own run."""

from __future__ import annotations

import dagster as dg
import pytest

from rag_assets.stage_asset import FORCE_TAG, asset_key
from rag_assets.sweep_chain import sweep_chain_name, sweep_stages
from rag_core.planning.stages import stage
from tests.conftest import write_sweep


@pytest.fixture(scope="module")
def swept(slice_data, tmp_path_factory):
    """A two-config BM25 sweep with a holdout, run by `rag-sweep run` (each stage by its own asset)."""
    from rag_sweep.runner import run_sweep

    root = tmp_path_factory.mktemp("sweep_chain")
    spec = write_sweep(
        root / "whole.yaml",
        slice_data,
        name="whole",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [2, 3]},
        decision={"holdout": 0.3},
    )
    return run_sweep(str(spec), str(root / "data"), progress=False)


def _defs(swept) -> dg.Definitions:
    from rag_sweep.sweep_defs import sweep_definitions

    return dg.Definitions.merge(
        sweep_definitions(swept.plan, None, str(swept.data)),
        dg.Definitions(resources=swept.defs.resources),
    )


def _latest(instance, key: dg.AssetKey, partitioned: bool) -> dict:
    out = {}
    for partition in instance.get_materialized_partitions(key) if partitioned else [None]:
        (record,) = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition] if partition else None), limit=1
        ).records
        out[partition] = record
    return out


def test_one_run_records_every_stage_as_the_stages_own_assets_do(swept):
    plan, instance = swept.plan, swept.instance
    stages = sweep_stages(plan)
    assert stages[0] == "corpus" and stages[-1] == "leaderboard" and "confirmation" not in stages
    before = {s: _latest(instance, asset_key(plan, s), s in plan.partitions) for s in stages}
    assert all(before.values())

    job = _defs(swept).resolve_job_def(sweep_chain_name(plan))
    result = job.execute_in_process(instance=instance, tags={FORCE_TAG: "true"})  # forced: all computed again
    assert result.success
    for s in stages:
        after = _latest(instance, asset_key(plan, s), s in plan.partitions)
        # every partition of the plan, each its own materialization by the chain's one run
        assert sorted(after, key=str) == sorted(plan.keys(s) if s in plan.partitions else [None], key=str), s
        for k, record in after.items():
            assert record.run_id == result.run_id, (s, k)
            tags = record.asset_materialization.tags
            was = before[s][k].asset_materialization.tags
            # the same artifact as the stage's own asset made: its fingerprint is the data version
            assert tags["dagster/data_version"] == was["dagster/data_version"], (s, k)
            assert record.asset_materialization.metadata["fingerprint"].value == tags["dagster/data_version"]
            assert tags["dagster/code_version"] == was["dagster/code_version"], (s, k)
            inputs = {t: v for t, v in tags.items() if t.startswith("dagster/input_data_version/")}
            had = {t: v for t, v in was.items() if t.startswith("dagster/input_data_version/")}
            if s in plan.partitions:  # each input's data version and materialization, as a batch records
                # them (a one-partition asset run records Dagster's hash of the input partitions' versions)
                assert set(inputs) == set(had), (s, k)
                for tag, version in inputs.items():
                    upstream = dg.AssetKey(tag.removeprefix("dagster/input_data_version/").split("/"))
                    read = plan.partition(s, k).reads.get(upstream.path[-1])
                    up = _latest(instance, upstream, read is not None)[read].asset_materialization
                    assert version == up.tags["dagster/data_version"], (s, k, tag)
            else:  # an unpartitioned stage's: each input artifact's (Dagster's output also names the
                # observed files and a partitioned input's combined version)
                artifacts = {r for r in stage(s).reads if r not in plan.partitions}
                assert {t.rsplit("/", 1)[-1] for t in inputs} == artifacts, (s, k)
                assert inputs.items() <= had.items(), (s, k)
    # the leaderboard's checks, evaluated on the leaderboard's asset
    checks = [e for e in result.all_events if e.event_type_value == "ASSET_CHECK_EVALUATION"]
    assert any(e.event_specific_data.asset_key == asset_key(plan, "leaderboard") for e in checks)


def test_the_eager_conditions_ignore_a_chains_records_and_follow_a_stages_own_run(swept):
    plan, instance = swept.plan, swept.instance
    defs = _defs(swept)
    first = dg.evaluate_automation_conditions(defs=defs, instance=instance)  # the initial evaluation
    job = defs.resolve_job_def(sweep_chain_name(plan))
    assert job.execute_in_process(instance=instance, tags={FORCE_TAG: "true"}).success
    after_chain = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=first.cursor)
    # the chain computed every later stage itself: nothing to request for what it recorded (the input files'
    # observation is due at every quarter hour whatever ran, rag_assets/inputs.py: only the stages count)
    asked = {name: after_chain.get_num_requested(asset_key(plan, name)) for name in sweep_stages(plan)}
    assert not any(asked.values()), asked
    # the chunksets by their own asset's run: the embeddings follow them
    chunk = plan.keys("chunksets")[0]
    assert dg.materialize(
        list(swept.defs.assets),
        selection=[asset_key(plan, "chunksets")],
        partition_key=chunk,
        instance=instance,
        resources=swept.defs.resources,
        tags={FORCE_TAG: "true"},
    ).success
    after_own = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=after_chain.cursor)
    assert after_own.get_requested_partitions(asset_key(plan, "embeddings")), "the embeddings did not follow"


def test_a_grid_sweep_has_the_chain_and_an_adaptive_one_its_search(tmp_path):
    from rag_core.planning.plan import Plan
    from rag_core.planning.spec import sweep_from_dict
    from rag_sweep.sweep_defs import sweep_definitions

    def jobs(**sections) -> dict:
        raw = {
            "name": "one",
            "data": {"corpus": "c.parquet", "qa": "q.parquet"},
            "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            "retrieval": {"mode": "bm25", "top_k": [1, 3]},
            **sections,
        }
        plan = Plan.resolve(sweep_from_dict(raw, tmp_path / "s.yaml"))
        return {j.name: j for j in sweep_definitions(plan, None, str(tmp_path)).jobs}

    grid = jobs()
    assert grid["one__sweep"].tags == {"sweep": "one", "rag/chain_run": "true"}
    adaptive = jobs(search={"strategy": "halving", "start_questions": 5})
    assert "one__sweep" not in adaptive and "one__search" in adaptive
