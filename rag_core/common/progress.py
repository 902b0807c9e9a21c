"""Progress inside a long step (texts embedded, questions answered), for whoever shows it.

Domain code reports `(what, done, total)`; the `rag-sweep` CLI listens and draws a bar under its steps bar.
With no listener (a run launched from the Dagster UI) a report costs nothing; the step logs its own progress.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

Listener = Callable[[str, int, int], None]
_listener: Listener | None = None
_lock = threading.Lock()


@contextmanager
def listening(listener: Listener) -> Iterator[None]:
    """Send every report made inside the block to `listener(what, done, total)`."""
    global _listener
    previous, _listener = _listener, listener
    try:
        yield
    finally:
        _listener = previous


def report(what: str, done: int, total: int) -> None:
    if _listener is not None:
        with _lock:  # reports come from worker threads too
            _listener(what, done, total)


class Counter:
    """Counts finished items of a concurrent map and reports each one."""

    def __init__(self, what: str, total: int):
        self.what, self.total, self.done = what, total, 0
        self._lock = threading.Lock()
        report(what, 0, total)

    def tick(self) -> None:
        with self._lock:
            self.done += 1
            done = self.done
        report(self.what, done, self.total)
