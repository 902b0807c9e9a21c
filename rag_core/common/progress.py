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


# what -> [done, total, maps open]: maps of one kind at once (a batch's configs side by side) report as one
_shared: dict[str, list[int]] = {}
_shared_lock = threading.Lock()


class Counter:
    """Counts finished items of a concurrent map and reports each one. Maps of the same `what` that run
    at once report their sum (the bar reads 40/198, not one config's 7/33 then another's 12/33) until
    the last of them is closed."""

    def __init__(self, what: str, total: int):
        self.what = what
        with _shared_lock:
            self._sum = _shared.setdefault(what, [0, 0, 0])
            self._sum[1] += total
            self._sum[2] += 1
            report(what, self._sum[0], self._sum[1])

    def tick(self) -> None:
        with _shared_lock:  # reported under the lock: the listener sees the counts in order
            self._sum[0] += 1
            report(self.what, self._sum[0], self._sum[1])

    def close(self) -> None:
        """The map has ended (or was interrupted): the sum starts again once no map of its kind is open."""
        with _shared_lock:
            self._sum[2] -= 1
            if self._sum[2] == 0 and _shared.get(self.what) is self._sum:
                del _shared[self.what]
