"""The gate on the example's slice: a registered champion, then candidates gated against it through the CLI
(exit codes, the JUnit file parsed, the MLflow run); and the champion's own gate check in the sweep's
Dagster assets, which keeps the champion when a new recommendation is worse than it."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import mlflow
import pytest

from tests.conftest import cli, write_sweep

pytestmark = pytest.mark.slow

HYBRID = {"mode": "hybrid", "hybrid_alpha": 0.5, "fusion": "weighted"}
PARAGRAPH = {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0}


@pytest.fixture(scope="module")
def champion(slice_data, tmp_path_factory):
    """Sweep `gated` with one config (hybrid, top 4) run: its recommendation is registered as version 1."""
    from rag_sweep.runner import run_sweep

    root = tmp_path_factory.mktemp("gate")
    spec = write_sweep(
        root / "champion.yaml", slice_data, name="gated", chunking=PARAGRAPH, retrieval={**HYBRID, "top_k": 4}
    )
    run = run_sweep(str(spec), str(root / "data"), progress=False)
    client = mlflow.MlflowClient(run.defs.resources["tracking"].resolved_uri())
    assert str(client.get_model_version_by_alias("gated", "champion").version) == "1"
    return {"root": root, "data": root / "data", "client": client, "run": run}


def gate_runs(client, sweep: str) -> list:
    exp = client.get_experiment_by_name(sweep)
    return client.search_runs(
        [exp.experiment_id], "tags.kind = 'gate'", order_by=["attributes.start_time DESC"]
    )


def test_a_much_smaller_top_k_fails_the_gate_and_an_equivalent_setting_does_not(slice_data, champion):
    root, data = champion["root"], champion["data"]
    spec = write_sweep(
        root / "gate.yaml",
        slice_data,
        name="gated",
        chunking=PARAGRAPH,
        retrieval=[{**HYBRID, "top_k": 1}, {**HYBRID, "hybrid_alpha": 0.6, "top_k": 4}],
        gate={"margin": 0.02},
    )
    junit, md = root / "gate.xml", root / "gate.md"
    args = ["gate", spec, "--against", "models:/gated@champion", "--data-dir", data]
    done = cli(*args, "--metric-margin", "recall_at_k=0.05", "--junit", junit, "--markdown", md)
    assert done.returncode == 1, done.stderr[-2000:]
    assert "verdict: fail (exit 1)" in done.stdout
    assert "the baseline's index is the one models:/gated/1 bundles" in done.stdout

    suite = ET.parse(junit).getroot().find("testsuite")
    props = {p.get("name"): p.get("value") for p in suite.iter("property")}
    assert props["verdict"] == "fail" and props["margin"] == "0.02" and props["questions"] == "20"
    cases = {(c.get("classname"), c.get("name")): c for c in suite.iter("testcase")}
    assert len(cases) == 4  # two candidates x (overall score, recall_at_k)
    small = {name: case for (label, name), case in cases.items() if label.endswith("k1")}
    failure = small["recall_at_k"].find("failure")
    assert failure is not None and "worse by more than 0.05" in failure.get("message")
    same = {name: case for (label, name), case in cases.items() if "a0.6" in label}
    assert all(case.find("failure") is None for case in same.values())  # pass, or inconclusive as measured
    assert "## rag-sweep gate: **fail**" in md.read_text()

    # the figures the JUnit file states are the report's, which the data dir and MLflow keep
    (report,) = sorted((data / "gates" / "gated").glob("*/gate.json"))
    doc = json.loads(report.read_text())
    verdicts = {c["label"]: c["verdict"] for c in doc["candidates"]}
    assert [v for k, v in verdicts.items() if k.endswith("k1")] == ["fail"]
    run = gate_runs(champion["client"], "gated")[0]
    assert run.data.tags["verdict"] == "fail" and run.data.tags["baseline_model_version"] == "1"
    assert run.data.tags["baseline_model_uri"] == "models:/gated/1"
    recall = next(
        t
        for c in doc["candidates"]
        if c["label"].endswith("k1")
        for t in c["tests"]
        if t["metric"] == "recall_at_k"
    )
    key = next(c["key"] for c in doc["candidates"] if c["label"].endswith("k1"))
    assert run.data.metrics[f"{key}.recall_at_k.difference"] == pytest.approx(recall["difference"])

    # the gate reused the champion's chunks, vectors and index: each was computed once, by the sweep
    instance = champion["run"].instance
    import dagster as dg

    for stage in ("chunksets", "embeddings"):
        events = instance.fetch_materializations(dg.AssetKey(["gated", stage]), limit=100).records
        assert len(events) == 1, stage

    # without the recall margin, on 20 questions, a top-k of 1 is not shown worse by 0.02 overall: the
    # verdict says how many questions would decide it
    done = cli(*args, "--junit", junit)
    assert done.returncode in (1, 3), done.stderr[-2000:]
    if done.returncode == 3:
        assert "questions would decide it" in done.stdout


def test_a_config_of_the_sweep_or_another_sweeps_recommendation_is_a_baseline_too(slice_data, champion):
    root, data = champion["root"], champion["data"]
    spec = write_sweep(
        root / "pair.yaml",
        slice_data,
        name="gated",
        chunking=PARAGRAPH,
        retrieval=[{**HYBRID, "top_k": 4}, {**HYBRID, "hybrid_alpha": 0.6, "top_k": 4}],
        gate={"margin": 0.05, "equivalence": True},
    )
    from rag_assets.orchestration.plans import load_plan

    plan = load_plan(spec, data_dir=data)
    label = plan.labels[plan.config_keys[0]]
    done = cli("gate", spec, "--against", label, "--data-dir", data)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "1 candidate(s)" in done.stdout and "within ±0.05" in done.stdout

    # the champion's sweep file: its recommendation is the baseline
    done = cli("gate", spec, "--against", root / "champion.yaml", "--data-dir", data)
    assert done.returncode == 0, done.stdout + done.stderr[-2000:]
    assert "gated's recommendation" in done.stdout


def test_the_champion_stays_when_a_new_recommendation_is_worse_than_it(slice_data, champion):
    """Weights that see only nDCG@k favour a top-k of 1 (its one passage is gold on this slice: nDCG@1 is 1):
    it is recommended; the sweep's gate, with recall at most 0.05 below the champion's, shows it worse."""
    from rag_sweep.runner import run_sweep

    root, data, client = champion["root"], champion["data"], champion["client"]
    spec = write_sweep(
        root / "reweighted.yaml",
        slice_data,
        name="gated",
        chunking=PARAGRAPH,
        retrieval={**HYBRID, "top_k": [4, 1]},
        weights={"ndcg_at_k": 1.0},
        decision={"holdout": 0, "prefer": "best"},
        gate={"metric_margins": {"recall_at_k": 0.05}},
    )
    run = run_sweep(str(spec), str(data), progress=False)
    from rag_assets.board_files import read_decision

    assert read_decision(data, "gated")["recommended"].endswith("k1__extractive")
    assert run.champion_kept and "recall_at_k: worse by more than 0.05" in run.champion_kept
    assert str(client.get_model_version_by_alias("gated", "champion").version) == "1"  # kept
    import dagster as dg

    check = run.instance.event_log_storage.get_latest_asset_check_execution_by_key(
        [dg.AssetCheckKey(dg.AssetKey(["gated", "champion_model"]), "not_worse_than_champion")]
    )
    (record,) = check.values()
    evaluation = record.event.dagster_event.event_specific_data
    assert not evaluation.passed and evaluation.blocking
    assert gate_runs(client, "gated")[0].data.tags["verdict"] == "fail"

    # the CLI says so, and fails
    done = cli("run", spec, "--data-dir", data)
    assert done.returncode == 1
    assert "the champion was not replaced" in done.stderr and "champion stays version 1" in done.stderr


def test_a_better_recommendation_passes_the_gate_and_is_registered(slice_data, champion):
    from rag_sweep.runner import run_sweep

    root, data, client = champion["root"], champion["data"], champion["client"]
    first = write_sweep(
        root / "up1.yaml", slice_data, name="gated-up", chunking=PARAGRAPH, retrieval={**HYBRID, "top_k": 1}
    )
    run_sweep(str(first), str(data), progress=False)
    assert str(client.get_model_version_by_alias("gated-up", "champion").version) == "1"
    both = write_sweep(
        root / "up2.yaml",
        slice_data,
        name="gated-up",
        chunking=PARAGRAPH,
        retrieval={**HYBRID, "top_k": [1, 4]},
        gate={"margin": 0.02},
    )
    run = run_sweep(str(both), str(data), progress=False)
    assert run.champion_kept is None
    now = client.get_model_version_by_alias("gated-up", "champion")
    assert str(now.version) == "2" and now.tags["config_key"].endswith("k4__extractive")
    gate_run = gate_runs(client, "gated-up")[0]
    assert gate_run.data.tags["verdict"] == "pass" and gate_run.data.tags["baseline_model_version"] == "1"
