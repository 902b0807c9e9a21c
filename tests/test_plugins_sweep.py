"""The example plug-in package (examples/plugins: the `lines` chunking method, the `exact` vector store and
the `answer_in_context` metric), installed by a real installer into a folder on the CLI's path, in a sweep as a user runs it: listed
by `rag-sweep components`, a leaderboard column, an MLflow metric; upgraded, it recomputes what it made and
nothing else."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import mlflow
import polars as pl
import pytest

from tests.conftest import ROOT, write_sweep

pytestmark = pytest.mark.slow


def _uv() -> list[str]:
    found = shutil.which("uv")
    return [found] if found else ["python3", "-m", "uv"]  # where scripts/bootstrap.sh put it


def install(target: Path, source: Path, version: str | None = None) -> None:
    """Install the package at `source` (its version replaced by `version`) into `target`, as `uv pip
    install` does: no dependencies (rag-sweep is the host), built with the project's setuptools."""
    build = target.parent / f"src-{version or 'as-is'}"
    shutil.copytree(source, build)
    if version:
        toml = build / "pyproject.toml"
        toml.write_text(re.sub(r'^version = ".*"$', f'version = "{version}"', toml.read_text(), flags=re.M))
    subprocess.run(
        [*_uv(), "pip", "install", "--python", sys.executable, "--no-deps", "--no-build-isolation"]
        + ["--offline", "--reinstall", "--target", str(target), str(build)],
        check=True,
        capture_output=True,
    )


def rag_sweep(target: Path, *args) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(target)}
    return subprocess.run(
        [sys.executable, "-m", "rag_sweep.cli", *map(str, args)],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )


def test_the_example_plugins_installed_run_in_a_sweep_and_an_upgrade_recomputes_only_their_work(
    small_slice, tmp_path
):
    target = tmp_path / "site"
    install(target, ROOT / "examples" / "plugins")
    listed = rag_sweep(target, "components")
    assert listed.returncode == 0, listed.stderr
    for name in ("lines", "exact", "answer_in_context"):
        assert re.search(rf"^  {name} +rag-sweep-example-plugins 0\.1\.0 ", listed.stdout, re.M), (
            listed.stdout
        )

    spec = write_sweep(
        tmp_path / "plugins.yaml",
        small_slice,
        name="plugins",
        chunking=[
            {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
            {"method": "lines", "chunk_size": 300, "chunk_overlap": 0},
        ],
        index={"store": "exact"},
        retrieval={"mode": "hybrid", "top_k": 4},
        weights={"recall_at_k": 0.3, "token_f1": 0.5, "answer_in_context": 0.2},
    )
    valid = rag_sweep(target, "validate", spec)
    assert "plug-ins: lines (chunking method, rag-sweep-example-plugins 0.1.0)" in valid.stdout, valid.stderr
    data = tmp_path / "data"
    run = rag_sweep(target, "run", spec, "--data-dir", data)
    assert run.returncode == 0, run.stderr[-3000:]
    assert "ans in ctx" in run.stdout  # the plug-in metric's column, under its label
    aliases = sorted(p.stem for p in (data / "exact" / "_aliases").glob("*.json"))
    assert len(aliases) == 2, aliases  # each chunking's index, in the plug-in store under the data dir

    board = pl.read_parquet(data / "leaderboards" / "plugins.parquet")
    assert sorted(k.split("__")[0] for k in board["config_key"]) == ["lines-300-0", "paragraph-1024-0"]
    scores = dict(zip(board["config_key"], board["answer_in_context"], strict=True))
    assert all(0.0 <= v <= 1.0 for v in scores.values()), scores
    # a client of its own: setting the process's tracking URI would send later tests' runs here
    client = mlflow.MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    experiment = client.get_experiment_by_name("plugins").experiment_id
    runs = client.search_runs([experiment], filter_string="tags.config_key != ''")  # the configs' runs
    logged = {r.data.tags["config_key"]: r.data.metrics["answer_in_context"] for r in runs}
    assert logged == pytest.approx(scores)
    # the weighted plug-in metric is in each config's overall score
    for row in board.iter_rows(named=True):
        expected = 0.3 * row["recall_at_k"] + 0.5 * row["token_f1"] + 0.2 * row["answer_in_context"]
        assert row["overall_score"] == pytest.approx(expected, abs=1e-12)

    # an upgrade: the lines chunkset and what was built on it, every index (the store) and what was built on
    # it, and every evaluation (the metric), again
    install(target, ROOT / "examples" / "plugins", version="0.2.0")
    plan = rag_sweep(target, "plan", spec, "--data-dir", data)
    assert plan.returncode == 0, plan.stderr
    table = dict(re.findall(r"^  (\w+) +(\d+ +\d+)$", plan.stdout, re.M))
    to_run = {stage: tuple(map(int, counts.split())) for stage, counts in table.items()}
    on_the_store = ("vector_index", "retrievals", "rerankings", "answers", "evaluations")
    assert to_run == {"chunksets": (1, 1), "embeddings": (1, 1), **dict.fromkeys(on_the_store, (0, 2))}, (
        plan.stdout
    )
