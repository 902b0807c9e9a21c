"""What every worker of a deployment shares moves to its PostgreSQL: the LLM call cache and ledger (rows kept
apart per data dir) and the locks (a second holder waits; a killed holder releases)."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import pytest

from rag_core.common.completion import Completion

ROOT = Path(__file__).resolve().parents[1]


@pytest.fixture
def deployment_db(postgres_server, monkeypatch):
    env = {
        "DAGSTER_PG_HOST": "127.0.0.1",
        "DAGSTER_PG_PORT": str(postgres_server.port),
        "DAGSTER_PG_USER": postgres_server.user,
        "DAGSTER_PG_DB": postgres_server.create_db(f"shared_{time.monotonic_ns()}"),
    }
    for k, v in env.items():
        monkeypatch.setenv(k, v)
    return env


def test_the_llm_cache_lives_in_the_deployments_database_per_data_dir(deployment_db, tmp_path):
    from resources.llm_cache import PostgresLLMCache, open_cache

    a = open_cache("s3://bucket/a/llm_cache.sqlite")
    b = open_cache(tmp_path / "llm_cache.sqlite")
    assert isinstance(a, PostgresLLMCache) and isinstance(b, PostgresLLMCache)
    assert not (tmp_path / "llm_cache.sqlite").exists()
    a.put("k", "m", Completion("first", None, 1, 12.0, 10, 2, 0.5))
    a.put("k", "m", Completion("again", None, 1, 11.0, 10, 2, 0.25))  # a re-asked call: the latest answers
    a.put("bad", "m", Completion("", "RateLimitError", 3, 5.0))  # a failed call is never stored
    hit = a.get("k")
    assert hit.text == "again" and hit.cached and hit.cost_usd == 0.25 and hit.prompt_tokens == 10
    assert a.get("bad") is None and b.get("k") is None  # another data dir's rows are its own
    assert a.spent() == (2, 0.75) and a.spent(since=time.time() + 1) == (0, 0.0) and b.spent() == (0, 0.0)


def test_a_lock_in_the_database_makes_a_second_holder_wait_and_a_killed_holder_releases(deployment_db):
    from resources.locks import shared_lock

    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import sys, time\nfrom pathlib import Path\nfrom resources.locks import shared_lock\n"
            "with shared_lock('sweep run on s3://b/x', Path('/nonexistent/lock')):\n"
            "    print('held', flush=True)\n    time.sleep(600)\n",
        ],
        cwd=ROOT,
        env={**os.environ, **deployment_db},
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert holder.stdout.readline().strip() == "held"
        waited: list[str] = []

        def waiting(who: str) -> None:
            waited.append(who)
            holder.kill()  # the holder dies: PostgreSQL ends its session and the lock is free

        t0 = time.monotonic()
        with shared_lock("sweep run on s3://b/x", Path("/nonexistent/lock"), waiting):
            # the holder is gone (its sockets close a moment before its exit status is there to read)
            assert waited == ["another process"] and holder.wait(timeout=10) is not None
        with shared_lock("sweep run on s3://b/x", Path("/nonexistent/lock"), waiting):
            assert len(waited) == 1  # free now: no wait
        assert time.monotonic() - t0 < 60
    finally:
        holder.kill()
        holder.wait()


def test_without_a_database_a_data_dir_on_object_storage_has_no_lock(monkeypatch):
    from resources.locks import NoSharedLock, shared_lock
    from resources.storage import data_root

    monkeypatch.delenv("DAGSTER_PG_HOST", raising=False)
    with pytest.raises(NoSharedLock, match="needs the deployment's PostgreSQL"):
        with shared_lock("x", data_root("s3://bucket/prefix") / ".lock"):
            pass
