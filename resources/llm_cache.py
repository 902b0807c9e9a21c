"""The LLM call cache and ledger: `<data_dir>/llm_cache.sqlite`, or a table in the deployment's PostgreSQL
when it has one (workers on several machines share it; rows are kept apart per data dir).

An identical call (model, endpoint, prompt, temperature, max tokens, sample) is answered from here
instead of the provider (unless it is re-asked: a forced re-evaluation sees today's provider), so a question already asked is never paid for again: when successive halving grows a
config's question set, when a killed run resumes inside a partition, when two configs send the same
prompt. Only successful completions are stored; a failed call is asked again next time. The rows are
also the ledger of what was spent: `spent(since)` is the calls and cost paid after a moment.

SQLite in WAL mode: steps in several processes and threads read and write it at once.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

from rag_core.common.completion import Completion
from rag_core.common.fingerprint import fingerprint
from resources.environment import shared_database_url
from resources.locks import NoSharedLock
from resources.storage import is_remote, set_aside_damaged_store

_LOG = logging.getLogger(__name__)

# One row per call paid for: a forced re-evaluation asks again and adds a row (the ledger keeps what was
# paid); the latest row of a key answers it. (Older stores kept one row per key in `completions`.)
SCHEMA = """CREATE TABLE IF NOT EXISTS calls (
    key TEXT, model TEXT, text TEXT, prompt_tokens INTEGER, completion_tokens INTEGER,
    cost_usd REAL, latency_ms REAL, attempts INTEGER, created REAL)"""
INDEX = "CREATE INDEX IF NOT EXISTS calls_by_key ON calls (key, created)"


_READY: set[tuple[Path, int]] = set()  # stores (path, inode) this process switched to WAL
_INIT = threading.Lock()


def _wal(conn: sqlite3.Connection, attempts: int = 100) -> None:
    """WAL mode (readers and a writer at once). Switching to it needs the database to itself and SQLite
    does not wait for that (no busy timeout), so a first use by several steps at once retries here."""
    for attempt in range(attempts):
        try:
            conn.execute("PRAGMA journal_mode=WAL")
            return
        except sqlite3.OperationalError as e:
            if "locked" not in str(e) or attempt == attempts - 1:
                raise
            time.sleep(0.05 + 0.01 * attempt)


def _set_up(conn: sqlite3.Connection) -> None:
    """WAL, the table and its index, and a check that the file is a whole SQLite store (a truncated one
    opens, then fails on some read: found here, once per process)."""
    if (check := conn.execute("PRAGMA quick_check").fetchone()[0]) != "ok":
        raise sqlite3.DatabaseError(f"quick_check: {check}")
    _wal(conn)
    conn.execute(SCHEMA)
    conn.execute(INDEX)
    _migrate(conn)


def _migrate(conn: sqlite3.Connection) -> None:
    """Move an older store's `completions` rows into `calls` (once; a process that finds it done goes on)."""
    if conn.execute("SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'completions'").fetchone():
        try:
            with conn:
                conn.execute("INSERT INTO calls SELECT * FROM completions")
                conn.execute("DROP TABLE completions")
        except sqlite3.OperationalError as e:  # another process moved them first
            if "no such table" not in str(e):
                raise


def call_key(
    model: str, api_base: str | None, prompt: str, temperature: float, max_tokens: int, sample: int = 0
) -> str:
    """An identical call's key; `sample` > 0: another draw of the same call (a generator with temperature
    > 0 answered several times), its own entry."""
    parts = ("completion", model, api_base or "", prompt, float(temperature), int(max_tokens))
    return fingerprint(*parts, int(sample)) if sample else fingerprint(*parts)


def open_cache(path: str | Path) -> LLMCache | PostgresLLMCache:
    """The cache of the data dir `path` lives in (`<data dir>/llm_cache.sqlite`): the deployment's database
    when it has one, else that SQLite file (which a data dir on object storage cannot hold)."""
    url = shared_database_url()
    if url:
        return PostgresLLMCache(url, store=str(path))
    if is_remote(path):
        raise NoSharedLock(
            f"{path}: a data dir on object storage keeps its LLM call cache in the deployment's PostgreSQL "
            "($DAGSTER_PG_HOST ...: see docs/guides/deployment.md)"
        )
    return LLMCache(path)


COLUMNS = "text, prompt_tokens, completion_tokens, cost_usd, latency_ms, attempts"  # what a hit reads


def _paid(c: Completion) -> tuple:
    """A paid call's stored values after its key and model (both stores keep the same columns)."""
    return (c.text, c.prompt_tokens, c.completion_tokens, c.cost_usd, c.latency_ms, c.attempts, time.time())


def _hit(row: tuple | None) -> Completion | None:
    if row is None:
        return None
    text, pt, ct, cost, ms, attempts = row
    return Completion(text, None, attempts, ms, pt, ct, cost, cached=True)


class LLMCache:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    def _connect(self) -> sqlite3.Connection:
        self.path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(self.path, timeout=60)
        store = (self.path, self.path.stat().st_ino)  # a deleted and re-created cache is a new store
        if store not in _READY:
            with _INIT:  # one thread of this process switches the store to WAL; other processes: retried
                if store not in _READY:
                    try:
                        _set_up(conn)
                    except sqlite3.DatabaseError as e:
                        if isinstance(e, sqlite3.OperationalError):  # locked, full disk ...: not damage
                            raise
                        conn.close()
                        self._set_aside(e)
                        conn = sqlite3.connect(self.path, timeout=60)
                        _set_up(conn)
                    _READY.add((self.path, self.path.stat().st_ino))
        conn.execute(SCHEMA)  # a plain write when missing (it waits for a busy database): every time
        return conn

    def _set_aside(self, error: Exception) -> None:
        """A damaged store (not SQLite, truncated, malformed) is moved aside, named, and a new one begun:
        its answers are asked again when needed, as a damaged embedding cache part's texts are embedded
        again. The ledger of what it recorded as spent goes with it (a search's LLM budget counts anew)."""
        set_aside_damaged_store(
            self.path,
            "LLM call cache",
            error,
            "a new cache is begun (calls it held are asked again when needed)",
            _LOG,
        )

    def get(self, key: str) -> Completion | None:
        """The stored completion (its original tokens, cost and latency: what the config costs per query)."""
        if not self.path.exists():
            return None
        with closing(self._connect()) as conn:
            row = conn.execute(
                f"SELECT {COLUMNS} FROM calls WHERE key = ? ORDER BY created DESC LIMIT 1", (key,)
            ).fetchone()
        return _hit(row)

    def put(self, key: str, model: str, c: Completion) -> None:
        if c.error is not None or c.cached:
            return
        with closing(self._connect()) as conn, conn:
            conn.execute("INSERT INTO calls VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)", (key, model, *_paid(c)))

    def spent(self, since: float = 0.0) -> tuple[int, float]:
        """(calls, USD) paid to providers since `since` (a time.time()), successful calls only."""
        if not self.path.exists():
            return 0, 0.0
        with closing(self._connect()) as conn:
            n, cost = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(cost_usd), 0) FROM calls WHERE created >= ?", (since,)
            ).fetchone()
        return int(n), float(cost)

    def latencies(self, model: str) -> tuple[int, float] | None:
        """(calls, median seconds a call) of `model`'s latest SPEED_SAMPLE calls paid for here (their
        latency leaves out the time a call queued for a slot or the rate limit); None: none recorded."""
        if not self.path.exists():
            return None
        with closing(self._connect()) as conn:
            rows = conn.execute(
                "SELECT latency_ms FROM calls WHERE model = ? AND latency_ms IS NOT NULL "
                "ORDER BY created DESC LIMIT ?",
                (model, SPEED_SAMPLE),
            ).fetchall()
        return (len(rows), _median([r[0] for r in rows]) / 1000) if rows else None


SPEED_SAMPLE = 200  # a model's latest calls whose latency the plan's time estimate reads (`latencies`)


def _median(values: list[float]) -> float:
    values = sorted(values)
    mid = len(values) // 2
    return values[mid] if len(values) % 2 else (values[mid - 1] + values[mid]) / 2


PG_SCHEMA = """CREATE TABLE IF NOT EXISTS rag_sweep_llm_calls (
    store TEXT, key TEXT, model TEXT, text TEXT, prompt_tokens INTEGER, completion_tokens INTEGER,
    cost_usd DOUBLE PRECISION, latency_ms DOUBLE PRECISION, attempts INTEGER, created DOUBLE PRECISION);
CREATE INDEX IF NOT EXISTS rag_sweep_llm_calls_by_key ON rag_sweep_llm_calls (store, key, created)"""
_PG_READY: set[str] = set()


class PostgresLLMCache:
    """The same cache and ledger in the deployment's PostgreSQL: one table, rows kept apart per data dir
    (`store`), so every worker of a deployment answers a call another already paid for."""

    def __init__(self, url: str, store: str):
        self.url, self.store = url, store

    def _connect(self):
        import psycopg2

        conn = psycopg2.connect(self.url, application_name="rag-sweep llm cache")
        if self.url not in _PG_READY:
            with _INIT, conn, conn.cursor() as cur:
                cur.execute("SELECT pg_advisory_xact_lock(7400125)")  # two first uses at once
                cur.execute(PG_SCHEMA)
            _PG_READY.add(self.url)
        return conn

    def get(self, key: str) -> Completion | None:
        with closing(self._connect()) as conn, conn.cursor() as cur:
            cur.execute(
                f"SELECT {COLUMNS} FROM rag_sweep_llm_calls WHERE store = %s AND key = %s "
                "ORDER BY created DESC LIMIT 1",
                (self.store, key),
            )
            return _hit(cur.fetchone())

    def put(self, key: str, model: str, c: Completion) -> None:
        if c.error is not None or c.cached:
            return
        with closing(self._connect()) as conn, conn, conn.cursor() as cur:
            cur.execute(
                "INSERT INTO rag_sweep_llm_calls VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s)",
                (self.store, key, model, *_paid(c)),
            )

    def spent(self, since: float = 0.0) -> tuple[int, float]:
        with closing(self._connect()) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT COUNT(*), COALESCE(SUM(cost_usd), 0) FROM rag_sweep_llm_calls "
                "WHERE store = %s AND created >= %s",
                (self.store, since),
            )
            n, cost = cur.fetchone()
        return int(n), float(cost)

    def latencies(self, model: str) -> tuple[int, float] | None:
        """As LLMCache.latencies, for this data dir's rows."""
        with closing(self._connect()) as conn, conn.cursor() as cur:
            cur.execute(
                "SELECT latency_ms FROM rag_sweep_llm_calls WHERE store = %s AND model = %s "
                "AND latency_ms IS NOT NULL ORDER BY created DESC LIMIT %s",
                (self.store, model, SPEED_SAMPLE),
            )
            rows = cur.fetchall()
        return (len(rows), _median([r[0] for r in rows]) / 1000) if rows else None
