"""Bad settings and unreachable services are refused before any work, each in one line naming the thing
and what to do: no traceback, nothing half-written, no silent wait."""

from __future__ import annotations

import os
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


def test_a_data_dir_with_white_space_or_another_scheme_is_refused_not_made_a_folder(
    spec, tmp_path, monkeypatch, capsys
):
    """` s3://b/x` (a leading space) and `hdfs:/x/y` became local folders named so."""
    from rag_sweep.cli import main

    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    for bad, said in (
        (" s3://bucket/x", "begins or ends with white space"),
        ("runs ", "begins or ends with white space"),
        ("hdfs:/x/y", "hdfs: is not supported"),
        ("gs:bucket", "gs: is not supported"),
        ("file:///tmp/x", "file: is not supported"),
        ("s3://bucket/x?versionId=1", "holds no credentials, query or fragment"),
    ):
        assert main(["plan", str(spec), "--data-dir", bad]) == 2, bad
        line = _one_error_line(capsys.readouterr().err)
        assert line.startswith("error: data dir ") and said in line, line
        assert list(work.iterdir()) == [], bad
    monkeypatch.setenv("RAG_DATA_DIR", "hdfs:/x/y")
    assert main(["plan", str(spec)]) == 2
    assert "hdfs: is not supported" in _one_error_line(capsys.readouterr().err)
    from resources.storage import check_data_dir

    for fine in ("run:1", "C:/x", "a b/c", "/tmp/x:y", "s3://bucket/prefix"):
        check_data_dir(fine)


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="needs /dev/full (Linux)")
def test_every_file_a_command_writes_is_checked_before_its_work(spec, tmp_path, monkeypatch, capsys):
    """`gate --junit /dev/full` ran the whole gate, then a traceback and exit 1 (the code of "worse"). Every
    option of every command whose help says it writes a file there is checked first: exit 2, one line."""
    import argparse

    from rag_sweep.cli import main

    ro = tmp_path / "ro"
    ro.mkdir()
    (tmp_path / "a-folder").mkdir()
    parser = _parser()
    checked = []
    for name, command in _subcommands(parser).items():
        for action in command._actions:
            said = (action.help or "").lower()
            if not action.option_strings or "write" not in said or "folder" in said:
                continue
            if action.nargs == 0 or isinstance(action, argparse._StoreTrueAction):
                continue
            flag = max(action.option_strings, key=len)
            for bad in ("/dev/full", str(tmp_path / "a-folder"), "/proc/x.out"):
                data = tmp_path / f"data-{name}"
                argv = [*_required_args(name, command, spec, tmp_path, skip=action.dest), flag, bad]
                argv += ["--data-dir", str(data)] if "--data-dir" in command._option_string_actions else []
                assert main(argv) == 2, argv
                line = _one_error_line(capsys.readouterr().err)
                assert line.startswith(f"error: {flag} {bad}: "), (argv, line)
                assert not data.exists(), argv  # no work
            checked.append(f"{name} {flag}")
    assert {"gate --junit", "gate --markdown", "run --output", "calibrate-judge --json"} <= set(checked)
    # a pipe, a terminal and /dev/null take a report
    from resources.storage import check_new_file

    check_new_file(os.devnull, "--junit")


def test_a_question_that_can_score_nothing_is_a_counted_warning(tmp_path):
    """A QA row with no answers and no gold documents was accepted in silence."""
    import json
    import warnings

    from rag_core.data.datasets import DataWarning, load_qa

    qa = tmp_path / "qa.jsonl"
    rows = [
        {"query_id": "a", "question": "a?", "answers": ["x"], "relevant_doc_ids": []},
        {"query_id": "b", "question": "b?", "answers": [], "relevant_doc_ids": []},
        {"query_id": "c", "question": "c?", "answers": [], "relevant_doc_ids": ["d1"]},
        {"query_id": "d", "question": "d?", "answers": ["."], "relevant_doc_ids": []},  # '.' is dropped
        {
            "query_id": "e",
            "question": "e?",
            "answers": [],
            "relevant_doc_ids": [],
            "question_type": "unanswerable",
        },
    ]
    qa.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        assert load_qa(qa).height == 5
    said = [str(w.message) for w in caught if issubclass(w.category, DataWarning)]
    (line,) = [s for s in said if "no reference answer and no gold document" in s]
    assert line.startswith(
        f"{qa}: 2 question(s) with no reference answer and no gold document ({qa}: line 2 ('b')"
    )


def test_a_key_collision_names_the_setting_that_collides(slice_data, tmp_path):
    """Two temperatures the key rounds alike were blamed on the models' names."""
    from rag_assets.orchestration.plans import load_plan
    from rag_core.planning.spec import SpecError

    spec = write_sweep(
        tmp_path / "t.yaml",
        slice_data,
        **SECTIONS,
        generation={"model": "openai/m", "temperature": [0.7, 0.7000001]},
    )
    with pytest.raises(SpecError) as refused:
        load_plan(str(spec))
    message = str(refused.value)
    assert "the answers stage's setting 'temperature' (0.7 and 0.7000001)" in message, message
    assert "rename a model" not in message


def _parser():
    from rag_sweep.cli import build_parser

    return build_parser()


def _subcommands(parser):
    from rag_sweep.cli import subcommands

    return subcommands(parser)


def _required_args(name: str, command, spec: Path, tmp_path: Path, skip: str | None = None) -> list[str]:
    """`rag-sweep NAME` with a value for each of its required arguments (by the argument's name; any other
    name: a file in the test's folder), so that any subcommand, a new one too, can be started."""
    values = {
        "spec": spec,
        "specs": spec,
        "corpus": spec,
        "model": "models:/rag@champion" if name in ("verify-model", "serve") else "openai/m",
        "against": "models:/rag@champion",
        "experiment": "rag",
        "out": tmp_path / f"out-{name}" / ("model" if name == "export" else "out.jsonl"),
    }
    argv = [name]
    for action in command._actions:
        if action.dest in ("help", skip) or not (action.required or not action.option_strings):
            continue
        value = str(values.get(action.dest, tmp_path / f"{name}-{action.dest}"))
        argv += [value] if not action.option_strings else [max(action.option_strings, key=len), value]
    return argv


def _secret_settings(port: int, data: Path) -> dict[str, dict[str, str]]:
    """Every URL-shaped setting the product reads, each with a password and a token in it (and the secret
    variables beside them), pointing at a closed port: by what it sets (`data dir`: the --data-dir)."""
    closed = f"127.0.0.1:{port}"
    return {
        "data dir": {"--data-dir": "s3://rag:pw-datadir-xq9zk@bucket/x?token=tok-datadir-xq9zk"},
        "tracking URI": {
            "MLFLOW_TRACKING_URI": f"http://rag:pw-mlflow-xq9zk@{closed}/?token=tok-mlflow-xq9zk"
        },
        "S3 endpoint": {
            "--data-dir": "s3://bucket/x",
            "AWS_ENDPOINT_URL": f"http://rag:pw-s3-xq9zk@{closed}/?X-Amz-Signature=sig-s3-xq9zk",
            "AWS_ACCESS_KEY_ID": "key-id-s3-xq9zk",
            "AWS_SECRET_ACCESS_KEY": "secret-s3-xq9zk",
        },
        "PostgreSQL": {
            "DAGSTER_PG_HOST": "127.0.0.1",
            "DAGSTER_PG_PORT": str(port),
            "DAGSTER_PG_USER": "rag",
            "DAGSTER_PG_PASSWORD": "pw-postgres-xq9zk",
        },
        "broker": {
            "RAG_EXECUTOR": "celery",
            "CELERY_BROKER_URL": f"amqp://rag:pw-broker-xq9zk@{closed}//?token=tok-broker-xq9zk",
        },
        "LLM api_base": {
            "RAG_LLM_API_BASE": f"http://rag:pw-llm-xq9zk@{closed}/v1?api_key=key-llm-xq9zk",
            "OPENAI_API_KEY": "sk-llm-xq9zk",
            "RAG_LLM_API_KEY": "sk-rag-llm-xq9zk",
        },
        "other variables": {
            "WEAVIATE_URL": f"http://rag:pw-weaviate-xq9zk@{closed}",
            "WEAVIATE_API_KEY": "key-weaviate-xq9zk",
            "RAG_ALERT_WEBHOOK": "https://hooks.example.com/x?token=tok-webhook-xq9zk",
            "HF_TOKEN": "hf-token-xq9zk",
        },
    }


SECRET_MARK = "xq9zk"  # in every secret above, and nowhere else: not hex (a sweep writes run ids and
# fingerprints, tens of thousands of hex digits, in which a hex mark such as "7c1f" turns up by chance)


def _files_holding(folder: Path, mark: str) -> dict[str, str]:
    """Each file under `folder` that holds `mark` (binary ones too: a secret in a SQLite store is bytes), with
    the text around its first occurrence: a failure names the file that leaked."""
    found = {}
    for p in sorted(folder.rglob("*")):
        if p.is_file() and not p.is_symlink():
            text = p.read_bytes().decode("utf-8", "replace")
            if (at := text.find(mark)) >= 0:
                found[str(p.relative_to(folder))] = text[max(0, at - 300) : at + 100]
    return found


@pytest.mark.parametrize(
    "setting",
    [
        "data dir",
        "tracking URI",
        "S3 endpoint",
        "PostgreSQL",
        "broker",
        # with nothing unreachable, `run` runs the sweep (its model, its LLM calls failing): the slow tier
        pytest.param("LLM api_base", marks=pytest.mark.slow),
        pytest.param("other variables", marks=pytest.mark.slow),
        "all",
    ],
)
def test_every_subcommand_fails_in_one_line_without_a_secret_in_bounded_time(
    setting, spec, tmp_path, monkeypatch, capfd
):
    """`gc`, `plan` (an s3://user:pass@...?token=... data dir) and `verify-model` (an unreachable tracking
    URI with a password, after 249 s of retries) printed secrets in tracebacks. Every subcommand, taken from
    the CLI's own parser (a new one is covered as it is added), with secrets in each URL-shaped setting
    (and all of them at once): it ends in bounded time, exit 0 or 2 (1 and 3 are verdicts, 4 a gate's
    failed step), a failure is one line, and no secret is in what it prints or writes."""
    import time

    from rag_sweep.cli import main

    work = tmp_path / "cwd"
    work.mkdir()
    monkeypatch.chdir(work)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    settings = _secret_settings(_closed_port(), tmp_path / "data")
    chosen = (
        {k: v for group in settings.values() for k, v in group.items()}
        if setting == "all"
        else settings[setting]
    )
    for name, value in chosen.items():
        if not name.startswith("--"):
            monkeypatch.setenv(name, value)
    data_dir = chosen.get("--data-dir", str(tmp_path / "data"))
    parser = _parser()
    for name, command in _subcommands(parser).items():
        argv = _required_args(name, command, spec, tmp_path)
        if "--data-dir" in command._option_string_actions:
            argv += ["--data-dir", data_dir]
        t0 = time.monotonic()
        try:
            code = main(argv)
        except SystemExit as e:  # argparse: a usage error
            code = e.code
        took = time.monotonic() - t0
        out, err = capfd.readouterr()
        said = out + err
        assert SECRET_MARK not in said, (setting, argv, said)
        assert "Traceback" not in said, (setting, argv, said)
        assert code in (0, 1, 2, 3, 4), (setting, argv, code)
        if code == 2:  # a failure: one line, last (after a library's log lines), and at once
            lines = [x for x in err.strip().splitlines() if not x.startswith("(rerun with --verbose")]
            assert lines[-1].startswith("error: ") and err.count("error: ") == 1, (setting, argv, err)
            # the servers' connect timeout is 10 s; the rest is imports (a minute on a loaded host)
            assert took < 120, (setting, argv, took)  # MLflow's own retries took 249 s
    assert not _files_holding(tmp_path, SECRET_MARK), setting


@pytest.mark.parametrize("command", ["verify-model", "serve"])
def test_a_placeholder_fingerprint_is_a_usage_error_before_the_model_is_read(command, tmp_path, capsys):
    """`--fingerprint 3f9c...` copied from a page: the argument is refused as what it is, not the folder
    reported as one that fails its check (a tampered file)."""
    from rag_sweep.cli import main

    folder = tmp_path / "model"
    folder.mkdir()
    with pytest.raises(SystemExit) as ended:
        main([command, str(folder), "--fingerprint", "3f9c..."])
    err = capsys.readouterr().err
    assert ended.value.code == 2
    assert "'3f9c...' is not a folder fingerprint" in err and "64 hex digits" in err, err
    assert "tamper" not in err.lower() and "Traceback" not in err


@pytest.mark.parametrize("command", ["run", "validate", "gate"])
def test_a_missing_extra_is_one_clean_line_in_every_command(command, capsys):
    """The refusal of a part whose extra is not installed reads as every other clean refusal: its own
    message with the install command, no exception name, no hint to rerun for a traceback."""
    import argparse

    from rag_core.common.extras import MissingExtra
    from rag_sweep.cli import _failed

    args = argparse.Namespace(command=command, verbose=False)
    assert _failed(MissingExtra("chroma", "the chroma vector store"), args) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: the chroma vector store needs the chroma extra"), err
    assert "MissingExtra" not in err[0]
