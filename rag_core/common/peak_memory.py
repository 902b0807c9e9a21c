"""The time and peak memory of one piece of work in this process (an index build, a benchmark stage).

Memory is the process's resident set (what a native library such as LanceDB's or faiss's allocates counts,
which Python's tracemalloc would miss): Linux's high-water mark (VmHWM) is reset before the work (writing 5
to /proc/self/clear_refs) and read after it, and the figure is the peak above the resident set at the start.
Where the mark cannot be reset (not Linux), the process's lifetime peak stands in: an upper bound.
"""

from __future__ import annotations

import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

MB = 1024 * 1024


@dataclass
class Measure:
    seconds: float = 0.0
    peak_mb: float = 0.0  # resident memory above the start, at its highest during the work
    peak_rss_mb: float = 0.0  # the process's whole resident set at its highest during the work


def _status_kb(field: str) -> int | None:
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith(field + ":"):
                return int(line.split()[1])
    except OSError:
        return None
    return None


def _reset_peak() -> bool:
    try:
        Path("/proc/self/clear_refs").write_text("5")
        return True
    except OSError:
        return False


@contextmanager
def measured() -> Iterator[Measure]:
    """`with measured() as m: work()`, then m.seconds and m.peak_mb."""
    m = Measure()
    _reset_peak()
    start_kb = _status_kb("VmRSS") or 0
    t0 = time.perf_counter()
    try:
        yield m
    finally:
        m.seconds = time.perf_counter() - t0
        peak_kb = _status_kb("VmHWM") or resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
        m.peak_rss_mb = peak_kb / 1024
        m.peak_mb = max(peak_kb - start_kb, 0) / 1024
