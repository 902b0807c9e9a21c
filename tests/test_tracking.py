"""MLflow tracking on a local SQLite store: a run a kill left RUNNING is never reused."""

from __future__ import annotations

from pathlib import Path

import polars as pl

from resources.tracking import MlflowTracking


def test_a_run_left_running_by_a_kill_is_replaced_not_reused(tmp_path):
    tracking = MlflowTracking(default_dir=str(tmp_path))
    client = tracking._client()
    exp = tracking._experiment_id(client, "sweep")
    # what a kill while logging leaves: a RUNNING run with the evaluation's tag and no metrics
    killed = client.create_run(exp, tags={"eval_fingerprint": "fp1"}).info.run_id
    args = dict(
        experiment="sweep",
        fingerprint="fp1",
        tags={"config_key": "c"},
        run_name="c",
        params={"a.b": 1},
        metrics={"recall_at_k": 0.5},
        per_query=pl.DataFrame({"query_id": ["q1"]}),
    )
    first = tracking.ensure_run(force=False, **args)
    assert first != killed and client.get_run(first).data.metrics == {"recall_at_k": 0.5}
    assert client.get_run(killed).info.status == "KILLED"
    assert client.get_run(killed).info.lifecycle_stage == "deleted"
    assert tracking.ensure_run(force=False, **args) == first  # a finished run is reused
    again = tracking.ensure_run(force=True, **args)  # recomputed (forced, or failed calls retried)
    assert again != first and client.get_run(first).info.lifecycle_stage == "deleted"
    assert [r.info.run_id for r in client.search_runs([exp])] == [again]  # one run per evaluation


def test_a_new_sqlite_store_is_a_copy_of_one_empty_store_built_once(tmp_path, monkeypatch):
    """The first store builds the empty template in the cache dir (MLflow's migrations); the next is a copy
    of it that MLflow opens as its own, with the Default experiment's artifacts in its data dir."""
    import mlflow

    from resources.tracking import seed_sqlite_store

    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    template = tmp_path / "cache" / "rag-sweep" / f"mlflow-{mlflow.__version__}-empty.db"
    seed_sqlite_store(tmp_path / "a" / "mlflow.db")
    assert template.exists() and (tmp_path / "a" / "mlflow.db").exists()
    assert not list((tmp_path / "cache" / "rag-sweep").glob("tmp*"))  # no half-built template left
    built = template.stat().st_mtime_ns

    tracking = MlflowTracking(default_dir=str(tmp_path / "b"))
    client = tracking._client()  # seeds b's store from the template
    assert template.stat().st_mtime_ns == built
    default = client.get_experiment("0")
    assert default.artifact_location == (tmp_path / "b" / "mlartifacts" / "0").resolve().as_uri()
    exp = tracking._experiment_id(client, "sweep")
    run = client.create_run(exp).info.run_id
    client.log_metric(run, "recall_at_k", 0.5)
    assert client.get_run(run).data.metrics == {"recall_at_k": 0.5}

    before = (tmp_path / "b" / "mlflow.db").read_bytes()
    seed_sqlite_store(tmp_path / "b" / "mlflow.db")  # an existing store is never replaced
    assert (tmp_path / "b" / "mlflow.db").read_bytes() == before


def _board(rows: list[tuple[str, int, bool]]) -> pl.DataFrame:
    return pl.DataFrame(
        [
            {
                "fingerprint": fp,
                "overall_score": 1.0 / rank,
                "overall_ci_low": 0.0,
                "overall_ci_high": 1.0,
                "rank": rank,
                "tier": rank,
                "vs_leader": "leader" if rank == 1 else "worse",
                "recommended": recommended,
            }
            for fp, rank, recommended in rows
        ]
    )


def test_the_latest_rank_is_the_current_boards_and_a_config_gone_from_it_loses_its_place(tmp_path):
    """MLflow reported the largest rank ever logged as the latest (all at one step); and the run of a config
    removed from the sweep kept recommended=true, rank 1: two recommended runs."""
    import math

    tracking = MlflowTracking(default_dir=str(tmp_path))
    client = tracking._client()
    runs = {
        fp: tracking.ensure_run(
            force=False,
            experiment="sweep",
            fingerprint=fp,
            tags={"config_key": fp},
            run_name=fp,
            params={},
            metrics={"recall_at_k": 0.5},
            per_query=pl.DataFrame({"query_id": ["q1"]}),
        )
        for fp in ("a", "b")
    }
    night = 20_000 * 86400.0
    tracking.log_ranking("sweep", _board([("a", 2, False), ("b", 1, True)]), night + 60)
    tracking.log_ranking("sweep", _board([("a", 1, True), ("b", 2, False)]), night)  # an older board, again
    a = client.get_run(runs["a"]).data
    assert a.metrics["rank"] == 1 and a.tags["recommended"] == "true" and a.tags["in_leaderboard"] == "true"
    assert client.get_run(runs["b"]).data.metrics["rank"] == 2

    tracking.log_ranking("sweep", _board([("a", 1, True)]), night + 120)  # b's config left the sweep
    b = client.get_run(runs["b"]).data
    assert (
        b.tags["in_leaderboard"] == "false" and b.tags["recommended"] == "false" and b.tags["tier"] == "none"
    )
    assert math.isnan(b.metrics["rank"]) and math.isnan(b.metrics["tier"])
    recommended = [
        r
        for r in client.search_runs([client.get_run(runs["a"]).info.experiment_id])
        if r.data.tags.get("recommended") == "true"
    ]
    assert [r.info.run_id for r in recommended] == [runs["a"]]
    assert [m.value for m in client.get_metric_history(runs["b"], "rank")][:2] == [1, 2]  # its history stays


def test_only_the_current_leaderboard_run_states_a_recommendation(tmp_path):
    """Two boards of a sweep (a config added since, e.g. an optimized prompt): the earlier board's run is
    tagged current=false and named superseded; a rerun that reinstates it makes it current again."""
    tracking = MlflowTracking(default_dir=str(tmp_path))
    client = tracking._client()
    ids = {}
    for fp in ("old", "new"):
        board = _board([("a", 1, fp == "old"), ("b", 2, fp == "new")])
        ids[fp] = tracking.log_leaderboard(
            "sweep", board, "|", b"", fingerprint=fp, decision={"recommended": fp}
        )
        tracking.mark_current_board("sweep", fp)
    old, new = (client.get_run(ids[k]) for k in ("old", "new"))
    assert old.data.tags["current"] == "false" and old.info.run_name == "leaderboard (superseded)"
    assert new.data.tags["current"] == "true" and new.info.run_name == "leaderboard"
    tracking.mark_current_board("sweep", "old")
    assert client.get_run(ids["old"]).data.tags["current"] == "true"
    assert client.get_run(ids["new"]).data.tags["current"] == "false"


def test_a_damaged_store_is_set_aside_named_and_begun_anew(tmp_path, caplog):
    """Random bytes in <data dir>/mlflow.db were a traceback, `file is not a database`."""
    import os

    damaged = os.urandom(16384)
    (tmp_path / "mlflow.db").write_bytes(damaged)
    tracking = MlflowTracking(default_dir=str(tmp_path))
    with caplog.at_level("WARNING", logger="resources.tracking"):
        exp = tracking.experiment_id("sweep")
        assert tracking.experiment_id("sweep") == exp  # the new store holds it; said once
    (said,) = caplog.messages
    db, aside = tmp_path / "mlflow.db", tmp_path / "mlflow.db.damaged"
    assert said.startswith(f"MLflow store {db} is damaged (") and f"set aside as {aside}" in said
    assert aside.read_bytes() == damaged
    assert tracking.client().get_experiment_by_name("sweep").experiment_id == exp


def test_a_moved_or_copied_data_dir_serves_its_own_artifacts(tmp_path):
    """MLflow records artifact locations as absolute paths: after `mv` of the data dir a registered model
    did not load (`No such artifact`), and a copy served the original's files. The store is re-anchored."""
    import shutil

    import mlflow

    first = tmp_path / "first"
    tracking = MlflowTracking(default_dir=str(first))
    client = tracking._client()
    run = client.create_run(tracking._experiment_id(client, "sweep"))
    model = tmp_path / "model.txt"
    model.write_text("the original")
    client.log_artifact(run.info.run_id, str(model), "model")
    client.create_registered_model("sweep")
    client.create_model_version("sweep", f"{run.info.artifact_uri}/model", run_id=run.info.run_id)

    copied, moved = tmp_path / "copied", tmp_path / "moved"
    shutil.copytree(first, copied)
    (copied / "mlartifacts" / "sweep" / run.info.run_id / "artifacts" / "model" / "model.txt").write_text(
        "copy"
    )
    shutil.move(first, moved)
    for folder, text in ((moved, "the original"), (copied, "copy")):
        client = MlflowTracking(default_dir=str(folder))._client()
        source = client.get_model_version_download_uri("sweep", "1")  # what models:/sweep/1 loads
        local = mlflow.artifacts.download_artifacts(artifact_uri=source, dst_path=str(tmp_path / folder.name))
        assert (Path(local) / "model.txt").read_text() == text
        assert client.get_run(run.info.run_id).info.artifact_uri.startswith(folder.resolve().as_uri())
