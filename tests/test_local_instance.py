"""The Dagster instance `rag-sweep run` creates in its data dir, and the command's exit.

A new instance keeps its event log in one SQLite file (no database per run), whose path follows the data
dir when it moves; an instance Dagster laid out before keeps its layout. The `rag-sweep` command exits
without the interpreter's teardown but with what that teardown is for: threads joined, atexit handlers run,
output flushed, the exit code kept.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest
import yaml
from dagster._core.storage.event_log import SqliteEventLogStorage

from rag_sweep.runner.compute_logs import _ends_with_this_process
from rag_sweep.runner.instance import local_instance
from rag_sweep.runner.instance_storage import (
    PooledSqliteEventLogStorage,
    PooledSqliteRunStorage,
    release_connections,
)
from tests.conftest import ROOT


def _observe(instance: dg.DagsterInstance, name: str) -> None:
    instance.report_runless_asset_event(dg.AssetObservation(dg.AssetKey(name)))


def _observed(instance: dg.DagsterInstance, name: str) -> int:
    return len(
        instance.fetch_observations(dg.AssetKey(name), limit=100).records  # every one recorded so far
    )


def test_a_new_instance_has_one_event_log_file_that_follows_its_data_dir(tmp_path):
    data = tmp_path / "data"
    with local_instance(data) as instance:
        assert isinstance(instance.event_log_storage, PooledSqliteEventLogStorage)
        assert isinstance(instance.run_storage, PooledSqliteRunStorage)
        _observe(instance, "corpus")
    home = data / "dagster_home"
    assert (home / "history" / "event_log.db").exists()
    assert not (home / "history" / "runs").exists()  # no database per run
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    assert config["event_log_storage"]["config"]["base_dir"] == str(home.resolve() / "history")
    assert config["concurrency"]["pools"]["default_limit"] == 2  # the repo's settings are kept

    moved = tmp_path / "moved"
    data.rename(moved)
    with local_instance(moved) as instance:
        assert _observed(instance, "corpus") == 1  # what was recorded before the move
        _observe(instance, "corpus")
        assert _observed(instance, "corpus") == 2
    config = yaml.safe_load((moved / "dagster_home" / "dagster.yaml").read_text())
    assert config["event_log_storage"]["config"]["base_dir"] == str(
        moved.resolve() / "dagster_home" / "history"
    )
    assert not data.exists()  # nothing was written where the data dir was


def test_an_instance_dagster_laid_out_keeps_its_layout(tmp_path):
    data = tmp_path / "data"
    home = data / "dagster_home"
    home.mkdir(parents=True)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        _observe(instance, "corpus")  # Dagster's default: history/runs/*.db
    with local_instance(data) as instance:
        assert type(instance.event_log_storage) is SqliteEventLogStorage
        assert _observed(instance, "corpus") == 1
    assert "event_log_storage" not in yaml.safe_load((home / "dagster.yaml").read_text())


def test_the_command_exits_with_its_code_after_its_threads_and_atexit_handlers(tmp_path):
    """`console` on a `main` that leaves a thread writing and an atexit handler: both happen, and the
    code is the process's."""
    out = tmp_path / "out.txt"
    script = f"""
import atexit, threading, time
import rag_sweep.cli as cli

def main():
    def late():
        time.sleep(0.5)
        open({str(out)!r}, "a").write("thread\\n")
    threading.Thread(target=late).start()
    atexit.register(lambda: open({str(out)!r}, "a").write("atexit\\n"))
    print("printed", end="")  # unflushed: no newline, stdout a pipe
    return 3

cli.main = main
cli.console()
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == 3, r.stderr
    assert r.stdout == "printed"
    assert out.read_text() == "thread\natexit\n"


def test_released_connections_leave_the_files_as_a_later_reader_finds_them(tmp_path):
    """What the up-to-date record stamps (rag_sweep/runner/up_to_date.py): after `release_connections`, another
    instance opening, reading and closing the files changes none of them."""
    data = tmp_path / "data"
    instance = local_instance(data)
    _observe(instance, "corpus")
    release_connections(instance)
    history = data / "dagster_home" / "history"

    def files() -> dict:
        return {p.name: (p.stat().st_size, p.stat().st_mtime_ns) for p in sorted(history.iterdir())}

    before = files()
    assert not any(name.endswith("-wal") for name in before)  # folded into the database files
    reader = (
        "import sys, dagster as dg; from rag_sweep.runner.instance import local_instance\n"
        f"with local_instance(__import__('pathlib').Path({str(data)!r})) as i:\n"
        "    sys.exit(len(i.fetch_observations(dg.AssetKey('corpus'), limit=9).records) != 1)"
    )
    subprocess.run([sys.executable, "-c", reader], check=True, cwd=ROOT, timeout=120)
    assert files() == before


def _talking_step(data: Path, env: dict | None = None) -> tuple[subprocess.CompletedProcess, list[list[str]]]:
    """A run of one asset that prints on stdout and stderr, in a process of its own on the CLI's instance:
    the process, and the processes it started."""
    script = f"""
import json, subprocess, sys
from pathlib import Path
started = []
popen = subprocess.Popen.__init__
def recorded(self, args, *rest, **kwargs):
    started.append([str(a) for a in args])
    popen(self, args, *rest, **kwargs)
subprocess.Popen.__init__ = recorded
import dagster as dg
from rag_sweep.runner.instance import local_instance

@dg.asset
def talks():
    print("said on stdout", flush=True)
    print("said on stderr", file=sys.stderr, flush=True)

with local_instance(Path({str(data)!r})) as instance:
    assert type(instance.compute_log_manager).__name__ == "TailedComputeLogManager"
    assert dg.materialize([talks], instance=instance).success
print("started " + json.dumps(started), flush=True)
"""
    r = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120, env=env
    )
    assert r.returncode == 0, r.stderr
    assert "said on stdout" in r.stdout and "said on stderr" in r.stderr  # the mirror, each on its own
    logs = data / "dagster_home" / "storage"  # the files the UI reads
    assert "said on stdout" in "".join(p.read_text() for p in logs.glob("*/compute_logs/*.out"))
    assert "said on stderr" in "".join(p.read_text() for p in logs.glob("*/compute_logs/*.err"))
    return r, json.loads(r.stdout.split("started ", 1)[1])


def test_a_steps_output_reaches_the_terminal_and_the_ui_through_one_tail_per_stream(tmp_path):
    """The instance's compute logs (rag_sweep/runner/compute_logs.py): what a step prints, on stdout and stderr, is in
    the files the UI reads and on the command's own output; the processes it starts for that are two tails
    the kernel ends with it, no watcher interpreter beside each."""
    if _ends_with_this_process() is None:
        pytest.skip("setpriv cannot run here: Dagster's mirror is used (the test below)")
    _, started = _talking_step(tmp_path / "data")
    tails = [a for a in started if "tail" in a]
    assert len(tails) == 2 and all(a[:3] == ["setpriv", "--pdeathsig", "TERM"] for a in tails), started
    assert not [a for a in started if "watch_orphans" in " ".join(a)]


def test_without_setpriv_a_steps_output_is_mirrored_as_dagster_does(tmp_path):
    """Where setpriv cannot be run (not on the PATH here), Dagster's own mirror: a tail and its watcher."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "tail").symlink_to(shutil.which("tail"))
    _, started = _talking_step(tmp_path / "data", env={**os.environ, "PATH": str(bin_dir)})
    assert not [a for a in started if "setpriv" in a and "tail" in a]  # tried (the probe), not used
    assert len([a for a in started if "watch_orphans" in " ".join(a)]) == 2, started


def test_the_mirrors_tail_ends_when_the_process_is_killed_mid_step(tmp_path):
    """What Dagster's watcher process was for: a command killed while a step's output is captured leaves no
    tail running, also while its parent has not reaped it yet (it reads the command's output to its end
    first, and the tails hold that output open), and also when killed at once (a tail still in setpriv,
    its signal not yet armed, would never be sent it)."""
    pids = tmp_path / "tails.txt"
    script = f"""
import os, signal
from pathlib import Path
from rag_sweep.runner.instance import local_instance

instance = local_instance(Path({str(tmp_path / "data")!r}))
with instance.compute_log_manager.capture_logs(["run", "step"]):
    children = Path(f"/proc/self/task/{{os.getpid()}}/children").read_text().split()
    names = [Path(f"/proc/{{c}}/comm").read_text().strip() for c in children]
    Path({str(pids)!r}).write_text(" ".join(children) + "\\n" + " ".join(names))
    os.kill(os.getpid(), signal.SIGKILL)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    children, names = pids.read_text().split("\n")
    tails = [int(p) for p in children.split()]
    # the capture begins once each child runs tail: setpriv has armed the parent-death signal by then
    assert len(tails) == 2 and names.split() == ["tail", "tail"], names

    def running(pid: int) -> bool:
        try:
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            return False
        return state != "Z"  # a zombie has ended (its parent, init here, reaps it when it does)

    deadline = time.monotonic() + 10
    while any(map(running, tails)) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert not any(map(running, tails))
