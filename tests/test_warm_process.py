"""`rag-sweep warm` (rag_sweep/warm_process.py): a command forks from a warm process of the same environment
and behaves as it would in a process of its own; another environment, a changed module or no warm process
runs it on its own."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import polars as pl
import pytest

from rag_sweep.warm_process import PER_COMMAND, key, starts_one
from tests.conftest import ROOT, TIMED, assert_same_board, write_sweep

RAG_SWEEP = Path(sys.executable).with_name("rag-sweep")
EXAMPLE_SPEC = ROOT / "examples" / "sweeps" / "example.yaml"


def test_the_key_is_the_environment_less_what_a_shell_sets_per_command():
    env = {"PATH": "/bin", "HOME": "/root", "PWD": "/a", "SHLVL": "1", "_": "/bin/x"}
    same = key(env, ["/p"])
    assert key({**env, "PWD": "/b", "OLDPWD": "/a", "SHLVL": "2", "_": "/bin/y"}, ["/p"]) == same
    assert key({**env, "RAG_DATA_DIR": "/d"}, ["/p"]) != same
    assert key(env, ["/p", "/q"]) != same
    assert {"PWD", "SHLVL"} <= set(PER_COMMAND)


def _env(folder: Path, **extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if not k.startswith("PYTEST")}
    return {**env, "RAG_SWEEP_WARM_DIR": str(folder), **extra}


def _command(*args, env, cwd=ROOT, timeout=300) -> subprocess.CompletedProcess:
    return subprocess.run(
        [str(RAG_SWEEP), *map(str, args)], capture_output=True, text=True, cwd=cwd, env=env, timeout=timeout
    )


def _served(folder: Path) -> list[str]:
    """The commands the warm processes in `folder` ran, as their logs say."""
    return [
        line for log in folder.glob("*.log") for line in log.read_text().splitlines() if "rag-sweep " in line
    ]


def _pid(started: subprocess.CompletedProcess) -> int:
    assert started.returncode == 0, started.stderr
    return int(started.stdout.split()[2])


def _ended(pid: int, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture(scope="module")
def warm():
    """A warm process in a folder of its own (a short path: a Unix socket's is at most 107 bytes)."""
    folder = Path(tempfile.mkdtemp(prefix="warm", dir="/tmp"))
    env = _env(folder)
    pid = _pid(_command("warm", "--idle-minutes", "20", env=env))
    yield folder, env, pid
    stopped = _command("warm", "--stop", env=env)
    assert f"{pid}" in stopped.stdout
    assert _ended(pid, 60)
    shutil.rmtree(folder, ignore_errors=True)


def test_a_command_runs_in_a_child_of_the_warm_process_as_in_its_own(warm):
    folder, env, pid = warm
    assert _pid(_command("warm", env=env)) == pid  # one per environment: a second `warm` finds it
    assert "already running" in _command("warm", env=env).stdout
    # the caller's folder: a relative path is read from there
    forked = _command("validate", "example.yaml", env=env, cwd=EXAMPLE_SPEC.parent)
    alone = _command("validate", "example.yaml", env={**env, "RAG_SWEEP_WARM": "0"}, cwd=EXAMPLE_SPEC.parent)
    assert forked.returncode == alone.returncode == 0, forked.stderr
    assert forked.stdout == alone.stdout and "12 configs" in forked.stdout
    missing = _command("validate", "missing.yaml", env=env)
    assert missing.returncode == 2 and "missing.yaml" in missing.stderr
    usage = _command("no-such-command", env=env)  # argparse's exit, in the child
    assert usage.returncode == 2 and "invalid choice" in usage.stderr
    _command("validate", "http://user:hunter22@example.invalid/x.yaml", env=env)
    served = _served(folder)
    assert any("validate example.yaml -> 0" in line for line in served), served
    assert any("validate missing.yaml -> 2" in line for line in served), served
    assert len(served) == 4
    assert not any("hunter22" in line for line in served)  # the log keeps no password


def test_a_later_warm_command_gives_the_running_one_its_imports(warm):
    """`rag-sweep warm --preload M` where one already runs: that one imports M too (what its message says
    is then true); a module that cannot be imported is the command's error, and the process serves on."""
    folder, env, pid = warm
    again = _command("warm", "--idle-minutes", "20", "--preload", "imaplib", env=env)
    assert _pid(again) == pid and "already running" in again.stdout and "imaplib" in again.stdout
    assert any("imported imaplib too" in log.read_text() for log in folder.glob("*.log"))
    wrong = _command("warm", "--idle-minutes", "20", "--preload", "no_such_module_at_all", env=env)
    assert wrong.returncode == 1 and "no_such_module_at_all" in wrong.stderr, wrong.stderr
    assert _pid(_command("warm", "--idle-minutes", "20", env=env)) == pid


def test_a_later_warm_command_sets_the_running_ones_idle_minutes():
    """Given, `--idle-minutes` applies from now on; not given, the running process keeps its own."""
    folder = Path(tempfile.mkdtemp(prefix="warm", dir="/tmp"))
    env = _env(folder)
    try:
        pid = _pid(_command("warm", "--idle-minutes", "20", env=env))
        plain = _command("warm", env=env)
        assert _pid(plain) == pid and "after 20 idle minutes" in plain.stdout
        shorter = _command("warm", "--idle-minutes", "0.05", env=env)
        assert _pid(shorter) == pid and "after 0.05 idle minutes" in shorter.stdout
        assert _ended(pid, 60)  # 3 s idle, not 20 minutes
    finally:
        _command("warm", "--stop", env=env)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_command_that_leaves_while_its_modules_import_leaves_the_warm_process_serving(tmp_path):
    """The answer to a later `rag-sweep warm` comes after its --preload imports; a command gone by then
    (Ctrl-C) must not take the warm process, and the commands forked from it, down with it."""
    (tmp_path / "slow_to_import.py").write_text("import time\ntime.sleep(2)\n")
    folder = Path(tempfile.mkdtemp(prefix="warm", dir="/tmp"))
    env = _env(folder, PYTHONPATH=str(tmp_path))
    try:
        pid = _pid(_command("warm", "--idle-minutes", "20", env=env))
        (sock,) = folder.glob("*.sock")
        with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as conn:  # asks, then leaves at once
            conn.connect(str(sock))
            conn.sendall(
                json.dumps({"ping": True, "settings": {"preload": ["slow_to_import"]}}).encode() + b"\n"
            )
        time.sleep(4)
        assert not _ended(pid, 0.1)
        again = _command("warm", env=env)
        assert _pid(again) == pid, again.stderr
        assert any("imported slow_to_import too" in log.read_text() for log in folder.glob("*.log"))
    finally:
        _command("warm", "--stop", env=env)
        shutil.rmtree(folder, ignore_errors=True)


def test_another_environment_runs_on_its_own(warm):
    folder, env, _ = warm
    before = len(_served(folder))
    other = _command("validate", EXAMPLE_SPEC, env={**env, "RAG_VECTOR_STORE": "lancedb"})
    assert other.returncode == 0 and "12 configs" in other.stdout, other.stderr
    off = _command("validate", EXAMPLE_SPEC, env={**env, "RAG_SWEEP_WARM": "0"})
    assert off.returncode == 0
    assert len(_served(folder)) == before


def test_ctrl_c_reaches_the_command_and_a_rerun_resumes(warm, small_slice, tmp_path):
    """SIGINT to the command's process (what Ctrl-C sends it) interrupts the forked child: the run says it
    was interrupted, exits 130, and the same command completes it."""
    folder, env, _ = warm
    spec = write_sweep(
        tmp_path / "small.yaml",
        small_slice,
        chunking={"method": "recursive", "chunk_size": 384, "chunk_overlap": 48},
        retrieval={"mode": "vector", "top_k": 3},
    )
    args = [str(RAG_SWEEP), "run", str(spec), "--data-dir", str(tmp_path / "data")]
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.PIPE, cwd=ROOT, env=env)
    assert proc.stderr.read(1)  # the run has started printing its progress
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=300)
    assert proc.returncode == 130, err.decode()
    assert b"interrupted" in err
    again = subprocess.run(args, capture_output=True, text=True, cwd=ROOT, env=env, timeout=300)
    assert again.returncode == 0, again.stderr
    assert "Leaderboard of sweep slice" in again.stdout
    served = _served(folder)
    assert any("small.yaml" in line and "-> 130 (" in line for line in served), served


def test_a_changed_module_stops_the_warm_process(tmp_path):
    """A module the warm process imported is edited: the next command is told, runs on its own (with the
    edit), and the warm process ends."""
    folder = Path(tempfile.mkdtemp(prefix="warm", dir="/tmp"))
    (tmp_path / "warm_probe.py").write_text("WORD = 'before'\n")
    env = _env(folder, PYTHONPATH=f"{tmp_path}{os.pathsep}{ROOT}")
    try:
        pid = _pid(_command("warm", "--preload", "warm_probe", env=env))
        assert _command("validate", EXAMPLE_SPEC, env=env).returncode == 0
        assert len(_served(folder)) == 1
        time.sleep(0.01)
        (tmp_path / "warm_probe.py").write_text("WORD = 'after!'\n")
        told = _command("validate", EXAMPLE_SPEC, env=env)
        assert told.returncode == 0 and "12 configs" in told.stdout
        assert "older than" in told.stderr and "warm_probe.py" in told.stderr
        assert _ended(pid, 60)
        assert len(_served(folder)) == 1
    finally:
        _command("warm", "--stop", env=env)
        shutil.rmtree(folder, ignore_errors=True)


@pytest.mark.slow
def test_an_idle_warm_process_exits(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="warm", dir="/tmp"))
    env = _env(folder)
    try:
        pid = _pid(_command("warm", "--idle-minutes", "0.05", env=env))
        assert _ended(pid, 60)
        assert not list(folder.glob("*.sock"))
        assert _command("validate", EXAMPLE_SPEC, env=env).returncode == 0  # on its own
    finally:
        _command("warm", "--stop", env=env)
        shutil.rmtree(folder, ignore_errors=True)


def test_a_folder_others_can_open_is_refused(tmp_path):
    folder = Path(tempfile.mkdtemp(prefix="warm", dir="/tmp"))
    folder.chmod(0o777)
    try:
        refused = _command("warm", env=_env(folder))
        assert refused.returncode != 0 and "open to others" in refused.stderr
        alone = _command("validate", EXAMPLE_SPEC, env=_env(folder))  # a command ignores it
        assert alone.returncode == 0 and "12 configs" in alone.stdout
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def test_a_run_starts_one_unless_told_not_to_or_under_ci(monkeypatch):
    monkeypatch.delenv("RAG_SWEEP_WARM", raising=False)
    monkeypatch.delenv("CI", raising=False)
    assert starts_one()
    monkeypatch.setenv("CI", "true")  # a machine that runs a command once
    assert not starts_one()
    monkeypatch.setenv("RAG_SWEEP_WARM", "1")
    assert starts_one()
    monkeypatch.setenv("RAG_SWEEP_WARM", "0")
    monkeypatch.delenv("CI")
    assert not starts_one()


def test_a_run_on_its_own_leaves_a_warm_process_that_the_next_run_forks_from(small_slice, tmp_path):
    """With no warm process, `rag-sweep run` forks one from itself once it has imported the libraries; it
    keeps none of the command's pipes (the caller gets its output's end as the command exits), and the next
    run in the environment is forked from it and gives the same leaderboard."""
    folder = Path(tempfile.mkdtemp(prefix="warm", dir="/tmp"))
    env = _env(folder, RAG_SWEEP_WARM="1")
    spec = write_sweep(
        tmp_path / "small.yaml",
        small_slice,
        chunking={"method": "recursive", "chunk_size": 384, "chunk_overlap": 48},
        retrieval={"mode": "vector", "top_k": 3},
    )
    pid = None
    try:
        first = _command("run", spec, "--data-dir", tmp_path / "first", env=env)
        assert first.returncode == 0, first.stderr
        started = re.search(r"warm process (\d+) started", first.stderr)
        assert started, first.stderr
        pid = int(started.group(1))
        os.kill(pid, 0)  # alive after the command ended
        assert Path(f"/proc/{pid}/comm").read_text().strip() == "rag-sweep-warm"
        assert not _served(folder)
        second = _command("run", spec, "--data-dir", tmp_path / "second", env=env)
        assert second.returncode == 0, second.stderr
        assert "warm process" not in second.stderr and "Leaderboard of sweep slice" in second.stdout
        served = _served(folder)
        assert len(served) == 1 and "second -> 0" in served[0], served
        boards = [
            pl.read_parquet(tmp_path / d / "leaderboards" / "slice.parquet") for d in ("first", "second")
        ]
        assert_same_board(*boards, skip=TIMED)
    finally:
        _command("warm", "--stop", env=env)
        if pid is not None:
            assert _ended(pid, 60)
        shutil.rmtree(folder, ignore_errors=True)
