"""The compute logs of the Dagster instance `rag-sweep run` creates: Dagster's local ones (the files the UI
shows as a step's stdout and stderr), mirrored to the terminal by one process per stream, not two.

Dagster's LocalComputeLogManager mirrors each captured stream with `tail -F` and starts a Python process
beside each tail, only to kill the tail should this process die first: four processes a run, the two
interpreters ~17 ms of CPU each (`benchmarks/compute_logs.py`). Here the kernel ends the tail instead:
util-linux's `setpriv --pdeathsig` starts it with a parent-death signal. (Not tail's own `--pid`: a killed process whose parent has not yet
reaped it still counts as alive, so a parent that reads the killed command's output to its end, as
`subprocess.run` does, would wait on the tail forever.) Where setpriv cannot, Dagster's own mirror is used.
"""

from __future__ import annotations

import functools
import os
import subprocess
import sys
import time
from collections.abc import Generator, Sequence
from contextlib import contextmanager
from pathlib import Path

from resources.dagster_private import (
    IO_TYPE_EXTENSION,
    CapturedLogContext,
    ComputeIOType,
    LocalComputeLogManager,
    ensure_file,
    fileno,
    mirror_stream_to_file,
    redirect_to_file,
    touch_file,
)


@functools.cache
def _ends_with_this_process() -> list[str] | None:
    """The command that starts a process the kernel ends (SIGTERM) when this one dies, or None: tried once
    (an older setpriv has no --pdeathsig; a sandbox may refuse it)."""
    prefix = ["setpriv", "--pdeathsig", "TERM", "--"]
    try:
        tried = subprocess.run([*prefix, "true"], capture_output=True, timeout=10)
    except (OSError, subprocess.SubprocessError):
        return None
    return prefix if tried.returncode == 0 else None


@contextmanager
def _mirrored(stream, path: str) -> Generator[None, None, None]:
    """`stream`'s output (the file descriptor: a library's C code too) into `path`, and `path` followed onto
    what `stream` was, by a tail that the kernel ends should this process die first."""
    if (ends := _ends_with_this_process()) is None:
        with mirror_stream_to_file(stream, path):
            yield
        return
    ensure_file(path)
    out = stream if fileno(stream) else None  # a test runner's stream without a descriptor: inherited
    # started from the thread that captures, which outlives the capture (the signal follows that thread)
    tail = subprocess.Popen([*ends, "tail", "-F", "-c", "+0", path], stdout=out)
    _armed(tail)
    try:
        with redirect_to_file(stream, path):
            yield
    finally:
        _caught_up(tail.pid, path)
        time.sleep(float(os.getenv("DAGSTER_COMPUTE_LOG_TAIL_WAIT_AFTER_FINISH", "0")))  # as Dagster's mirror
        tail.terminate()
        tail.communicate(timeout=30)


def _armed(process: subprocess.Popen, within_s: float = 10.0) -> None:
    """Wait until `process` runs tail: setpriv sets the parent-death signal and then execs tail, so
    from then on this process's death ends it. (Killed in between, the signal would never be sent and the
    tail would hold the command's output open.)"""
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline and process.poll() is None:
        try:
            if Path(f"/proc/{process.pid}/comm").read_text().strip() == "tail":
                return
        except OSError:  # no /proc, or the process already ended: nothing to wait for
            return
        time.sleep(0.001)


def _caught_up(pid: int, path: str, within_s: float = 0.5) -> None:
    """Wait, at most `within_s`, until the tail `pid` has read `path` to its end: the step's last lines reach
    the terminal before the tail is stopped (the file, which the UI reads, has them either way)."""
    target, size = os.path.realpath(path), os.path.getsize(path)
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            for fd in os.listdir(f"/proc/{pid}/fd"):
                if os.readlink(f"/proc/{pid}/fd/{fd}") == target:
                    with open(f"/proc/{pid}/fdinfo/{fd}") as info:
                        if int(info.read().split()[1]) >= size:  # "pos: <offset>"
                            return
        except (OSError, ValueError, IndexError):  # no /proc, or the tail ended: nothing to wait for
            return
        time.sleep(0.01)


class TailedComputeLogManager(LocalComputeLogManager):
    """LocalComputeLogManager (the same files, read by `dagster dev` as its own), its mirror a tail the
    kernel ends."""

    @classmethod
    def from_config_value(cls, inst_data, config_value) -> TailedComputeLogManager:
        return cls(inst_data=inst_data, **config_value)

    @contextmanager
    def capture_logs(self, log_key: Sequence[str]) -> Generator[CapturedLogContext, None, None]:
        out = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDOUT])
        err = self.get_captured_local_path(log_key, IO_TYPE_EXTENSION[ComputeIOType.STDERR])
        with _mirrored(sys.stdout, out), _mirrored(sys.stderr, err):
            yield CapturedLogContext(log_key)
        touch_file(self.complete_artifact_path(log_key))  # the capture is complete (as Dagster marks it)
