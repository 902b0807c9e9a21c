"""An LLM outage in any stage is an error, not a score: one LLM-backed stage at a time is broken (its model,
on a local OpenAI-protocol server, fails every call): the hop policy, the reranker, the query transform,
context compression, and the judge. Each config so broken is refused everywhere: on the board (no tier),
by the recommendation, by `rag-sweep gate`; its Dagster metadata and MLflow run carry the per-stage counts."""

from __future__ import annotations

import dagster as dg
import pytest

from tests.conftest import write_sweep
from tests.openai_stub import OpenAIStub

pytestmark = pytest.mark.slow
DOWN = "openai/down"  # every call to it fails (a 500)
PARAGRAPH = {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0}


def _respond(prompt: str, model: str):
    return (500, "upstream error", 0.0) if model == "down" else (200, "ok", 0.0)


def _stages(c) -> set[str]:
    """The stages of config `c` that call the broken model."""
    r = c.retrieval
    broken = {
        "query_transform": r.query_transform != "none",
        "hops": r.max_hops > 1,
        "rerank": c.rerank.method == "llm",
        "context_compression": c.generation.context == "compress",
    }
    return {s for s, on in broken.items() if on}


def _mlflow_runs(data, sweep: str) -> dict[str, object]:
    from mlflow import MlflowClient

    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(sweep)
    runs = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    return {r.data.tags["config_key"]: r for r in runs}


def test_one_broken_llm_stage_at_a_time_is_refused_everywhere(slice_data, tmp_path):
    from rag_assets.board_files import read_decision
    from rag_sweep.runner import run_sweep
    from rag_sweep.runner.gate import run_gate
    from resources.llm import LLMClient

    spec = write_sweep(
        tmp_path / "outages.yaml",
        slice_data,
        name="outages",
        chunking=PARAGRAPH,
        retrieval=[
            {"mode": "bm25", "top_k": 2},
            {"mode": "bm25", "top_k": 2, "query_transform": "rewrite", "query_model": DOWN},
            {"mode": "bm25", "top_k": 2, "max_hops": 2, "hop_policy": "llm", "hop_model": DOWN},
        ],
        rerank=[{"method": "none"}, {"method": "llm", "candidates": 4, "model": DOWN}],
        generation=[
            {"model": "extractive"},
            {"model": "extractive", "context": "compress", "context_model": DOWN},
        ],
    )
    data = tmp_path / "data"
    with OpenAIStub(_respond, by_model=True) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0)
        run = run_sweep(str(spec), str(data), progress=False, resources={"llm": llm})
        plan = run.plan
        healthy = next(k for k in plan.config_keys if not _stages(plan.config(k)))
        gated = run_gate(str(spec), plan.labels[healthy], str(data), progress=False, resources={"llm": llm})
    board = run.board
    decision = read_decision(data, run.plan.sweep.name)
    assert board.height == 12 and decision["recommended"] == healthy
    rows = {r["config_key"]: r for r in board.iter_rows(named=True)}
    mlflow_runs = _mlflow_runs(data, "outages")
    for key, row in rows.items():
        stages = _stages(plan.config(key))
        listed = {part.split(" ")[0] for part in row["failed_stages"].split(", ") if part}
        assert listed == stages, (key, row["failed_stages"])
        assert row["too_many_errors"] == bool(stages), key
        if stages:  # refused: no tier, not recommended, never tied with the leader
            assert row["tier"] is None and not row["recommended"] and row["vs_leader"] == "too many errors"
        for s in stages:
            assert row[f"failed_share_{s}"] == 1.0, (key, s)
        # MLflow: the config's run carries the verdict and each stage's counts
        tags, metrics = mlflow_runs[key].data.tags, mlflow_runs[key].data.metrics
        assert tags["too_many_errors"] == str(bool(stages)).lower()
        assert tags["failed_stages"] == (row["failed_stages"] or "none")
        for s in stages:
            assert metrics[f"failed_share_{s}"] == 1.0
        if "rerank" in stages:
            assert metrics["n_rerank_fallbacks"] == metrics["n_rerank_calls"] == 20.0
        if "hops" in stages:
            assert metrics["n_hop_fallbacks"] == metrics["hop_llm_calls"] > 0
        # Dagster: the evaluation's metadata says the same
        record = run.instance.fetch_materializations(
            dg.AssetRecordsFilter(asset_key=dg.AssetKey(["outages", "evaluations"]), asset_partitions=[key]),
            limit=1,
        ).records[0]
        meta = record.asset_materialization.metadata
        assert meta["too_many_errors"].value == bool(stages)
        calls = meta["llm_calls"].value
        assert set(calls) == stages and all(v["failed"] == v["calls"] > 0 for v in calls.values())
    # the hop outage made the names rule's hops, not more searches than it
    names_rule = next(
        r
        for k, r in rows.items()
        if plan.config(k).retrieval.max_hops > 1 and _stages(plan.config(k)) == {"hops"}
    )
    assert names_rule["mean_hops"] <= 2.0
    # the gate passes none of the broken configs against the healthy one
    assert gated.result.verdict == "inconclusive" and gated.result.exit_code == 3
    for c in gated.result.candidates:
        assert c.verdict == "inconclusive" and "LLM calls failed or fell back" in c.why, c.why

    # the judge: a sweep whose judge is down, and weighted, qualifies no config
    judged = write_sweep(
        tmp_path / "judge.yaml",
        slice_data,
        name="judge-outage",
        chunking=PARAGRAPH,
        retrieval={"mode": "bm25", "top_k": 2},
        evaluation={"judge_model": DOWN},
        weights={"token_f1": 0.9, "faithfulness_judge": 0.1},
    )
    with OpenAIStub(_respond, by_model=True) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0)
        run = run_sweep(str(judged), str(data), progress=False, resources={"llm": llm})
        only = run.plan.config_keys[0]
        gated = run_gate(
            str(judged), run.plan.labels[only], str(data), progress=False, resources={"llm": llm}
        )
    row = run.board.row(0, named=True)
    decision = read_decision(data, run.plan.sweep.name)
    assert row["too_many_errors"] and row["failed_stages"].startswith("judge ") and row["tier"] is None
    assert decision["recommended"] is None and "judge" in decision["why"]
    assert _mlflow_runs(data, "judge-outage")[only].data.tags["failed_stages"].startswith("judge ")
    # an unchanged config passes the gate, unless its own calls failed
    assert gated.result.verdict == "inconclusive" and "judge" in gated.result.candidates[0].why
    # reported but not weighted, the judge changes no score: its failures are counted, and set nothing aside
    unweighted = write_sweep(
        tmp_path / "judge-unweighted.yaml",
        slice_data,
        name="judge-unweighted",
        chunking=PARAGRAPH,
        retrieval={"mode": "bm25", "top_k": 2},
        evaluation={"judge_model": DOWN},
        weights={"token_f1": 1.0},
    )
    with OpenAIStub(_respond, by_model=True) as stub:
        llm = LLMClient(api_base=stub.api_base, api_key="k", max_retries=0)
        run = run_sweep(str(unweighted), str(data), progress=False, resources={"llm": llm})
    row = run.board.row(0, named=True)
    assert not row["too_many_errors"] and row["failed_stages"] == "" and row["tier"] == 1
    assert row["failed_share_judge"] == 1.0 and row["n_judge_failures"] == row["n_judge_calls"] > 0
    assert read_decision(data, "judge-unweighted")["recommended"] == run.plan.config_keys[0]
