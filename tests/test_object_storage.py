"""A sweep whose data dir is on object storage (a real S3-compatible server, started by the suite), run as
a deployment runs it: the Dagster instance and the locks in PostgreSQL, configs tracked on the MLflow
server, and `rag-sweep run` started in an empty working directory, so nothing can hide in a local file.

A run killed mid-sweep resumes to the board a local run gives, embedding no text twice; damaged objects are
found and recomputed, never trusted; the S3 credentials reach no object, no Dagster run and no MLflow run.
"""

from __future__ import annotations

import os
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
