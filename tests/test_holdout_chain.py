"""The holdout's chain (`<sweep>__holdout`, rag_assets/holdout_chain.py): every holdout stage of the finalists
in one run records each partition as its holdout asset's materialization, with the fingerprint the
stage's own asset records; a partition that fails is named, and the others are recorded. `rag-sweep run`
runs its holdout as the chain."""

from __future__ import annotations

from types import SimpleNamespace

import dagster as dg
import pytest

from rag_assets.holdout_chain import chain_tags, first_stage
from rag_assets.stage_asset import FORCE_TAG, holdout_asset_key
from rag_core.decision.holdout import holdout_key
from tests.conftest import write_sweep


@pytest.fixture(scope="module")
def swept(slice_data, tmp_path_factory):
    """A two-config BM25 sweep with a holdout, run by `rag-sweep run`: its finalists' holdout in one run of
    the chain."""
    from rag_sweep.runner import run_sweep

    root = tmp_path_factory.mktemp("chain")
    spec = write_sweep(
        root / "chain.yaml",
        slice_data,
        name="chain",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "bm25", "top_k": [2, 3]},
        decision={"holdout": 0.3},
    )
    run = run_sweep(str(spec), str(root / "data"), progress=False)
    chains = run.instance.get_runs(filters=dg.RunsFilter(job_name="chain__holdout"))
    assert len(chains) == 1 and chains[0].status == dg.DagsterRunStatus.SUCCESS
    return run


def test_the_chain_starts_at_the_first_stage_due_however_the_stages_are_given():
    """A rerun whose retrievals are complete starts at the first stage still due; the drivers pass the
    stages due as a generator, which must be read once, not once per stage."""
    plan = SimpleNamespace(
        holdout_partitions=dict.fromkeys(["retrievals", "rerankings", "answers", "evaluations"])
    )
    due = [("answers", "k1"), ("evaluations", "k1"), ("evaluations", "k2")]
    assert first_stage(plan, (s for s, _ in due)) == "answers"
    assert first_stage(plan, ["evaluations", "rerankings"]) == "rerankings"
    assert first_stage(plan, iter(["retrievals"])) == "retrievals"


def _latest(instance, key: dg.AssetKey) -> dict[str, dg.EventLogRecord]:
    out = {}
    for partition in instance.get_materialized_partitions(key):
        (record,) = instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=key, asset_partitions=[partition]), limit=1
        ).records
        out[partition] = record
    return out


def _chain(swept, tags: dict):
    from rag_sweep.sweep_defs import sweep_definitions

    defs = dg.Definitions.merge(
        sweep_definitions(swept.plan, None, str(swept.data)),
        dg.Definitions(resources=swept.defs.resources),
    )
    job = defs.resolve_job_def(f"{swept.plan.prefix}__holdout")
    return job.execute_in_process(instance=swept.instance, tags=tags, raise_on_error=False)


def _by_assets(swept, keys: list[str]) -> None:
    """The holdout's stages materialized by their own assets, a run each (a UI backfill's way), forced."""
    from rag_assets.batch import range_tags

    plan = swept.plan
    for s in plan.holdout_partitions:
        one = len(keys) == 1
        result = dg.materialize(
            list(swept.defs.assets),
            selection=[holdout_asset_key(plan, s)],
            partition_key=keys[0] if one else None,
            instance=swept.instance,
            resources=swept.defs.resources,
            tags={FORCE_TAG: "true", **({} if one else range_tags(plan, s, keys, swept.instance))},
        )
        assert result.success


def test_one_run_records_every_holdout_stage_as_the_stages_own_assets_do(swept):
    plan, instance = swept.plan, swept.instance
    stages = list(plan.holdout_partitions)
    # `rag-sweep run` ran the chain; each holdout asset materialized by itself again
    keys = sorted(_latest(instance, holdout_asset_key(plan, "evaluations")))
    assert keys and all(k.endswith("~holdout") for k in keys)
    _by_assets(swept, keys)
    before = {s: _latest(instance, holdout_asset_key(plan, s)) for s in stages}
    jobs = {instance.get_run_by_id(r.run_id).job_name for s in stages for r in before[s].values()}
    assert "chain__holdout" not in jobs  # recorded by the assets' own runs

    result = _chain(swept, {FORCE_TAG: "true", **chain_tags(keys)})  # forced: every stage computed again
    assert result.success
    for s in stages:
        after = _latest(instance, holdout_asset_key(plan, s))
        assert sorted(after) == keys, s
        for k in keys:
            record = after[k]
            assert record.run_id == result.run_id, (s, k)  # recorded by the chain's run
            tags = record.asset_materialization.tags
            was = before[s][k].asset_materialization.tags
            # the same artifact as the stage's own run made: its fingerprint is the data version
            assert tags["dagster/data_version"] == was["dagster/data_version"], (s, k)
            assert tags["dagster/code_version"] == was["dagster/code_version"]
            assert record.asset_materialization.metadata["fingerprint"].value == tags["dagster/data_version"]
            # each input's data version, as Dagster records it for an asset's output
            inputs = {t for t in tags if t.startswith("dagster/input_data_version/")}
            assert inputs == {t for t in was if t.startswith("dagster/input_data_version/")}, (s, k)


def test_a_chain_from_a_later_stage_leaves_the_stages_before_it(swept):
    plan, instance = swept.plan, swept.instance
    keys = sorted(_latest(instance, holdout_asset_key(plan, "evaluations")))
    retrievals = _latest(instance, holdout_asset_key(plan, "retrievals"))
    result = _chain(swept, {FORCE_TAG: "true", **chain_tags(keys, "answers")})
    assert result.success
    assert _latest(instance, holdout_asset_key(plan, "retrievals")) == retrievals  # not run
    assert {r.run_id for r in _latest(instance, holdout_asset_key(plan, "answers")).values()} == {
        result.run_id
    }
    assert {r.run_id for r in _latest(instance, holdout_asset_key(plan, "evaluations")).values()} == {
        result.run_id
    }


def test_a_failed_partition_is_named_and_the_others_are_recorded(swept):
    plan, instance = swept.plan, swept.instance
    good = sorted(_latest(instance, holdout_asset_key(plan, "evaluations")))[0]
    missing = holdout_key("no-such-config")
    result = _chain(swept, {FORCE_TAG: "true", **chain_tags([good, missing])})
    assert not result.success
    (failure,) = [e for e in result.all_events if e.event_type_value == "STEP_FAILURE"]
    assert f"retrievals[{missing}]" in failure.step_failure_data.error.to_string()
    retrievals = _latest(instance, holdout_asset_key(plan, "retrievals"))
    assert retrievals[good].run_id == result.run_id and missing not in retrievals
    # the later stages did not run: a rerun of the chain computes them
    assert _latest(instance, holdout_asset_key(plan, "answers"))[good].run_id != result.run_id
