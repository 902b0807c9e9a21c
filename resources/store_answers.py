"""What a local SQLite MLflow store answered, remembered beside it while the store is unchanged.

An unchanged rerun asks MLflow four things (which evaluations and leaderboards are logged, the champion, the
experiment's id) and changes nothing. Importing MLflow to ask them was ~2.6 s of a ~5 s rerun. Every MLflow
write changes the store's file (a deleted run, a renamed experiment, a moved alias: SQLite commits into the
file, or into its `-wal` file in WAL mode), so an answer given while the file had the same path, inode, size
and modification time is still the answer. A store that was written to, moved or copied is asked again. A
tracking server is always asked.
"""

from __future__ import annotations

import json
import os
import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any


def store_state(db: Path) -> list | None:
    """The store's identity and state: path, device, inode, size and mtime of the file and of its WAL."""
    parts: list = [str(db.resolve())]
    for path in (db, db.with_name(db.name + "-wal")):
        try:
            st = path.stat()
        except FileNotFoundError:
            if path == db:
                return None
            parts.append(None)
            continue
        parts.append([st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns])
    return parts


class StoreAnswers:
    """Answers (JSON values) of the SQLite store `db`, kept in `<db>.answers.json`."""

    def __init__(self, db: Path):
        self.db = db
        self.file = db.with_name(db.name + ".answers.json")

    def _read(self) -> dict:
        try:
            memo = json.loads(self.file.read_text())
        except (FileNotFoundError, ValueError):
            return {}
        return memo if isinstance(memo, dict) and isinstance(memo.get("answers"), dict) else {}

    def get(self, question: str, ask: Callable[[], Any]) -> Any:
        """The store's answer to `question`: remembered, or `ask()`ed (and remembered when the store did not
        change while it was asked)."""
        before = store_state(self.db)
        memo = self._read()
        if before is not None and memo.get("stamp") == before and question in memo["answers"]:
            return memo["answers"][question]
        answer = ask()
        after = store_state(self.db)
        if after is not None and after == before:
            answers = memo["answers"] if memo.get("stamp") == after else {}
            self._write({"stamp": after, "answers": {**answers, question: answer}})
        return answer

    def _write(self, memo: dict) -> None:
        """Whole or not at all (a reader never sees half a file); a read-only data dir remembers nothing."""
        try:
            fd, tmp = tempfile.mkstemp(dir=self.file.parent, prefix=".answers-")
        except OSError:
            return
        try:
            with os.fdopen(fd, "w") as out:
                json.dump(memo, out)
            os.replace(tmp, self.file)
        except OSError:
            Path(tmp).unlink(missing_ok=True)
