"""The LLM call cache and ledger: `<data_dir>/llm_cache.sqlite`.

An identical call (model, endpoint, prompt, temperature, max tokens) is answered from here instead of
the provider, so a question already asked is never paid for again: when successive halving grows a
config's question set, when a killed run resumes inside a partition, when two configs send the same
prompt. Only successful completions are stored; a failed call is asked again next time. The rows are
also the ledger of what was spent: `spent(since)` is the calls and cost paid after a moment.

SQLite in WAL mode: steps in several processes and threads read and write it at once.
"""

from __future__ import annotations

import sqlite3
import threading
import time
from contextlib import closing
from pathlib import Path

from rag_core.completion import Completion
from rag_core.fingerprint import fingerprint

SCHEMA = """CREATE TABLE IF NOT EXISTS completions (
    key TEXT PRIMARY KEY, model TEXT, text TEXT, prompt_tokens INTEGER, completion_tokens INTEGER,
    cost_usd REAL, latency_ms REAL, attempts INTEGER, created REAL)"""


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


def call_key(model: str, api_base: str | None, prompt: str, temperature: float, max_tokens: int) -> str:
    return fingerprint("completion", model, api_base or "", prompt, float(temperature), int(max_tokens))


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
                    _wal(conn)
                    _READY.add(store)
        conn.execute(SCHEMA)  # a plain write when missing (it waits for a busy database): every time
        return conn

    def get(self, key: str) -> Completion | None:
        """The stored completion (its original tokens, cost and latency: what the config costs per query)."""
        if not self.path.exists():
            return None
        with closing(self._connect()) as conn:
            row = conn.execute(
                "SELECT text, prompt_tokens, completion_tokens, cost_usd, latency_ms, attempts "
                "FROM completions WHERE key = ?",
                (key,),
            ).fetchone()
        if row is None:
            return None
        text, pt, ct, cost, ms, attempts = row
        return Completion(text, None, attempts, ms, pt, ct, cost, cached=True)

    def put(self, key: str, model: str, c: Completion) -> None:
        if c.error is not None or c.cached:
            return
        with closing(self._connect()) as conn, conn:
            conn.execute(
                "INSERT OR IGNORE INTO completions VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
                (
                    key,
                    model,
                    c.text,
                    c.prompt_tokens,
                    c.completion_tokens,
                    c.cost_usd,
                    c.latency_ms,
                    c.attempts,
                    time.time(),
                ),
            )

    def spent(self, since: float = 0.0) -> tuple[int, float]:
        """(calls, USD) paid to providers since `since` (a time.time()), successful calls only."""
        if not self.path.exists():
            return 0, 0.0
        with closing(self._connect()) as conn:
            n, cost = conn.execute(
                "SELECT COUNT(*), COALESCE(SUM(cost_usd), 0) FROM completions WHERE created >= ?", (since,)
            ).fetchone()
        return int(n), float(cost)
