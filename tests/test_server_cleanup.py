"""A pytest run stopped with SIGTERM (a CI time-out, a killed job) still stops the servers it started."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import psycopg2
import pytest

ROOT = Path(__file__).resolve().parents[1]
pytestmark = pytest.mark.stack

CHILD = """
import time
from pathlib import Path

def test_hold_a_server(postgres_server):
    Path(__file__).with_name("server.txt").write_text(f"{postgres_server.port} {postgres_server.tmp}")
    try:
        time.sleep(600)
    except BaseException:  # code under test that swallows the interrupt (as in-process Dagster runs do)
        time.sleep(600)
"""


def test_sigterm_stops_the_test_servers(tmp_path):
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    (tmp_path / "test_child.py").write_text(CHILD)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path / "test_child.py")],
        cwd=tmp_path,
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
    )
    marker = tmp_path / "server.txt"
    deadline = time.monotonic() + 120
    while not marker.exists() and time.monotonic() < deadline and child.poll() is None:
        time.sleep(0.2)
    assert marker.exists(), child.communicate()[0].decode()[-2000:]
    port, folder = marker.read_text().split()
    psycopg2.connect(host="127.0.0.1", port=int(port), user="rag", dbname="postgres").close()  # it runs
    child.send_signal(signal.SIGTERM)
    try:
        deadline = time.monotonic() + 60  # the server stops although the test swallowed the interrupt
        while Path(folder).exists() and time.monotonic() < deadline:
            time.sleep(0.2)
        assert not Path(folder).exists()  # stopped, its data directory removed
        with pytest.raises(psycopg2.OperationalError):
            psycopg2.connect(
                host="127.0.0.1", port=int(port), user="rag", dbname="postgres", connect_timeout=3
            )
    finally:
        child.kill()
        child.communicate()
