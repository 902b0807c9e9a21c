"""Every `rag-sweep` command runs in its own process and leaves nothing running: once it has returned, no
process it started is alive (a compute log's tail, a server, a background process of its own)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path

import pytest

from tests.conftest import ROOT, write_sweep

RAG_SWEEP = Path(sys.executable).with_name("rag-sweep")  # the command as installed (its console entry point)


def _stat(pid: str) -> tuple[str, int, int, int] | None:
    """(state, parent, process group, session) of a process, None where it has gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()  # after the name, which may hold spaces and parentheses
    return fields[0], int(fields[1]), int(fields[2]), int(fields[3])


def _marked(pid: str, mark: bytes) -> bool:
    """Whether the process was started with the command's environment: every process it starts inherits it,
    a double fork into a session of its own too."""
    try:
        return mark in Path(f"/proc/{pid}/environ").read_bytes().split(b"\0")
    except OSError:
        return False


def _left_by(command: int, mark: bytes) -> dict[int, str]:
    """The live processes that `command` (ended) started: in its session or process group, descended from
    it, or carrying its environment. Each with its command line."""
    stats = {int(p): s for p in os.listdir("/proc") if p.isdigit() and (s := _stat(p)) is not None}

    def descends(pid: int) -> bool:
        seen = set()
        while pid > 1 and pid not in seen:
            seen.add(pid)
            if pid == command:
                return True
            pid = stats[pid][1] if pid in stats else 0
        return False

    left = {}
    for pid, (state, _, group, session) in stats.items():
        if pid == os.getpid() or state == "Z":  # a zombie has ended; only its parent has not looked yet
            continue
        if command in (group, session) or descends(pid) or _marked(str(pid), mark):
            try:
                left[pid] = Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode()
            except OSError:  # ended meanwhile
                pass
    return left


def _command(*args, env: dict[str, str]) -> None:
    """`rag-sweep ARGS` in a session of its own; after it returns, fails naming every process it left."""
    mark = f"RAG_SWEEP_TEST_MARK={uuid.uuid4().hex}"
    env = {**env, mark.split("=")[0]: mark.split("=")[1]}
    proc = subprocess.Popen(
        [str(RAG_SWEEP), *map(str, args)],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        _, err = proc.communicate(timeout=600)
    finally:
        if proc.poll() is None:  # timed out: the command and its process group go
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 0, err
    left = _left_by(proc.pid, mark.encode())
    for pid in left:  # ours to end, whatever the verdict
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"`rag-sweep {args[0]}` left running: {left}"


@pytest.mark.slow
def test_run_and_export_leave_no_process_behind(small_slice, tmp_path):
    # the user's environment as a terminal has it: none of the switches (CI) a command may read to stay alone
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PYTEST", "RAG_SWEEP", "CI"))}
    spec = write_sweep(
        tmp_path / "small.yaml",
        small_slice,
        chunking={"method": "recursive", "chunk_size": 384, "chunk_overlap": 48},
        retrieval={"mode": "vector", "top_k": 3},
    )
    data = tmp_path / "data"
    _command("run", spec, "--data-dir", data, env=env)  # Dagster runs, compute log tails, MLflow, LanceDB
    _command("export", spec, "--out", tmp_path / "model", "--data-dir", data, env=env)


@pytest.fixture(scope="module")
def model_folder(tmp_path_factory) -> tuple[Path, str]:
    """A small exported model folder and its fingerprint (tests/small_model.py)."""
    from resources.shipping.bundle import fingerprints, save
    from tests.small_model import small_bundle

    tmp = tmp_path_factory.mktemp("served")
    folder = save(small_bundle(tmp), tmp / "model")
    return folder, fingerprints(folder)["model_fingerprint"]


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.mark.slow
@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT, signal.SIGHUP])
def test_serve_sent_a_signal_ends_its_server_and_removes_its_copy(model_folder, tmp_path, signum):
    """`kill -TERM PID` (a supervisor), Ctrl-C's SIGINT, a closed terminal's SIGHUP, sent to the command
    alone: the MLflow server and its uvicorn end with it, the port is free again, the checked copy is gone."""
    import socket
    import time

    folder, fingerprint = model_folder
    port = _free_port()
    mark = f"RAG_SWEEP_TEST_MARK={uuid.uuid4().hex}"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1], "TMPDIR": str(tmp)}
    proc = subprocess.Popen(
        [str(RAG_SWEEP), "serve", str(folder), "--fingerprint", fingerprint, "-p", str(port)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline and proc.poll() is None:
            with socket.socket() as s:
                if s.connect_ex(("127.0.0.1", port)) == 0:
                    break
            time.sleep(0.5)
        assert proc.poll() is None, proc.stderr.read()
        assert any(tmp.iterdir())  # the checked copy, while it serves
        os.kill(proc.pid, signum)  # the command alone, as `kill PID` does
        proc.wait(timeout=60)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode == 128 + signum
    time.sleep(0.5)
    left = _left_by(proc.pid, mark.encode())
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"`rag-sweep serve` left running: {left}"
    with socket.socket() as s:
        assert s.connect_ex(("127.0.0.1", port)) != 0  # nothing answers on the port any more
    assert not list(tmp.iterdir())  # the copy is gone


def test_serve_refuses_a_port_outside_the_range_before_any_work(model_folder, capsys):
    from rag_sweep.cli import main

    folder, fingerprint = model_folder
    for port in ("0", "65536", "-1"):
        assert main(["serve", str(folder), "--fingerprint", fingerprint, "-p", port]) == 2
        err = capsys.readouterr().err
        assert f"--port {port}: not a TCP port" in err and "serving" not in err


@pytest.mark.slow
@pytest.mark.parametrize(
    "command, signum",
    [("run", signal.SIGTERM), ("run", signal.SIGINT), ("run", signal.SIGHUP), ("gate", signal.SIGTERM)],
)
def test_a_long_command_sent_a_signal_mid_sweep_leaves_no_process_and_no_temp_folder(
    small_slice, tmp_path, command, signum
):
    """`rag-sweep run` (and `gate`, which runs the same steps) sent SIGTERM, SIGINT or SIGHUP (to the command
    alone) while it computes: it ends, nothing it started is left running, and no temporary folder of its is
    left; the same command run again completes."""
    import time

    spec = write_sweep(
        tmp_path / "small.yaml",
        small_slice,
        chunking={"method": "recursive", "chunk_size": [256, 384], "chunk_overlap": 48},
        retrieval={"mode": ["vector", "bm25"], "top_k": 3},
    )
    data = tmp_path / "data"
    mark = f"RAG_SWEEP_TEST_MARK={uuid.uuid4().hex}"
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    env = {**os.environ, mark.split("=")[0]: mark.split("=")[1], "TMPDIR": str(tmp)}
    extra = ["--against", _first_key(spec)] if command == "gate" else []
    argv = [str(RAG_SWEEP), command, str(spec), "--data-dir", str(data), *extra]
    proc = subprocess.Popen(
        argv,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
        cwd=ROOT,
        env=env,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not list((data / "dagster_home").glob("storage/*")):
            time.sleep(0.2)  # a Dagster run under way: its compute logs are being captured
        time.sleep(1.0)
        assert proc.poll() is None, proc.stderr.read()
        os.kill(proc.pid, signum)
        proc.wait(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert proc.returncode != 0
    time.sleep(0.5)
    left = _left_by(proc.pid, mark.encode())
    for pid in left:
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
    assert not left, f"`rag-sweep {command}` left running: {left}"
    assert not list(tmp.iterdir()), list(tmp.iterdir())
    r = subprocess.run(argv, capture_output=True, text=True, cwd=ROOT)
    assert r.returncode in ((0, 1, 3) if command == "gate" else (0,)), r.stderr  # a gate's verdict, any


def _first_key(spec: Path) -> str:
    from rag_core.planning.plan import Plan
    from rag_core.planning.spec import load_sweep

    return Plan.resolve(load_sweep(spec)).config_keys[0]
