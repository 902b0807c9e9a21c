"""The README's flow after the first command: open the Dagster UI and the MLflow UI on a finished sweep, in a
real browser (Debian's Chromium driven by Playwright).

Opening the Dagster UI (webserver + daemon, as the README's `dg dev` runs them) must start no run by itself while
the automation sensor ticks; the leaderboard page shows the table with short labels and its plot loads.
MLflow shows the config runs under their labels and previews a run's per-question table.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from tests.conftest import computing_runs
from tests.docs_images import keep_for_docs
from tests.servers import _stop, free_port, graphql, wait_http

ROOT = Path(__file__).resolve().parents[1]
pytestmark = [pytest.mark.slow, pytest.mark.stack]
SENSOR_TICKS = """
query($selector: SensorSelector!) {
  sensorOrError(sensorSelector: $selector) {
    __typename
    ... on Sensor { sensorState { ticks(limit: 20) { status timestamp } } }
  }
}"""


def browser(p):
    executable = os.environ.get("CHROMIUM_BIN") or shutil.which("chromium")
    assert executable, "no chromium: run scripts/ensure_servers.sh"
    return p.chromium.launch(executable_path=executable, args=["--no-sandbox"])


def test_opening_the_dagster_ui_on_a_finished_sweep_starts_nothing_and_shows_the_leaderboard(
    sweep_run, slice_sweep, tmp_path
):
    from playwright.sync_api import TimeoutError as PlaywrightTimeout
    from playwright.sync_api import sync_playwright

    data, plan, board = sweep_run["data"], sweep_run["plan"], sweep_run["board"]
    home = data / "dagster_home"  # the instance `rag-sweep run` created, as its printed command opens it
    before = len(dg.DagsterInstance.from_config(str(home)).get_runs())
    env = {
        **os.environ,
        "DAGSTER_HOME": str(home),
        "RAG_SWEEP": str(slice_sweep),
        "RAG_DATA_DIR": str(data),
        "RAG_VECTOR_STORE": "lancedb",
        "LITELLM_LOCAL_MODEL_COST_MAP": "True",
        "DAGSTER_DISABLE_TELEMETRY": "1",
    }
    bindir = Path(sys.executable).parent
    port = free_port()
    # the README's command (`dg dev`: the webserver and the daemon on the dg project), on a free port
    env["DAGSTER_GRPC_TIMEOUT_SECONDS"] = "240"
    logs = {name: (tmp_path / f"{name}.log").open("w") for name in ("webserver",)}
    commands = {"webserver": ["dg", "dev", "--host", "127.0.0.1", "--port", str(port)]}
    procs = [
        subprocess.Popen(
            [str(bindir / cmd[0]), *cmd[1:]],
            cwd=ROOT,
            env=env,
            stdout=logs[name],
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        for name, cmd in commands.items()
    ]
    url = f"http://127.0.0.1:{port}"
    selector = {
        "repositoryLocationName": "rag_sweep",
        "repositoryName": "__repository__",
        "sensorName": "rag_automation_sensor",
    }
    try:
        wait_http(f"{url}/server_info", 180, procs[0], tmp_path / "webserver.log")
        ticks, deadline = [], time.monotonic() + 240
        while time.monotonic() < deadline and len(ticks) < 2:  # two evaluations of the automation sensor
            state = graphql(url, SENSOR_TICKS, {"selector": selector})["sensorOrError"]
            assert state["__typename"] == "Sensor", state
            ticks = state["sensorState"]["ticks"]
            time.sleep(5)
        daemon_log = (tmp_path / "webserver.log").read_text()[-3000:]  # dg dev logs both
        assert len(ticks) >= 2, f"the automation sensor did not tick twice\n{daemon_log}"
        runs = dg.DagsterInstance.from_config(str(home)).get_runs()
        launched = computing_runs(runs[: len(runs) - before])  # nothing launched
        assert not launched, [r.tags for r in launched]

        with sync_playwright() as p:
            b = browser(p)
            page = b.new_page(viewport={"width": 1500, "height": 1100})
            page.goto(f"{url}/assets/slice/leaderboard")
            leader = board["label"][0]
            page.get_by_text(leader, exact=True).first.wait_for(timeout=90_000)  # the table, by label
            for label in board["label"]:
                assert page.get_by_text(label, exact=True).count() >= 1
            show = page.locator("tr", has=page.get_by_text("plot", exact=True)).first.get_by_text(
                "Show Markdown"
            )
            # a new instance's community dialog opens over the page when it likes: close it and try again
            for _ in range(6):
                if page.get_by_text("Skip", exact=True).count():
                    page.get_by_text("Skip", exact=True).click()
                try:
                    show.click(timeout=10_000)
                    break
                except PlaywrightTimeout:
                    page.keyboard.press("Escape")  # any other dialog in the way
            else:
                pytest.fail("the leaderboard's plot entry could not be opened: a dialog stays over the page")
            page.locator("img[src^='data:image/png']").first.wait_for(timeout=30_000)
            sizes = page.eval_on_selector_all(
                "img[src^='data:image/png']", "imgs => imgs.map(i => [i.complete, i.naturalWidth])"
            )
            assert sizes and all(done and width > 300 for done, width in sizes)
            page.screenshot(path=str(tmp_path / "dagster_leaderboard.png"))
            b.close()
        keep_for_docs(tmp_path / "dagster_leaderboard.png")
        assert (tmp_path / "dagster_leaderboard.png").stat().st_size > 30_000
        assert plan.sweep.name == "slice"
    finally:
        for proc in procs:
            _stop(proc)


def test_mlflow_ui_lists_config_runs_by_label_and_previews_their_questions(sweep_run, tmp_path):
    from mlflow import MlflowClient
    from playwright.sync_api import sync_playwright

    from resources.tracking import MlflowTracking

    data, board = sweep_run["data"], sweep_run["board"]
    uri = f"sqlite:///{data / 'mlflow.db'}"
    port = free_port()
    log = tmp_path / "mlflow.log"
    proc = subprocess.Popen(  # the README's command
        [str(Path(sys.executable).parent / "mlflow"), "ui", "--backend-store-uri", uri, "--port", str(port)],
        env={**os.environ, "LITELLM_LOCAL_MODEL_COST_MAP": "True", "MLFLOW_DISABLE_TELEMETRY": "true"},
        stdout=log.open("w"),
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_http(f"{url}/health", 180, proc, log)
        client = MlflowClient(tracking_uri=uri)
        exp = client.get_experiment_by_name("slice")
        top = client.search_runs(
            [exp.experiment_id],
            "tags.config_key != ''",
            order_by=["metrics.overall_score DESC"],
            max_results=1,
        )[0]
        assert top.info.run_name == board["label"][0]
        with sync_playwright() as p:
            b = browser(p)
            page = b.new_page(viewport={"width": 1500, "height": 1000})
            # the link `rag-sweep run` prints: the runs best first
            ranked = MlflowTracking(default_dir=str(data)).ranked_runs_url("slice")
            page.goto(ranked.replace("http://127.0.0.1:5000", url))
            try:
                for label in board["label"]:
                    page.get_by_text(label, exact=True).first.wait_for(timeout=90_000)
            except Exception:
                page.screenshot(path=str(tmp_path / "mlflow_failed.png"))  # what the page showed
                raise
            text = page.inner_text("body")
            shown = sorted(board["label"], key=text.index)  # the order the page lists them in
            assert shown == board["label"].to_list()
            # the saved view: the config runs alone (the experiment holds the leaderboard's run too), with
            # the board's figures as columns
            configs = client.search_runs([exp.experiment_id], "tags.kind = 'config'")
            assert len(client.search_runs([exp.experiment_id], "")) > len(configs)
            assert f"{len(configs)} matching runs" in text, text[-2000:]
            assert {"overall_score", "rank", "tier"} <= set(text.split()), text[:3000]
            page.screenshot(path=str(tmp_path / "mlflow_runs.png"))
            page.goto(
                f"{url}/#/experiments/{exp.experiment_id}/runs/{top.info.run_id}/artifacts/per_question.json"
            )
            question = sweep_run["run"].artifact("qa_set")["question"][0]
            page.get_by_text(question[:40]).first.wait_for(timeout=90_000)  # the table previews
            page.screenshot(path=str(tmp_path / "mlflow_per_question.png"))
            b.close()
        keep_for_docs(tmp_path / "mlflow_runs.png")
        keep_for_docs(tmp_path / "mlflow_per_question.png")
    finally:
        _stop(proc)
