"""The Dagster definitions: the project's sweeps load side by side, every asset declares what it reads,
and partitions carry real lineage through their mappings."""

import json
import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import pytest

from rag_assets.orchestration.plans import load_plan
from rag_core.planning.plan import Plan
from rag_core.planning.spec import load_sweep
from rag_core.planning.stages import STAGES
from rag_sweep.definitions import build_definitions

ROOT = Path(__file__).resolve().parents[1]
EXAMPLE = "hotpotqa_example"


def _defs(tmp_path, *names: str):
    plans = [
        Plan.resolve(load_sweep(ROOT / "examples" / "sweeps" / f"{n}.yaml")) for n in names or ("example",)
    ]
    return build_definitions(plans, str(tmp_path))


def test_definitions_load(tmp_path):
    defs = _defs(tmp_path)
    dg.Definitions.validate_loadable(defs)
    keys = {a.key.to_user_string() for a in defs.resolve_all_asset_specs()}
    assert keys == {f"{EXAMPLE}/{s.name}" for s in STAGES} | {
        f"{EXAMPLE}/corpus_file",
        f"{EXAMPLE}/qa_file",
        f"{EXAMPLE}/champion_model",
        # the example holds questions out: the stages that read them have a holdout asset each
        *(f"{EXAMPLE}/holdout_{s}" for s in ("retrievals", "rerankings", "answers", "evaluations")),
    }
    assert {s.name for s in defs.sensors} == {
        "rag_automation_sensor",
        f"{EXAMPLE}__drift_alerts",
        f"{EXAMPLE}__holdout_driver",  # the example holds questions out: each leaderboard is confirmed
    }
    assert {s.name: s.default_status.value for s in defs.schedules} == {
        # a nightly spends LLM calls: off until turned on ($RAG_NIGHTLY_STATUS, or the UI)
        f"{EXAMPLE}__evaluate_nightly": "STOPPED",
        f"{EXAMPLE}__evaluate_holdout_nightly": "STOPPED",  # the finalists on the holdout
        "storage_cleanup_weekly": "STOPPED",  # it deletes: off until a person turns it on
    }


def test_every_asset_declares_every_artifact_it_reads(tmp_path):
    """The registry's reads are the assets' declared upstream; StageRun.read only serves declared inputs,
    and the end-to-end test records what each step really read (test_sweep_end_to_end)."""
    graph = _defs(tmp_path).resolve_asset_graph()
    for s in STAGES:
        parents = {k.path[-1] for k in graph.get(dg.AssetKey([EXAMPLE, s.name])).parent_keys}
        sources = {"corpus": {"corpus_file"}, "qa_set": {"qa_file"}}.get(s.name, set())
        # the confirmation reads the finalists' holdout evaluations
        reads = {("holdout_" + r if s.name == "confirmation" and r == "evaluations" else r) for r in s.reads}
        assert parents == reads | sources, s.name
        if "qa_set" in s.reads and s.partitioned:  # its holdout asset reads the holdout's stages before it
            held = {k.path[-1] for k in graph.get(dg.AssetKey([EXAMPLE, "holdout_" + s.name])).parent_keys}
            asks = {"retrievals", "rerankings", "answers", "evaluations"}
            assert held == {("holdout_" + r if r in asks else r) for r in s.reads}, s.name


def test_two_sweeps_load_side_by_side(tmp_path):
    defs = _defs(tmp_path, "example", "every_stage")
    dg.Definitions.validate_loadable(defs)
    prefixes = {a.key.path[0] for a in defs.resolve_all_asset_specs()}
    assert prefixes == {EXAMPLE, "hotpotqa_every_stage"}


def test_workspace_module_loads_the_defs_folder():
    env = {k: v for k, v in os.environ.items() if k != "RAG_SWEEP"}
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "from rag_sweep.definitions import defs; d = defs(); "
            "print(sorted({a.key.path[0] for a in d.resolve_all_asset_specs()}))",
        ],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert out.strip() == "['hotpotqa_example']"  # the demos stay in examples/


@pytest.mark.parametrize("command", [["check", "defs"], ["list", "defs", "--json"]])
def test_dg_cli_on_the_project(command):
    bindir = Path(sys.executable).parent
    env = {k: v for k, v in os.environ.items() if k != "RAG_SWEEP"} | {"VIRTUAL_ENV": str(bindir.parent)}
    out = subprocess.run([str(bindir / "dg"), *command], cwd=ROOT, env=env, capture_output=True, text=True)
    assert out.returncode == 0, out.stdout[-2000:] + out.stderr[-2000:]
    if command[0] == "list":
        listed = json.loads(out.stdout)
        keys = {a["asset_key"] for a in listed["assets"]}
        assert f"{EXAMPLE}/leaderboard" in keys
        checks = {
            c["key"] if isinstance(c, dict) and "key" in c else str(c) for c in listed.get("asset_checks", [])
        }
        assert any("row_count_matches_chunkset" in c for c in checks), checks


def _upstream(defs, asset: str, upstream: str, key: str) -> set[str]:
    graph = defs.resolve_asset_graph()
    node = graph.get(dg.AssetKey([EXAMPLE, asset]))
    up = graph.get(dg.AssetKey([EXAMPLE, upstream]))
    mapping = node.assets_def.get_partition_mapping(dg.AssetKey([EXAMPLE, upstream]))
    result = mapping.get_upstream_mapped_partitions_result_for_partitions(
        node.partitions_def.subset_with_partition_keys([key]), node.partitions_def, up.partitions_def
    )
    return set(result.partitions_subset.get_partition_keys())


def test_each_partition_maps_to_its_real_upstream_partition(tmp_path):
    defs = _defs(tmp_path)
    index = "recursive-384-48__all-minilm-l6-v2__lancedb"
    retrieval = f"{index}__hybrid-rrf-a0.5-k5"
    rerank = f"{retrieval}__none-k5"
    cfg = f"{rerank}__extractive"
    assert _upstream(defs, "answers", "rerankings", cfg) == {rerank}
    assert _upstream(defs, "evaluations", "answers", cfg) == {cfg}
    assert _upstream(defs, "evaluations", "embeddings", cfg) == {"recursive-384-48__all-minilm-l6-v2"}
    assert _upstream(defs, "rerankings", "retrievals", rerank) == {retrieval}
    assert _upstream(defs, "retrievals", "vector_index", retrieval) == {index}
    assert _upstream(defs, "retrievals", "chunksets", retrieval) == {"recursive-384-48"}
    assert _upstream(defs, "embeddings", "chunksets", "recursive-384-48__all-minilm-l6-v2") == {
        "recursive-384-48"
    }


def test_partition_counts_snapshot(tmp_path):
    graph = _defs(tmp_path).resolve_asset_graph()
    counts = {
        s.name: len(graph.get(dg.AssetKey([EXAMPLE, s.name])).partitions_def.get_partition_keys())
        for s in STAGES
        if s.partitioned
    }
    assert counts == {
        "chunksets": 2,
        "embeddings": 2,
        "vector_index": 2,
        # the question stages on the selection split; the holdout's are assets of their own (below)
        "retrievals": 12,
        "rerankings": 12,
        "answers": 12,
        "evaluations": 12,
    }
    # ... partitioned by the finalists, which a leaderboard names: none before one
    for s in ("retrievals", "rerankings", "answers", "evaluations"):
        held = graph.get(dg.AssetKey([EXAMPLE, "holdout_" + s])).partitions_def
        assert isinstance(held, dg.DynamicPartitionsDefinition)
        assert held.name == f"{EXAMPLE}__holdout_finalists"
        with dg.instance_for_test() as instance:
            assert held.get_partition_keys(dynamic_partitions_store=instance) == []


def test_the_deployment_store_is_in_every_index_key():
    sweep = load_sweep(ROOT / "examples" / "sweeps" / "example.yaml")
    for store in ("lancedb", "qdrant"):
        plan = Plan.resolve(sweep, store)
        assert all(k.endswith(f"__{store}") for k in plan.keys("vector_index"))
        assert all(c.index.store == store for c in plan.configs)


def test_the_leaderboard_depends_on_the_selection_and_the_confirmation_on_the_holdout(tmp_path):
    """The leaderboard reads every selection evaluation, the confirmation every holdout evaluation (the
    finalists': the only partitions the holdout's assets have); each holdout stage reads its own config's
    holdout partition, and the selection's partitions it needs among all of them (no built-in mapping maps
    a dynamic partition onto static ones)."""
    defs = _defs(tmp_path)
    graph = defs.resolve_asset_graph()
    evaluations = graph.get(dg.AssetKey([EXAMPLE, "evaluations"]))
    held = dg.AssetKey([EXAMPLE, "holdout_evaluations"])
    selection = evaluations.partitions_def.get_partition_keys()
    assert len(selection) == 12 and not any(k.endswith("~holdout") for k in selection)

    def mapping(asset: str, upstream: dg.AssetKey):
        return graph.get(dg.AssetKey([EXAMPLE, asset])).assets_def.get_partition_mapping(upstream)

    assert isinstance(mapping("leaderboard", evaluations.key), dg.AllPartitionMapping)
    assert isinstance(mapping("confirmation", held), dg.AllPartitionMapping)
    assert evaluations.key not in graph.get(dg.AssetKey([EXAMPLE, "confirmation"])).parent_keys
    for asset, upstream in (
        ("holdout_evaluations", "holdout_answers"),
        ("holdout_answers", "holdout_rerankings"),
    ):
        assert isinstance(mapping(asset, dg.AssetKey([EXAMPLE, upstream])), dg.IdentityPartitionMapping)
    assert isinstance(
        mapping("holdout_retrievals", dg.AssetKey([EXAMPLE, "vector_index"])), dg.AllPartitionMapping
    )
    # what a holdout partition reads, in the plan: its own config's holdout partition and selection index
    plan = load_plan(ROOT / "examples" / "sweeps" / "example.yaml", data_dir=tmp_path)
    cfg = selection[0]
    assert plan.partition("evaluations", cfg + "~holdout").reads["answers"] == cfg + "~holdout"
    assert plan.partition("retrievals", cfg + "~holdout").reads["vector_index"] == plan.key_of(
        plan.config(cfg), "vector_index"
    )


def _retrieval(config_key: str) -> str:
    return config_key.rsplit("__", 2)[0]


def test_an_adaptive_sweep_has_a_search_job_the_ui_launches_and_a_sensor_that_drives_it(tmp_path):
    """The job's run config is the budget; before it runs, the sensor has nothing to do."""
    from rag_core.planning.spec import sweep_from_dict

    raw = yaml_sweep(search={"strategy": "halving", "start_questions": 5, "budget": {"max_configs": 2}})
    plan = Plan.resolve(sweep_from_dict(raw, tmp_path / "s.yaml"))
    defs = build_definitions([plan], str(tmp_path))
    dg.Definitions.validate_loadable(defs)
    job = defs.get_job_def("halving__search")
    fields = job.run_config_schema.config_type.fields["ops"].config_type.fields
    budget = fields["halving__start_search"].config_type.fields["config"].config_type.fields
    assert {"max_configs", "max_llm_calls", "max_cost_usd", "restart"} <= set(budget)
    sensor = defs.get_sensor_def("halving__search_driver")
    with dg.instance_for_test() as instance:
        result = sensor.evaluate_tick(dg.build_sensor_context(instance=instance))
    assert not result.run_requests and "no search running" in result.skip_message
    grid = build_definitions(
        [Plan.resolve(sweep_from_dict(yaml_sweep(), tmp_path / "g.yaml"))], str(tmp_path)
    )
    assert not [j for j in grid.jobs if j.name.endswith("__search")]  # a grid has nothing to drive


def yaml_sweep(**sections) -> dict:
    return {
        "name": "halving",
        "data": {"corpus": "c.parquet", "qa": "q.parquet"},
        "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        "retrieval": {"mode": "vector", "top_k": [1, 3]},
        **sections,
    }


def test_two_sweeps_sharing_a_prefix_are_an_error_naming_both(tmp_path):
    """`a-b` and `a_b` both map to the prefix `a_b`: in one deployment the code location failed with
    `Duplicate asset key`, and on one data dir each run showed the other's board."""
    import yaml

    from rag_core.planning.spec import SpecError
    from rag_sweep.runner import load_plan, run_sweep

    example = ROOT / "examples" / "sweeps" / "example.yaml"
    spec = yaml.safe_load(example.read_text())
    spec["data"] = {k: str((example.parent / v).resolve()) for k, v in spec["data"].items()}
    paths = []
    for name in ("a-b", "a_b"):
        (path := tmp_path / f"{name}.yaml").write_text(yaml.safe_dump({**spec, "name": name}))
        paths.append(path)
    with pytest.raises(
        SpecError,
        match=r"sweep 'a_b' \(.*a_b.yaml\) and sweep 'a-b' \(.*a-b.yaml\) share the Dagster prefix 'a_b'",
    ):
        build_definitions([load_plan(p) for p in paths], str(tmp_path))
    build_definitions([load_plan(paths[0]), load_plan(example)], str(tmp_path))  # distinct prefixes load

    data = tmp_path / "data"
    (data / "sweep_prefixes").mkdir(parents=True)
    (data / "sweep_prefixes" / "a_b.txt").write_text("a-b")  # as a run of `a-b` leaves it
    with pytest.raises(
        SpecError, match=r"sweep 'a_b' shares the Dagster prefix 'a_b' with sweep 'a-b', already run"
    ):
        run_sweep(str(paths[1]), str(data), progress=False)
    assert not (data / "dagster_home").exists()  # refused before any work


def test_the_defs_folder_sweeps_are_read_without_building_them(tmp_path):
    from rag_sweep.definitions import folder_sweeps

    found = dict(folder_sweeps(ROOT / "rag_sweep" / "defs"))
    assert set(found) == {"hotpotqa-example"}
    (tmp_path / "broken").mkdir()
    (tmp_path / "broken" / "defs.yaml").write_text(
        "type: rag_sweep.lib.RagSweep\nattributes: {sweep: missing.yaml}\n"
    )
    assert folder_sweeps(tmp_path) == []  # left to Dagster's loading, which names what is wrong


def test_a_search_snapshots_both_inputs_in_one_run_and_chains_a_rungs_steps(tmp_path):
    """The search driver's requests: the stale input snapshots in one run (only those); a rung's steps of
    every partitioned stage in one run of the search's chain, each stage's keys named once and in order."""
    from types import SimpleNamespace

    from rag_assets.orchestration.search import STEP_TAG
    from rag_assets.search_chain import CHAIN_TAG
    from rag_core.planning.spec import sweep_from_dict
    from sensors.search import batched_requests, step_jobs

    raw = yaml_sweep(search={"strategy": "halving", "start_questions": 5})
    plan = Plan.resolve(sweep_from_dict(raw, tmp_path / "s.yaml"))
    jobs = step_jobs(plan)
    state = SimpleNamespace(id="s1", force=False)
    both = batched_requests(plan, state, jobs, [(("corpus", None, None), 0), (("qa_set", None, None), 0)])
    assert [r.job_name for r in both] == ["halving__search_snapshots"]
    assert both[0].asset_selection == [dg.AssetKey(["halving", "corpus"]), dg.AssetKey(["halving", "qa_set"])]
    (one,) = batched_requests(plan, state, jobs, [(("qa_set", None, None), 1)])
    assert one.asset_selection == [dg.AssetKey(["halving", "qa_set"])] and one.run_key.endswith(":1")
    configs = [plan.config(k) for k in plan.config_keys[:2]]
    steps = [
        (s, plan.key_of(c, s), 5)
        for c in configs
        for s in ("retrievals", "rerankings", "answers", "evaluations")
    ]
    rung = batched_requests(plan, state, jobs, [(step, 0) for step in steps])
    assert [(r.job_name, r.partition_key, r.asset_selection) for r in rung] == [
        ("halving__search_chain", None, None)
    ]
    named = json.loads(rung[0].tags[CHAIN_TAG])
    assert list(named) == ["retrievals", "rerankings", "answers", "evaluations"]
    for s, keys in named.items():
        assert keys == list(dict.fromkeys(plan.key_of(c, s) for c in configs))
    assert [tuple(t) for t in json.loads(rung[0].tags[STEP_TAG])] == steps  # the search sees each step's run
    assert rung[0].tags["rag/questions"] == "5"
    # another rung is another run
    later = batched_requests(
        plan,
        state,
        jobs,
        [((s, k, 5), 0) for s, k, _ in steps[:1]] + [((s, k, 10), 0) for s, k, _ in steps[:1]],
    )
    assert len(later) == 2 and {r.tags["rag/questions"] for r in later} == {"5", "10"}


def test_the_search_driver_replays_a_waiting_search_only_when_one_of_its_runs_changed(tmp_path, monkeypatch):
    """A replay reads every rung's completeness; while the search's runs are in flight and none changed
    status, a tick skips it (the cursor holds what the last replay saw), and replays again when a run ends
    or RECHECK_S passed."""
    from rag_assets.orchestration.search import SEARCH_TAG, SearchState
    from rag_core.planning.spec import sweep_from_dict
    from sensors import RECHECK_S, search

    plan = Plan.resolve(sweep_from_dict(yaml_sweep(search={"strategy": "halving"}), tmp_path / "s.yaml"))
    state = SearchState(SearchState.file(tmp_path, plan.sweep.name), "s1", 0.0)
    state.save()
    replays = []
    monkeypatch.setattr(
        search, "next_requests", lambda *a: replays.append(1) or ([], 1, "", [])
    )  # a search waiting for its run
    driver = search.search_driver(plan, {}, str(tmp_path))
    with dg.instance_for_test() as instance:
        job = dg.GraphDefinition("step", node_defs=[dg.OpDefinition(lambda _: None, name="noop")]).to_job()
        run = instance.create_run_for_job(job, tags={SEARCH_TAG: "s1"}, status=dg.DagsterRunStatus.STARTED)

        def tick(cursor):
            context = dg.build_sensor_context(instance=instance, cursor=cursor)
            return driver.evaluate_tick(context), context.cursor

        first, cursor = tick(None)
        assert len(replays) == 1 and "waiting for 1 run(s)" in first.skip_message
        again, kept = tick(cursor)
        assert len(replays) == 1 and "waiting for 1 run(s)" in again.skip_message and kept == cursor
        stale = json.dumps({**json.loads(cursor), "at": json.loads(cursor)["at"] - RECHECK_S})
        tick(stale)
        assert len(replays) == 2  # replayed after RECHECK_S, whatever changed
        instance.report_run_failed(run)
        tick(cursor)
        assert len(replays) == 3  # a run that ended is a replay
