"""Child processes that never outlive the process that started them."""

from __future__ import annotations

import ctypes
import signal


def die_with_parent() -> None:
    """A `preexec_fn` (Linux): the kernel sends the child SIGTERM when its parent dies, even by SIGKILL
    (PR_SET_PDEATHSIG). Elsewhere nothing."""
    try:
        ctypes.CDLL(None, use_errno=True).prctl(1, signal.SIGTERM)  # PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass
