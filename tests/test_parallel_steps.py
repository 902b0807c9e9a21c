"""Independent partitions in worker processes (runner/step_runs.py): the same leaderboard as one process,
each text embedded once, each Dagster run tagged with the worker that ran it, and a step that fails in a
worker (or a worker killed mid-step) stops the sweep with its name while what completed stays complete."""

from __future__ import annotations

import os
import signal
from pathlib import Path

import polars as pl
import pytest

from resources.embedders import EmbeddingService
from tests.conftest import assert_same_board, cli

_BLOCKS_EMBEDDED = 0


class KilledOnThirdBlock(EmbeddingService):
    """Embeds two blocks of texts (each saved to the cache as it completes), then SIGKILLs the worker
    process embedding the third: no cleanup runs, as when the kernel's out-of-memory killer strikes."""

    parent: int = 0  # the test's process, which must never be killed

    def _model_embed(self, model, texts, progress):
        global _BLOCKS_EMBEDDED
        if os.getpid() == self.parent:
            raise RuntimeError("expected to embed in a worker process")
        _BLOCKS_EMBEDDED += 1
        if _BLOCKS_EMBEDDED == 3:
            os.kill(os.getpid(), signal.SIGKILL)
        return super()._model_embed(model, texts, progress)


def _cache(data: Path) -> pl.DataFrame:
    parts = list((data / "embedding_cache").rglob("*.parquet"))
    return pl.concat([pl.read_parquet(p) for p in parts]) if parts else pl.DataFrame()


def test_two_workers_give_the_board_of_one_process_and_embed_each_text_once(sweep_run, slice_sweep, tmp_path):
    from runner import RUNNER_PID_TAG, asset_key, run_sweep

    run = run_sweep(str(slice_sweep), str(tmp_path / "data"), progress=False, workers=2)
    assert_same_board(run.board, sweep_run["board"])

    pids = {
        r.tags[RUNNER_PID_TAG] for r in run.instance.get_runs() if RUNNER_PID_TAG in r.tags
    }  # not observations
    workers = pids - {str(os.getpid())}
    assert len(workers) == 2, pids  # the partitions ran in two other processes
    # the leaderboard too (the finalists' holdout steps then run in this process)
    board = run.instance.get_latest_materialization_event(asset_key(run.plan, "leaderboard"))
    assert run.instance.get_run_by_id(board.run_id).tags[RUNNER_PID_TAG] != str(os.getpid())

    hashes = _cache(tmp_path / "data")["text_hash"]
    assert hashes.len() == hashes.n_unique() > 0  # the two embeddings never ran at once on shared texts


def test_a_step_that_fails_in_a_worker_is_named_and_what_completed_stays(slice_sweep, tmp_path):
    from runner import StepFailed, run_sweep

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


@pytest.mark.slow  # two sweeps, one of them in two worker processes
def test_a_worker_killed_mid_embedding_is_named_and_the_next_run_resumes_from_its_saved_blocks(
    sweep_run, slice_sweep, tmp_path
):
    import dagster as dg

    from resources import build_resources
    from runner import StepFailed, run_sweep

    data = tmp_path / "data"
    default = build_resources(str(data))["embedder"]  # the run's backend and endpoint, as the other runs
    settings = {k: getattr(default, k) for k in type(default).model_fields}
    dying = KilledOnThirdBlock(**{**settings, "checkpoint_texts": 16}, parent=os.getpid())
    with pytest.raises(StepFailed, match=r"embeddings\[.*a worker process ended abruptly"):
        run_sweep(str(slice_sweep), str(data), progress=False, workers=2, resources={"embedder": dying})
    saved = _cache(data)
    assert saved.height == 32  # the two whole blocks embedded before the kill, nothing of the third

    run = run_sweep(str(slice_sweep), str(data), progress=False, workers=1)
    assert_same_board(run.board, sweep_run["board"])
    cache = _cache(data)
    assert cache["text_hash"].n_unique() == cache.height > saved.height  # the rest embedded, once each
    kept = saved.join(cache, on="text_hash", suffix="_after")
    assert kept.height == saved.height and kept["vector"].to_list() == kept["vector_after"].to_list()
    live = [dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    assert not run.instance.get_runs(filters=dg.RunsFilter(statuses=live))  # the killed runs were closed
    failed = run.instance.get_runs(filters=dg.RunsFilter(statuses=[dg.DagsterRunStatus.FAILURE]))
    assert any(r.tags.get("dagster/partition") in run.plan.partitions["embeddings"] for r in failed)


def test_a_bad_worker_count_is_a_one_line_error(slice_sweep, tmp_path, monkeypatch, capsys):

    assert (
        r := cli(*["run", str(slice_sweep), "--data-dir", str(tmp_path), "--workers", "0"])
    ).returncode == 2
    assert "--workers 0: expected 1 or more" in r.stderr
    monkeypatch.setenv("RAG_WORKERS", "many")
    assert (r := cli(*["run", str(slice_sweep), "--data-dir", str(tmp_path / "d")])).returncode == 2
    assert "$RAG_WORKERS='many'" in r.stderr
    assert not Path(tmp_path / "d" / "chunksets").exists()
