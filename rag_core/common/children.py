"""A long-running child (a server) that ends with the command that started it.

The child and everything it starts (MLflow's `models serve` starts uvicorn and its workers) get a process
group of their own, so that the whole tree can be signalled at once. SIGTERM, SIGINT and SIGHUP sent to the
command (a supervisor, `kill PID`, a closed terminal) are passed on to that group; the command waits for it
to end (SIGKILL after a grace period), then returns, so its own clean-up (a temporary copy) runs. Should the
command die without a word (SIGKILL), the kernel ends the direct child (`PR_SET_PDEATHSIG`), and the child's
own children see their parent go.
"""

from __future__ import annotations

import os
import signal
import subprocess

from rag_core.common.processes import die_with_parent

SIGNALS = (signal.SIGTERM, signal.SIGINT, signal.SIGHUP)
GRACE_S = 10.0  # a server's own shutdown, before it is killed


def run_until_signalled(command: list[str], env: dict[str, str] | None = None) -> int:
    """Run `command` until it exits, or until this process is sent one of SIGNALS: then the child's whole
    process group is sent it too and waited for. The child's exit code, or 128 + the signal's number."""
    child = subprocess.Popen(command, env=env, process_group=0, preexec_fn=die_with_parent)
    received: list[int] = []

    def forward(signum, frame) -> None:
        received.append(signum)
        try:
            os.killpg(child.pid, signum)
        except ProcessLookupError:
            pass

    before = {s: signal.signal(s, forward) for s in SIGNALS}
    try:
        while True:
            try:
                code = child.wait()
                break
            except InterruptedError:  # pragma: no cover - Python retries wait() itself (PEP 475)
                continue
    finally:
        try:
            child.wait(timeout=GRACE_S if received else 0.1)
        except subprocess.TimeoutExpired:
            pass
        try:  # whatever of its group is left (a worker that ignored the signal)
            os.killpg(child.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        for s, handler in before.items():
            signal.signal(s, handler)
    return 128 + received[0] if received else code
