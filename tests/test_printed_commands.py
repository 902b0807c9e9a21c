"""The commands `rag-sweep` prints for the user to paste (serve a model, open the Dagster and MLflow UIs)
quote every path, URI and value they interpolate: pasted into bash, a data dir like `my data $x` arrives as
one argument with its space and `$x` intact; a plain path prints as it is."""

from __future__ import annotations

import ast
import shlex
import subprocess
from pathlib import Path
from types import SimpleNamespace

import pytest

from rag_assets.champion import serve_line
from rag_sweep import cli
from rag_sweep.runner.up_to_date import Shipping, shipping_facts

ODD = "my data $x 'q'"  # a space, a variable that must not expand, a quote


def _line(out: str, label: str) -> str:
    """The command after `label` on its printed line, without the `(then open ...)` note."""
    line = next(line for line in out.splitlines() if line.strip().startswith(label))
    return line.split(label, 1)[1].split("   (then open")[0].strip()


def _bash(command: str, program: str) -> list[str]:
    """What bash passes `program` when the line is pasted: MLFLOW_TRACKING_URI, then each argument (the
    program is a function printing them, so nothing is run)."""
    script = f'{program}() {{ printf "%s\\n" "${{MLFLOW_TRACKING_URI-unset}}" "$@"; }}\n{command}\n'
    done = subprocess.run(["bash", "-c", script], capture_output=True, text=True, check=True, env={"x": "X"})
    return done.stdout.splitlines()


def _champion(capsys, store: str) -> str:
    version = SimpleNamespace(version="2", tags={"config_key": "para-bm25-k4"})
    client = SimpleNamespace(get_model_version_by_alias=lambda name, alias: version)
    tracking = SimpleNamespace(
        enabled=True,
        client=lambda: client,
        resolved_uri=lambda: store,
        display_uri=lambda: store,
        remembered=lambda question, ask: ask(),  # nothing remembered: the registry is asked
        ranked_runs_url=lambda sweep: None,
    )
    cli._print_champion(shipping_facts(tracking, "ship"), "ship", None)
    return capsys.readouterr().out


def _explore(capsys, data: Path) -> str:
    store = f"sqlite:///{data / 'mlflow.db'}"
    shipping = Shipping(True, None, store, store, None)
    cli._print_explore(shipping, "ship", data / "ship.yaml", data, data / "dagster_home", "lancedb")
    return capsys.readouterr().out


def test_the_export_lines_keep_an_odd_folder_whole(capsys, tmp_path):
    out = tmp_path / ODD / "model"
    cli._print_export("para·bm25·k4", "para-bm25-k4", out, "f" * 64)
    printed = capsys.readouterr().out
    serve = _line(printed, "serve:")
    assert shlex.split(serve)[:7] == [
        "PATH=$PWD/.venv/bin:$PATH",
        "mlflow",
        "models",
        "serve",
        "-m",
        str(out),
        "--env-manager",
    ]
    assert _bash(serve, "mlflow") == [
        "unset",
        "models",
        "serve",
        "-m",
        str(out),
        "--env-manager",
        "local",
        "-p",
        "5001",
    ]
    load = _line(printed, "load:")  # Python: the folder as a string literal
    assert ast.literal_eval(load.split("load_model(", 1)[1].split(")", 1)[0]) == str(out)


def test_the_champion_serve_line_quotes_the_tracking_uri(capsys, tmp_path):
    store = f"sqlite:///{tmp_path / ODD / 'mlflow.db'}"
    serve = _line(_champion(capsys, store), "Serve it:")
    assert shlex.split(serve)[1] == f"MLFLOW_TRACKING_URI={store}"
    assert _bash(serve, "rag-sweep")[:3] == [store, "serve", "models:/ship@champion"]


def test_the_ui_lines_quote_each_value(capsys, tmp_path):
    data = tmp_path / ODD
    printed = _explore(capsys, data)
    dagster = shlex.split(_line(printed, "Dagster UI:"))
    assert dagster == [
        f"DAGSTER_HOME={data / 'dagster_home'}",
        f"RAG_SWEEP={data / 'ship.yaml'}",
        f"RAG_DATA_DIR={data}",
        "RAG_VECTOR_STORE=lancedb",
        "DAGSTER_GRPC_TIMEOUT_SECONDS=240",
        ".venv/bin/dg",
        "dev",
    ]
    mlflow = shlex.split(_line(printed, "MLflow UI:"))
    assert mlflow[1:] == [".venv/bin/mlflow", "ui", "--backend-store-uri", f"sqlite:///{data / 'mlflow.db'}"]


def test_plain_paths_print_as_they_are(capsys, tmp_path):
    """Nothing to quote: the lines read as before."""
    assert shlex.quote(str(tmp_path)) == str(tmp_path)  # (pytest's folders hold no odd character)
    cli._print_export("k4", "k4", tmp_path / "model", "f" * 64)
    assert (
        f"mlflow models serve -m {tmp_path / 'model'} --env-manager local -p 5001" in capsys.readouterr().out
    )
    store = f"sqlite:///{tmp_path / 'mlflow.db'}"
    assert f"MLFLOW_TRACKING_URI={store} rag-sweep serve models:/ship@champion -p 5001" in _champion(
        capsys, store
    )
    printed = _explore(capsys, tmp_path)
    assert f"DAGSTER_HOME={tmp_path / 'dagster_home'} RAG_SWEEP={tmp_path / 'ship.yaml'} " in printed
    assert f"--backend-store-uri {store}   (then open" in printed


@pytest.mark.parametrize("uri", ["models:/ship@champion", "models:/my model@champion"])
def test_the_champion_metadata_serve_line(uri):
    assert shlex.split(serve_line(uri))[1:3] == ["serve", uri]
    assert serve_line("models:/ship@champion") == "rag-sweep serve models:/ship@champion -p 5001"
