"""A killed `rag-sweep run` loses nothing that was complete and trusts nothing that was not.

Each scenario SIGKILLs a real `rag-sweep run` subprocess at one point (during embedding, during answers,
before the leaderboard), runs it again, and compares the final leaderboard with an uninterrupted run into
another data dir. Damaged files (a truncated Parquet artifact, a truncated embedding-cache part) are found
and recomputed; two runs started together on one data dir give one leaderboard. The LLM is a local
OpenAI-protocol server; its API key must appear nowhere in what the runs leave behind.
"""

from __future__ import annotations

import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import time
import zlib
from pathlib import Path

import polars as pl
import pyarrow.parquet as pq
import pytest

from tests.conftest import assert_same_board, write_sweep
from tests.openai_stub import GoldAnswers, OpenAIStub

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
KEY = "sk-resume-test-0123456789abcdef"  # must never be written anywhere
N_CONFIGS = 2


@pytest.fixture(scope="module")
def llm(slice_data):
    """Answers each question with its gold answer after a short delay; one question gets an auth error
    that echoes the key, as some providers do."""
    qa = pl.read_parquet(slice_data["qa"])
    gold = GoldAnswers(qa)
    echoing = qa["question"][0]

    def respond(prompt: str):
        question = gold.question(prompt)
        if question == echoing:
            return 401, f"Incorrect API key provided: {KEY}", 0.0
        return 200, gold.answer[question], 0.15

    with OpenAIStub(respond) as stub:
        yield stub


@pytest.fixture(scope="module")
def spec(slice_data, tmp_path_factory) -> Path:
    return write_sweep(
        tmp_path_factory.mktemp("resume") / "resume.yaml",
        slice_data,
        name="resume",
        chunking=[
            {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},  # 124 texts
            {"method": "recursive", "chunk_size": 200, "chunk_overlap": 0},  # 397 texts: 2 cache parts
        ],
        retrieval={"mode": "vector", "top_k": 4},
        generation={"model": "openai/stub-model", "max_tokens": 16},
    )


def _start(spec: Path, data: Path, llm: OpenAIStub, out: Path | None = None) -> subprocess.Popen:
    env = {
        **os.environ,
        "RAG_LLM_API_BASE": llm.api_base,
        "RAG_LLM_API_KEY": KEY,
        "OPENAI_API_KEY": KEY,
    }
    args = [sys.executable, "-m", "rag_sweep.cli", "run", str(spec), "--data-dir", str(data)]
    return subprocess.Popen(
        args + (["--output", str(out)] if out else []),
        cwd=ROOT,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _run(spec: Path, data: Path, llm: OpenAIStub) -> tuple[pl.DataFrame, str]:
    out = data.parent / f"{data.name}.board.parquet"
    proc = _start(spec, data, llm, out)
    stdout, stderr = proc.communicate(timeout=900)
    assert proc.returncode == 0, stderr[-3000:]
    return pl.read_parquet(out), stdout + stderr


def _kill_when(proc: subprocess.Popen, condition, sig: int = signal.SIGKILL, timeout: float = 600) -> None:
    t0 = time.monotonic()
    while not condition():
        assert proc.poll() is None, f"the run ended before the kill point: {proc.communicate()[1][-2000:]}"
        assert time.monotonic() - t0 < timeout, "the kill point never came"
        time.sleep(0.05)
    proc.send_signal(sig)
    if sig == signal.SIGKILL:
        proc.wait()


def _cache_parts(data: Path) -> list[Path]:
    return sorted((data / "embedding_cache").rglob("*.parquet"))


def _cached_rows(data: Path) -> int:
    return sum(pq.read_metadata(p).num_rows for p in _cache_parts(data))


def _artifacts(data: Path, stage: str) -> list[Path]:
    """Main artifact files (not side tables, not temp files)."""
    return [p for p in (data / stage).glob("*.parquet") if p.name.count(".") == 1]


def _dagster_runs(data: Path) -> list:
    from rag_sweep.runner import local_instance

    with local_instance(data) as instance:
        return list(instance.get_runs())


def _seed_cache(reference: Path, data: Path) -> None:
    """Start from the reference run's embedding cache (content-addressed: only saves model time)."""
    shutil.copytree(reference / "embedding_cache", data / "embedding_cache")


@pytest.fixture(scope="module")
def reference(spec, llm, tmp_path_factory):
    data = tmp_path_factory.mktemp("reference") / "data"
    board, output = _run(spec, data, llm)
    hashes = pl.concat([pl.read_parquet(p, columns=["text_hash"]) for p in _cache_parts(data)])["text_hash"]
    assert hashes.n_unique() == hashes.len()  # no text embedded twice
    return {"data": data, "board": board, "output": output, "texts": _cached_rows(data)}


def test_the_reference_run_counts_the_echoed_key_as_an_error(reference):
    board = reference["board"]
    assert board.height == N_CONFIGS and (board["n_generation_errors"] == 1.0).all()
    assert reference["texts"] > 124 + 397  # the chunks, and the evaluation's answers and sentences


def test_killed_during_embedding_keeps_its_checkpoints_and_embeds_nothing_twice(
    spec, llm, reference, tmp_path
):
    data = tmp_path / "data"
    proc = _start(spec, data, llm)
    # a first 256-text checkpoint of the larger chunkset is on disk: the run is inside its embedding
    _kill_when(proc, lambda: any(pq.read_metadata(p).num_rows == 256 for p in _cache_parts(data)))
    before = _cached_rows(data)
    assert 256 <= before < reference["texts"] and len(_artifacts(data, "embeddings")) < N_CONFIGS
    board, _ = _run(spec, data, llm)
    after = _cached_rows(data)
    hashes = pl.concat([pl.read_parquet(p, columns=["text_hash"]) for p in _cache_parts(data)])["text_hash"]
    assert after == reference["texts"] and hashes.n_unique() == hashes.len()  # each text embedded once
    print(f"texts embedded before the kill: {before}; after the rerun: {after - before} more")
    assert_same_board(board, reference["board"])


def test_killed_during_answers_recomputes_only_the_unfinished_partition(spec, llm, reference, tmp_path):
    data = tmp_path / "data"
    _seed_cache(reference["data"], data)
    parts = _cache_parts(data)
    asked = len(llm.requests)
    proc = _start(spec, data, llm)
    _kill_when(proc, lambda: len(llm.requests) - asked >= 8)  # inside the first answers partition
    assert not _artifacts(data, "answers")  # nothing half-written was left as an artifact
    board, output = _run(spec, data, llm)
    assert _cache_parts(data) == parts  # nothing embedded again
    # the killed run's Dagster run is ended as failed, not left started for the UI to show forever
    assert "marked 1 Dagster run(s) a killed rag-sweep run left started as failed" in output
    runs = _dagster_runs(data)
    assert not [r for r in runs if not r.is_finished]
    (killed,) = [r for r in runs if r.status.value == "FAILURE"]
    assert killed.tags["rag/cli_pid"] == str(proc.pid)
    assert all(pq.read_metadata(p).num_rows == 20 for p in _artifacts(data, "answers"))
    assert_same_board(board, reference["board"])


def test_killed_before_the_leaderboard_resumes_to_the_same_board(spec, llm, reference, slice_data, tmp_path):
    data = tmp_path / "data"
    _seed_cache(reference["data"], data)
    proc = _start(spec, data, llm)
    _kill_when(proc, lambda: len(_artifacts(data, "evaluations")) == N_CONFIGS)
    asked = len(llm.requests)
    board, _ = _run(spec, data, llm)
    # every answer that came back was reused; only the failed call (the key-echoing question) is asked
    # again, in each config, never kept as a result
    echoing = pl.read_parquet(slice_data["qa"])["question"][0]
    again = [r["body"]["messages"][-1]["content"] for r in llm.requests[asked:]]
    assert again and all(echoing in p for p in again)
    assert_same_board(board, reference["board"])


def test_two_runs_started_together_on_one_data_dir_give_one_leaderboard(spec, llm, reference, tmp_path):
    from mlflow import MlflowClient

    data = tmp_path / "data"  # a new data dir: the stores are set up by whichever run comes first
    _seed_cache(reference["data"], data)
    procs = [_start(spec, data, llm, tmp_path / f"board{i}.parquet") for i in range(2)]
    results = [p.communicate(timeout=900) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], [r[1][-2000:] for r in results]
    assert sum("waiting for the rag-sweep run on" in err for _, err in results) == 1
    for i in range(2):
        assert_same_board(pl.read_parquet(tmp_path / f"board{i}.parquet"), reference["board"])
    client = MlflowClient(tracking_uri=f"sqlite:///{data / 'mlflow.db'}")
    exp = client.get_experiment_by_name("resume")
    assert len(client.search_runs([exp.experiment_id], filter_string="tags.config_key != ''")) == N_CONFIGS
    assert len(client.search_runs([exp.experiment_id], filter_string="tags.kind = 'leaderboard'")) == 1


def _stored_text(path: Path) -> list[str]:
    """Every text a file holds, with SQLite cells and zlib-compressed blobs (Dagster's snapshots) opened."""
    raw = path.read_bytes()
    texts = [raw.decode("latin-1")]
    if raw.startswith(b"SQLite format 3"):
        with sqlite3.connect(f"file:{path}?mode=ro", uri=True) as db:
            tables = [r[0] for r in db.execute("select name from sqlite_master where type = 'table'")]
            for table in tables:
                for row in db.execute(f'select * from "{table}"'):
                    for cell in row:
                        if isinstance(cell, bytes):
                            try:
                                cell = zlib.decompress(cell)
                            except zlib.error:
                                pass
                            texts.append(cell.decode("latin-1"))
                        elif isinstance(cell, str):
                            texts.append(cell)
    return texts


def test_the_api_key_is_nowhere_in_the_data_dir_or_the_output(reference):
    files = [p for p in reference["data"].rglob("*") if p.is_file()]
    assert any(p.name == "runs.db" for p in files) and any(p.name == "mlflow.db" for p in files)
    leaks = [str(p) for p in files if any(KEY in text for text in _stored_text(p))]
    assert not leaks
    assert KEY not in reference["output"]
    echoed = pl.concat([pl.read_parquet(p) for p in _artifacts(reference["data"], "answers")])
    assert echoed["error"].drop_nulls().str.contains("Incorrect API key provided: \\*\\*\\*").all()


def test_damaged_artifact_and_cache_part_are_recomputed_never_trusted(spec, llm, reference, tmp_path):
    data = tmp_path / "data"
    shutil.copytree(reference["data"], data)
    # the oldest part: the first chunkset's texts (copytree keeps modification times)
    cut_part = min(_cache_parts(data), key=lambda p: p.stat().st_mtime_ns)
    cut_rows = pq.read_metadata(cut_part).num_rows
    for path in (*_artifacts(data, "embeddings"), _artifacts(data, "answers")[0], cut_part):
        path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])  # cut short, as a full disk leaves it
    board, output = _run(spec, data, llm)
    assert "is damaged" in output
    assert [p.name for p in (data / "embedding_cache").rglob("*.damaged")] == [
        cut_part.with_suffix(".damaged").name
    ]
    new_parts = {
        p for p in _cache_parts(data) if p.name not in {r.name for r in _cache_parts(reference["data"])}
    }
    assert sum(pq.read_metadata(p).num_rows for p in new_parts) == cut_rows  # its texts again, no more
    assert _cached_rows(data) == reference["texts"]
    for path in (*_artifacts(data, "embeddings"), *_artifacts(data, "answers")):
        pq.read_metadata(path)  # whole again
    assert_same_board(board, reference["board"])


def test_a_lost_index_is_rebuilt_not_trusted_for_its_marker(spec, llm, reference, tmp_path):
    """The vector store's files are gone, the index markers remain, and a new retrieval setting needs the
    indexes: the rerun rebuilds them instead of failing on a missing collection."""
    import yaml

    data = tmp_path / "data"
    shutil.copytree(reference["data"], data)
    shutil.rmtree(data / "lancedb")
    wider = yaml.safe_load(spec.read_text())
    wider["retrieval"]["top_k"] = 3  # new retrievals over the same indexes
    other = tmp_path / "wider.yaml"
    other.write_text(yaml.safe_dump(wider))
    board, _ = _run(other, data, llm)
    assert len(list((data / "lancedb").glob("*.lance"))) == N_CONFIGS  # both indexes rebuilt
    assert board.height == N_CONFIGS and (board["recall_at_k"] > 0).all()


def test_ctrl_c_stops_at_once_without_waiting_for_llm_calls_in_flight(spec, reference, tmp_path):
    """A provider that takes 60 s a call: Ctrl-C during answers ends the run in seconds, with one line."""
    data = tmp_path / "data"
    _seed_cache(reference["data"], data)
    with OpenAIStub(lambda prompt: (200, "late", 60.0)) as slow:
        proc = _start(spec, data, slow)
        _kill_when(proc, lambda: len(slow.requests) >= 2, signal.SIGINT)
        t0 = time.monotonic()
        _, stderr = proc.communicate(timeout=120)
        waited = time.monotonic() - t0
    assert proc.returncode == 130 and waited < 15, (waited, stderr[-2000:])
    assert "interrupted: every complete artifact is kept" in stderr and "Traceback" not in stderr
    assert not _artifacts(data, "answers")
