"""How many calls to one provider are in flight at once, shared by every thread of a process.

Each stage maps its questions over up to `max_concurrency` threads, and a batch of LLM partitions computes
several side by side (rag_assets/stage_asset.py): the limit is the provider's, not one map's, so the
threads of every config and stage that calls the same provider and endpoint share one count. A call holds
its slot only while its request is out; a retry's backoff and a rate limit's wait hold none.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Generator
from contextlib import contextmanager

_SLOTS: dict[tuple[str, int], threading.BoundedSemaphore] = {}
_LOCK = threading.Lock()


def _slots(key: str, limit: int) -> threading.BoundedSemaphore:
    with _LOCK:
        if (key, limit) not in _SLOTS:
            _SLOTS[(key, limit)] = threading.BoundedSemaphore(max(1, limit))
        return _SLOTS[(key, limit)]


@contextmanager
def in_flight(key: str, limit: int) -> Generator[float, None, None]:
    """Hold one of the `limit` slots of the provider and endpoint `key` while the block runs; yields the
    seconds waited for it (not the provider's time)."""
    slots = _slots(key, limit)
    t0 = time.perf_counter()
    slots.acquire()
    try:
        yield time.perf_counter() - t0
    finally:
        slots.release()
