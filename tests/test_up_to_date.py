"""An unchanged rerun answered from the last run's record (rag_sweep/runner/up_to_date.py): the same output without
importing Dagster or MLflow, and any change to what the answer was read from (an artifact, the MLflow store,
an input file, the spec) asked again through Dagster."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from rag_sweep.runner.up_to_date import RECORD
from tests.conftest import ROOT, write_sweep

RUN = """
import sys
from rag_sweep.cli import main
rc = main(["run", *sys.argv[1:]])
print("IMPORTED " + " ".join(m for m in ("dagster", "mlflow") if m in sys.modules), file=sys.stderr)
sys.exit(rc)
"""


def _run(spec: Path, data: Path, *extra: str) -> tuple[str, str, set[str]]:
    """`rag-sweep run` in a process of its own: (stdout, stderr, the heavy packages it imported)."""
    env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "DAGSTER_HOME")}
    done = subprocess.run(
        [sys.executable, "-c", RUN, str(spec), "--data-dir", str(data), *extra],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert done.returncode == 0, done.stderr
    imported = done.stderr.strip().splitlines()[-1].removeprefix("IMPORTED").split()
    return done.stdout, done.stderr, set(imported)


def _printed(stdout: str) -> str:
    """What a run prints, but its duration."""
    return re.sub(r"configs, \d+ s\)", "configs, N s)", stdout)


@pytest.fixture(scope="module")
def swept(small_slice, tmp_path_factory):
    folder = tmp_path_factory.mktemp("up_to_date")
    spec = write_sweep(
        folder / "one.yaml",
        small_slice,
        name="one",
        chunking={"method": "recursive", "chunk_size": 384, "chunk_overlap": 48},
        retrieval={"mode": "hybrid", "top_k": 3},
    )
    data = folder / "data"
    cold, _, _ = _run(spec, data)
    return spec, data, cold


def test_an_unchanged_rerun_prints_the_same_without_importing_dagster_or_mlflow(swept):
    spec, data, cold = swept
    assert (data / RECORD).exists()  # the run checked again that nothing was left, and recorded it
    out, err, imported = _run(spec, data)
    assert imported == set()
    assert "every partition is up to date: nothing to compute" in err
    assert _printed(out) == _printed(cold)  # the leaderboard, the recommendation, the UIs, the champion
    assert "Ship the winner (models:/one@champion, version 1" in out


def test_what_the_answer_was_read_from_changed_is_asked_again(swept, tmp_path):
    from mlflow import MlflowClient

    spec, data, cold = swept
    # an artifact deleted: computed again (through Dagster), then recorded again
    answers = sorted((data / "answers").glob("*.parquet"))
    answers[0].unlink()
    out, err, imported = _run(spec, data)
    assert "dagster" in imported and answers[0].exists()
    assert _printed(out) == _printed(cold)
    assert _run(spec, data)[2] == set()
    # the config's MLflow run deleted (in the MLflow UI): logged again
    client = MlflowClient(f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("one")
    runs = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    client.delete_run(runs[0].info.run_id)
    _, _, imported = _run(spec, data)
    assert "dagster" in imported
    again = client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")
    assert [r.info.run_id for r in again] != [runs[0].info.run_id] and len(again) == 1
    assert _run(spec, data)[2] == set()
    # an input file rewritten (the same bytes): observed again, nothing computed
    qa = Path(yaml.safe_load(spec.read_text())["data"]["qa"])
    qa.write_bytes(qa.read_bytes())
    _, err, imported = _run(spec, data)
    assert "dagster" in imported and "nothing to compute" in err
    assert _run(spec, data)[2] == set()
    # the spec edited (top_k 2): another config, computed
    edited = yaml.safe_load(spec.read_text())
    edited["retrieval"]["top_k"] = 2
    changed = tmp_path / "one.yaml"
    changed.write_text(yaml.safe_dump(edited))
    out, err, imported = _run(changed, data)
    assert "dagster" in imported and "nothing to compute" not in err
    assert "k2" in out and _run(changed, data)[2] == set()


def test_nothing_is_recorded_where_a_server_answers(swept, monkeypatch):
    from rag_assets.orchestration.plans import load_plan
    from rag_sweep.runner.up_to_date import recordable

    spec, data, _ = swept
    plan = load_plan(spec, None, data)
    assert recordable(plan, data)
    monkeypatch.setenv("MLFLOW_TRACKING_URI", "http://127.0.0.1:5000")
    assert not recordable(plan, data)  # a tracking server is always asked
    monkeypatch.delenv("MLFLOW_TRACKING_URI")
    monkeypatch.setenv("DAGSTER_HOME", str(data / "elsewhere"))
    assert not recordable(plan, data)  # a deployment's instance
    monkeypatch.delenv("DAGSTER_HOME")
    monkeypatch.setenv("RAG_EXECUTOR", "celery")
    assert not recordable(plan, data)  # a fleet
    monkeypatch.delenv("RAG_EXECUTOR")
    weaviate = load_plan(spec, "weaviate", data)
    assert not recordable(weaviate, data)  # a vector store server


def test_a_setting_that_cannot_run_is_refused_on_an_up_to_date_rerun_too(swept):
    """$RAG_DEVICE naming a device this machine lacks, or a bad $RAG_EXECUTOR: the rerun that would compute
    nothing says so as the run that computes would, in one line."""
    spec, data, _ = swept
    for name, value, said in (
        ("RAG_DEVICE", "cuda:7", "$RAG_DEVICE=cuda:7: this machine has no such device"),
        ("RAG_EXECUTOR", "threads", "$RAG_EXECUTOR='threads': expected one of"),
    ):
        env = {k: v for k, v in os.environ.items() if k not in ("MLFLOW_TRACKING_URI", "DAGSTER_HOME")}
        done = subprocess.run(
            [sys.executable, "-m", "rag_sweep.cli", "run", str(spec), "--data-dir", str(data)],
            capture_output=True,
            text=True,
            cwd=ROOT,
            env={**env, name: value},
        )
        assert done.returncode == 2 and said in done.stderr, done.stderr
        assert "nothing to compute" not in done.stderr
