"""The product: the Dagster deployment of every sweep (`definitions.py`, one `RagSweep` component per folder of
`defs/`) and the `rag-sweep` CLI."""

import os as _os

# the environment this process was started with, before any import added to it (polars, the runner and
# `resources.environment` set variables): what names a warm process (rag_sweep/warm_process.py)
STARTING_ENVIRONMENT = dict(_os.environ)


# the file descriptors it was started with beyond stdin, stdout and stderr (a caller's pipes): a warm process
# forked from a command (rag_sweep/warm_process.py) closes them, so the caller is not left waiting on them
def _open_fds() -> frozenset[int]:
    try:
        listed = [int(fd) for fd in _os.listdir("/proc/self/fd")]
    except OSError:  # no /proc: nothing known to close
        return frozenset()
    still = set()
    for fd in listed:  # not the one the listing itself opened, closed by now
        try:
            _os.fstat(fd)
            still.add(fd)
        except OSError:
            pass
    return frozenset(still - {0, 1, 2})


STARTING_FDS = _open_fds()
