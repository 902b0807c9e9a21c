"""Steps on a worker fleet: `rag-sweep run` with $RAG_EXECUTOR=celery hands every partitioned step to
Dagster's Celery executor, and two real Celery workers (a real RabbitMQ broker) run them. Each worker and
the runner start in an empty working directory of their own and share no file: only PostgreSQL (the
instance, locks, LLM call cache), the S3 server (the data dir) and the MLflow server.

The fleet's board equals the in-process board; the embedding steps go only to the worker serving the GPU
queue; each text is embedded once; a worker killed in the middle of a step loses nothing: the broker hands
the step to the other worker and nothing complete is computed again.
"""

from __future__ import annotations

import io
import os
import shutil
import subprocess
import sys
import time
from collections import defaultdict
from pathlib import Path

import dagster as dg
import polars as pl
import pytest

from tests.conftest import TIMED, assert_same_board, write_sweep
from tests.servers import CeleryWorker

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.stack]
# the deployment's instance with compute logs off: a worker on another machine cannot write the launcher's
# folder (a fleet keeps them in object storage: README, Deployment)
NO_COMPUTE_LOGS = """
compute_logs:
  module: resources.dagster_private
  class: NoOpComputeLogManager
"""


@pytest.fixture(scope="module")
def fleet(s3_server, postgres_server, mlflow_server, rabbitmq_server, tmp_path_factory):
    """The deployment's environment and two workers: `gpu` serves the default queue and the GPU queue,
    `cpu` the default queue only."""
    import s3fs

    tmp = tmp_path_factory.mktemp("fleet")
    home = tmp / "dagster_home"
    home.mkdir()
    (home / "dagster.yaml").write_text((ROOT / "deploy" / "dagster.yaml").read_text() + NO_COMPUTE_LOGS)
    shared = {
        **s3_server.env(),
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(postgres_server.port),
        "DAGSTER_PG_USER": postgres_server.user,
        "DAGSTER_PG_PASSWORD": "unused",
        "DAGSTER_PG_DB": postgres_server.create_db("dagster_fleet"),
        "MLFLOW_TRACKING_URI": mlflow_server.url,
        "CELERY_BROKER_URL": rabbitmq_server.url,
    }
    base = {k: v for k, v in os.environ.items() if not k.startswith(("DAGSTER_", "RAG_", "MLFLOW_"))}
    workers = {
        name: CeleryWorker.start(name, queues, {**base, **shared}, tmp)
        for name, queues in (("gpu", "dagster,gpu"), ("cpu", "dagster"))
    }
    fs = s3fs.S3FileSystem(
        key=s3_server.key_id, secret=s3_server.secret, client_kwargs={"endpoint_url": s3_server.endpoint}
    )
    launcher = {**base, **shared, "DAGSTER_HOME": str(home), "RAG_EXECUTOR": "celery"}
    yield {"launcher": launcher, "home": home, "tmp": tmp, "fs": fs, "bucket": s3_server.bucket, **workers}
    for w in workers.values():
        w.stop()


def _start(spec: Path, fleet: dict, prefix: str, **env) -> subprocess.Popen:
    cwd = fleet["tmp"] / f"cwd-{time.monotonic_ns()}"
    cwd.mkdir()
    return subprocess.Popen(
        [
            sys.executable,
            "-m",
            "rag_sweep.cli",
            "run",
            str(spec),
            "--output",
            str(cwd.parent / f"{prefix}.parquet"),
        ],
        cwd=cwd,
        env={**fleet["launcher"], "RAG_DATA_DIR": f"s3://{fleet['bucket']}/{prefix}", **env},
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _finish(proc: subprocess.Popen, fleet: dict, prefix: str) -> pl.DataFrame:
    _, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-4000:]
    for name in ("gpu", "cpu"):
        assert not list(fleet[name].cwd.iterdir()), f"worker {name} wrote to its working dir"
    return pl.read_parquet(fleet["tmp"] / f"{prefix}.parquet")


def _instance(fleet: dict) -> dg.DagsterInstance:
    keys = [k for k in fleet["launcher"] if k.startswith("DAGSTER_PG_")]
    saved = {k: os.environ.get(k) for k in keys}
    os.environ.update({k: fleet["launcher"][k] for k in keys})
    try:
        return dg.DagsterInstance.from_config(str(fleet["home"]))
    finally:
        for k, v in saved.items():
            os.environ.pop(k) if v is None else os.environ.__setitem__(k, v)


def _workers_by_step(instance, sweep: str) -> dict[tuple[str, str | None], list[str]]:
    """(stage, partition or first partition of a batch) -> the workers that started it, in order, from the
    engine events Dagster's Celery tasks record in each step's run."""
    out = defaultdict(list)
    for run in instance.get_runs(filters=dg.RunsFilter(tags={"sweep": sweep})):
        stage = run.job_name.rsplit("__", 1)[-1]
        key = run.tags.get("dagster/partition") or run.tags.get("dagster/asset_partition_range_start")
        for entry in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ENGINE_EVENT):
            worker = entry.dagster_event.engine_event_data.metadata.get("Celery worker")
            if worker is not None:
                out[(stage, key)].append(worker.value.split("@")[0])
    return out


def _embedded_hashes(fleet: dict, prefix: str) -> pl.Series:
    fs = fleet["fs"]
    fs.invalidate_cache()
    parts = [p for p in fs.find(f"{fleet['bucket']}/{prefix}/embedding_cache") if p.endswith(".parquet")]
    return pl.concat([pl.read_parquet(io.BytesIO(fs.cat_file(p)), columns=["text_hash"]) for p in parts])[
        "text_hash"
    ]


def _materialized_once(instance, plan, stage: str) -> None:
    events = instance.fetch_materializations(dg.AssetKey(plan.asset_path(stage)), limit=1000).records
    keys = [e.partition_key for e in events]
    assert keys and len(keys) == len(set(keys)), f"{stage}: a partition was materialized twice"


@pytest.fixture(scope="module")
def eight(slice_data, tmp_path_factory) -> Path:
    """2 chunkings x 2 retrieval modes x 2 depths = 8 configs on 20 questions."""
    return write_sweep(
        tmp_path_factory.mktemp("spec") / "fleet.yaml",
        slice_data,
        name="fleet",
        chunking=[
            {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            {"method": "recursive", "chunk_size": 300, "chunk_overlap": 40},
        ],
        retrieval={"mode": ["vector", "hybrid"], "top_k": [4, 2], "hybrid_alpha": 0.5, "fusion": "weighted"},
    )


def test_a_sweep_on_two_workers_gives_the_local_board(eight, fleet, sweep_run, tmp_path):
    from rag_sweep.runner import load_plan, run_sweep

    board = _finish(_start(eight, fleet, "fleet/eight", RAG_GPU_QUEUE="gpu"), fleet, "fleet/eight")
    # the same sweep in process; its embeddings come from the slice sweep's cache (same texts, same model)
    shutil.copytree(sweep_run["data"] / "embedding_cache", tmp_path / "embedding_cache")
    local = run_sweep(str(eight), str(tmp_path), progress=False)
    assert board.height == 8
    assert_same_board(board, local.board, skip=TIMED)

    plan = load_plan(eight)
    instance = _instance(fleet)
    ran = _workers_by_step(instance, plan.sweep.name)
    assert {w for ws in ran.values() for w in ws} == {"gpu", "cpu"}, ran  # both took steps
    embedding = {step: ws for step, ws in ran.items() if step[0] == "embeddings"}
    assert embedding and all(ws == ["gpu"] for ws in embedding.values()), embedding  # routed
    assert any(step[0] == "evaluations" for step in ran) and ("leaderboard", None) in ran
    hashes = _embedded_hashes(fleet, "fleet/eight")
    assert hashes.len() and hashes.n_unique() == hashes.len()  # every text embedded once
    for stage in ("chunksets", "embeddings", "retrievals", "evaluations"):
        _materialized_once(instance, plan, stage)


def test_a_killed_worker_loses_nothing(slice_sweep, sweep_run, fleet):
    """The worker running an embedding step is SIGKILLed: the other worker runs that step again, the sweep
    ends with the in-process board, and nothing complete is computed twice."""
    plan = sweep_run["plan"]
    proc = _start(slice_sweep, fleet, "fleet/kill")  # no GPU queue: every step may go to either worker
    instance = _instance(fleet)
    t0 = time.monotonic()
    while not (
        embedding := [
            (s, ws) for s, ws in _workers_by_step(instance, plan.sweep.name).items() if s[0] == "embeddings"
        ]
    ):
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        assert time.monotonic() - t0 < 300, "no embedding step started"
        time.sleep(0.2)
    step, (victim, *_) = embedding[0]
    fleet[victim].kill()
    board = _finish(proc, fleet, "fleet/kill")
    assert_same_board(board, sweep_run["board"], skip=TIMED)

    ran = _workers_by_step(instance, plan.sweep.name)
    survivor = ({"gpu", "cpu"} - {victim}).pop()
    assert ran[step] == [victim, survivor], ran[step]  # started on the killed worker, ended on the other
    hashes = _embedded_hashes(fleet, "fleet/kill")
    assert hashes.len() and hashes.n_unique() == hashes.len()
    for stage in ("chunksets", "embeddings", "retrievals", "evaluations"):
        _materialized_once(instance, plan, stage)
