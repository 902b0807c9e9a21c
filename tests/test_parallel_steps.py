"""Independent partitions in worker processes (rag_assets/step_runs.py): the same leaderboard as one process,
each text embedded once, each Dagster run tagged with the worker that ran it, and a step that fails in a
worker stops the sweep with its name while what completed stays complete."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl
import pytest

from tests.conftest import assert_same_board


def test_two_workers_give_the_board_of_one_process_and_embed_each_text_once(sweep_run, slice_sweep, tmp_path):
    from rag_assets.cli import CLI_PID_TAG, run_sweep

    run = run_sweep(str(slice_sweep), str(tmp_path / "data"), progress=False, workers=2)
    assert_same_board(run.board, sweep_run["board"])

    pids = {r.tags[CLI_PID_TAG] for r in run.instance.get_runs() if CLI_PID_TAG in r.tags}  # not observations
    workers = pids - {str(os.getpid())}
    assert len(workers) == 2, pids  # the partitions ran in two other processes
    assert run.instance.get_runs(limit=1)[0].tags[CLI_PID_TAG] != str(os.getpid())

    parts = list((tmp_path / "data" / "embedding_cache").rglob("*.parquet"))
    hashes = pl.concat([pl.read_parquet(p, columns=["text_hash"]) for p in parts])["text_hash"]
    assert hashes.len() == hashes.n_unique() > 0  # the two embeddings never ran at once on shared texts


def test_a_step_that_fails_in_a_worker_is_named_and_what_completed_stays(slice_sweep, tmp_path):
    from rag_assets.cli import StepFailed, run_sweep
    from resources.embedders import EmbeddingService

    blocked = tmp_path / "not-a-folder"
    blocked.write_text("a file where the embedding cache would go")
    with pytest.raises(StepFailed, match=r"^embeddings\[.*(NotADirectory|FileExists)"):
        run_sweep(
            str(slice_sweep),
            str(tmp_path / "data"),
            progress=False,
            workers=2,
            resources={"embedder": EmbeddingService(cache_dir=str(blocked / "cache"))},
        )
    chunksets = [p for p in (tmp_path / "data" / "chunksets").iterdir() if not p.name.startswith(".")]
    assert len(chunksets) == 2  # both chunksets were complete before an embedding failed


def test_a_bad_worker_count_is_a_one_line_error(slice_sweep, tmp_path, monkeypatch, capsys):
    from rag_assets.cli import main

    assert main(["run", str(slice_sweep), "--data-dir", str(tmp_path), "--workers", "0"]) == 2
    assert "--workers 0: expected 1 or more" in capsys.readouterr().err
    monkeypatch.setenv("RAG_WORKERS", "many")
    assert main(["run", str(slice_sweep), "--data-dir", str(tmp_path / "d")]) == 2
    assert "$RAG_WORKERS='many'" in capsys.readouterr().err
    assert not Path(tmp_path / "d" / "chunksets").exists()
