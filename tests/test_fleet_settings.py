"""The fleet's settings, without a broker: which steps go to the GPU queue (an op tag Dagster's Celery
executor reads), and the settings a fleet run refuses in one line before any work."""

from pathlib import Path

import dagster as dg
import yaml

from rag_assets.sweep_assets import stage_assets
from rag_sweep.runner import load_plan
from tests.conftest import cli

ROOT = Path(__file__).resolve().parents[1]
QUEUE_TAG = "dagster-celery/queue"


def _queues(spec: Path) -> dict[str, str | None]:
    return {
        a.key.path[-1]: a.op.tags.get(QUEUE_TAG)
        for a in stage_assets(load_plan(spec))
        if isinstance(a, dg.AssetsDefinition) and a.is_materializable
    }


def test_the_steps_that_load_a_model_go_to_the_gpu_queue(monkeypatch, tmp_path):
    example = ROOT / "examples/sweeps/example.yaml"
    spec = yaml.safe_load(example.read_text())
    spec["data"] = {k: str((example.parent / v).resolve()) for k, v in spec["data"].items()}
    (tmp_path / "ce").mkdir()
    spec["rerank"] = [{"method": "none"}, {"method": "cross_encoder", "model": str(tmp_path / "ce")}]
    reranked = tmp_path / "reranked.yaml"
    reranked.write_text(yaml.safe_dump(spec))
    assert set(_queues(example).values()) == {None}  # no $RAG_GPU_QUEUE: every step on the default queue
    monkeypatch.setenv("RAG_GPU_QUEUE", "gpu")
    routed = _queues(example)
    assert routed["embeddings"] == "gpu"
    assert routed["rerankings"] is None  # the example reranks with no model
    assert {k for k, q in routed.items() if q} == {"embeddings"}
    assert _queues(reranked)["rerankings"] == "gpu"  # a cross-encoder


def test_a_fleet_run_refuses_what_its_workers_could_not_reach(tmp_path, monkeypatch):
    spec = ROOT / "examples/sweeps/example.yaml"
    monkeypatch.setenv("RAG_EXECUTOR", "ray")
    r = cli("run", spec, "--data-dir", tmp_path)
    assert r.returncode == 2 and "$RAG_EXECUTOR='ray': expected one of in_process, celery" in r.stderr
    monkeypatch.setenv("RAG_EXECUTOR", "celery")
    r = cli("run", spec, "--data-dir", tmp_path)
    assert r.returncode == 2 and "the workers cannot reach data dir" in r.stderr, r.stderr
    assert "Traceback" not in r.stderr and not list(tmp_path.iterdir())  # nothing written
    monkeypatch.setenv("DAGSTER_HOME", str(tmp_path))
    monkeypatch.setenv("DAGSTER_PG_HOST", "127.0.0.1")
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:1")
    monkeypatch.delenv("CELERY_BROKER_URL", raising=False)
    r = cli("run", spec, "--data-dir", "s3://bucket/prefix")
    assert r.returncode == 2 and "set $CELERY_BROKER_URL" in r.stderr, r.stderr
