"""Requests per minute to one provider, shared by every thread of a process.

Concurrent LLM calls (rag_core/common/concurrency.py) start as fast as the threads allow; a provider with a
requests-per-minute quota answers that burst with 429s, each retried after a wait. A limiter spaces the
starts instead: call `wait()` before each request; it returns once the request may start, and how long it
waited (not the model's latency). Limiters are per provider and endpoint (`limiter(key, rpm)`), so two
stages calling the same provider share its quota, and two providers do not slow each other down.

It spaces when calls start, not when the HTTP request leaves: litellm's one-time set-up in a process (its
first call) can hold calls that already have their slot, and those then reach the provider together (a
burst of up to `max_concurrency`, measured under CPU load); the provider's 429 and its Retry-After, which
every call honours (resources/llm.py), cover that first moment.

A wait longer than `LONG_WAIT_S` is said, once per limiter (how long and why): a slow quota is never a
silent stall.
"""

from __future__ import annotations

import logging
import threading
import time

_LOG = logging.getLogger(__name__)
LONG_WAIT_S = 5.0

_LIMITERS: dict[tuple[str, float], RateLimiter] = {}
_LOCK = threading.Lock()


class RateLimiter:
    """At most `per_minute` starts in any minute, evenly spaced (60 / per_minute s apart): a burst is
    spread out, not let through then blocked for the rest of the minute."""

    def __init__(self, per_minute: float, clock=time.monotonic, sleep=time.sleep, name: str = ""):
        if per_minute <= 0:
            raise ValueError(f"requests per minute must be > 0, got {per_minute}")
        self.per_minute, self.name = per_minute, name
        self.interval = 60.0 / per_minute
        self._said = False  # a long wait was logged
        self._clock, self._sleep = clock, sleep
        self._next = float("-inf")  # the earliest time the next request may start
        self._lock = threading.Lock()

    def wait(self) -> float:
        """Block until this request's slot; the seconds waited."""
        with self._lock:  # reserve a slot, then sleep outside the lock: the next caller takes the next slot
            now = self._clock()
            start = max(now, self._next)
            self._next = start + self.interval
        delay = start - now
        if delay > LONG_WAIT_S and not self._said:
            self._said = True
            _LOG.warning(
                f"waiting {delay:.0f} s for an LLM call's turn: the rate limit"
                f"{f' of {self.name.strip()}' if self.name.strip() else ''} ({self.per_minute:g} requests per "
                f"minute, $RAG_LLM_REQUESTS_PER_MINUTE) starts one call every {self.interval:.0f} s "
                "(said once)"
            )
        if delay > 0:
            self._sleep(delay)
        return delay


def limiter(key: str, per_minute: float) -> RateLimiter:
    """The process's limiter of this provider and endpoint at this rate."""
    with _LOCK:
        if (key, per_minute) not in _LIMITERS:
            _LIMITERS[(key, per_minute)] = RateLimiter(per_minute, name=key)
        return _LIMITERS[(key, per_minute)]
