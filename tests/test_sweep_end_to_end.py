"""Materialize a slice of the example sweep in process, through the real assets, model, store and MLflow."""

from __future__ import annotations

import json
import re
from pathlib import Path

import dagster as dg
import polars as pl
import pytest
import yaml
from mlflow import MlflowClient

from rag_assets.stage_asset import StageRun
from rag_core.metrics import scorable_metrics
from rag_core.planning.plan import Plan
from rag_core.planning.spec import load_sweep
from rag_core.planning.stages import PARTITIONED
from rag_sweep.runner import run_sweep, stale_snapshots, steps
from tests.docs_images import keep_for_docs

pytestmark = pytest.mark.slow
PREFIX = "slice"


def _key(stage: str) -> dg.AssetKey:
    return dg.AssetKey([PREFIX, stage])


def _materializations(instance, stage: str) -> list:
    records = instance.fetch_materializations(_key(stage), limit=1000).records
    return [r.asset_materialization for r in records]


def test_every_partition_materialized(sweep_run):
    plan, instance = sweep_run["plan"], sweep_run["instance"]
    assert len(plan.configs) == 4
    for s in PARTITIONED:
        assert instance.get_materialized_partitions(_key(s.name)) == set(plan.keys(s.name)), s.name
    assert _materializations(instance, "leaderboard")


def test_every_asset_check_passed(sweep_run):
    instance = sweep_run["instance"]
    seen = set()
    for event in instance.get_event_records(
        dg.EventRecordsFilter(event_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION), limit=1000
    ):
        evaluation = event.event_log_entry.dagster_event.event_specific_data
        seen.add(evaluation.check_name)
        assert evaluation.passed, (evaluation.asset_key, evaluation.check_name, evaluation.metadata)
    assert seen == {
        "gold_docs_in_corpus",
        "unique_questions",
        "queries_with_gold_docs",
        "answers_in_gold_passages",
        "aligned_with_chunks",
        "row_count_matches_chunkset",
        "error_rate",
        "judge_failures",
        "complete",
        "nightly_drift",  # passed: no earlier leaderboard on these questions
        "not_worse_than_champion",  # passed: no champion to compare with before the first
    }


def test_embedding_partitions_are_unique_chunkings_and_calls_unique_texts(sweep_run):
    plan, instance, run = sweep_run["plan"], sweep_run["instance"], sweep_run["run"]
    # one embedding partition per (chunking, embedder) pair, not per config
    assert len(plan.keys("embeddings")) == 2 < len(plan.configs)
    mats = _materializations(instance, "embeddings")
    assert len(mats) == 2
    calls = sum(m.metadata["embedding_calls"].value for m in mats)
    texts = set()
    for key in plan.keys("chunksets"):
        texts |= set(run.artifact("chunksets", key)["index_text"].to_list())
    assert calls == len(texts)
    # the two chunkings share texts (short documents are one chunk in both), embedded once
    total = sum(m.metadata["texts"].value for m in mats)
    assert total > calls


def test_leaderboard_has_one_row_per_config_with_metrics_in_unit_interval(sweep_run):
    board, plan = sweep_run["board"], sweep_run["plan"]
    assert sorted(board["config_key"].to_list()) == sorted(plan.config_keys)
    present = [m for m in scorable_metrics() if m in board.columns]
    assert set(scorable_metrics()) - set(present) == {"faithfulness_judge"}  # no judge model configured
    # extractive answers cite nothing: citation accuracy is undefined for every query (null, not 0.0)
    assert board["citation_accuracy"].is_null().all()
    assert (board["n_answers_without_citations"] == board["n_queries"]).all()
    for m in (*present, "overall_score", "answer_coverage", "chunk_cohesion", "chunk_separation"):
        values = board[m].to_list()
        assert m == "citation_accuracy" or all(0.0 <= v <= 1.0 for v in values), m
    assert board["overall_score"].is_sorted(descending=True)
    assert board["recall_at_k"].max() > 0.3  # real retrieval finds gold paragraphs
    assert board["rank"].to_list() == list(range(1, 5))
    assert set(board["index.store"]) == {"lancedb"}  # the deployment's store, named in every config


def test_mlflow_holds_one_run_per_config(sweep_run):
    plan, data = sweep_run["plan"], sweep_run["data"]
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(plan.sweep.name)
    runs = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    assert sorted(r.data.tags["config_key"] for r in runs) == sorted(plan.config_keys)
    # one tag tells every kind of run apart: the configs alone under `tags.kind = 'config'`
    kinds = {r.info.run_id: r.data.tags.get("kind") for r in client.search_runs([exp.experiment_id])}
    assert {i for i, k in kinds.items() if k == "config"} == {r.info.run_id for r in runs}
    assert None not in kinds.values(), kinds
    for r in runs:
        c = plan.config(r.data.tags["config_key"])
        assert r.data.params["retrieval.mode"] == c.retrieval.mode
        assert r.data.params["chunking.chunk_size"] == str(c.chunking.chunk_size)
        assert r.data.params["index.store"] == "lancedb"
        assert 0.0 <= r.data.metrics["ndcg_at_k"] <= 1.0
        assert r.data.tags["sweep"] == plan.sweep.name and r.data.tags["partition_key"] == plan.key_of(c)
        assert r.data.tags["dagster_run_id"]
        artifacts = [a.path for a in client.list_artifacts(r.info.run_id)]
        assert "per_query.parquet" in artifacts
        local = client.download_artifacts(r.info.run_id, "per_query.parquet")
        assert pl.read_parquet(local).height == 20


def test_mlflow_config_runs_sort_by_overall_score_under_short_names(sweep_run):
    """Each config run carries its place in the leaderboard (score, interval, rank, tier) and a short name
    saying what differs between the configs; the full key stays its tag."""
    board, plan, data = sweep_run["board"], sweep_run["plan"], sweep_run["data"]
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(plan.sweep.name)
    runs = client.search_runs(
        [exp.experiment_id], filter_string="tags.config_key != ''", order_by=["metrics.overall_score DESC"]
    )
    assert [r.data.tags["config_key"] for r in runs] == board["config_key"].to_list()
    for r, row in zip(runs, board.iter_rows(named=True), strict=True):
        m = r.data.metrics
        assert m["overall_score"] == pytest.approx(row["overall_score"])
        assert m["overall_ci_low"] <= m["overall_score"] <= m["overall_ci_high"]
        assert m["rank"] == row["rank"] and m["tier"] == row["tier"] == int(r.data.tags["tier"])
        assert r.data.tags["vs_leader"] == row["vs_leader"]
        assert r.data.tags["recommended"] == str(row["recommended"]).lower()
        assert r.info.run_name == row["label"] and len(row["label"]) <= 24
    assert sorted(board["label"]) == ["para·hybrid", "para·vector", "rec·hybrid", "rec·vector"]


def test_the_dagster_leaderboard_table_shows_labels_intervals_and_tiers(sweep_run):
    board, instance = sweep_run["board"], sweep_run["instance"]
    meta = (
        instance.fetch_materializations(_key("leaderboard"), limit=1)
        .records[0]
        .asset_materialization.metadata
    )
    table = meta["table"].value
    names = [c.name for c in table.schema.columns]
    assert names[:6] == ["rank", "label", "overall_score", "overall_ci95", "tier", "vs_leader"]
    assert "config_key" not in names
    rows = [r.data for r in table.records]
    assert [r["label"] for r in rows] == board["label"].to_list()
    assert all(len(repr(r["overall_score"]).split(".")[-1]) <= 4 for r in rows)  # rounded for reading
    assert meta["config_keys"].value == dict(zip(board["label"], board["config_key"], strict=True))
    # question by question: the leader's results, worst first
    questions = [r.data for r in meta["leader_questions"].value.records]
    assert meta["leader_label"].value == board["label"][0] and len(questions) == 20
    assert {"question", "gold", "answer", "score", "recall_at_k", "token_f1"} <= set(questions[0])
    assert [q["score"] for q in questions] == sorted(q["score"] for q in questions)


def test_each_mlflow_config_run_previews_its_questions_and_dagster_links_to_it(sweep_run):
    plan, data, instance = sweep_run["plan"], sweep_run["data"], sweep_run["instance"]
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(plan.sweep.name)
    (r,) = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''", max_results=1)
    # an MLflow table (the UI previews it): tagged as one, columns and rows in the table format
    assert {"path": "per_question.json", "type": "table"} in json.loads(r.data.tags["mlflow.loggedArtifacts"])
    table = json.loads(Path(client.download_artifacts(r.info.run_id, "per_question.json")).read_text())
    columns = set(table["columns"])
    assert len(table["data"]) == 20
    assert {"question", "gold_answers", "retrieved_doc_ids", "retrieved_titles"} <= columns
    assert {"answer", "recall_at_k", "token_f1"} <= columns
    key = r.data.tags["config_key"]
    meta = instance.fetch_materializations(_key("evaluations"), limit=100).records
    mat = next(m.asset_materialization for m in meta if m.asset_materialization.partition == key)  # newest
    numbers = [k for k, v in mat.metadata.items() if isinstance(v, dg.FloatMetadataValue)]
    assert 5 <= len(numbers) <= 10 and "token_f1" in numbers  # what the UI plots: the metrics that decide
    assert len(mat.metadata["all_metrics"].value) > 15
    assert mat.metadata["mlflow_run"].value.endswith(
        f"/#/experiments/{exp.experiment_id}/runs/{r.info.run_id}"
    )


def test_rerun_of_unchanged_spec_reuses_everything(sweep_run, slice_sweep, monkeypatch):
    plan, data, instance = sweep_run["plan"], sweep_run["data"], sweep_run["instance"]
    # nothing remains after the input snapshots: every partition is complete and MLflow holds every run
    stores, tracking = (sweep_run["defs"].resources[r] for r in ("vector_stores", "tracking"))
    assert steps(plan, instance, data, force=False, stores=stores, tracking=tracking) == []
    runs_before = len(instance.get_run_records())
    before = len(_materializations(instance, "embeddings"))
    # every step reads only what its asset declares (the asset graph is the UI's lineage)
    graph = sweep_run["defs"].resolve_asset_graph()
    reads: dict[str, set[str]] = {}
    original = StageRun.read

    def recording(self, name):
        reads.setdefault(self.context.asset_key.path[-1], set()).add(name)
        return original(self, name)

    monkeypatch.setattr(StageRun, "read", recording)
    run = run_sweep(str(slice_sweep), str(data), progress=False)
    for stage, names in reads.items():
        declared = {k.path[-1] for k in graph.get(_key(stage)).parent_keys}
        assert names <= declared, stage
    assert len(_materializations(instance, "embeddings")) == before
    assert len(instance.get_run_records()) == runs_before  # the files are as observed, the snapshots current
    assert run.board.drop("rank").equals(sweep_run["board"].drop("rank"))
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(plan.sweep.name)
    runs = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    assert len(runs) == len(plan.configs)  # a reused evaluation is not logged twice
    boards = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'leaderboard'")
    assert len(boards) == 1  # an unchanged rerun logs no second leaderboard run


def test_an_input_snapshot_is_current_only_for_the_file_and_settings_it_was_taken_of(sweep_run, tmp_path):
    """What lets an unchanged rerun skip the snapshot runs: a changed QA file or max_queries is not current
    (so the QA set is snapshotted again), while the corpus it did not touch still is."""
    plan, data, instance = sweep_run["plan"], sweep_run["data"], sweep_run["instance"]
    assert stale_snapshots(plan, instance, data) == []
    fewer = Plan.resolve(load_sweep(str(_copy_spec(plan, tmp_path, max_queries=5))))
    assert stale_snapshots(fewer, instance, data) == ["qa_set"]  # the corpus snapshot is still current
    qa = pl.read_parquet(plan.sweep.qa_path)
    qa.head(qa.height - 1).write_parquet(tmp_path / "qa.parquet")  # one question less
    edited = Plan.resolve(load_sweep(str(_copy_spec(plan, tmp_path, qa=str(tmp_path / "qa.parquet")))))
    assert "qa_set" in stale_snapshots(edited, instance, data)


def _copy_spec(plan, folder: Path, max_queries: int | None = None, qa: str | None = None) -> Path:
    spec = yaml.safe_load(plan.sweep.path.read_text())
    spec["data"] = {"corpus": str(plan.sweep.corpus_path), "qa": qa or str(plan.sweep.qa_path)}
    if max_queries is not None:
        spec["data"]["max_queries"] = max_queries
    out = folder / f"spec{len(list(folder.glob('spec*')))}.yaml"
    out.write_text(yaml.safe_dump(spec))
    return out


def test_a_config_run_deleted_from_mlflow_is_logged_again_with_its_rank(sweep_run, slice_sweep):
    plan, data, instance = sweep_run["plan"], sweep_run["data"], sweep_run["instance"]
    stores, tracking = (sweep_run["defs"].resources[r] for r in ("vector_stores", "tracking"))
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(plan.sweep.name)
    gone = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")[0]
    client.delete_run(gone.info.run_id)
    todo = steps(plan, instance, data, force=False, stores=stores, tracking=tracking)
    assert todo == [("evaluations", gone.data.tags["config_key"]), ("leaderboard", None)]
    run_sweep(str(slice_sweep), str(data), progress=False)
    runs = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    assert len(runs) == len(plan.configs)
    (back,) = [r for r in runs if r.data.tags["config_key"] == gone.data.tags["config_key"]]
    assert back.data.metrics["overall_score"] == gone.data.metrics["overall_score"]
    assert back.data.tags["tier"] == gone.data.tags["tier"]


def test_a_deleted_mlflow_store_gets_every_run_back_the_leaderboard_run_too(sweep_run, slice_sweep):
    """MLflow's database deleted (its artifacts kept): the rerun computes nothing, and logs again every run
    MLflow lacks, the leaderboard's with its recommendation and ship report as well as the configs'."""
    plan, data = sweep_run["plan"], sweep_run["data"]
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(plan.sweep.name)
    (board,) = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'leaderboard'")
    client.delete_run(board.info.run_id)  # the leaderboard run alone: its artifact is reused, its run logged
    run_sweep(str(slice_sweep), str(data), progress=False)
    (again,) = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'leaderboard'")
    assert again.data.tags["board_fingerprint"] == board.data.tags["board_fingerprint"]
    (data / "mlflow.db").unlink()
    run_sweep(str(slice_sweep), str(data), progress=False)
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(plan.sweep.name)
    assert len(client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")) == len(
        plan.configs
    )
    (again,) = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'leaderboard'")
    assert again.data.tags["recommended_config"] == board.data.tags["recommended_config"] != "None"
    assert again.data.tags["board_fingerprint"] == board.data.tags["board_fingerprint"]
    names = {a.path for a in client.list_artifacts(again.info.run_id)}
    assert {"leaderboard.parquet", "leaderboard.md"} <= names
    # ... in the file on disk, as another process (the MLflow UI) reads it: not in a deleted file's ghost
    # that this process's pooled connections still held
    import sqlite3

    with sqlite3.connect(data / "mlflow.db") as db:
        kinds = dict(
            db.execute("select value, count(*) from tags where key = 'kind' group by value").fetchall()
        )
        configs = db.execute("select count(*) from tags where key = 'config_key'").fetchone()[0]
    assert kinds.get("leaderboard") == 1 and configs == len(plan.configs)


def test_forced_rerun_plans_every_partition(sweep_run):
    plan, instance, data = sweep_run["plan"], sweep_run["instance"], sweep_run["data"]
    every = sum(len(plan.keys(s.name)) for s in PARTITIONED)
    assert len(steps(plan, instance, data, force=True)) == every + 1  # and the leaderboard


def test_the_leaderboard_recommends_a_config_and_writes_the_ship_report(sweep_run):
    from rag_assets.board_files import leaderboard_path, read_decision

    board, plan, data, instance = (
        sweep_run["board"],
        sweep_run["plan"],
        sweep_run["data"],
        sweep_run["instance"],
    )
    decision = read_decision(data, plan.sweep.name)
    rec = decision["recommended"]
    assert rec in plan.config_keys and board.filter(pl.col("recommended"))["config_key"].to_list() == [rec]
    assert board.filter(pl.col("config_key") == rec)["tier"][0] == 1  # no constraints: from the top tier
    assert board["tier"][0] == 1 and board["tier"].is_sorted()
    assert board.filter(pl.col("tier") == 1)["config_key"].to_list() == decision["top_tier"]
    assert (board["tied_with_leader"] == (board["tier"] == 1)).all()  # the Holm-corrected verdict
    assert 0 < decision["min_detectable_difference"] < 1
    report = leaderboard_path(data, plan.sweep.name).with_suffix(".report.html")
    assert rec in report.read_text()
    meta = (
        instance.fetch_materializations(_key("leaderboard"), limit=1)
        .records[0]
        .asset_materialization.metadata
    )
    assert meta["recommended"].value == rec and meta["ship_report"].value == str(report)
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name(plan.sweep.name)
    (lb,) = client.search_runs([exp.experiment_id], filter_string="tags.kind = 'leaderboard'")
    assert lb.data.tags["recommended_config"] == rec
    assert {"ship_report.html", "ship_report.md"} <= {a.path for a in client.list_artifacts(lb.info.run_id)}


def test_the_ship_report_renders_in_a_real_browser(sweep_run, tmp_path):
    """Chromium (Debian's, scripts/ensure_servers.sh) opens the report: the recommendation is on screen and
    every inlined plot decodes."""
    import os
    import shutil

    from playwright.sync_api import sync_playwright

    from rag_assets.board_files import leaderboard_path, read_decision

    browser_bin = os.environ.get("CHROMIUM_BIN") or shutil.which("chromium")
    assert browser_bin, "no chromium: run scripts/ensure_servers.sh"
    plan, data = sweep_run["plan"], sweep_run["data"]
    report = leaderboard_path(data, plan.sweep.name).with_suffix(".report.html")
    rec = read_decision(data, plan.sweep.name)["recommended"]
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=browser_bin, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1400, "height": 900})
        page.goto(report.as_uri())
        assert page.locator("h2", has_text="Recommendation").is_visible()
        # the recommendation by its label, its full key beside it once
        assert page.locator("p strong").first.inner_text() == plan.labels[rec]
        assert f"(config {rec})" in page.locator("p").first.inner_text()
        sizes = page.eval_on_selector_all("img", "imgs => imgs.map(i => [i.complete, i.naturalWidth])")
        assert sizes and all(done and width > 300 for done, width in sizes)
        page.screenshot(path=str(tmp_path / "ship_report.png"), full_page=True)
        browser.close()
    assert (tmp_path / "ship_report.png").stat().st_size > 50_000
    keep_for_docs(tmp_path / "ship_report.png")


def test_queries_without_gold_documents_are_left_out_of_retrieval_metrics_and_counted(
    slice_data, tmp_path, capsys
):
    """5 of 20 queries have no gold documents: retrieval metrics are means over the other 15, the 5 are
    counted. With none anywhere, the retrieval metrics are undefined (null, not 0.0), left out of the
    overall score, and the run says so."""
    from rag_core.metrics import RETRIEVAL_METRICS, overall_score
    from tests.conftest import write_sweep

    qa = pl.read_parquet(slice_data["qa"])
    no_gold = qa["query_id"].head(5).to_list()
    some = tmp_path / "some.parquet"
    qa.with_columns(
        pl.when(pl.col("query_id").is_in(no_gold))
        .then(pl.lit([], dtype=pl.List(pl.String)))
        .otherwise(pl.col("relevant_doc_ids"))
        .alias("relevant_doc_ids")
    ).write_parquet(some)
    none = tmp_path / "none.parquet"
    qa.with_columns(pl.lit([], dtype=pl.List(pl.String)).alias("relevant_doc_ids")).write_parquet(none)
    sections = {
        "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        "retrieval": {"mode": "vector", "top_k": 3},
    }
    data = tmp_path / "data"
    full = write_sweep(tmp_path / "full.yaml", slice_data, name="full", **sections)
    partial = write_sweep(tmp_path / "some.yaml", {**slice_data, "qa": some}, name="some", **sections)
    board_full = run_sweep(str(full), str(data), progress=False).board
    run = run_sweep(str(partial), str(data), progress=False)
    per_query = run.artifact("evaluations", run.plan.config_keys[0], "per_query")
    assert per_query.filter(pl.col("query_id").is_in(no_gold))["recall_at_k"].null_count() == 5
    with_gold = per_query.filter(~pl.col("query_id").is_in(no_gold))["recall_at_k"]
    assert run.board["recall_at_k"][0] == pytest.approx(with_gold.mean())
    assert run.board["n_queries_without_gold"][0] == 5
    # the 15 with gold are scored as in the full set: same per-query recall there
    full_pq = run_sweep(str(full), str(data), progress=False).artifact(
        "evaluations", run.plan.config_keys[0], "per_query"
    )
    assert full_pq.filter(~pl.col("query_id").is_in(no_gold))["recall_at_k"].to_list() == with_gold.to_list()
    assert board_full["n_queries_without_gold"][0] == 0

    capsys.readouterr()
    nothing = write_sweep(tmp_path / "none.yaml", {**slice_data, "qa": none}, name="none", **sections)
    run = run_sweep(str(nothing), str(data), progress=False)
    row = run.board.row(0, named=True)
    assert all(row[m] is None for m in RETRIEVAL_METRICS)  # undefined, not 0.0
    assert row["n_queries_without_gold"] == 20
    rest = {m: w for m, w in run.plan.sweep.weights.items() if m not in RETRIEVAL_METRICS}
    assert row["overall_score"] == pytest.approx(overall_score(row, rest))
    assert "gold document ids (relevant_doc_ids)" in capsys.readouterr().err
    assert run.search is None and run.board["overall_score"].is_not_null().all()
    report = (data / "leaderboards" / "none.report.md").read_text()
    assert "Undefined for every config, so left out: recall_at_k" in report


def test_a_batch_of_evaluations_embeds_every_configs_answer_texts_in_one_call(sweep_run):
    """The texts the answer metrics embed (answers, questions, gold answers), of every config the batch
    evaluates, in one call per embedding model, not one small call per config."""
    from rag_core.metrics import embedded_texts

    plan, instance, run = sweep_run["plan"], sweep_run["instance"], sweep_run["run"]
    said = [
        e.message
        for r in instance.get_runs()
        for e in instance.all_logs(r.run_id)
        if e.message and "answer metrics of" in e.message
    ]
    keys = plan.keys("evaluations")
    texts: set[str] = set()
    for key in keys:  # an evaluation's key is its answers' (one evaluation per answers partition)
        texts |= set(embedded_texts(run.artifact("qa_set"), run.artifact("answers", key)))
    pattern = r"answer metrics of (\d+) configs: (\d+) texts embedded with .* in one call"
    found = [re.search(pattern, m) for m in said]
    assert len(found) == 1 and found[0], said
    assert int(found[0][1]) == len(keys) > 1 and int(found[0][2]) == len(texts), said
