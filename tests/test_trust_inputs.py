"""Inputs that used to slip through (issue 82): secrets in argument errors, an upper-case `S3://`, an empty
variable, a NUL byte or `..` in a data dir, a closed stdout, a bad $RAG_DEVICE on an up-to-date rerun, a dry
run that made a data dir. Each is one line naming the setting, or the right thing done."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from rag_core.planning.spec import SpecError
from tests.conftest import ROOT, cli

SECRET = "pa55w0rdS3CRET"
TOKEN = "t0kenS3CRETvalue"


def _parser_commands() -> list[str]:
    from rag_sweep.cli import build_parser, subcommands

    return sorted(subcommands(build_parser()))


@pytest.mark.parametrize("command", _parser_commands())
def test_a_secret_in_an_argument_error_is_never_echoed(command, capsys):
    """An unknown option, a bad value and a missing argument, each holding a secret: argparse's usage error
    is redacted like every other line."""
    from rag_sweep.cli import main

    for argv in (
        [command, "--data_dir", f"s3://AKIAEXAMPLE:{SECRET}@bkt/p"],
        [command, f"--data_dir=s3://{TOKEN}@bkt/p"],
        [command, "x.yaml", "--port", f"https://u:{SECRET}@host/"],
        [command, "--unknown", f"http://host/?token={TOKEN}"],
    ):
        with pytest.raises(SystemExit) as stopped:
            main(argv)
        assert stopped.value.code == 2
        out = capsys.readouterr()
        assert SECRET not in out.err + out.out and TOKEN not in out.err + out.out, (argv, out.err)


def test_a_token_data_dir_is_refused_without_printing_the_token(capsys):
    from rag_sweep.cli import main

    assert main(["plan", "examples/sweeps/example.yaml", "--data-dir", f"s3://{TOKEN}@bucket/p"]) == 2
    err = capsys.readouterr().err
    assert "holds no credentials" in err and TOKEN not in err and len(err.strip().splitlines()) == 1


def test_an_upper_case_scheme_is_object_storage_everywhere():
    from resources.storage import check_data_dir, data_root, is_remote

    root = data_root("S3://bucket/prefix")
    assert is_remote("S3://bucket/prefix") and is_remote(root) and str(root) == "s3://bucket/prefix"
    with pytest.raises(SpecError, match="holds no credentials"):
        check_data_dir("S3://key:secret@bucket/p")
    assert not (ROOT / "S3:").exists()


@pytest.mark.parametrize(
    "location, said",
    [
        ("s3://bucket/a/../b", "`.` and `..` are not folders"),
        ("s3://bucket/./b", "`.` and `..` are not folders"),
        ("/tmp/a\x00b", "holds a NUL byte"),
    ],
)
def test_a_data_dir_that_cannot_be_one_is_said_in_one_line(location, said):
    from resources.storage import data_root

    with pytest.raises(SpecError, match=said):
        data_root(location)


def test_an_empty_variable_is_an_unset_one_for_every_variable(tmp_path):
    """Every declared variable set to "" reads as unset: defaults apply, and the libraries that read the
    same variables see them unset too; `RAG_DATA_DIR=` is ./.rag_data, not the current folder."""
    from resources.environment import VARIABLES

    env = {**os.environ, **{v.name: "" for v in VARIABLES}, "PYTHONPATH": str(ROOT)}
    code = (
        "import os\nfrom resources import environment as e\n"
        "print(sorted(v.name for v in e.VARIABLES if os.environ.get(v.name) == ''))\n"
        "print(e.default_data_dir())\nprint(os.environ['HF_HUB_OFFLINE'])\n"
    )
    out = subprocess.run([sys.executable, "-c", code], env=env, cwd=tmp_path, capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    empty, data_dir, offline = out.stdout.splitlines()
    assert empty == "[]" and data_dir == str(tmp_path / ".rag_data") and offline == "1"


def test_a_closed_stdout_is_one_line_and_exit_2_before_any_work(tmp_path):
    cmd = [sys.executable, "-m", "rag_sweep.cli", "plan", "examples/sweeps/example.yaml", "--data-dir", "d"]
    out = subprocess.run(
        ["bash", "-c", " ".join(f"'{c}'" for c in cmd) + " >&-"], capture_output=True, text=True, cwd=tmp_path
    )
    assert out.returncode == 2 and out.stderr.strip().splitlines() == [
        "error: standard output is closed; run it again with its output sent somewhere (> FILE, | less)"
    ], out.stderr
    assert not (tmp_path / "d").exists()


def test_a_dry_gc_and_a_plan_create_nothing(tmp_path):
    for data in (tmp_path / "new", tmp_path / "empty"):
        if data.name == "empty":
            data.mkdir()
        for command in (("gc", "examples/sweeps/example.yaml"), ("plan", "examples/sweeps/example.yaml")):
            r = cli(*command, "--data-dir", data)
            assert r.returncode == 0, r.stderr
            assert (not data.exists()) if data.name == "new" else not list(data.iterdir()), (
                command,
                r.stderr,
            )


def test_an_output_pipe_nobody_reads_is_refused_before_the_work(tmp_path):
    from resources.storage import check_new_file

    fifo = tmp_path / "board.csv"
    os.mkfifo(fifo)
    with pytest.raises(SpecError, match="--output .*a pipe no process reads"):
        check_new_file(fifo, "--output")
    reader = os.open(fifo, os.O_RDONLY | os.O_NONBLOCK)  # a reader now: the pipe is a place to write
    try:
        check_new_file(fifo, "--output")
    finally:
        os.close(reader)


@pytest.mark.parametrize(
    "variable, value, said",
    [
        ("RAG_CONNECT_TIMEOUT_S", "1e300", "$RAG_CONNECT_TIMEOUT_S=1e+300: at most 3600 s"),
        (
            "MLFLOW_TRACKING_URI",
            "http://[::1:5000/",
            "$MLFLOW_TRACKING_URI='http://[::1:5000/': not a valid URL",
        ),
        ("MLFLOW_TRACKING_URI", f"http://u:{SECRET}@[::1/", "not a valid URL"),
        ("MLFLOW_TRACKING_URI", "postgresql://u@127.0.0.1/db", "needs the Python driver psycopg"),
    ],
)
def test_a_setting_that_cannot_work_is_one_line_naming_it(variable, value, said, tmp_path):
    env = {**os.environ, variable: value}
    r = subprocess.run(
        [
            sys.executable,
            "-m",
            "rag_sweep.cli",
            "plan",
            "examples/sweeps/example.yaml",
            "--data-dir",
            tmp_path,
        ],
        capture_output=True,
        text=True,
        cwd=ROOT,
        env=env,
    )
    assert r.returncode == 2 and said in r.stderr and len(r.stderr.strip().splitlines()) == 1, r.stderr
    assert SECRET not in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("field", ["data.corpus", "evaluation.judge_labels", "generation.prompt_template"])
def test_a_nul_byte_in_any_text_of_the_spec_is_one_line_naming_the_field(tmp_path, field):
    from rag_core.planning.spec import load_sweep

    section, name = field.split(".")
    spec = {
        "name": "nul",
        "data": {"corpus": "c.parquet", "qa": "q.parquet"},
        "chunking": {"method": "paragraph", "chunk_size": 1024, "chunk_overlap": 0},
        "retrieval": {"mode": "bm25", "top_k": 5},
    }
    spec.setdefault(section, {})[name] = "a\x00b"
    path = tmp_path / "nul.yaml"
    path.write_text(__import__("yaml").safe_dump(spec))
    with pytest.raises(SpecError, match=rf"field '{field}': holds a NUL byte"):
        load_sweep(path)
