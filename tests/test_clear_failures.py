"""Bad settings and unreachable services are refused before any work, each in one line naming the thing
and what to do: no traceback, nothing half-written, no silent wait."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli, write_sweep

SECTIONS = {
    "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
    "retrieval": {"mode": "bm25", "top_k": 3},
}


@pytest.fixture
def spec(slice_data, tmp_path):
    return write_sweep(tmp_path / "s.yaml", slice_data, **SECTIONS)


def _one_error_line(err: str) -> str:
    lines = [line for line in err.strip().splitlines() if not line.startswith("(rerun with --verbose")]
    assert len(lines) == 1 and lines[0].startswith("error: ") and "Traceback" not in err, err
    return lines[0]


def test_a_data_dir_that_is_no_path_and_no_bucket_is_refused_before_anything_is_written(
    spec, slice_data, tmp_path, monkeypatch, capsys
):
    from rag_sweep.cli import main

    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    commands = {
        "run": ["run", spec],
        "plan": ["plan", spec],
        "export": ["export", spec, "--out", work / "model"],
        "generate-qa": [
            "generate-qa",
            slice_data["corpus"],
            "--model",
            "openai/m",
            "--out",
            work / "q.jsonl",
        ],
    }
    for name, args in commands.items():
        for bad in ("s3://", "s3:bucket", "gs://bucket/x"):
            assert main([*map(str, args), "--data-dir", bad]) == 2, (name, bad)
            line = _one_error_line(capsys.readouterr().err)
            assert line.startswith(f"error: data dir {bad}: ") and "--data-dir or $RAG_DATA_DIR" in line
            assert list(work.iterdir()) == [], (name, bad)  # no `s3:` folder, no output
    monkeypatch.setenv("RAG_DATA_DIR", "s3://")
    assert main(["plan", str(spec)]) == 2
    assert "error: data dir s3://: not an object-storage URI with a bucket" in capsys.readouterr().err
    assert list(work.iterdir()) == []


@pytest.mark.skipif(not Path("/proc/self").exists(), reason="needs /proc (Linux)")
def test_an_output_where_no_file_can_be_written_is_refused_before_the_sweep(
    spec, slice_data, tmp_path, capsys
):
    """/proc passes access() for root and refuses only the write: it failed after the whole sweep."""
    data = tmp_path / "data"
    r = cli("run", spec, "--data-dir", data, "--output", "/proc/x.csv")
    assert r.returncode == 2 and not data.exists()
    line = _one_error_line(r.stderr)
    assert line.startswith("error: --output /proc/x.csv: cannot write a file in /proc (")
    from rag_sweep.cli import main

    for args in (
        ["export", spec, "--out", "/proc/model"],
        ["generate-qa", slice_data["corpus"], "--model", "openai/m", "--out", "/proc/q.jsonl"],
    ):
        assert main([*map(str, args), "--data-dir", str(data)]) == 2
        assert "error: --out /proc/" in _one_error_line(capsys.readouterr().err)
        assert not data.exists()
    # a writable place is left as it was: no probe file stays behind
    (tmp_path / "board.csv").write_text("old")
    from resources.storage import check_new_file

    check_new_file(tmp_path / "board.csv", "--output")
    check_new_file(tmp_path / "new" / "board.csv", "--output")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["board.csv", "s.yaml"]
    assert (tmp_path / "board.csv").read_text() == "old"


def _failed_drift_check(instance, leaderboard) -> None:
    """One failed `nightly_drift` evaluation of `leaderboard`, with its alert, as the leaderboard records it."""
    import dagster as dg

    @dg.asset(key=leaderboard, check_specs=[dg.AssetCheckSpec("nightly_drift", asset=leaderboard)])
    def board():
        yield dg.Output(1)
        yield dg.AssetCheckResult(
            check_name="nightly_drift",
            passed=False,
            severity=dg.AssetCheckSeverity.WARN,
            metadata={"alert": {"sweep": "s", "severity": "WARN", "message": "dropped"}},
        )

    assert dg.materialize([board], instance=instance).success


def test_an_alert_webhook_that_is_not_http_is_refused_and_the_alert_waits_for_a_good_one(
    tmp_path, monkeypatch
):
    """A file:// webhook said "sent", advanced the cursor and lost the alert."""
    import dagster as dg

    from rag_core.planning.spec import SpecError
    from sensors.alerts import drift_alerts
    from tests.test_drift import Webhook

    leaderboard = dg.AssetKey(["s", "leaderboard"])
    sensor = drift_alerts("s", leaderboard, "s__drift_alerts")
    with dg.DagsterInstance.ephemeral() as instance:
        _failed_drift_check(instance, leaderboard)
        tick = dg.build_sensor_context(instance=instance)
        (tmp_path / "alerts.json").write_text("")
        for bad in (f"file://{tmp_path}/alerts.json", "hooks.example.com/secret-path", "ftp://h/x"):
            monkeypatch.setenv("RAG_ALERT_WEBHOOK", bad)
            with pytest.raises(SpecError) as refused:
                sensor(tick)
            assert str(refused.value).startswith("$RAG_ALERT_WEBHOOK: not an http(s) URL")
            assert "secret-path" not in str(refused.value) and tick.cursor is None  # nothing sent
        hook = Webhook()
        try:
            monkeypatch.setenv("RAG_ALERT_WEBHOOK", hook.url)
            sensor(tick)
            sensor(tick)  # sent once
        finally:
            hook.close()
    (alert,) = hook.bodies
    assert alert["message"] == "dropped" and alert["link"].endswith("/assets/s/leaderboard")


def _closed_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_an_mlflow_server_that_cannot_be_reached_is_one_line_before_any_work(spec, tmp_path, monkeypatch):
    """A closed port was 256 s of MLflow's retries, in silence, then a traceback."""
    import time

    uri = f"http://rag:hunter2-pw@127.0.0.1:{_closed_port()}"
    monkeypatch.setenv("MLFLOW_TRACKING_URI", uri)
    data = tmp_path / "data"
    t0 = time.monotonic()
    r = cli("run", spec, "--data-dir", data)
    assert r.returncode == 2 and time.monotonic() - t0 < 60  # the process's start, then at once
    line = _one_error_line(r.stderr)
    address = uri.replace("rag:hunter2-pw@", "")
    assert line.startswith(f"error: MLflow at {address} ($MLFLOW_TRACKING_URI) cannot be reached (")
    assert "hunter2" not in r.stderr + r.stdout and not data.exists()


def test_a_postgresql_that_cannot_be_reached_is_one_line_naming_it_and_its_variables(
    spec, tmp_path, monkeypatch
):
    """The run lock's psycopg2.OperationalError was a traceback."""
    port = _closed_port()
    monkeypatch.setenv("DAGSTER_PG_HOST", "127.0.0.1")
    monkeypatch.setenv("DAGSTER_PG_PORT", str(port))
    monkeypatch.setenv("DAGSTER_PG_PASSWORD", "hunter2-pw")
    r = cli("run", spec, "--data-dir", tmp_path / "data")
    assert r.returncode == 2
    line = _one_error_line(r.stderr)
    assert line.startswith(f"error: PostgreSQL at 127.0.0.1:{port} (") and "$DAGSTER_PG_HOST" in line
    assert "hunter2" not in r.stderr + r.stdout
