"""A sweep whose data dir is on object storage (a real S3-compatible server, started by the suite), run as
a deployment runs it: the Dagster instance and the locks in PostgreSQL, configs tracked on the MLflow
server, and `rag-sweep run` started in an empty working directory, so nothing can hide in a local file.

A run killed mid-sweep resumes to the board a local run gives, embedding no text twice; damaged objects are
found and recomputed, never trusted; the S3 credentials reach no object, no Dagster run and no MLflow run.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from tests.conftest import TIMED, assert_same_board

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.stack]
PREFIX = "sweeps/slice"


@pytest.fixture(scope="module")
def deployment(s3_server, postgres_server, mlflow_server, tmp_path_factory):
    """The environment of a deployment whose data dir is `s3://rag/sweeps/slice`."""
    import s3fs

    tmp = tmp_path_factory.mktemp("object-storage")
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "deploy" / "dagster.yaml").read_text())
    env = {
        **os.environ,
        **s3_server.env(),
        "DAGSTER_HOME": str(home),
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(postgres_server.port),
        "DAGSTER_PG_USER": postgres_server.user,
        "DAGSTER_PG_PASSWORD": "unused",
        "DAGSTER_PG_DB": postgres_server.create_db("dagster_object_storage"),
        "MLFLOW_TRACKING_URI": mlflow_server.url,
        "RAG_DATA_DIR": f"s3://{s3_server.bucket}/{PREFIX}",
        "PYTHONPATH": str(ROOT),
    }
    fs = s3fs.S3FileSystem(
        key=s3_server.key_id, secret=s3_server.secret, client_kwargs={"endpoint_url": s3_server.endpoint}
    )
    return {"env": env, "home": home, "tmp": tmp, "fs": fs, "root": f"{s3_server.bucket}/{PREFIX}"}


def _start(spec: Path, deployment: dict, out: Path | None = None) -> subprocess.Popen:
    cwd = deployment["tmp"] / f"cwd-{time.monotonic_ns()}"
    cwd.mkdir()  # an empty working directory: nothing local to lean on
    args = [sys.executable, "-m", "rag_sweep.cli", "run", str(spec)]
    return subprocess.Popen(
        args + (["--output", str(out)] if out else []),
        cwd=cwd,
        env=deployment["env"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(spec: Path, deployment: dict) -> tuple[pl.DataFrame, str]:
    out = deployment["tmp"] / f"board-{time.monotonic_ns()}.parquet"
    proc = _start(spec, deployment, out)
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-3000:]
    left = [str(f) for p in deployment["tmp"].glob("cwd-*") for f in p.iterdir()]
    assert not left, f"a run wrote to its working dir: {left}"
    return pl.read_parquet(out), stdout + stderr


def _objects(deployment: dict, folder: str, suffix: str = ".parquet") -> list[str]:
    fs = deployment["fs"]
    fs.invalidate_cache()
    return sorted(p for p in fs.find(f"{deployment['root']}/{folder}") if p.endswith(suffix))


def _main_artifacts(deployment: dict, stage: str) -> list[str]:
    return [p for p in _objects(deployment, stage) if p.rsplit("/", 1)[-1].count(".") == 1]


def _instance(deployment: dict) -> dg.DagsterInstance:
    keys = [k for k in deployment["env"] if k.startswith("DAGSTER_PG_")]
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: deployment["env"][k] for k in keys})
    try:
        return dg.DagsterInstance.from_config(str(deployment["home"]))
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


@pytest.fixture(scope="module")
def resumed(slice_sweep, sweep_run, deployment):
    """The slice sweep killed once its first evaluation is stored, then run again."""
    proc = _start(slice_sweep, deployment)
    t0 = time.monotonic()
    while not _main_artifacts(deployment, "evaluations"):
        assert proc.poll() is None, f"the run ended before the kill point: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() - t0 < 600, "the kill point never came"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)
    proc.wait()
    done = {stage: _main_artifacts(deployment, stage) for stage in ("chunksets", "embeddings", "evaluations")}
    board, output = _run(slice_sweep, deployment)
    return {"board": board, "output": output, "before": done}


def test_a_killed_sweep_on_object_storage_resumes_to_the_local_board(resumed, sweep_run, deployment):
    assert_same_board(resumed["board"], sweep_run["board"], skip=TIMED)
    # what was complete at the kill was kept, not computed again
    for stage, files in resumed["before"].items():
        assert set(files) <= set(_main_artifacts(deployment, stage)), stage
    instance = _instance(deployment)
    for stage in ("chunksets", "embeddings"):
        key = sweep_run["plan"].asset_path(stage)
        events = instance.fetch_materializations(dg.AssetKey(key), limit=100).records
        assert len(events) == len(_main_artifacts(deployment, stage)), stage  # each once, in either run
    # every text embedded once: the cache's parts hold distinct texts
    import io

    fs = deployment["fs"]
    hashes = pl.concat(
        [
            pl.read_parquet(io.BytesIO(fs.cat_file(p)), columns=["text_hash"])
            for p in _objects(deployment, "embedding_cache")
        ]
    )["text_hash"]
    assert hashes.len() and hashes.n_unique() == hashes.len()
    # the leaderboard, the ship report and the indexes are in the bucket
    assert _objects(deployment, "leaderboards", ".report.html")
    assert _objects(deployment, "lancedb", ".lance")


def test_damaged_objects_are_recomputed_never_trusted(resumed, slice_sweep, sweep_run, deployment):
    fs = deployment["fs"]
    embeddings = _main_artifacts(deployment, "embeddings")
    part = _objects(deployment, "embedding_cache")[0]
    for path in (*embeddings, part):
        data = fs.cat_file(path)
        fs.pipe_file(path, data[: len(data) // 2])  # cut short, as an interrupted copy leaves it
    board, output = _run(slice_sweep, deployment)
    assert "is damaged" in output
    assert any(p.endswith(".damaged") for p in _objects(deployment, "embedding_cache", ".damaged"))
    for path in embeddings:
        import pyarrow.parquet as pq

        with fs.open(path, "rb") as f:
            pq.read_metadata(f)  # whole again
    assert_same_board(board, sweep_run["board"], skip=TIMED)


def test_the_s3_secret_is_in_no_object_run_or_mlflow_record(resumed, s3_server, deployment, mlflow_server):
    from mlflow import MlflowClient

    fs = deployment["fs"]
    fs.invalidate_cache()
    objects = [p for p in fs.find(deployment["root"]) if fs.size(p) < 50_000_000]
    assert objects
    for path in objects:
        assert s3_server.secret.encode() not in fs.cat_file(path), path
    instance = _instance(deployment)
    for run in instance.get_runs():
        assert s3_server.secret not in repr((run.tags, run.run_config)), run.run_id
    client = MlflowClient(mlflow_server.url)
    for exp in client.search_experiments():
        for run in client.search_runs([exp.experiment_id]):
            assert s3_server.secret not in repr((run.data.params, run.data.tags)), run.info.run_id


def test_a_data_dir_on_object_storage_without_a_deployment_fails_first_in_one_line(slice_sweep, tmp_path):
    env = {
        k: v
        for k, v in os.environ.items()
        if k not in ("DAGSTER_HOME", "DAGSTER_PG_HOST", "MLFLOW_TRACKING_URI")
    }
    proc = subprocess.run(
        [sys.executable, "-m", "rag_sweep.cli", "run", str(slice_sweep), "--data-dir", "s3://rag/nowhere"],
        cwd=tmp_path,
        env={**env, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
    )
    assert proc.returncode == 2
    assert "s3://rag/nowhere is on object storage" in proc.stderr and "$DAGSTER_HOME" in proc.stderr
    assert not any(tmp_path.iterdir())


def test_gc_on_object_storage_removes_what_no_sweep_needs_and_its_weaviate_collection(
    resumed, slice_sweep, deployment, weaviate_server
):
    """Unneeded objects planted beside the sweep's own on the S3 server (an artifact no plan names, an index
    marker whose collection is on the Weaviate server, a cache part of texts no chunkset holds): gc lists
    them and only them, --apply removes them and the collection, and the sweep's board is untouched."""
    import numpy as np

    from resources.vector_stores.weaviate_store import WeaviateStore

    fs, root = deployment["fs"], deployment["root"]
    env = {
        **deployment["env"],
        "WEAVIATE_URL": weaviate_server.url,
        "WEAVIATE_GRPC_PORT": str(weaviate_server.grpc_port),
    }
    store = WeaviateStore(url=weaviate_server.url, grpc_port=weaviate_server.grpc_port)
    stale = "Rag_stale_index_0123456789"
    rows = [{"chunk_id": "c1", "doc_id": "d1", "text": "a stale chunk", "metadata": "{}"}]
    store.upsert(stale, rows, np.ones((1, 4), dtype=np.float32))
    fake = "f" * 64
    marker = pl.DataFrame({"collection": [stale], "store": ["weaviate"], "count": [1]})
    with fs.open(f"{root}/vector_index/{fake}.parquet", "wb") as f:
        marker.write_parquet(f)
    fs.copy(_main_artifacts(deployment, "answers")[0], f"{root}/answers/{'e' * 64}.parquet")
    (model_folder,) = {p.rsplit("/", 1)[0] for p in _objects(deployment, "embedding_cache")}
    part = pl.DataFrame({"text_hash": ["nobody"], "vector": [[0.0, 1.0]]})
    with fs.open(f"{model_folder}/stale-part.parquet", "wb") as f:
        part.write_parquet(f)
    before = set(_objects(deployment, ""))

    def gc(*flags: str) -> subprocess.CompletedProcess:
        args = [sys.executable, "-m", "rag_sweep.cli", "gc", str(slice_sweep), "--older-than", "0", *flags]
        return subprocess.run(args, env=env, capture_output=True, text=True, cwd=deployment["tmp"])

    listed = gc()
    assert listed.returncode == 0, listed.stderr[-3000:]
    # the planted artifact and marker; the planted cache part and those of texts only the evaluation
    # embeds (answers' sentences), which no chunkset or QA set holds
    assert re.search(
        r"would remove 2 artifact file\(s\), \d+ embedding-cache part\(s\) and 1 vector", listed.stdout
    )
    assert f"weaviate collection {stale}" in listed.stdout and set(_objects(deployment, "")) == before
    applied = gc("--apply")
    assert applied.returncode == 0, applied.stderr[-3000:]
    planted = {
        f"{root}/vector_index/{fake}.parquet",
        f"{root}/answers/{'e' * 64}.parquet",
        f"{model_folder}/stale-part.parquet",
    }
    removed = before - set(_objects(deployment, ""))
    assert planted <= removed and all("/embedding_cache/" in p for p in removed - planted)
    assert not store.info(stale)["exists"]
    again = gc()
    assert (
        "would remove 0 artifact file(s), 0 embedding-cache part(s) and 0 vector collection(s)"
        in again.stdout
    )
