"""The Dagster instance `rag-sweep run` creates in its data dir, and the command's exit.

A new instance is Dagster's SQLite storage, configured publicly (`storage: sqlite:`), whose path follows
the data dir when it moves; an instance Dagster laid out before keeps its layout, and one with the single
event log file this project's own storage classes kept has its events moved into Dagster's storage. The `rag-sweep` command exits
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

from runner.compute_logs import _ends_with_this_process
from runner.instance import STORAGE_MARK, local_instance
from tests.conftest import ROOT


def _observe(instance: dg.DagsterInstance, name: str) -> None:
    instance.report_runless_asset_event(dg.AssetObservation(dg.AssetKey(name)))


def _observed(instance: dg.DagsterInstance, name: str) -> int:
    return len(
        instance.fetch_observations(dg.AssetKey(name), limit=100).records  # every one recorded so far
    )


def test_a_new_instance_is_dagsters_sqlite_storage_that_follows_its_data_dir(tmp_path):
    data = tmp_path / "data"
    with local_instance(data) as instance:
        _observe(instance, "corpus")
    home = data / "dagster_home"
    config = yaml.safe_load((home / "dagster.yaml").read_text())
    # the public form only: no storage class of the project's (nor any module path) in the instance's file
    assert config["storage"] == {"sqlite": {"base_dir": str(home.resolve())}}
    assert not {"run_storage", "event_log_storage", "schedule_storage"} & set(config)
    assert (home / "history" / "runs.db").exists()  # Dagster's default layout
    assert config["concurrency"]["pools"]["default_limit"] == 2  # the repo's settings are kept

    moved = tmp_path / "moved"
    data.rename(moved)
    with local_instance(moved) as instance:
        assert _observed(instance, "corpus") == 1  # what was recorded before the move
        _observe(instance, "corpus")
        assert _observed(instance, "corpus") == 2
    config = yaml.safe_load((moved / "dagster_home" / "dagster.yaml").read_text())
    assert config["storage"]["sqlite"]["base_dir"] == str(moved.resolve() / "dagster_home")
    assert not data.exists()  # nothing was written where the data dir was


def test_an_instance_dagster_laid_out_keeps_its_layout(tmp_path):
    data = tmp_path / "data"
    home = data / "dagster_home"
    home.mkdir(parents=True)
    with dg.DagsterInstance.from_config(str(home)) as instance:
        _observe(instance, "corpus")  # Dagster's default: history/runs/*.db
    with local_instance(data) as instance:
        assert _observed(instance, "corpus") == 1
    assert "storage" not in yaml.safe_load((home / "dagster.yaml").read_text())


# What the instance's dagster.yaml said before: the project's storage classes, one event log file
FORMER_STORAGE = """
run_storage:
  module: runner.instance_storage
  class: PooledSqliteRunStorage
  config:
    base_dir: {history}
event_log_storage:
  module: runner.instance_storage
  class: PooledSqliteEventLogStorage
  config:
    base_dir: {history}
"""


def test_an_instance_of_the_former_single_event_log_file_keeps_its_runs_and_materializations(tmp_path):
    """A data dir made by an earlier rag-sweep: its runs, materializations and data versions survive the
    move to Dagster's storage (a sweep's completed steps are not run again)."""
    data = tmp_path / "data"
    home = data / "dagster_home"
    history = home / "history"
    history.mkdir(parents=True)

    @dg.asset
    def chunks():
        return dg.MaterializeResult(data_version=dg.DataVersion("v1"))

    # the former file, written as the former storage did: one `event_logs` table of Dagster's schema
    # (Dagster's consolidated SQLite event log, which the tests may reach privately)
    from dagster._core.storage.event_log import ConsolidatedSqliteEventLogStorage

    overrides = {
        "run_storage": {"module": "dagster._core.storage.runs", "class": "SqliteRunStorage",
                        "config": {"base_dir": str(history)}},
        "event_log_storage": {"module": "dagster._core.storage.event_log",
                              "class": "ConsolidatedSqliteEventLogStorage", "config": {"base_dir": str(history)}},
    }  # fmt: skip
    (home / "dagster.yaml").write_text(yaml.safe_dump(overrides))
    with dg.DagsterInstance.from_config(str(home)) as old:
        assert isinstance(old.event_log_storage, ConsolidatedSqliteEventLogStorage)
        run_id = dg.materialize([chunks], instance=old).run_id
    assert (history / "event_log.db").exists()
    (home / "dagster.yaml").write_text(
        (ROOT / "dagster.yaml").read_text() + STORAGE_MARK + FORMER_STORAGE.format(history=history)
    )

    with local_instance(data) as instance:
        assert instance.get_run_by_id(run_id).is_success
        record = instance.get_latest_data_version_record(chunks.key)
        assert record.asset_materialization.tags["dagster/data_version"] == "v1"
        events = instance.all_logs(run_id)
        assert any(
            e.dagster_event and e.dagster_event.event_type == dg.DagsterEventType.RUN_SUCCESS for e in events
        )
    assert not (history / "event_log.db").exists() and (history / "event_log.db.migrated").exists()
    assert "runner.instance_storage" not in (home / "dagster.yaml").read_text()
    with local_instance(data) as instance:  # once: the events are not stored twice
        assert len(instance.fetch_materializations(chunks.key, limit=10).records) == 1


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


def test_a_later_reader_leaves_the_instance_files_as_it_finds_them(tmp_path):
    """What the up-to-date record stamps (runner/up_to_date.py): after a run's instance is done with, another
    instance opening, reading and closing the files changes none of them."""
    data = tmp_path / "data"
    instance = local_instance(data)
    _observe(instance, "corpus")
    home = data / "dagster_home"

    def files() -> dict:
        return {
            str(p.relative_to(home)): (p.stat().st_size, p.stat().st_mtime_ns)
            for p in sorted(home.rglob("*"))
            if p.is_file()
        }

    before = files()
    assert not any(name.endswith("-wal") for name in before)  # folded into the database files
    reader = (
        "import sys, dagster as dg; from runner.instance import local_instance\n"
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
from runner.instance import STORAGE_MARK, local_instance

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
    """The instance's compute logs (runner/compute_logs.py): what a step prints, on stdout and stderr, is in
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
    first, and the tails hold that output open)."""
    pids = tmp_path / "tails.txt"
    script = f"""
import os, signal
from pathlib import Path
from runner.instance import STORAGE_MARK, local_instance

instance = local_instance(Path({str(tmp_path / "data")!r}))
with instance.compute_log_manager.capture_logs(["run", "step"]):
    children = Path(f"/proc/self/task/{{os.getpid()}}/children").read_text().split()
    Path({str(pids)!r}).write_text(" ".join(children))
    os.kill(os.getpid(), signal.SIGKILL)
"""
    r = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, cwd=ROOT, timeout=120)
    assert r.returncode == -signal.SIGKILL, r.stderr
    tails = [int(p) for p in pids.read_text().split()]
    assert len(tails) == 2

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
