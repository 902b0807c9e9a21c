"""Concurrent LLM calls that an interrupt stops at once.

`ThreadPoolExecutor`'s `with` block waits for every call in flight before an exception (Ctrl-C, a failed
call) gets out of it: with a slow provider, Ctrl-C took the whole request timeout. Here the calls not yet
started are cancelled and the ones in flight are left to end on their own; their results are not needed.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from concurrent.futures import ThreadPoolExecutor
from typing import TypeVar

from rag_core.common.progress import Counter

T = TypeVar("T")
R = TypeVar("R")


def map_concurrently(fn: Callable[[T], R], items: Iterable[T], workers: int, what: str = "") -> list[R]:
    """`fn` over `items` on up to `workers` threads; results in the items' order. With `what` (e.g.
    "questions answered"), each finished item is reported to the progress listener (rag_core/common/progress.py)."""
    counter = None
    if what:
        items = list(items)
        counter = Counter(what, len(items))
        inner = fn

        def fn(item: T) -> R:
            out = inner(item)
            counter.tick()
            return out

    pool = ThreadPoolExecutor(max_workers=max(1, workers))
    try:
        return list(pool.map(fn, items))
    finally:
        pool.shutdown(wait=False, cancel_futures=True)
        if counter is not None:
            counter.close()
