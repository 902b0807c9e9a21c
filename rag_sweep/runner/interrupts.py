"""A Ctrl-C during a sweep run's Dagster runs in this process is never lost.

Two ways it was: Dagster defers a SIGINT that arrives outside a step's code (while it stores events, starts
or ends the run) to its next checkpoint, and the in-process executor has none after the last step, so the
deferred interrupt was dropped when the run ended (Ctrl-C while the champion was registered ended
`rag-sweep run` with exit 0); and a SIGINT whose handler raises while Python runs a weakref callback or a
`__del__` (garbage collected at that moment) has its exception printed as "ignored" and dropped, so the run
went on. Every SIGINT writes a byte to a pipe (`signal.set_wakeup_fd`, at the C level, whichever Python
handler then runs, Dagster's deferring one included): a run that ends as if nothing happened raises
KeyboardInterrupt when the pipe says one came. Nothing of Dagster's is read or replaced.
"""

from __future__ import annotations

import os
import signal
import threading
from collections.abc import Iterator
from contextlib import contextmanager

_PIPE: tuple[int, int, int] | None = None  # (the process it was made in, read end, write end)


def watch_interrupts() -> int | None:
    """The read end of the pipe every signal writes its number to, installed now (main thread only): a run
    calls it first, so a Ctrl-C dropped before its first Dagster run is seen at that run. None where another
    wakeup descriptor is in place (an event loop's in this thread: left to it)."""
    global _PIPE
    if threading.current_thread() is not threading.main_thread():
        return None
    if _PIPE is None or _PIPE[0] != os.getpid():  # a forked child makes its own
        r, w = os.pipe()
        os.set_blocking(r, False)
        os.set_blocking(w, False)
        _PIPE = (os.getpid(), r, w)
    previous = signal.set_wakeup_fd(_PIPE[2], warn_on_full_buffer=False)
    if previous not in (-1, _PIPE[2]):
        signal.set_wakeup_fd(previous)
        return None
    return _PIPE[1]


def _sigint_came(pipe: int | None) -> bool:
    """Whether a SIGINT came since the pipe was last read (reading it empties it)."""
    if pipe is None:
        return False
    got = b""
    try:
        while chunk := os.read(pipe, 512):
            got += chunk
    except BlockingIOError:
        pass
    return signal.SIGINT in got


@contextmanager
def interrupts_kept() -> Iterator[None]:
    """Around a Dagster run in this process: a Ctrl-C is raised (KeyboardInterrupt), wherever it landed,
    also one since the last run that nothing raised."""
    pipe = watch_interrupts()
    if _sigint_came(pipe):
        raise KeyboardInterrupt
    try:
        yield
    except BaseException as e:
        # what propagates is the answer to a Ctrl-C, unless it is another error and one came meanwhile
        if _sigint_came(pipe) and not _interrupt(e):
            raise KeyboardInterrupt from e
        raise
    if _sigint_came(pipe):
        raise KeyboardInterrupt


def _interrupt(e: BaseException) -> bool:
    import dagster

    return isinstance(e, (KeyboardInterrupt, dagster.DagsterExecutionInterruptedError))
