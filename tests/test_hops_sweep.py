"""Iterative retrieval as a sweep dimension, end to end on the example's slice (multi-hop HotpotQA): single-shot
against 2 hops. Every per-hop figure is recomputed here from the saved trajectories; a rerun pays nothing;
the exported model runs the same loop and answers as the sweep did."""

from __future__ import annotations

import mlflow
import pandas as pd
import polars as pl
import pytest

from tests.conftest import cli, write_sweep

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def hops_run(slice_data, tmp_path_factory):
    from rag_sweep.runner import run_sweep

    root = tmp_path_factory.mktemp("hops")
    spec = write_sweep(
        root / "hops.yaml",
        slice_data,
        name="hops",
        chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        retrieval={"mode": "vector", "top_k": 2, "max_hops": [1, 2]},
    )
    return run_sweep(str(spec), str(root / "data"), progress=False)


def recompute(trajectory: list[list[str]], gold: set[str], max_hops: int) -> dict:
    """Recall after each hop and the stop's correctness, written again from the definitions."""
    out, found, done = {}, set(), None
    for h in range(max_hops):
        if h < len(trajectory):
            found.update(trajectory[h])
            if done is None and gold.issubset(found):
                done = h + 1
        out[f"recall_hop_{h + 1}"] = len(gold.intersection(found)) / len(gold)
    out["stop_correct"] = float(len(trajectory) == (done if done else max_hops))
    out["wasted_hops"] = float(len(trajectory) - done) if done else 0.0
    return out


def test_two_hops_against_single_shot_every_figure_from_the_trajectories(hops_run, slice_data):
    plan, board = hops_run.plan, hops_run.board
    single, double = plan.config_keys
    assert plan.config(double).retrieval.max_hops == 2 and plan.config(single).retrieval.max_hops == 1
    qa = pl.read_parquet(slice_data["qa"])
    gold = dict(zip(qa["query_id"], map(set, qa["relevant_doc_ids"]), strict=True))

    retrieved = hops_run.artifact("retrievals", plan.key_of(plan.config(double), "retrievals"))
    per_query = hops_run.artifact("evaluations", double, "per_query")
    assert retrieved.height == per_query.height == qa.height
    mine = {
        r["query_id"]: recompute(r["hop_doc_ids"], gold[r["query_id"]], 2)
        for r in retrieved.iter_rows(named=True)
    }
    for r in per_query.iter_rows(named=True):
        for name, value in mine[r["query_id"]].items():
            assert r[name] == pytest.approx(value), (r["query_id"], name)
    hops = dict(zip(retrieved["query_id"], retrieved["hop_doc_ids"].list.len(), strict=True))
    assert {r["query_id"]: r["hops"] for r in per_query.iter_rows(named=True)} == hops
    row = board.filter(pl.col("config_key") == double).row(0, named=True)
    means = {"recall_hop_1": "recall_hop_1", "recall_hop_2": "recall_hop_2", "stop_correct": "stop_accuracy"}
    for name, column in {**means, "wasted_hops": "mean_wasted_hops"}.items():
        expected = sum(m[name] for m in mine.values()) / len(mine)
        assert row[column] == pytest.approx(expected), column
    assert row["mean_hops"] == pytest.approx(retrieved["hops"].mean())
    # hop 1 is single-shot retrieval: the same documents, so the same recall
    one = board.filter(pl.col("config_key") == single).row(0, named=True)
    assert row["recall_hop_1"] == pytest.approx(one["recall_at_k"])
    assert row["recall_hop_2"] >= row["recall_hop_1"] and row["recall_at_k"] == pytest.approx(
        row["recall_hop_2"]
    )
    assert one["mean_hops"] == 1.0
    # the figures reach MLflow and the ship report
    client = mlflow.MlflowClient(hops_run.defs.resources["tracking"].resolved_uri())
    exp = client.get_experiment_by_name("hops")
    (run,) = client.search_runs([exp.experiment_id], f"tags.config_key = '{double}'")
    assert run.data.metrics["recall_hop_2"] == pytest.approx(row["recall_hop_2"])
    report = (hops_run.data / "leaderboards" / "hops.report.md").read_text()
    assert "## Retrieval hop by hop" in report


def test_a_rerun_pays_nothing_and_the_exported_model_runs_the_same_loop(hops_run, tmp_path):
    from rag_sweep.runner import run_sweep

    plan, data = hops_run.plan, hops_run.data
    before = len(hops_run.instance.get_runs())
    run_sweep(str(plan.sweep.path), str(data), progress=False)
    assert len(hops_run.instance.get_runs()) == before  # no Dagster run: nothing to compute

    double = plan.config_keys[1]
    out = tmp_path / "model"
    done = cli("export", plan.sweep.path, "--config", plan.labels[double], "--out", out, "--data-dir", data)
    assert done.returncode == 0, done.stderr
    config = plan.config(double)
    reranked = hops_run.artifact("rerankings", plan.key_of(config, "rerankings"))
    answers = hops_run.artifact("answers", plan.key_of(config, "answers")).filter(pl.col("sample") == 0)
    qa = hops_run.artifact("qa_set")
    expected = (
        qa.select("query_id", "question")
        .join(answers.select("query_id", "answer"), on="query_id")
        .join(reranked.select("query_id", "doc_ids"), on="query_id")
        .sort("query_id")
    )
    got = mlflow.pyfunc.load_model(str(out)).predict(
        pd.DataFrame({"question": expected["question"].to_list()})
    )
    assert [list(x) for x in got["doc_ids"]] == expected["doc_ids"].to_list()
    assert got["answer"].tolist() == expected["answer"].to_list()
    assert max(len(x) for x in got["doc_ids"]) > 2  # a second hop's documents in the context
